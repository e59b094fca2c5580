from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fleet_rlm.config import Settings
from fleet_rlm.engine.turn import HistoryEntry, Turn, TurnOutcome, TurnRequest, build_turn
from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.testing.settings import scripted_settings
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.tree import SHARED_DIR_MODE


@dataclass
class TurnRun:
    outcome: TurnOutcome
    events: list[Event] = field(default_factory=list)
    workspace: Path = Path()

    def of(self, kind: EventType) -> list[Event]:
        return [e for e in self.events if e.type is kind]

    def output_text(self) -> str:
        return "".join(str(e.data["text"]) for e in self.of(EventType.OUTPUT))


@dataclass
class Harness:
    server: ScriptedModelServer
    home: Path
    tmp: Path

    def settings(self, **overrides: Any) -> Settings:
        return scripted_settings(self.server, self.home, **overrides)

    def workspace(self, files: dict[str, str] | None = None) -> Path:
        workspace = Workspace.create(self.tmp / "ws", mode=SHARED_DIR_MODE)
        for name, text in (files or {}).items():
            workspace.tree.write(f"files/{name}", text.encode())
        return workspace.root

    def build(
        self,
        task: str,
        files: dict[str, str] | None = None,
        history: list[HistoryEntry] | None = None,
        **overrides: Any,
    ) -> tuple[Turn, list[Event]]:
        events: list[Event] = []
        request = TurnRequest(task=task, workspace=self.workspace(files), history=list(history or []))
        return build_turn(self.settings(**overrides), request, events.append), events

    def run(
        self,
        task: str,
        files: dict[str, str] | None = None,
        history: list[HistoryEntry] | None = None,
        **overrides: Any,
    ) -> TurnRun:
        turn, events = self.build(task, files, history, **overrides)
        outcome = asyncio.run(turn.run())
        return TurnRun(outcome, events, turn.workspace.root)


@pytest.fixture
def harness(model_server: ScriptedModelServer, home: Path, tmp_path: Path) -> Harness:
    return Harness(model_server, home, tmp_path)
