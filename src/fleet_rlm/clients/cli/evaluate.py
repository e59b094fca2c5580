"""``fleet eval``: label captured turns, list and remove labels, and run evaluations (docs/evaluation.md).

Works on the local database and data directory (embedded defaults, or ``FLEET_DATABASE_URL``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fleet_rlm.clients.cli.exit_codes import fail
from fleet_rlm.clients.cli.local_service import with_local_service

if TYPE_CHECKING:
    from fleet_rlm.service.service import FleetService
    from fleet_rlm.store import LabelRecord

app = typer.Typer(help="Label captured turns, manage labels, and replay them as an evaluation.", no_args_is_help=True)
T = TypeVar("T")
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def label_json(label: LabelRecord) -> dict[str, Any]:
    return {
        "id": label.id,
        "turn_id": label.turn_id,
        "session_id": label.session_id,
        "answer": label.answer,
        "value": label.value,
        "expectations": label.expectations,
        "group": label.group,
        "critical": label.critical,
        "benchmark": label.benchmark,
        "created_at": label.created_at.isoformat() if label.created_at else None,
    }


@app.command("label")
def label(
    turn_id: Annotated[str, typer.Argument(help="The turn to label (it must have been captured).")],
    answer: Annotated[str, typer.Option("--answer", help="The reviewed, approved answer.")],
    value: Annotated[str | None, typer.Option("--value", help="The exact value the answer must state.")] = None,
    expectations_file: Annotated[
        Path | None, typer.Option("--expectations-file", help="JSON file of structured expectations.")
    ] = None,
    group: Annotated[str | None, typer.Option("--group", help="Source group (default: the session).")] = None,
    critical: Annotated[bool, typer.Option("--critical", help="Must pass in every validation pass.")] = False,
    benchmark: Annotated[bool, typer.Option("--benchmark", help="Evaluate only; never optimize on it.")] = False,
) -> None:
    """Record an approved gold label for a captured turn."""
    from fleet_rlm.quality.labels import label_turn, parse_value, read_expectations_file

    async def action(service: FleetService) -> dict[str, Any]:
        checks = read_expectations_file(expectations_file) if expectations_file is not None else None
        record = await label_turn(
            service,
            turn_id,
            answer=answer,
            value=parse_value(value) if value is not None else None,
            expectations=checks,
            group=group,
            critical=critical,
            benchmark=benchmark,
        )
        return label_json(record)

    created = with_local_service(action)
    print(f"labeled {created['turn_id']} as {created['id']} (group {created['group']})")


@app.command("ls")
def list_labels(
    session: Annotated[str | None, typer.Option("--session", help="Only this session's labels.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Labels, oldest first."""

    async def action(service: FleetService) -> list[dict[str, Any]]:
        session_id = (await service.sessions.get(session)).id if session else None
        return [label_json(r) for r in await service.quality.labels(session_id=session_id)]

    rows = with_local_service(action)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("id", "turn", "group", "critical", "benchmark", "answer")
    for row in rows:
        answer = " ".join(row["answer"].split())
        table.add_row(
            row["id"],
            row["turn_id"],
            row["group"],
            "yes" if row["critical"] else "",
            "yes" if row["benchmark"] else "",
            answer if len(answer) <= 50 else answer[:49] + "…",
        )
    Console().print(table)


@app.command("rm")
def remove_label(label_ref: Annotated[str, typer.Argument(help="Label id, or the labeled turn's id.")]) -> None:
    """Remove a label."""

    async def action(service: FleetService) -> str:
        return (await service.quality.delete_label(label_ref)).id

    print(f"removed {with_local_service(action)}")


@app.command("run")
def run_eval(
    session: Annotated[str | None, typer.Option("--session", help="Only this session's labels.")] = None,
    label_set: Annotated[
        list[str] | None, typer.Option("--label-set", help="Only labels of this group (repeatable).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Replay the labeled turns concurrently and score them with fleet_metric."""
    from fleet_rlm.quality.evaluation import reports_dir
    from fleet_rlm.quality.evaluation import run_eval as evaluate

    console = Console(highlight=False, stderr=as_json)

    async def action(service: FleetService) -> Any:
        session_id = (await service.sessions.get(session)).id if session else None
        labels = await service.quality.labels(session_id=session_id, groups=list(label_set or []))
        if not labels:
            raise fail("no labels to evaluate: label captured turns with 'fleet eval label'")
        with Progress(
            TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            task = progress.add_task("replays", total=len(labels))
            report = await evaluate(
                service, labels, on_progress=lambda done, _total: progress.update(task, completed=done)
            )
        return report, report.write(reports_dir(service.settings, report.run_id))

    report, (json_path, md_path) = with_local_service(action, run_turns=True)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        table = Table("turn", "group", "score", "feedback")
        for row in report.rows:
            table.add_row(
                row.turn_id, row.group + (" (critical)" if row.critical else ""), f"{row.score:.3f}", row.feedback
            )
        console.print(table)
        console.print(f"mean score {report.mean:.3f} over {len(report.rows)} examples")
    console.print(f"reports: {json_path} and {md_path}")
