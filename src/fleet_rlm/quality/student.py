"""What ``dspy.GEPA`` optimizes: a DSPy module whose parameters are Fleet's program — the RLM's
``generate_action`` and ``extract`` instructions and the flex route's module source — and whose forward
replays the example's captured turn with them.

GEPA sees ordinary predictors and a ``dspy.Flex`` submodule, so its own proposers work on them: the
instruction proposer rewrites the two instructions, the code proposer the flex source. The turn itself
runs where every turn runs (a fresh sandbox from the pool, on the service's event loop); its predictor
calls happen there, so the forward records one trace entry per predictor (the turn's inputs and what it
produced) for GEPA's reflective dataset. Nothing of the module runs sandbox code on the host: the flex
source is only parsed here, and runs in the sandbox when a flex-route turn is replayed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import dspy

from fleet_rlm.engine.modes.flex import FLEX_MODULE
from fleet_rlm.engine.program import FleetTask, ProgramSpec, build_rlm
from fleet_rlm.protocol.events import EventType
from fleet_rlm.quality.replay import ReplayResult, replay
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.replays import ReplaySnapshot


class _NoInterpreter:
    """A stand-in interpreter factory: the student's RLM and Flex only lend their signatures and source;
    they never run (the replayed turn builds its own)."""

    execution_instructions = ""

    def __call__(self) -> Any:
        raise RuntimeError("the optimization student never runs code itself")


def builtin_extract_instructions() -> str:
    rlm = build_rlm(
        max_iterations=1, max_model_calls=1, max_output_chars=1, sub_lm=None, interpreter_factory=_NoInterpreter()
    )
    return str(rlm.extract.signature.instructions)


class Replayer:
    """Runs replays for the student from GEPA's threads on the service's event loop. Shared, never
    copied, by the student's copies."""

    def __init__(self, service: FleetService, loop: asyncio.AbstractEventLoop, snapshots: dict[str, ReplaySnapshot]):
        self.service = service
        self.loop = loop
        self.snapshots = snapshots

    def __deepcopy__(self, _memo: dict[int, Any]) -> Replayer:
        return self

    def run(self, turn_id: str, program: ProgramSpec) -> ReplayResult:
        future = asyncio.run_coroutine_threadsafe(
            replay(self.service, self.snapshots[turn_id], program=program), self.loop
        )
        return future.result()


class FleetStudent(dspy.Module):  # type: ignore[misc]
    def __init__(self, replayer: Replayer, base: ProgramSpec) -> None:
        super().__init__()
        self.replayer = replayer
        self.generate_action = dspy.Predict(FleetTask.with_instructions(base.generate_action or FleetTask.instructions))
        extract = base.extract or builtin_extract_instructions()
        self.extract = dspy.Predict(dspy.Signature("task, trajectory -> answer", extract))
        self.flex = dspy.Flex(FleetTask, interpreter_factory=_NoInterpreter(), max_predictor_calls=None)
        self.flex.load_state({"module_src": base.flex_module_src or FLEX_MODULE})

    def program(self, version: str) -> ProgramSpec:
        """This module's parameters as a program."""
        return ProgramSpec(
            version=version,
            generate_action=str(self.generate_action.signature.instructions),
            extract=str(self.extract.signature.instructions),
            flex_module_src=self.flex.module_src,
        )

    def forward(self, task: str, turn_id: str) -> dspy.Prediction:
        result = self.replayer.run(turn_id, self.program("candidate"))
        outcome = result.outcome
        code = "\n\n".join(str(e.data.get("code", "")) for e in result.events if e.type is EventType.CODE)
        trace = dspy.settings.trace
        if trace is not None:
            trace.append((self.generate_action, {"task": task}, dspy.Prediction(code=code, answer=outcome.answer)))
            trace.append((self.extract, {"task": task, "trajectory": code}, dspy.Prediction(answer=outcome.answer)))
        return dspy.Prediction(
            answer=outcome.answer,
            route=outcome.route,
            usage=outcome.usage,
            artifacts=result.artifacts,
            unverified_reason=outcome.unverified_reason,
            error=outcome.error,
            status=outcome.status.value,
        )


def changed_parts(base: ProgramSpec, candidate: ProgramSpec) -> list[str]:
    """The parts of ``candidate`` that differ from ``base`` (built-in parts resolved to their text)."""
    resolved = {
        "generate_action": base.generate_action or str(FleetTask.instructions),
        "extract": base.extract or builtin_extract_instructions(),
        "flex_module_src": base.flex_module_src or FLEX_MODULE,
    }
    return [name for name, text in candidate.content().items() if text is not None and text != resolved[name]]
