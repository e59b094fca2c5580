"""The sandbox environment from the command line: ``fleet sandbox build``, ``fleet doctor``'s rows, and a
``fleet run`` turn that analyses a CSV with pandas and saves a matplotlib chart as an artifact."""

from __future__ import annotations

from pathlib import Path

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.cli import run_fleet, scripted_env

CHART_CODE = """
import pandas as pd
import matplotlib.pyplot as plt
frame = pd.read_csv("files/sales.csv")
totals = frame.groupby("region")["revenue"].sum()
ax = totals.plot.bar(title="Revenue by region")
plt.savefig("artifacts/revenue.png")
print(totals.to_dict())
SUBMIT(answer=f"north={totals['north']} south={totals['south']}")
"""


def test_a_turn_analyses_a_csv_with_pandas_and_the_terminal_shows_its_chart(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    (tmp_path / "sales.csv").write_text("region,revenue\nnorth,10\nsouth,32\nnorth,5\n")
    model_server.script("root", rlm_step("Chart it.", CHART_CODE))
    workspace = tmp_path / "ws"
    result = run_fleet(
        ["run", "Chart revenue by region", "--file", "sales.csv", "--workspace", str(workspace)],
        tmp_path,
        scripted_env(model_server),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "north=15 south=32" in result.stdout
    assert "artifacts/revenue.png" in result.stdout
    assert (workspace / "artifacts" / "revenue.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_sandbox_build_reports_the_built_environment(tmp_path: Path) -> None:
    result = run_fleet(["sandbox", "build"], tmp_path)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first.startswith("sandbox environment already built: ")
    assert Path(first.split(": ", 1)[1], "bin", "python").exists()
    assert second.startswith("Python ") and "pandas " in second and "matplotlib " in second


def test_sandbox_build_refuses_a_package_that_is_not_one(tmp_path: Path) -> None:
    result = run_fleet(["sandbox", "build"], tmp_path, {"FLEET_SANDBOX_PACKAGES": "--index-url=http://x"})
    assert result.returncode == 2
    assert "'FLEET_SANDBOX_PACKAGES'" in result.stderr and "is not a package" in result.stderr


def test_doctor_says_which_bwrap_and_which_environment(tmp_path: Path) -> None:
    result = run_fleet(["doctor"], tmp_path, {"COLUMNS": "400"})
    lines = result.stdout.splitlines()
    bwrap = next(line for line in lines if line.startswith("pass  bubblewrap: "))
    assert "bubblewrap 0." in bwrap and ("the system's" in bwrap or "bundled with Fleet" in bwrap)
    environment = next(line for line in lines if line.startswith("pass  sandbox environment: "))
    assert "built at " in environment and "numpy " in environment and "pandas " in environment
