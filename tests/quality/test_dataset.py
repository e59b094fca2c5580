"""The dataset rules of ``fleet optimize``: each refuses with its own message, before any model call."""

from __future__ import annotations

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.quality.dataset import DatasetRefused, split_dataset
from fleet_rlm.quality.labels import label_turn
from fleet_rlm.quality.optimize import optimize
from fleet_rlm.service.service import FleetService
from fleet_rlm.store import Invalid, LabelRecord

from .conftest import captured_turn

pytestmark = pytest.mark.anyio


def labels(spec: str) -> list[LabelRecord]:
    """``spec``: space-separated ``group:count[c|b]`` (c: critical, b: benchmark)."""
    made = []
    for part in spec.split():
        group, rest = part.split(":")
        count = int(rest.rstrip("cb"))
        for index in range(count):
            made.append(
                LabelRecord(
                    id=f"lbl_{group}{index}",
                    turn_id=f"turn_{group}{index}",
                    session_id="s",
                    answer="a",
                    group=group,
                    critical="c" in rest,
                    benchmark="b" in rest,
                )
            )
    return made


@pytest.mark.parametrize(
    ("spec", "rule", "message"),
    [
        ("a:3 b:2 c:2", "min-examples", "7 approved examples; at least 8 are needed"),
        ("a:3 b:3 c:1 d:2b", "min-examples", "7 approved examples (2 benchmark-labeled ones are excluded)"),
        ("a:3 b:3 c:2b", "min-examples", "6 approved examples (2 benchmark-labeled ones are excluded)"),
        ("a:5 b:5", "min-groups", "from 2 source group(s) (a, b); at least 3 are needed"),
        ("a:4c b:4c c:4", "split", "after the critical groups (a, b) go to holdout, 1 group(s) remain"),
    ],
)
def test_each_rule_refuses_with_its_own_message(spec: str, rule: str, message: str) -> None:
    with pytest.raises(DatasetRefused) as refused:
        split_dataset(labels(spec))
    assert refused.value.rule == rule and refused.value.code == f"dataset_{rule.replace('-', '_')}"
    assert refused.value.message.startswith(f"dataset rule {rule!r}: ")
    assert message in refused.value.message


def test_the_split_keeps_groups_whole_and_critical_groups_in_holdout() -> None:
    split = split_dataset(labels("a:2 b:2 c:2c d:2 e:1b"))
    assert split.groups() == {"train": ["a", "b"], "dev": ["d"], "holdout": ["c"]}
    assert split.benchmark_excluded == 1
    assert all(not x.benchmark for part in split.parts().values() for x in part)
    without_critical = split_dataset(labels("a:3 b:3 c:3"))
    assert without_critical.groups() == {"train": ["a"], "dev": ["b"], "holdout": ["c"]}
    assert not any(x.critical for x in without_critical.holdout)  # runs, but can never pass its gate


async def test_optimize_refuses_before_any_model_call(service: FleetService, model_server: ScriptedModelServer) -> None:
    for group in ("a", "b", "c"):
        turn = await captured_turn(service, model_server, group)
        await label_turn(service, turn.id, answer="The total revenue is 250.", group=group)
    calls = len(model_server.model.requests)
    with pytest.raises(DatasetRefused, match="dataset rule 'min-examples': 3 approved examples"):
        await optimize(service, max_metric_calls=10)
    with pytest.raises(Invalid, match="give exactly one of --gepa-budget and --max-metric-calls"):
        await optimize(service)
    with pytest.raises(Invalid, match="--gepa-budget 'huge': use one of light, medium, heavy"):
        await optimize(service, gepa_budget="huge")
    assert len(model_server.model.requests) == calls
