"""The soak benchmark still runs: a short soak against a real ``fleet serve`` passes its own checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).parents[2] / "benchmarks" / "soak.py"


@pytest.mark.timeout(300)
def test_a_short_soak_runs_every_kind_of_turn_and_passes_its_checks() -> None:
    # Memory after ten turns is not yet settled, so the RSS bound is loose here; the figures that count
    # come from the full run (docs/performance.md).
    args = ["--turns", "20", "--checkpoint", "10", "--warmup", "10", "--crash-every", "20", "--rss-growth", "0.5"]
    finished = subprocess.run(
        [sys.executable, str(SOAK), *args], capture_output=True, text=True, timeout=280, check=False
    )

    report = json.loads(finished.stdout)
    assert finished.returncode == 0, (report["checks"], finished.stderr[-2000:])
    assert report["turns"] == 20
    kinds = {outcome.split(":")[0] for outcome in report["outcomes"]}
    assert kinds == {
        "rlm",
        "direct",
        "hybrid-direct",
        "hybrid-rlm",
        "hybrid-flex",
        "flex",
        "children",
        "cancel",
        "rlm-error",
        "rlm-steps",
        "crash",
    }
    assert report["outcomes"]["cancel: cancelled"] == 2
    assert report["crash_turns"]["count"] == 1
    assert all(check["ok"] for check in report["checks"].values())
