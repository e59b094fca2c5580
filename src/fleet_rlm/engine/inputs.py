"""Turn inputs the model must see in full.

``dspy.RLM`` shows a plain string input only by its first and last 500 characters. The workspace
manifest, the session history and the task are already bounded by Fleet, and the model needs all of
them, so they enter as :class:`Text`: shown whole in the prompt, injected into the sandbox once per
turn rather than re-sent on every iteration.
"""

from __future__ import annotations

from dspy.primitives import SandboxSerializable


class Text(SandboxSerializable):  # type: ignore[misc]
    """A string that is shown to the model whole and bound as a ``str`` in the sandbox."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __str__(self) -> str:
        return self.value

    def sandbox_setup(self) -> str:
        return ""

    def to_sandbox(self) -> bytes:
        return self.value.encode("utf-8")

    def sandbox_assignment(self, var_name: str, data_expr: str) -> str:
        return f"{var_name} = {data_expr}"

    def rlm_preview(self, max_chars: int = 500) -> str:
        return self.value
