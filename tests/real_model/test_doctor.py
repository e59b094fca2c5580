"""``fleet doctor --smoke --real-model``: one real turn against the local model, reported with its time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet_rlm.models.local import CACHE_ENV, RealModelServer, cache_root
from fleet_rlm.testing.cli import run_fleet

pytestmark = pytest.mark.real_model


@pytest.mark.timeout(300)
def test_doctor_runs_one_real_turn_and_reports_outcome_and_time(small_model: RealModelServer, tmp_path: Path) -> None:
    # The session's server proves the cache is ready: doctor reuses it and starts its own server.
    result = run_fleet(
        ["doctor", "--smoke", "--real-model", "--real-model-size", "small"],
        tmp_path,
        {CACHE_ENV: str(cache_root()), "COLUMNS": "400", "FLEET_TURN_TIMEOUT": "120"},
        timeout=240,
    )
    lines = [line for line in result.stdout.splitlines() if "real-model turn (small)" in line]
    assert len(lines) == 1, result.stdout + result.stderr
    line = lines[0]
    assert re.search(r"\d+\.\ds, \d+ model calls, read \d+ tokens at [\d.]+/s, wrote \d+ at [\d.]+/s", line), line
    if line.startswith("pass"):
        assert "qwen2.5-coder-0.5b-instruct answered" in line
        assert result.returncode == 0, result.stdout
    else:
        assert re.match(
            r"FAIL  real-model turn \(small\): qwen2.5-coder-0.5b-instruct: turn (failed|incomplete) after", line
        ), line
        assert result.returncode == 1
    assert "pass  smoke turn" in result.stdout
