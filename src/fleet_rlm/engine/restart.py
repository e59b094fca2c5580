"""A crashed sandbox is replaced, not fatal: a fresh one on the same workspace carries on the loop.

When the worker dies or breaks its protocol while the model's code runs (``SandboxCrashed``: an
exit, a signal, an OOM kill at the memory limit, a protocol error), :class:`SandboxRestarter` makes
a new sandbox through the loop's factory (admitted and registered for cancel like the first), gives
it the output fields, and replays the setup executions ``dspy.RLM`` ran before the first iteration:
the inputs it injected once (``Text`` values) and DSPy's sandbox facade. Tools are bound again at
each execution. Files in the workspace are kept; variables are lost. The model is told exactly that
in its next observation, and a ``sandbox.restarted`` event tells the person. The turn's budget
bounds the restarts (``max_sandbox_restarts``, child agents included); a cancel is never a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dspy.primitives import CodeExecutionError, CodeInterpreterError

from fleet_rlm.engine.budget import one_line
from fleet_rlm.protocol.payloads import SandboxRestarted
from fleet_rlm.sandbox.base import Sandbox, SandboxCrashed


def restart_observation(crash: SandboxCrashed) -> str:
    """What the model sees instead of its execution's result: the output so far, then what happened."""
    said = f"the sandbox restarted after {crash.cause}; variables are lost, files in the workspace are kept"
    output = crash.output.rstrip("\n")
    return f"{output}\n{said}" if output else said


class SandboxRestarter:
    """Replaces one observed sandbox after a crash; remembers what the fresh one must be given."""

    def __init__(
        self,
        make: Callable[[], Sandbox],
        reserve: Callable[[str], int],
        max_restarts: int,
        announce: Callable[[SandboxRestarted], None],
    ) -> None:
        self._make = make
        self._reserve = reserve
        self._max_restarts = max_restarts
        self._announce = announce
        self._setup: list[tuple[str, dict[str, Any] | None]] = []

    def record_setup(self, code: str, variables: dict[str, Any] | None) -> None:
        """An execution before the loop's first iteration (inputs, the facade): replayed on a restart."""
        self._setup.append((code, dict(variables) if variables is not None else None))

    def replace(self, dead: Sandbox, crash: SandboxCrashed, tools: Callable[[], dict[str, Any]]) -> Sandbox:
        """A started sandbox set up as ``dead`` was; ``tools`` gives the tools to bind for each replay.

        Raises ``BudgetExceeded`` past the turn's restarts, ``TurnCancelled`` once the turn is
        cancelled, and ``CodeInterpreterError`` when the fresh sandbox cannot be set up."""
        number = self._reserve(crash.cause)
        fresh = self._make()
        try:
            fresh.output_fields = dead.output_fields
            fresh.start()
            for code, variables in self._setup:
                fresh.tools = tools()
                fresh.execute(code, variables)
        except (CodeExecutionError, SyntaxError) as exc:
            fresh.shutdown()
            raise CodeInterpreterError(
                f"the sandbox crashed ({crash.cause}) and could not be set up again: {one_line(exc)}"
            ) from exc
        except BaseException:
            fresh.shutdown()
            raise
        finally:
            dead.shutdown()
        self._announce(SandboxRestarted(cause=crash.cause, restart=number, max_restarts=self._max_restarts))
        return fresh
