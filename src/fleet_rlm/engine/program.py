"""The DSPy program a turn runs: the task signature Fleet gives ``dspy.RLM``."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.primitives import CodeExecutionError

from fleet_rlm.engine.bridge.allowlist import sub_agent_guidance
from fleet_rlm.engine.dspy_compat import AdapterParseError
from fleet_rlm.engine.honesty import GuardedExtract, LoopGuard, NothingComputed, RepeatedWork
from fleet_rlm.engine.inputs import Text
from fleet_rlm.engine.malformed import NOTHING_RAN, malformed_observation, malformed_warning
from fleet_rlm.protocol.ids import BUILTIN_PROGRAM_VERSION


class FleetTask(dspy.Signature):  # type: ignore[misc]
    """You are Fleet, an analyst that answers by running Python in a sandbox.

    The current directory is the workspace. Inputs are in `files/`; anything the person should keep
    (tables, charts, reports) must be saved under `artifacts/`. `memory/MEMORIES.md`, when present,
    holds what the person approved to remember from earlier turns and sessions (edits to it are not kept).
    `task`, `workspace` and `history` are shown to you in full below: never print them. `workspace` lists
    every file with its size, sha256, kind and a short preview; it is a listing, not the data, and the
    previews are partial: read the files with code by their paths, and never guess their contents. Keep
    large data in files and variables, print only small summaries. Use `llm_query` for semantic judgements
    on snippets.
    The answer is for a person: concise Markdown that states the result, the key figures and the
    artifacts written."""

    task: Text = dspy.InputField(desc="What the person asked for.")
    workspace: Text = dspy.InputField(desc="Manifest of the workspace files (path, size, sha256, kind, preview).")
    history: Text = dspy.InputField(
        desc="The approved memory, if any, then earlier turns of this conversation, oldest first."
    )
    answer: str = dspy.OutputField(desc="The final answer for the person, in Markdown.")


@dataclass(frozen=True)
class ProgramSpec:
    """The program a turn runs: Fleet's built-in one, or an approved optimization's. Each text set
    replaces the built-in one: the instructions of the RLM's ``generate_action`` and ``extract``
    predictors, and the flex route's module source."""

    version: str = BUILTIN_PROGRAM_VERSION
    generate_action: str | None = None
    """The task instructions DSPy's RLM puts first in ``generate_action``'s prompt (Fleet's own part of
    it: DSPy's action template, the tools' documentation and the sandbox's rules follow as always)."""
    extract: str | None = None
    """The whole instructions of the RLM's ``extract`` predictor."""
    flex_module_src: str | None = None

    def content(self) -> dict[str, str | None]:
        return {
            "generate_action": self.generate_action,
            "extract": self.extract,
            "flex_module_src": self.flex_module_src,
        }

    def canonical_bytes(self) -> bytes:
        """The program's changes as canonical JSON: what a candidate's sha256 covers."""
        return json.dumps(self.content(), sort_keys=True, separators=(",", ":")).encode()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.canonical_bytes()).hexdigest()

    def apply_extract(self, rlm: dspy.RLM) -> None:
        """Put this program's extract instructions on ``rlm``."""
        if self.extract is not None:
            rlm.extract.signature = rlm.extract.signature.with_instructions(self.extract)


MAX_SKILLS_CHARS = 8000


def skills_instructions(skills: Sequence[tuple[str, str]], *, max_chars: int = MAX_SKILLS_CHARS) -> str:
    """What the model is told of the skills installed under ``skills/``: each one's name and
    description, never its body (the model reads ``SKILL.md`` with code when a job needs it)."""
    if not skills:
        return ""
    lines: list[str] = []
    room = max_chars
    for index, (name, description) in enumerate(skills):
        line = f"- {name}: {description}"
        if len(line) > room:
            lines.append(f"- ... and {len(skills) - index} more: list them with os.listdir('skills')")
            break
        lines.append(line)
        room -= len(line) + 1
    return (
        "Skills: `skills/<name>/` holds read-only guidance and helper code for common jobs. When the task "
        "involves one, first read its `skills/<name>/SKILL.md` with code (print it whole) and follow it; it "
        "says how to load its helpers. Available skills:\n" + "\n".join(lines)
    )


def task_signature(skills: Sequence[tuple[str, str]] = (), instructions: str | None = None) -> type[dspy.Signature]:
    """:class:`FleetTask` (with ``instructions`` instead of its own when given), with the installed skills
    listed after its instructions when there are any."""
    base = FleetTask.instructions if instructions is None else instructions
    listing = skills_instructions(skills)
    if not listing and instructions is None:
        return FleetTask
    text = f"{base}\n\n{listing}" if listing else base
    return FleetTask.with_instructions(text)  # type: ignore[no-any-return]


