"""``FleetInterpreter``: a DSPy ``CodeInterpreter`` that runs code in a Fleet sandbox (docs/dspy.md).

A drop-in for ``dspy.LocalInterpreter``: the same constructor, the same results (a trailing
expression's value is returned), errors and callbacks, but the code runs isolated, under Fleet's
limits, in a workspace of its own. ``dspy.RLM`` and ``dspy.Flex`` take the class itself as their
``interpreter_factory``, or :meth:`FleetInterpreter.factory` for one with options.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dspy.utils import BaseCallback

from fleet_rlm.config import ConfigError, Settings, load_settings
from fleet_rlm.sandbox.base import SandboxLimits, SandboxSpec
from fleet_rlm.sandbox.isolation import PythonRuntime, importable_packages
from fleet_rlm.sandbox.local import TRAILING_VALUE_RETURNED, LocalSandboxBackend, execution_instructions
from fleet_rlm.sandbox.local_sandbox import LocalSandbox, check_output_fields
from fleet_rlm.sandbox.registry import configured_backend
from fleet_rlm.sandbox.tool_calls import check_tool_names
from fleet_rlm.sandbox.volume import remove_volume_directory
from fleet_rlm.workspace.tree import SHARED_DIR_MODE


class _ExecutionInstructions:
    """``FleetInterpreter.execution_instructions``, readable on the class (``dspy.RLM`` reads it off its
    factory) and worked out on first read: it lists the packages the sandbox can import."""

    def __init__(self) -> None:
        self._text: str | None = None

    def __get__(self, instance: object, owner: type | None = None) -> str:
        if self._text is None:
            packages = importable_packages(PythonRuntime.current())
            self._text = f"{execution_instructions(TRAILING_VALUE_RETURNED)} {packages}"
        return self._text


class FleetInterpreter(LocalSandbox):
    """A DSPy ``CodeInterpreter`` backed by a Fleet sandbox.

    Args:
        tools: host functions the code calls by name (positional or keyword arguments); arguments and
            results must be JSON-compatible.
        output_fields: field definitions for a typed ``SUBMIT``.
        execution_timeout: seconds one execution may take, tool calls included (default: the
            ``execution_timeout`` setting). The code is interrupted and the session keeps its state.
        callbacks: DSPy callbacks of this interpreter alone, besides those configured in DSPy.
        workspace: the directory the code works in (its working directory, kept afterwards). By
            default a fresh private one, bounded like a turn's where the host allows, and removed at
            shutdown.
        settings: Fleet's settings, for the sandbox's limits and backend (default: loaded as ``fleet``
            loads them, from the environment, ``.env`` and ``fleet.toml``).
        backend: the local backend to run on (default: the one the settings configure).

    Raises SandboxUnavailable when code cannot run isolated here (see ``fleet doctor``).
    """

    execution_instructions = _ExecutionInstructions()

    def __init__(
        self,
        tools: dict[str, Callable[..., Any]] | None = None,
        output_fields: list[dict[str, Any]] | None = None,
        *,
        execution_timeout: float | None = None,
        callbacks: list[BaseCallback] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        settings: Settings | None = None,
        backend: LocalSandboxBackend | None = None,
    ) -> None:
        check_tool_names(tools or {})
        fields = None if output_fields is None else [dict(field) for field in output_fields]
        check_output_fields(fields)
        if execution_timeout is not None and not execution_timeout > 0:
            raise ValueError("execution_timeout must be a positive number of seconds (or None for the setting)")
        chosen = Path(workspace).expanduser().resolve() if workspace is not None else None
        if chosen is not None and not chosen.is_dir():
            raise NotADirectoryError(f"workspace {chosen} is not a directory")
        settings = settings or load_settings()
        backend = backend or _local_backend(settings)
        limits = SandboxLimits.from_settings(settings.sandbox, settings.budget)
        if execution_timeout is not None:
            limits = dataclasses.replace(limits, execution_timeout=float(execution_timeout))
        # Until start() makes the private workspace, the spec names the directory it will be made in.
        spec = SandboxSpec(chosen or Path(tempfile.gettempdir()), limits=limits)
        super().__init__(spec, backend.checked_launcher(limits), interrupt_grace=backend.interrupt_grace)
        self.tools = dict(tools or {})
        self.output_fields = fields
        self.callbacks = list(callbacks or [])
        self.return_trailing_value = True
        self._backend = backend
        self._own_workspace = chosen is None
        self._release_workspace: Callable[[], Any] | None = None

    @classmethod
    def factory(
        cls,
        *,
        execution_timeout: float | None = None,
        callbacks: list[BaseCallback] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        settings: Settings | None = None,
        backend: LocalSandboxBackend | None = None,
    ) -> FleetInterpreterFactory:
        """A zero-argument factory of interpreters with these options, for ``interpreter_factory=``
        (``dspy.RLM`` and ``dspy.Flex`` add their own tools and output fields to each)."""
        settings = settings or load_settings()
        options: dict[str, Any] = {
            "execution_timeout": execution_timeout,
            "callbacks": callbacks,
            "workspace": workspace,
            "settings": settings,
            "backend": backend or _local_backend(settings),
        }
        return FleetInterpreterFactory(cls, options)

    def _launch_workspace(self) -> Path:
        if self._own_workspace and self._release_workspace is None:
            directory = Path(tempfile.mkdtemp(prefix="fleet-interpreter-"))
            try:
                volume = self._backend.workspace_volume(directory, self.spec.limits)
                os.chmod(volume.workspace, SHARED_DIR_MODE)  # the sandbox may run as a uid of its own
            except BaseException:
                remove_volume_directory(directory)
                raise
            # Released at shutdown, or when the interpreter is collected or Python exits without one.
            self._release_workspace = weakref.finalize(self, volume.release)
            self.spec.workspace = volume.workspace
        return super()._launch_workspace()

    def shutdown(self) -> None:
        """Stop the worker; a workspace the interpreter made is removed, a given one is kept."""
        try:
            super().shutdown()
        finally:
            if self._release_workspace is not None:
                self._release_workspace()


@dataclasses.dataclass(frozen=True)
class FleetInterpreterFactory:
    """Makes a :class:`FleetInterpreter` with the same options at each call; carries the
    ``execution_instructions`` ``dspy.RLM`` shows the model."""

    interpreter: type[FleetInterpreter]
    options: dict[str, Any]

    @property
    def execution_instructions(self) -> str:
        return self.interpreter.execution_instructions

    def __call__(self) -> FleetInterpreter:
        return self.interpreter(**self.options)


def _local_backend(settings: Settings) -> LocalSandboxBackend:
    backend = configured_backend(settings)
    if not isinstance(backend, LocalSandboxBackend):
        raise ConfigError(
            f"FleetInterpreter runs on the local sandbox backend; sandbox_backend is {settings.sandbox.backend!r}"
        )
    return backend
