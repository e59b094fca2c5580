"""What a label expects of an answer, beyond the reviewed answer the judge compares it with.

Every expectation is deterministic and checked on the replay's result; each failed one is said in
words (the metric's feedback). An unverified answer (extracted when the iteration budget ran out, or a
flex module's) fails unless the label allows it.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fleet_rlm.protocol.routes import Route

MAX_PATTERN = 1000
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")


def _pattern(value: str) -> str:
    if len(value) > MAX_PATTERN:
        raise ValueError(f"a regex is at most {MAX_PATTERN} characters")
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regex: {exc}") from exc
    return value


class ArtifactExpectation(BaseModel):
    """An artifact the answer must come with, and what its text must hold."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="Workspace path, e.g. artifacts/totals.csv.")
    contains: list[str] = Field(default_factory=list)
    regex: list[str] = Field(default_factory=list)

    @field_validator("path")
    @classmethod
    def _under_artifacts(cls, value: str) -> str:
        if not value.startswith("artifacts/") or ".." in value.split("/") or "\x00" in value:
            raise ValueError(f"artifact path {value!r} must be under artifacts/ with no '..'")
        return value

    @field_validator("regex")
    @classmethod
    def _regexes(cls, values: list[str]) -> list[str]:
        return [_pattern(v) for v in values]


class Expectations(BaseModel):
    """The structured checks of a label (``--expectations-file``, JSON)."""

    model_config = ConfigDict(extra="forbid")

    value: Any = Field(default=None, description="Exact value: a number one of the answer's numbers equals, or text.")
    tolerance: float | None = Field(default=None, ge=0, description="Absolute tolerance of a numeric value.")
    contains: list[str] = Field(default_factory=list, description="Text the answer must hold, each verbatim.")
    regex: list[str] = Field(default_factory=list, description="Patterns the answer must match (re.search).")
    artifacts: list[ArtifactExpectation] = Field(default_factory=list)
    route: Route | None = Field(default=None, description="The route the turn must take (a hard requirement).")
    delegation: bool | None = Field(default=None, description="True: a child agent must run; False: none may.")
    allow_unverified: bool = Field(default=False, description="Accept an answer that was not checked by code.")

    @field_validator("regex")
    @classmethod
    def _regexes(cls, values: list[str]) -> list[str]:
        return [_pattern(v) for v in values]

    @field_validator("value")
    @classmethod
    def _scalar(cls, value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, str | int | float)):
            raise ValueError("value must be a number or a text")
        return value


def numbers_in(text: str) -> list[float]:
    """The numbers written in ``text`` (``29,342`` is one number)."""
    found = []
    for match in _NUMBER.findall(text):
        try:
            found.append(float(match.replace(",", "")))
        except ValueError:
            continue
    return found


def value_failure(answer: str, value: Any, tolerance: float | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return None if value in answer else f"the answer does not state the expected value {value!r}"
    expected = float(value)
    allowed = tolerance or 0.0
    if any(abs(n - expected) <= allowed for n in numbers_in(answer)):
        return None
    within = f" (±{allowed:g})" if allowed else ""
    return f"no number in the answer equals the expected value {value:g}{within}"


def check(expectations: Expectations, result: Any) -> list[str]:
    """Every failed expectation, in words; ``result`` has answer, route, usage, artifacts (path -> text)
    and unverified_reason."""
    failures: list[str] = []
    answer: str = result.answer or ""
    if result.unverified_reason and not expectations.allow_unverified:
        failures.append(f"the answer is unverified ({result.unverified_reason}) and the label does not accept that")
    failed = value_failure(answer, expectations.value, expectations.tolerance)
    if failed:
        failures.append(failed)
    failures += [f"the answer does not contain {text!r}" for text in expectations.contains if text not in answer]
    failures += [f"the answer does not match the regex {p!r}" for p in expectations.regex if not re.search(p, answer)]
    for artifact in expectations.artifacts:
        content = result.artifacts.get(artifact.path)
        if content is None:
            failures.append(f"the artifact {artifact.path} was not written")
            continue
        failures += [f"{artifact.path} does not contain {t!r}" for t in artifact.contains if t not in content]
        failures += [
            f"{artifact.path} does not match the regex {p!r}" for p in artifact.regex if not re.search(p, content)
        ]
    if expectations.route is not None and result.route != expectations.route:
        failures.append(f"the turn took the {result.route or 'no'} route; the label requires {expectations.route}")
    if expectations.delegation is not None:
        children = int((result.usage or {}).get("children") or 0)
        if expectations.delegation and children == 0:
            failures.append("no child agent ran; the label requires delegation")
        if not expectations.delegation and children:
            failures.append(f"{children} child agent(s) ran; the label requires none")
    return failures
