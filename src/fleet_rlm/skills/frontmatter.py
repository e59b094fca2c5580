"""The front matter of a ``SKILL.md``: a YAML mapping between two ``---`` lines, first thing in the file.

The same format as other agent-skill tools use, so their skills work here: ``name`` and
``description`` are required strings; other keys (``license``, ``metadata``, ...) are allowed and
ignored. Parsing is strict: PyYAML's safe loader (no tags that build objects), duplicate keys,
anchors and aliases refused, nesting and the block bounded in size, and every error names the file, the line
where YAML can tell it, and what is wrong (quoting the file's text only in short, escaped).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import yaml

from fleet_rlm.protocol.visible import excerpt, quoted

FENCE = "---"
MAX_FRONT_MATTER_CHARS = 16_384
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_NESTING = 32
"""How deep lists and mappings may nest in a front matter: composing recurses once a level, so a few
KB of ``[`` would exhaust Python's stack."""
NAME_PATTERN = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")
NAME_RULE = "lowercase letters, digits and single '-' or '_' between them, at most 64 characters"


class SkillFormatError(ValueError):
    """A skill that cannot be used; the message names the file and what is wrong with it."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class SkillHeader:
    name: str
    description: str
    """On one line: runs of whitespace (a folded YAML block's newlines too) become one space."""
    body: str
    """The Markdown after the front matter."""


class _StrictLoader(yaml.SafeLoader):
    """The safe loader, refusing a mapping that repeats a key (YAML allows it, silently keeping the
    last), any anchor or alias (a front matter needs none, and a few hundred bytes of aliases nested
    in each other stand for a structure too large to hold or print: a "billion laughs"), and lists or
    mappings nested deeper than :data:`MAX_NESTING`."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        mark = event.start_mark if isinstance(event.start_mark, yaml.error.Mark) else None
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            what = "an alias" if isinstance(event, yaml.AliasEvent) else "an anchor"
            raise yaml.composer.ComposerError(
                None, None, f"anchors and aliases are not allowed (found {what}: {quoted(anchor, 40)})", mark
            )
        if self._depth >= MAX_NESTING:
            raise yaml.composer.ComposerError(None, None, f"lists and mappings nest more than {MAX_NESTING} deep", mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {quoted(str(key))} appears twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _scalar(value: object) -> str:
    """`` (7)`` for a number, a date or a boolean, cut short; nothing for a list or a mapping,
    whose text could be anything (never their whole ``repr``)."""
    if isinstance(value, list | dict | set):
        return ""
    return f" ({excerpt(str(value))})"


def is_valid_name(name: str) -> bool:
    return len(name) <= MAX_NAME_CHARS and NAME_PATTERN.fullmatch(name) is not None


def parse_skill_md(text: str, where: str) -> SkillHeader:
    """The front matter and body of a ``SKILL.md`` whose text is ``text``; ``where`` (its path) names
    it in errors. Raises :class:`SkillFormatError`."""
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].rstrip() != FENCE:
        raise SkillFormatError(
            where,
            f"must start with a front matter block: a '{FENCE}' line, then 'name: ...' "
            f"and 'description: ...', then another '{FENCE}' line",
        )
    end = next((index for index, line in enumerate(lines[1:], 1) if line.rstrip() == FENCE), None)
    if end is None:
        raise SkillFormatError(where, f"the front matter is not closed by a '{FENCE}' line")
    block = "".join(lines[1:end])
    if len(block) > MAX_FRONT_MATTER_CHARS:
        raise SkillFormatError(where, f"the front matter is longer than {MAX_FRONT_MATTER_CHARS} characters")
    data = _load(block, where)
    name = _required_string(data, "name", where)
    if not is_valid_name(name):
        raise SkillFormatError(where, f"front matter: 'name' {quoted(name)} is not a valid skill name ({NAME_RULE})")
    description = " ".join(_required_string(data, "description", where).split())
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillFormatError(where, f"front matter: 'description' is longer than {MAX_DESCRIPTION_CHARS} characters")
    return SkillHeader(name=name, description=description, body="".join(lines[end + 1 :]))


@functools.lru_cache(maxsize=256)
def _parsed(block: str) -> Any:
    """The YAML of a front matter block, remembered: every turn finds every skill again (a skill may
    have changed between turns), and parsing YAML was most of that cost. Errors are not remembered."""
    return yaml.load(block, Loader=_StrictLoader)  # a SafeLoader: no tag builds an object


def _load(block: str, where: str) -> dict[str, Any]:
    try:
        data = _parsed(block)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 2}: " if mark is not None else ""  # +1: 0-based, +1: the opening fence
        raise SkillFormatError(
            where, f"the front matter is not valid YAML ({at}{quoted(exc.problem or exc.context or '', 200)})"
        ) from None
    except yaml.YAMLError as exc:
        raise SkillFormatError(where, f"the front matter is not valid YAML ({quoted(str(exc), 200)})") from None
    except RecursionError:  # what MAX_NESTING stops; should any other path of PyYAML's recurse as deep
        raise SkillFormatError(where, "the front matter nests too deep to read") from None
    except ValueError as exc:  # a value YAML cannot convert: an integer of more than 4300 digits
        raise SkillFormatError(
            where, f"the front matter holds a value that cannot be read ({quoted(str(exc))})"
        ) from None
    if not isinstance(data, dict):
        got = "nothing" if data is None else f"a {type(data).__name__}"
        raise SkillFormatError(where, f"the front matter must be 'key: value' lines (a mapping), not {got}")
    return dict(data)  # a copy: the remembered mapping is shared


def _required_string(data: dict[str, Any], key: str, where: str) -> str:
    if key not in data:
        raise SkillFormatError(where, f"front matter: '{key}' is missing")
    value = data[key]
    if not isinstance(value, str):
        shown = "empty" if value is None else f"a {type(value).__name__}{_scalar(value)}"
        raise SkillFormatError(where, f"front matter: '{key}' must be a string, not {shown}; quote it")
    if not value.strip():
        raise SkillFormatError(where, f"front matter: '{key}' is empty")
    return value.strip()
