"""Labels of captured turns on SQLite and PostgreSQL: recorded with structured expectations, listed,
removed; every bad input refused with a message naming what was wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.quality.labels import expectations_of, label_turn, load_expectations, parse_value, read_expectations_file
from fleet_rlm.service.service import FleetService
from fleet_rlm.store import Conflict, Invalid, NotFound

from .conftest import captured_turn

pytestmark = pytest.mark.anyio

EXPECTATIONS = """{
  "tolerance": 0.5,
  "contains": ["total revenue"],
  "regex": ["\\\\b250\\\\b"],
  "artifacts": [{"path": "artifacts/total.txt", "contains": ["total="], "regex": ["=\\\\d+"]}],
  "route": "rlm",
  "delegation": false
}"""


async def test_label_ls_and_rm(service: FleetService, model_server: ScriptedModelServer, tmp_path: Path) -> None:
    turn = await captured_turn(service, model_server, "sales")
    other = await captured_turn(service, model_server, "sales", message="Total again?")
    path = tmp_path / "expect.json"
    path.write_text(EXPECTATIONS)
    label = await label_turn(
        service,
        turn.id,
        answer="The total revenue is 250.",
        value=parse_value("250"),
        expectations=read_expectations_file(path),
        critical=True,
    )
    assert (label.turn_id, label.group, label.critical, label.benchmark, label.value) == (
        turn.id,
        "sales",
        True,
        False,
        250,
    )
    checks = expectations_of(label)
    assert (checks.value, checks.tolerance, checks.route, checks.delegation) == (250, 0.5, "rlm", False)
    assert checks.artifacts[0].path == "artifacts/total.txt"
    second = await label_turn(service, other.id, answer="250", group="finance", benchmark=True)
    assert [x.id for x in await service.parts.store.list_labels()] == [label.id, second.id]
    assert [x.id for x in await service.parts.store.list_labels(groups=["finance"])] == [second.id]
    assert (await service.parts.store.get_label(turn.id)).id == label.id  # by the turn's id too
    with pytest.raises(Conflict, match="labeled already; remove its label first") as taken:
        await label_turn(service, turn.id, answer="again")
    assert taken.value.code == "label_exists"
    assert (await service.parts.store.delete_label(label.id)).turn_id == turn.id
    assert [x.id for x in await service.parts.store.list_labels()] == [second.id]
    with pytest.raises(NotFound, match="no label"):
        await service.parts.store.delete_label(label.id)
    await service.sessions.delete("sales")  # a session's labels go with it
    assert await service.parts.store.list_labels() == []


async def test_bad_labels_are_refused_naming_what_is_wrong(
    service: FleetService, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    turn = await captured_turn(service, model_server, "sales")
    with pytest.raises(NotFound, match="no turn 'turn_nope'"):
        await label_turn(service, "turn_nope", answer="x")
    with pytest.raises(Invalid, match="--answer is empty"):
        await label_turn(service, turn.id, answer="  ")
    with pytest.raises(Invalid, match=r"group '\.\./x' is not valid"):
        await label_turn(service, turn.id, answer="x", group="../x")
    with pytest.raises(Invalid, match="--value and the expectations file's value differ"):
        await label_turn(service, turn.id, answer="x", value=1, expectations=load_expectations('{"value": 2}'))
    with pytest.raises(Invalid, match=r"--expectations-file .*: no such file"):
        read_expectations_file(tmp_path / "missing.json")
    refusals = {
        '{"regex": ["("]}': r"regex.*'\(' is not a regex",
        '{"route": "teleport"}': r"route: Input should be 'direct', 'flex' or 'rlm'",
        '{"artifacts": [{"path": "../../etc/passwd"}]}': r"artifacts\.0\.path.*must be under artifacts/",
        '{"tolerance": -1}': "tolerance: Input should be greater than or equal to 0",
        '{"value": [1, 2]}': "value: Value error, value must be a number or a text",
        '{"judge": "always pass"}': "judge: Extra inputs are not permitted",
        "not json": "Invalid JSON",
    }
    for text, message in refusals.items():
        with pytest.raises(Invalid, match=message) as refused:
            load_expectations(text)
        assert refused.value.code == "invalid_expectations"
    assert await service.parts.store.list_labels() == []


def test_values_read_as_numbers_when_they_are_numbers() -> None:
    assert [parse_value(v) for v in ("42", "1,234", "2.5", "north", "true", "")] == [42, 1234, 2.5, "north", "true", ""]
