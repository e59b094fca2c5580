"""``fleet optimize``: search for a better program with dspy.GEPA, then approve, list or roll back
(docs/evaluation.md). Works on the local database and data directory."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from fleet_rlm.clients.cli.exit_codes import fail
from fleet_rlm.clients.cli.local_service import with_local_service

if TYPE_CHECKING:
    from fleet_rlm.service.service import FleetService


def optimize_command(
    session: Annotated[str | None, typer.Option("--session", help="Only this session's labels.")] = None,
    gepa_budget: Annotated[
        str | None, typer.Option("--gepa-budget", help="GEPA's preset budget: light, medium or heavy.")
    ] = None,
    max_metric_calls: Annotated[
        int | None, typer.Option("--max-metric-calls", help="GEPA's budget in metric calls (replays).")
    ] = None,
    approve_version: Annotated[
        str | None, typer.Option("--approve", metavar="VERSION", help="Serve this candidate from the next turn.")
    ] = None,
    list_programs: Annotated[bool, typer.Option("--list", help="List candidates and approved programs.")] = False,
    rollback: Annotated[bool, typer.Option("--rollback", help="Stop serving the approved program.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Search for better instructions and flex code with dspy.GEPA; approve, list or roll back."""
    chosen = [approve_version is not None, list_programs, rollback]
    if sum(chosen) > 1:
        raise fail("give one of --approve, --list and --rollback", 2)
    console = Console(highlight=False)
    if approve_version is not None:
        from fleet_rlm.quality.optimize import approve

        async def approving(service: FleetService) -> str:
            return (await approve(service, approve_version)).version

        console.print(f"approved {with_local_service(approving)}: it serves from the next turn")
        return
    if list_programs:
        _list(console, as_json)
        return
    if rollback:

        async def rolling_back(service: FleetService) -> tuple[str, str]:

            retired = await service.quality.retire_program()
            return retired.version, (await service.quality.serving()).version

        retired, serving = with_local_service(rolling_back)
        console.print(f"retired {retired}; {serving} serves from the next turn")
        return
    _search(console, session, gepa_budget, max_metric_calls, as_json)


def _search(console: Console, session: str | None, budget: str | None, calls: int | None, as_json: bool) -> None:
    from fleet_rlm.quality.optimize import optimize

    async def searching(service: FleetService) -> Any:
        return await optimize(service, session=session, gepa_budget=budget, max_metric_calls=calls)

    run = with_local_service(searching, run_turns=True)
    report = run.program.report
    if as_json:
        print(json.dumps(report, indent=2))
        return
    table = Table("condition", "result", "numbers")
    for condition in report["gate"]["conditions"]:
        table.add_row(condition["name"], "pass" if condition["passed"] else "FAIL", condition["detail"])
    console.print(table)
    verdict = "passed" if run.passed else "did not pass"
    console.print(f"candidate {run.program.version} saved, inactive; the gate {verdict}")
    if run.passed:
        console.print(f"approve it with: fleet optimize --approve {run.program.version}")
    console.print(f"reports: {run.json_report} and {run.markdown_report}")


def _list(console: Console, as_json: bool) -> None:
    async def listing(service: FleetService) -> tuple[list[dict[str, Any]], str]:

        serving = (await service.quality.serving()).version
        rows = [
            {
                "version": p.version,
                "status": p.status,
                "serving": p.version == serving,
                "gate_passed": bool(p.report.get("gate", {}).get("passed")),
                "changed": p.report.get("candidate", {}).get("changed", []),
                "sha256": p.sha256,
                "created_at": p.created_at.isoformat() if p.created_at else None,
                "approved_at": p.approved_at.isoformat() if p.approved_at else None,
                "retired_at": p.retired_at.isoformat() if p.retired_at else None,
            }
            for p in await service.quality.programs()
        ]
        return rows, serving

    rows, serving = with_local_service(listing)
    if as_json:
        print(json.dumps({"serving": serving, "programs": rows}, indent=2))
        return
    table = Table("version", "status", "gate", "changed", "sha256")
    for row in rows:
        status = row["status"] + (" (serving)" if row["serving"] else "")
        table.add_row(
            row["version"],
            status,
            "passed" if row["gate_passed"] else "failed",
            ", ".join(row["changed"]),
            row["sha256"][:12],
        )
    console.print(table)
    console.print(f"serving: {serving}")