SIGNATURES_KEPT = 32
"""Distinct builds of :class:`FleetRLM`'s signatures a process keeps (task, tools, runtime, budget)."""

_INITIAL_RULES = ("_initial_execution_instructions", "_initial_sub_agent_rules", "_initial_interpreter_rules")
_Signatures = tuple[type[dspy.Signature], type[dspy.Signature]]
_built: dict[tuple[object, ...], tuple[_Signatures, dict[str, str]]] = {}
_built_lock = threading.Lock()


SHOW_WRITTEN_FILES = """import os
for _dir, _subdirs, _names in os.walk('artifacts'):
    for _name in sorted(_names)[:10]:
        _path = os.path.join(_dir, _name)
        print(f'--- {_path} ---')
        try:
            print(open(_path, errors='replace').read(2000))
        except OSError as _error:
            print(_error)"""


@dataclass
class LoopRecovery:
    """How one RLM loop goes on where DSPy's would stop: a reply that could not be read becomes an
    observation (``warn`` reports it), and the loop ends through the extract step (``end_early`` is told
    why first) after ``guard.stop_after`` such replies in a row, or when the guard sees the same work
    repeated (:class:`RepeatedWork`)."""

    guard: LoopGuard
    warn: Callable[[str], None]
    end_early: Callable[[str], None]

    def recover(self, error: Exception, history: Any) -> Any | None:
        """The history to go on with, or None to end the loop through the extract step."""
        if isinstance(error, RepeatedWork):
            self.end_early(str(error))
            return None
        fields = list(error.signature.output_fields) if isinstance(error, AdapterParseError) else []
        in_a_row = self.guard.malformed()
        self.warn(malformed_warning(error, fields))
        if in_a_row >= self.guard.stop_after:
            why = f"{in_a_row} replies of the model in a row could not be read"
            if self.guard.succeeded == 0:
                raise NothingComputed(f"{why} and no code ran successfully") from error
            self.end_early(why)
            return None
        as_json = isinstance(dspy.settings.adapter, dspy.JSONAdapter)
        observation = malformed_observation(error, fields, in_a_row, self.guard.stop_after, as_json=as_json)
        return history.append(reasoning="(the reply could not be read)", code=NOTHING_RAN, output=observation)

    def show_written_files(self, repl: Any, history: Any) -> Any:
        """``history`` with the start of each file under ``artifacts/``, printed by code run in the sandbox
        (the host reads nothing the sandbox wrote): what repeated work that printed nothing wrote is then
        in front of the extract step, and what it printed can be the answer's evidence."""
        try:
            shown = repl.execute(SHOW_WRITTEN_FILES)
        except (CodeExecutionError, SyntaxError):
            return history
        if not isinstance(shown, str) or not shown.strip():
            return history
        return history.append(reasoning="(Fleet shows the files the work wrote)", code=SHOW_WRITTEN_FILES, output=shown)


