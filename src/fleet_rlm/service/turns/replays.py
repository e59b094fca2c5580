"""Replay capture: the immutable snapshot of a turn's inputs, kept when ``capture_replays`` is on
(server-wide or for the session), so the turn can be labeled and replayed later in a fresh runtime.

The snapshot names input files by sha256 (their bytes stay in the session's blob store, kept while a
snapshot names them) and records the program and configuration identities the turn ran with.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fleet_rlm.config import Settings
from fleet_rlm.engine.identity import config_identity, dependency_identity, program_identity
from fleet_rlm.engine.turn import HistoryEntry, TurnRequest
from fleet_rlm.service.files import stored_path
from fleet_rlm.store import FileRecord, Invalid
from fleet_rlm.store.session_settings import SESSION_SETTING_KEYS

SNAPSHOT_VERSION = 1
CAPTURE_HINT = (
    "turn on capture_replays (server-wide with FLEET_CAPTURE_REPLAYS=true, or in the session's settings) "
    "and run the task again"
)


class SnapshotFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)

    @field_validator("path")
    @classmethod
    def _workspace_path(cls, value: str) -> str:
        """A replay puts the file back at this path: it must be the clean workspace path it was."""
        try:
            clean = stored_path(value)
        except Invalid as exc:
            raise ValueError(f"path {value!r}: {exc.message}") from exc
        if clean != value:
            raise ValueError(f"path {value!r} is not a clean workspace path")
        return value


class SnapshotTurn(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    message: str
    answer: str | None


class ReplaySnapshot(BaseModel):
    """Everything a replay needs, and what identifies how the captured turn ran."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = SNAPSHOT_VERSION
    session_id: str
    turn_id: str
    task: str
    history: tuple[SnapshotTurn, ...] = ()
    context_paths: tuple[str, ...] = ()
    files: tuple[SnapshotFile, ...] = ()
    memory: str | None = None
    mode: str
    budgets: dict[str, float | int]
    overrides: dict[str, Any] = Field(default_factory=dict)
    """The session's settings and the turn's options (non-secret keys only), applied again on replay."""
    program: dict[str, str]
    config: dict[str, Any]
    dependencies: dict[str, str]

    def settings_for(self, base: Settings) -> Settings:
        """``base`` with the captured turn's overrides, as it ran."""
        return base.with_values({k: v for k, v in self.overrides.items() if v is not None})

    def request(self, workspace: Any, turn_id: str) -> TurnRequest:
        return TurnRequest(
            task=self.task,
            workspace=workspace,
            turn_id=turn_id,
            history=[HistoryEntry(message=h.message, answer=h.answer) for h in self.history],
            context_paths=list(self.context_paths),
            mode=self.mode,
            max_iterations=int(self.budgets["max_iterations"]),
            max_model_calls=int(self.budgets["max_model_calls"]),
            turn_timeout=float(self.budgets["turn_timeout"]),
            memory=self.memory,
        )


def capture(
    request: TurnRequest, session_id: str, settings: Settings, files: list[FileRecord], overrides: dict[str, Any]
) -> ReplaySnapshot:
    """The snapshot of ``request`` about to run with ``settings`` on the session's ``files``."""
    budget = settings.budget
    return ReplaySnapshot(
        session_id=session_id,
        turn_id=request.turn_id,
        task=request.task,
        history=tuple(SnapshotTurn(message=h.message, answer=h.answer) for h in request.history),
        context_paths=tuple(request.context_paths),
        files=tuple(SnapshotFile(path=f.path, sha256=f.sha256, size=f.size) for f in files),
        memory=request.memory,
        mode=request.mode or settings.mode,
        budgets={
            "max_iterations": request.max_iterations or budget.max_iterations,
            "max_model_calls": request.max_model_calls or budget.max_model_calls,
            "turn_timeout": request.turn_timeout or budget.turn_timeout,
        },
        overrides={k: v for k, v in overrides.items() if k in SESSION_SETTING_KEYS and k != "capture_replays"},
        program=program_identity(request.program),
        config=config_identity(settings),
        dependencies=dependency_identity(),
    )
