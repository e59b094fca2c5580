"""Labels: a maintainer's approved gold answer for a captured turn, with structured expectations.

Only a turn captured with ``capture_replays`` can be labeled: a label is for replaying the turn, and
without its snapshot there is nothing to replay. Each refusal says why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleet_rlm.quality.expectations import Expectations
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.replays import CAPTURE_HINT
from fleet_rlm.store import Invalid, LabelRecord

GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_EXPECTATIONS_BYTES = 256 * 1024


def load_expectations(text: str, *, where: str = "expectations") -> Expectations:
    """Parse and check expectations (JSON); Invalid names the field that is wrong."""
    try:
        return Expectations.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "expectations"
        raise Invalid(f"{where}: {key}: {first['msg']}", code="invalid_expectations") from exc


def expectations_from(data: dict[str, Any] | None) -> Expectations | None:
    """Expectations given as a JSON object (the API's body); Invalid names the field that is wrong."""
    if data is None:
        return None
    try:
        return Expectations.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "expectations"
        raise Invalid(f"expectations: {key}: {first['msg']}", code="invalid_expectations") from exc


def read_expectations_file(path: Path) -> Expectations:
    if not path.is_file():
        raise Invalid(f"--expectations-file {path}: no such file", code="invalid_expectations")
    if path.stat().st_size > MAX_EXPECTATIONS_BYTES:
        raise Invalid(f"--expectations-file {path}: larger than {MAX_EXPECTATIONS_BYTES} bytes")
    return load_expectations(path.read_text(encoding="utf-8"), where=str(path))


def parse_value(text: str) -> float | int | str:
    """``--value``: a number when it reads as one (``1,234`` is one), else the text."""
    try:
        number = json.loads(text.replace(",", "")) if text.strip() else text
    except json.JSONDecodeError:
        return text
    return number if isinstance(number, int | float) and not isinstance(number, bool) else text


async def label_turn(
    service: FleetService,
    turn_id: str,
    *,
    answer: str,
    value: Any = None,
    expectations: Expectations | None = None,
    group: str | None = None,
    critical: bool = False,
    benchmark: bool = False,
) -> LabelRecord:
    """Record an approved gold label for ``turn_id``; raises Invalid (not capturable), NotFound or
    Conflict (labeled already)."""
    if not answer.strip():
        raise Invalid("--answer is empty: give the reviewed answer", code="invalid_label")
    if group is not None and not GROUP.fullmatch(group):
        raise Invalid(f"group {group!r} is not valid: use 1-64 letters, digits, '.', '_' or '-'", code="invalid_label")
    turn = await service.turns.get(turn_id)
    if turn.active:
        raise Invalid(f"turn {turn_id} is still {turn.status}; label it once it has ended", code="turn_active")
    if not await service.quality.captured(turn_id):
        raise Invalid(
            f"turn {turn_id} cannot be labeled for optimization: it ran without capture_replays, so its inputs "
            f"were not kept and it cannot be replayed; {CAPTURE_HINT}",
            code="turn_not_captured",
        )
    checks = expectations or Expectations()
    if value is not None:
        if checks.value is not None and checks.value != value:
            raise Invalid("--value and the expectations file's value differ: give one", code="invalid_label")
        checks = checks.model_copy(update={"value": value})
    session = await service.sessions.get(turn.session_id)
    return await service.quality.add_label(
        turn_id=turn_id,
        session_id=turn.session_id,
        answer=answer,
        value=checks.value,
        expectations=checks.model_dump(mode="json", exclude_defaults=True, exclude={"value"}),
        group=group or session.name or session.id,
        critical=critical,
        benchmark=benchmark,
    )


def expectations_of(label: LabelRecord) -> Expectations:
    return Expectations.model_validate({**label.expectations, "value": label.value})
