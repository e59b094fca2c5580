"""Child agents: ``spawn_agent`` / ``spawn_agents`` in sandbox code, each child its own RLM and sandbox.

A child gets a fresh workspace holding copies of the files it was handed and of the turn's skills,
a fresh ``dspy.RLM`` with the same tools (delegation included while depth allows; ``remember``
never) and its own iteration budget. Model calls,
children and the deadline are drawn from the one :class:`TurnBudget` of the run tree. A child never
fails its parent: every limit or error comes back as a result the parent's code can read. The
child's artifacts are promoted into the parent's workspace under ``artifacts/children/<child-id>/``
with a ``provenance.json``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import Any

import dspy

from fleet_rlm.config import Settings
from fleet_rlm.engine.adapters import SchemaAdapter, turn_adapter
from fleet_rlm.engine.budget import BudgetExceeded, TurnBudget, TurnCancelled, budget_error_in, one_line
from fleet_rlm.engine.emitter import EventEmitter
from fleet_rlm.engine.honesty import LoopGuard, could_not_compute, incomplete_in, unread_inputs_reason
from fleet_rlm.engine.inputs import Text
from fleet_rlm.engine.lm import MeteredLM, program_context
from fleet_rlm.engine.observe import RLMCallbacks, TurnObserver, TurnTrace, observed_sandboxes
from fleet_rlm.engine.program import build_rlm
from fleet_rlm.engine.skills import TurnSkills
from fleet_rlm.engine.usage import TurnUsage
from fleet_rlm.protocol.events import new_id
from fleet_rlm.protocol.payloads import ChildFinished, ChildStarted, ChildUsage, TurnWarning
from fleet_rlm.sandbox.base import Sandbox, SandboxBackend, SandboxLimits, SandboxSpec
from fleet_rlm.workspace.copyout import CopyBudget, mib_bound
from fleet_rlm.workspace.hashing import HashingReader
from fleet_rlm.workspace.layout import ARTIFACTS, FILES, Workspace
from fleet_rlm.workspace.manifest import build_manifest
from fleet_rlm.workspace.paths import PathEscapeError, split_rel
from fleet_rlm.workspace.tree import SHARED_DIR_MODE, SafeTree, Skipped, UnsafeEntry

CHILDREN_DIR = "children"


@dataclass
class Delegation:
    """What every child agent of one turn shares."""

    settings: Settings
    budget: TurnBudget
    emitter: EventEmitter
    backend: SandboxBackend
    turn_id: str
    lm: dspy.LM
    sub_lm: dspy.LM
    register_sandbox: Callable[[Sandbox], None]
    scratch_root: Path
    skills: TurnSkills = field(default_factory=TurnSkills)
    """The turn's skills, installed into every child's workspace too."""
    _slots: dict[int, threading.BoundedSemaphore] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def slot(self, depth: int) -> threading.BoundedSemaphore:
        """Concurrency is capped per level, so a parent waiting on its children never holds their slots."""
        with self._lock:
            if depth not in self._slots:
                self._slots[depth] = threading.BoundedSemaphore(self.settings.budget.max_concurrent_children)
            return self._slots[depth]

    def tools(self, *, depth: int, parent: TurnTrace, workspace: Workspace) -> list[Callable[..., Any]]:
        """``spawn_agent`` and ``spawn_agents`` for code running at ``depth`` (0 = the turn's own loop)."""
        if depth >= self.settings.budget.max_depth:
            return []

        def spawn_agent(task: str, files: list[str] | None = None, context: str | None = None) -> dict[str, Any]:
            """Run a child agent on `task` in its own sandbox; `files` are workspace paths (e.g. 'files/a.csv')
            copied into the child's files/, `context` is text it is told. Returns a dict with status
            ('completed', 'incomplete', 'failed', 'timeout', 'cancelled', 'refused'), answer, unverified (True when
            the child ran out of iterations and its answer was extracted, or its code never read a file its task
            names) with unverified_reason, error, artifacts
            (paths in your workspace under artifacts/children/<child_id>/) and child_id."""
            task, files, context, error = _spec({"task": task, "files": files or [], "context": context})
            if error is not None:
                return _result("", "refused", error=error)
            return self.run_child(task, files, context, depth=depth + 1, parent=parent, workspace=workspace)

        def spawn_agents(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
            """Run several child agents concurrently; each item is {'task': ..., 'files': [...], 'context': ...}.
            Returns their results in the same order; a child that fails gives an error result in its slot."""
            specs = [_spec(item) for item in tasks]
            if not specs:
                return []
            with ThreadPoolExecutor(max_workers=len(specs), thread_name_prefix="child") as pool:
                futures = [
                    pool.submit(self.run_child, t, f, c, depth=depth + 1, parent=parent, workspace=workspace)
                    if error is None
                    else None
                    for t, f, c, error in specs
                ]
                return [
                    future.result() if future is not None else _result("", "refused", error=spec[3])
                    for future, spec in zip(futures, specs, strict=True)
                ]

        return [spawn_agent, spawn_agents]

    def run_child(
        self, task: str, files: list[str], context: str | None, *, depth: int, parent: TurnTrace, workspace: Workspace
    ) -> dict[str, Any]:
        child_id = new_id("child")
        try:
            self.budget.reserve_child()
        except (BudgetExceeded, TurnCancelled) as exc:
            return _result(child_id, "refused", error=str(exc))
        with self.slot(depth):
            return ChildRun(self, child_id, task, files, context, depth, parent, workspace).run()


def _spec(item: Any) -> tuple[str, list[str], str | None, str | None]:
    if not isinstance(item, dict) or not isinstance(item.get("task"), str):
        return "", [], None, "each item needs a 'task' string"
    files = item.get("files") or []
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return item["task"], [], None, "'files' must be a list of workspace paths"
    context = item.get("context")
    return item["task"], files, context if isinstance(context, str) else None, None


def _result(child_id: str, status: str, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "child_id": child_id,
        "status": status,
        "answer": None,
        "answer_source": None,
        "unverified": False,
        "unverified_reason": None,
        "error": None,
        "artifacts": [],
    }
    base.update(extra)
    return base


class ChildRun:
    """One child agent from start to teardown."""

    def __init__(
        self,
        delegation: Delegation,
        child_id: str,
        task: str,
        files: list[str],
        context: str | None,
        depth: int,
        parent: TurnTrace,
        parent_workspace: Workspace,
    ) -> None:
        self.delegation = delegation
        self.child_id = child_id
        self.task = task
        self.files = files
        self.context = context
        self.depth = depth
        self.parent = parent
        self.parent_workspace = parent_workspace
        self.span = new_id("span")
        self.sandboxes: list[Sandbox] = []
        self.usage = TurnUsage(parent=delegation.budget.usage)
        self.trace = TurnTrace(
            delegation.emitter,
            delegation.settings.budget.child_max_iterations,
            root_span=self.span,
            parent_span=parent.iteration_span,
            guard=LoopGuard.from_settings(delegation.settings.budget),
        )

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        self.trace.emit(ChildStarted(child_id=self.child_id, depth=self.depth, task=self.task, files=self.files))
        volume = self.delegation.backend.workspace_volume(
            self.delegation.scratch_root / self.child_id,
            SandboxLimits.from_settings(self.delegation.settings.sandbox, self.delegation.settings.budget),
        )
        try:
            result = self._run_in(Workspace.create(volume.workspace, mode=SHARED_DIR_MODE))
        finally:
            for sandbox in self.sandboxes:
                sandbox.interrupt()
            volume.release()
        result["duration"] = round(time.monotonic() - started, 3)
        usage = self._usage()
        result["usage"] = usage.model_dump()
        self.trace.emit(
            ChildFinished(
                child_id=self.child_id,
                depth=self.depth,
                task=self.task,
                duration=result["duration"],
                outcome=result["status"],
                error=result["error"],
                usage=usage,
                artifacts=result["artifacts"],
            )
        )
        return result

    def _run_in(self, workspace: Workspace) -> dict[str, Any]:
        try:
            self._copy_inputs(workspace)
        except (PathEscapeError, OSError) as exc:
            return _result(self.child_id, "failed", error=f"bad file for child: {_reason(exc)}")
        self.delegation.skills.install(workspace, self.trace)
        deadline = min(self.delegation.settings.budget.child_timeout, self.delegation.budget.remaining_seconds())
        if deadline <= 0:
            return _result(self.child_id, "timeout", error="no time left in the turn for a child agent")
        outcome: dict[str, Any] = {}
        worker = threading.Thread(
            target=self._think, args=(workspace, outcome), name=f"child-{self.child_id}", daemon=True
        )
        worker.start()
        worker.join(deadline)
        if worker.is_alive():
            for sandbox in self.sandboxes:
                sandbox.interrupt()
            return _result(self.child_id, "timeout", error=f"child agent exceeded its deadline of {deadline:.0f}s")
        if "error" in outcome:
            return _result(self.child_id, outcome["status"], error=outcome["error"], answer=outcome.get("answer"))
        artifacts, provenance = self._promote(workspace)
        extracted = self.trace.extracted
        unread_reason = (
            None if extracted else unread_inputs_reason(self.task, self.trace.hints.inputs, self.trace.codes)
        )
        return _result(
            self.child_id,
            "completed",
            answer=outcome["answer"],
            answer_source="extracted" if extracted else "submitted",
            unverified=extracted or unread_reason is not None,
            unverified_reason=unread_reason,
            artifacts=artifacts,
            provenance=provenance,
        )

    def _copy_inputs(self, workspace: Workspace) -> None:
        """The files the parent named, read without following links, into the child's ``files/``."""
        parent, child = self.parent_workspace.tree, workspace.tree
        for rel in self.files:
            names = split_rel(rel)
            if names[0] == FILES:
                names = names[1:]
            if not names:
                raise PathEscapeError(rel, "the path names the files directory itself, not a file in it")
            child.copy_from(parent, rel, "/".join((FILES, *names)))

    def _think(self, workspace: Workspace, outcome: dict[str, Any]) -> None:
        budget = self.delegation.budget
        spec = SandboxSpec(
            workspace=workspace.root,
            limits=SandboxLimits.from_settings(self.delegation.settings.sandbox, self.delegation.settings.budget),
            labels={"turn": self.delegation.turn_id, "child": self.child_id},
            observer=TurnObserver(self.trace),
        )
        factory = observed_sandboxes(
            self.delegation.backend,
            spec,
            self.trace,
            self.delegation.settings,
            budget=budget,
            on_create=self._register,
        )
        rlm = build_rlm(
            max_iterations=self.delegation.settings.budget.child_max_iterations,
            max_model_calls=budget.max_model_calls,
            max_output_chars=self.delegation.settings.budget.max_output_chars,
            sub_lm=MeteredLM(self.delegation.sub_lm, budget, f"child-sub:{self.child_id}", streaming=False),
            interpreter_factory=factory,
            tools=self.delegation.tools(depth=self.depth, parent=self.trace, workspace=workspace) or None,
            guard=self.trace.guard,
            on_extract=self.trace.mark_extracted,
            skills=self.delegation.skills.listing,
            recovery=self.trace.recovery(),
        )
        inputs = {
            "task": Text(self.task),
            "workspace": Text(self.trace.shown_inputs(build_manifest(workspace), self.task)),
            "history": Text(self.context or "(no context from the parent agent)"),
        }
        root = MeteredLM(self.delegation.lm, budget, f"child:{self.child_id}", streaming=False)
        callbacks = RLMCallbacks(self.trace, rlm.generate_action, rlm.extract)
        try:
            adapter = turn_adapter(self.delegation.settings.lm, root, self.task, self.trace.guard)
            self.trace.hints.json_replies = isinstance(adapter, SchemaAdapter)
            with program_context(root, self.usage, callbacks, adapter=adapter):
                prediction = rlm(**inputs)
            budget.check_alive()
            outcome["answer"] = str(prediction.answer)
        except BaseException as exc:  # a child's failure is a result for its parent, never a crash
            outcome.update(_child_failure(exc, budget))

    def _register(self, sandbox: Sandbox) -> None:
        self.sandboxes.append(sandbox)
        self.delegation.register_sandbox(sandbox)

    def _promote(self, workspace: Workspace) -> tuple[list[str], list[dict[str, Any]]]:
        """Copy the child's artifacts into the parent's ``artifacts/children/<child id>/``.

        Both trees are sandbox-writable: the child's is walked without following links (what is
        skipped is reported), and the parent's is written through descriptors, so a link the
        parent's code planted at ``artifacts/children`` is refused rather than written through.
        Each copy is bounded (:meth:`~fleet_rlm.workspace.tree.SafeTree.open_bounded`), the child's
        files together by ``sandbox.copy_out_turn_mb``: a sparse file, or one past it, is left behind
        with a warning naming it.
        """
        source, target = workspace.tree, self.parent_workspace.tree
        base = f"{ARTIFACTS}/{CHILDREN_DIR}/{self.child_id}"
        promoted: list[str] = []
        provenance: list[dict[str, Any]] = []
        turn_mb = self.delegation.settings.sandbox.copy_out_turn_mb
        budget = CopyBudget([mib_bound("the turn's", "sandbox.copy_out_turn_mb", turn_mb)])
        try:
            for entry in source.walk(ARTIFACTS):
                rel = entry.rel.removeprefix(f"{ARTIFACTS}/")
                path = f"{base}/{rel}"
                try:
                    copied = budget.copy(
                        entry.rel, partial(_copy_hashed, source, entry.rel, target, path), itemgetter(1)
                    )
                except UnsafeEntry as exc:  # the child's file, replaced by a link or a special file since listed
                    source.skipped.append(Skipped(exc.rel, exc.what))
                    continue
                if copied is None:
                    continue
                promoted.append(path)
                provenance.append(
                    {
                        "path": path,
                        "source_path": entry.rel,
                        "sha256": copied[0],
                        "child_id": self.child_id,
                        "parent_turn": self.delegation.turn_id,
                        "task": self.task,
                    }
                )
            if provenance:
                target.write(f"{base}/provenance.json", json.dumps(provenance, indent=2).encode())
        except OSError as exc:
            self.trace.emit(TurnWarning(message=f"the child's artifacts were not promoted: {_reason(exc)}"))
            return [], []
        finally:
            self.trace.warn_skipped(source)
            for message in budget.refused.values():
                self.trace.emit(TurnWarning(message=message))
        return promoted, provenance

    def _usage(self) -> ChildUsage:
        calls = self.delegation.budget.calls
        return ChildUsage(
            model_calls=calls.get(f"child:{self.child_id}", 0) + calls.get(f"child-sub:{self.child_id}", 0),
            input_tokens=self.usage.input_tokens,
            output_tokens=self.usage.output_tokens,
            iterations=self.trace.iteration,
        )


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, UnsafeEntry | _ParentRefused) and exc.strerror else str(exc)


def _child_failure(exc: BaseException, budget: TurnBudget) -> dict[str, str]:
    cause = budget_error_in(exc)
    if isinstance(cause, TurnCancelled) or budget.cancelled:
        return {"status": "cancelled", "error": "the turn was cancelled"}
    incomplete = incomplete_in(exc)
    if incomplete is not None:
        return {"status": "incomplete", "error": str(incomplete), "answer": could_not_compute(str(incomplete))}
    if cause is not None:
        return {"status": "failed", "error": str(cause)}
    return {"status": "failed", "error": one_line(exc)}


class _ParentRefused(OSError):
    """The parent's tree refused a write (a link its code planted on the way): the promotion stops,
    unlike a child's file refused on its own, which is skipped."""


def _copy_hashed(source: SafeTree, rel: str, target: SafeTree, path: str, limit: int) -> tuple[str, int]:
    """Copy ``rel`` of ``source`` to ``path`` of ``target``, at most ``limit`` bytes; its sha256 and size."""
    with source.open_bounded(rel, limit) as handle:
        reader = HashingReader(handle)
        try:
            size = target.write(path, reader)
        except UnsafeEntry as exc:
            raise _ParentRefused(exc.errno, exc.strerror) from exc
    return reader.sha256, size
