"""``fleet sessions``: list, show, delete, export and import sessions.

Works on the local database (embedded defaults, no server needed) or, with ``--url``, through a
running server's API. Both paths return the API's own JSON shapes, so ``--json`` output is the
same either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from fleet_rlm.api.client import ApiFailure, FleetClient
from fleet_rlm.clients.cli.exit_codes import fail
from fleet_rlm.clients.cli.local_service import with_local_service

if TYPE_CHECKING:  # the service and schemas load DSPy and SQLAlchemy: only commands that run pay for them
    from fleet_rlm.service.service import FleetService

app = typer.Typer(help="List, show, delete, export and import sessions.", no_args_is_help=True)
T = TypeVar("T")

UrlOption = Annotated[
    str | None,
    typer.Option("--url", envvar="FLEET_URL", help="A Fleet server's base URL; default: the local database."),
]
TokenOption = Annotated[str | None, typer.Option("--token", envvar="FLEET_API_TOKEN", help="Bearer token for --url.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _remote(url: str, token: str | None, action: Callable[[FleetClient], T]) -> T:
    try:
        with FleetClient(url, token=token) as client:
            return action(client)
    except ApiFailure as exc:
        raise fail(exc.message) from None
    except OSError as exc:
        raise fail(f"cannot reach {url}: {exc}") from None


def _session_json(record: Any) -> dict[str, Any]:
    from fleet_rlm.api.schemas import SessionOut

    return SessionOut.of(record).model_dump(mode="json")


@app.command("ls")
def list_sessions(url: UrlOption = None, token: TokenOption = None, as_json: JsonOption = False) -> None:
    """Sessions, most recently active first."""

    async def local(service: FleetService) -> list[dict[str, Any]]:
        return [_session_json(r) for r in await service.sessions.recent(limit=10_000)]

    rows = _remote(url, token, lambda c: c.sessions()) if url else with_local_service(local)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("id", "name", "title", "updated")
    for row in rows:
        table.add_row(row["id"], row["name"] or "", row["title"] or "", row["updated_at"][:19].replace("T", " "))
    Console().print(table)


@app.command("show")
def show_session(
    session: Annotated[str, typer.Argument(help="Session id or name.")],
    url: UrlOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """A session with its turns and files."""

    async def local(service: FleetService) -> dict[str, Any]:
        from fleet_rlm.api.schemas import FileOut, TurnOut

        record = await service.sessions.get(session)
        turns = await service.turns.in_session(record.id, limit=1_000_000)
        files = await service.files.in_session(record.id)
        return {
            **_session_json(record),
            "turns": [TurnOut.of(t).model_dump(mode="json") for t in turns],
            "files": [FileOut.of(f, str(k)).model_dump(mode="json") for f, k in files],
        }

    def remote(client: FleetClient) -> dict[str, Any]:
        return {**client.session(session), "turns": client.turns(session), "files": client.files(session)}

    shown = _remote(url, token, remote) if url else with_local_service(local)
    if as_json:
        print(json.dumps(shown, indent=2))
        return
    console = Console(highlight=False)
    console.print(f"[bold]{shown['name'] or shown['id']}[/bold]  {shown['id']}  {shown['title'] or ''}")
    turns = Table("#", "status", "message", "answer")
    for turn in shown["turns"]:
        turns.add_row(
            str(turn["position"]), turn["status"], _clip(turn["message"]), _clip(turn["answer"] or turn["error"] or "")
        )
    console.print(turns)
    files = Table("path", "size", "kind", "sha256")
    for file in shown["files"]:
        files.add_row(file["path"], str(file["size"]), file["kind"], file["sha256"][:12])
    console.print(files)


def _clip(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


@app.command("rm")
def remove_session(
    session: Annotated[str, typer.Argument(help="Session id or name.")],
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Delete a session with its turns, events and files."""

    async def local(service: FleetService) -> str:
        return (await service.sessions.delete(session)).id

    def remote(client: FleetClient) -> str:
        session_id = str(client.session(session)["id"])
        client.delete_session(session)
        return session_id

    deleted = _remote(url, token, remote) if url else with_local_service(local)
    print(f"deleted {deleted}")


@app.command("export")
def export_session(
    session: Annotated[str, typer.Argument(help="Session id or name.")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Archive to write (default: <name>.fleet.tar.gz).")
    ] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Write one portable archive of the session's history, files, artifacts and memory."""
    target = out or Path(f"{session}.fleet.tar.gz")
    partial = target.with_name(target.name + ".partial")

    async def local(service: FleetService) -> None:
        with partial.open("wb") as handle:
            await service.archives.export(session, handle)

    try:
        if url:
            _remote(url, token, lambda c: c.export_session(session, partial))
        else:
            with_local_service(local)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    print(f"exported {session} to {target}")


@app.command("import")
def import_session(
    archive: Annotated[
        Path, typer.Argument(help="An archive written by 'fleet sessions export'.", exists=True, dir_okay=False)
    ],
    name: Annotated[str | None, typer.Option(help="Name for the new session (default: the archived name).")] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Restore an archive as a new session, under a new id."""

    async def local(service: FleetService) -> dict[str, Any]:
        with archive.open("rb") as handle:
            return _session_json(await service.archives.restore(handle, name=name))

    created = _remote(url, token, lambda c: c.import_session(archive, name=name)) if url else with_local_service(local)
    print(f"imported {archive} as {created['id']}" + (f" ({created['name']})" if created.get("name") else ""))