class FleetRLM(dspy.RLM):  # type: ignore[misc]
    """``dspy.RLM`` telling the model about the sub-agents Fleet's bridge builds, not DSPy's full set, and
    going on after a reply it cannot read (:class:`LoopRecovery`)."""

    recovery: LoopRecovery | None = None

    def _execute_iteration(self, repl: Any, variables: Any, history: Any, iteration: int, *rest: Any) -> Any:
        try:
            return super()._execute_iteration(repl, variables, history, iteration, *rest)
        except (AdapterParseError, RepeatedWork) as error:
            if self.recovery is None:
                raise
            going_on = self.recovery.recover(error, history)
            if going_on is None and isinstance(error, RepeatedWork):
                history = self.recovery.show_written_files(repl, history)
        if going_on is not None:
            return going_on
        return self._extract_fallback(variables, history, list(self.signature.output_fields))

    async def _aexecute_iteration(self, repl: Any, variables: Any, history: Any, iteration: int, *rest: Any) -> Any:
        try:
            return await super()._aexecute_iteration(repl, variables, history, iteration, *rest)
        except (AdapterParseError, RepeatedWork) as error:
            if self.recovery is None:
                raise
            going_on = self.recovery.recover(error, history)
            if going_on is None and isinstance(error, RepeatedWork):
                history = self.recovery.show_written_files(repl, history)
        if going_on is not None:
            return going_on
        return await self._aextract_fallback(variables, history, list(self.signature.output_fields))

    def _build_signatures(self) -> _Signatures:
        """``dspy.RLM``'s action and extract signatures, with Fleet's sub-agent guidance in place of DSPy's
        from the start (DSPy would otherwise derive a new action signature for it on every iteration).

        Built once per process for each task signature, tool set, runtime and call budget: a build makes
        about ten pydantic model classes, a tenth of a turn process's CPU when many turns run. The classes
        are shared, so nothing changes them in place (optimizers give a predictor a new signature)."""
        key = (
            self.signature.instructions,
            tuple(
                (name, repr(field.annotation), repr(field.json_schema_extra))
                for name, field in self.signature.fields.items()
            ),
            self._format_tool_docs(self._user_tools),
            getattr(self._interpreter_factory, "execution_instructions", None),
            self.max_llm_calls,
        )
        with _built_lock:
            built = _built.get(key)
        if built is None:
            built = self._build_with_fleet_guidance()
            with _built_lock:
                if key not in _built and len(_built) >= SIGNATURES_KEPT:
                    del _built[next(iter(_built))]
                _built[key] = built
        signatures, initial = built
        for name, value in initial.items():
            setattr(self, name, value)
        return signatures

    def _build_with_fleet_guidance(self) -> tuple[_Signatures, dict[str, str]]:
        action, extract = super()._build_signatures()
        guidance = self._fleet_guidance()
        initial = {name: str(getattr(self, name)) for name in _INITIAL_RULES}
        dspy_rules = initial["_initial_interpreter_rules"]
        if dspy_rules and dspy_rules in action.instructions:
            rules = self._format_interpreter_rules(initial["_initial_execution_instructions"], guidance)
            action = action.with_instructions(action.instructions.replace(dspy_rules, rules, 1))
            initial.update(_initial_sub_agent_rules=guidance, _initial_interpreter_rules=rules)
        return (action, extract), initial

    def _fleet_guidance(self) -> str:
        """What Fleet tells the model about sub-agents, in place of DSPy's text."""
        return sub_agent_guidance(delegation="spawn_agent" in self._user_tools)

    def _setup_facade(self, repl: Any, budget: Any, interpreter_factory: Callable[[], Any]) -> str:
        rules = super()._setup_facade(repl, budget, interpreter_factory)
        return self._fleet_guidance() if rules else ""


def build_rlm(
    *,
    max_iterations: int,
    max_model_calls: int,
    max_output_chars: int,
    sub_lm: Any,
    interpreter_factory: Callable[[], Any],
    tools: list[Callable[..., Any]] | None = None,
    guard: LoopGuard | None = None,
    on_extract: Callable[[], None] | None = None,
    skills: Sequence[tuple[str, str]] = (),
    program: ProgramSpec | None = None,
    recovery: LoopRecovery | None = None,
) -> FleetRLM:
    """Fleet's ``dspy.RLM``. With ``guard``, its extract step refuses to answer when no code ever
    ran successfully, and calls ``on_extract`` before it answers from the work so far; with
    ``recovery``, a reply that cannot be read or repeated work do not end it. ``skills``
    (name, description) are listed in the instructions; ``program`` (the served one) may replace the
    task and extract instructions."""
    program = program or ProgramSpec()
    rlm = FleetRLM(
        task_signature(skills, program.generate_action),
        max_iters=max_iterations,
        # Fleet's own budget counts root and sub-model calls on one counter and fires first.
        max_llm_calls=max_model_calls,
        max_output_chars=max_output_chars,
        sub_lm=sub_lm,
        interpreter_factory=interpreter_factory,
        tools=tools,
    )
    program.apply_extract(rlm)
    rlm.recovery = recovery
    if guard is not None:
        rlm.extract = GuardedExtract(rlm.extract.signature, guard, on_extract)
    return rlm


def render_history(entries: list[tuple[str, str | None]], *, max_chars: int = 6000) -> str:
    """Earlier turns as the model sees them, newest kept when the text must be cut."""
    if not entries:
        return "(no earlier turns)"
    blocks = [f"User: {message}\nFleet: {answer or '(no answer)'}" for message, answer in entries]
    text = "\n\n".join(blocks)
    if len(text) <= max_chars:
        return text
    return "[earlier turns omitted]\n" + text[-max_chars:]


def render_context(entries: list[tuple[str, str | None]], memory: str | None) -> str:
    """The ``history`` input: the approved memory (``memory/MEMORIES.md``), when there is any, then the
    earlier turns."""
    history = render_history(entries)
    if not memory:
        return history
    return f"{memory.rstrip()}\n\n# Earlier turns\n\n{history}"
