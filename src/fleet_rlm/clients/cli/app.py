"""The ``fleet`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from fleet_rlm.clients.cli import evaluate as eval_cli
from fleet_rlm.clients.cli import mcp as mcp_cli
from fleet_rlm.clients.cli import sandbox as sandbox_cli
from fleet_rlm.clients.cli import serve as serve_cli
from fleet_rlm.clients.cli import sessions as sessions_cli
from fleet_rlm.clients.cli import skills as skills_cli
from fleet_rlm.clients.cli import worker as worker_cli
from fleet_rlm.clients.cli.chat import chat_command
from fleet_rlm.clients.cli.exit_codes import EXIT_CONFIG, fail
from fleet_rlm.clients.cli.optimize import optimize_command
from fleet_rlm.clients.cli.web import web_command
from fleet_rlm.config import ConfigError, load_settings, require_model

if TYPE_CHECKING:
    from fleet_rlm.clients.cli.doctor import Check

# Each command imports what it runs on (DSPy, the engine, the server) only when it runs, so that
# `fleet --help`, `fleet chat` and `fleet sessions` start fast.

app = typer.Typer(
    name="fleet",
    help="Fleet RLM: answer tasks over your files with a model that writes Python in a sandbox.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def run(
    task: Annotated[str, typer.Argument(help="What to do, in plain words.")],
    file: Annotated[list[Path] | None, typer.Option("--file", "-f", help="Input file to copy into files/.")] = None,
    workspace: Annotated[Path | None, typer.Option(help="Keep the workspace in this directory.")] = None,
    context: Annotated[list[str] | None, typer.Option(help="Workspace path the turn must focus on.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print events as JSON lines.")] = False,
    mode: Annotated[str | None, typer.Option(help="Route: hybrid, rlm, flex or direct.")] = None,
    model: Annotated[str | None, typer.Option(help="Root model (overrides FLEET_LM_MODEL).")] = None,
    max_iterations: Annotated[int | None, typer.Option(help="Iteration budget.")] = None,
    max_model_calls: Annotated[int | None, typer.Option(help="Model-call budget (root + sub).")] = None,
    timeout: Annotated[float | None, typer.Option(help="Turn deadline in seconds.")] = None,
    url: Annotated[
        str | None, typer.Option(envvar="FLEET_URL", help="Run through the Fleet server at this URL.")
    ] = None,
    session: Annotated[str | None, typer.Option(help="With --url: the session (id or name) to run in.")] = None,
    token: Annotated[str | None, typer.Option(envvar="FLEET_API_TOKEN", help="With --url: bearer token.")] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Also print the libraries' log lines (DSPy, LiteLLM) to stderr.")
    ] = False,
) -> None:
    """Run one task over some files and print the answer and the artifacts written."""
    if url:
        from fleet_rlm.clients.cli.remote_run import run_remote

        for path in file or []:
            if not path.is_file():
                raise fail(f"--file {path}: no such file", EXIT_CONFIG)
        raise typer.Exit(
            run_remote(
                url,
                task,
                files=list(file or []),
                as_json=as_json,
                context_paths=list(context or []),
                token=token,
                session=session,
                mode=mode,
                max_iterations=max_iterations,
                max_model_calls=max_model_calls,
                turn_timeout=timeout,
            )
        )
    from fleet_rlm.sandbox.registry import configured_backend_class

    try:
        settings = load_settings(
            lm_model=model,
            max_iterations=max_iterations,
            max_model_calls=max_model_calls,
            turn_timeout=timeout,
            mode=mode,
        )
        require_model(settings.lm)
        configured_backend_class(settings)
    except ConfigError as exc:
        raise fail(str(exc), EXIT_CONFIG) from None
    for path in file or []:
        if not path.is_file():
            raise fail(f"--file {path}: no such file", EXIT_CONFIG)
    from fleet_rlm.clients.cli.run import run_local

    code = run_local(
        settings,
        task,
        files=list(file or []),
        workspace_dir=workspace,
        as_json=as_json,
        verbose=verbose,
        context_paths=list(context or []),
        mode=mode,
    )
    raise typer.Exit(code)


@app.command()
def doctor(
    smoke: Annotated[
        bool, typer.Option("--smoke", help="Also run one full turn against the built-in scripted model.")
    ] = False,
    real_model: Annotated[
        bool,
        typer.Option("--real-model", help="Also run one turn against a local real model (prepared if need be)."),
    ] = False,
    real_model_size: Annotated[
        str, typer.Option(help="The local real model: large (1.5B) or small (0.5B: fast, rarely follows the format).")
    ] = "large",
) -> None:
    """Check that the configuration, the sandbox and the model endpoint work here."""
    from fleet_rlm.clients.cli import doctor as doctor_checks

    console = Console(highlight=False)
    config_check, settings = doctor_checks.check_config()
    checks = [config_check]
    if settings is not None:
        for check in (
            doctor_checks.check_bubblewrap(settings),
            doctor_checks.check_environment(settings, Console(highlight=False, stderr=True)),
        ):
            if check is not None:
                checks.append(check)
        checks.append(doctor_checks.check_sandbox(settings))
        checks.extend(doctor_checks.check_limits(settings))
        model_check = doctor_checks.check_model(settings)
        checks.append(model_check)
        schema_check = doctor_checks.check_reply_schema(settings) if model_check.ok else None
        if schema_check is not None:
            checks.append(schema_check)
        checks.append(doctor_checks.check_kernels(settings))
    for check in checks:
        _print_check(console, check)
    if smoke and settings is not None:
        smoke_check = doctor_checks.smoke_turn(settings)
        _print_check(console, smoke_check)
        checks.append(smoke_check)
    if real_model and settings is not None:
        real_check = doctor_checks.real_model_turn(settings, real_model_size)
        _print_check(console, real_check)
        checks.append(real_check)
    # A smoke run brings its own model: the configured endpoint's absence does not fail it.
    failed = [c for c in checks if not c.ok and not (c.name == "model endpoint" and (smoke or real_model))]
    raise typer.Exit(1 if failed else 0)


def _print_check(console: Console, check: Check) -> None:
    mark = (
        "[yellow]warn[/yellow]" if check.ok and check.warn else "[green]pass[/green]" if check.ok else "[red]FAIL[/red]"
    )
    console.print(f"{mark}  {check.name}: {check.detail}")
    if (not check.ok or check.warn) and check.fix:
        console.print(f"      fix: {check.fix}")


app.command("serve")(serve_cli.serve_command)
app.command("mcp")(mcp_cli.mcp_command)
app.command("worker")(worker_cli.worker_command)
app.add_typer(sessions_cli.app, name="sessions")
app.add_typer(skills_cli.app, name="skills")
app.add_typer(sandbox_cli.app, name="sandbox")
app.add_typer(eval_cli.app, name="eval")
app.command("optimize")(optimize_command)

app.command("chat")(chat_command)
app.command("web")(web_command)


def main() -> None:
    app()
