"""``fleet doctor``: is this machine ready to run Fleet? Each check prints pass/fail and the fix."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console

from fleet_rlm.config import ConfigError, Settings, config_files, load_settings
from fleet_rlm.engine.turn import TurnRequest, build_turn
from fleet_rlm.models.endpoint import probe_endpoint
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.models.structured import schema_support
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.sandbox.registry import UnknownSandboxBackend, backend_names, configured_backend
from fleet_rlm.workspace.manifest import human_size


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    warn: bool = False  # passes, but something the person should know is missing


def check_config() -> tuple[Check, Settings | None]:
    sources = ", ".join(str(p) for p in config_files()) or "no fleet.toml found; environment and defaults"
    try:
        settings = load_settings()
    except ConfigError as exc:
        return Check("configuration", False, str(exc), "fix or remove the key named above"), None
    return Check("configuration", True, f"parsed ({sources})"), settings


def check_sandbox(settings: Settings) -> Check:
    try:
        result = configured_backend(settings).check()
    except UnknownSandboxBackend as exc:
        return Check("sandbox", False, str(exc), f"set sandbox_backend to one of: {', '.join(backend_names())}")
    except Exception as exc:
        return Check("sandbox", False, f"{type(exc).__name__}: {exc}", "see docs/sandbox.md")
    return Check("sandbox", result.ok, result.message, result.fix)


def check_bubblewrap(settings: Settings) -> Check | None:
    """Which bwrap the local backend runs sandboxes with: path, version and where it comes from."""
    if settings.sandbox.backend != "local":
        return None
    from fleet_rlm.sandbox.bubblewrap import choose_bubblewrap
    from fleet_rlm.sandbox.local import INSTALL_FIX

    choice = choose_bubblewrap()
    note = f" ({choice.passed_over})" if choice.passed_over else ""
    if choice.chosen is not None:
        return Check("bubblewrap", True, choice.chosen.describe() + note)
    unisolated = settings.sandbox.allow_unisolated
    detail = f"no usable bwrap{note}" + (": sandboxes run WITHOUT isolation" if unisolated else "")
    return Check("bubblewrap", unisolated, detail, INSTALL_FIX, warn=unisolated)


def check_environment(settings: Settings, console: Console) -> Check | None:
    """The local backend's sandbox environment: built now (progress on ``console``) if it is not yet."""
    if settings.sandbox.backend != "local":
        return None
    from fleet_rlm.clients.cli.preparing import prepare_backend
    from fleet_rlm.sandbox.base import SandboxUnavailable
    from fleet_rlm.sandbox.environment import built_environment
    from fleet_rlm.sandbox.local import BUILD_FIX, LocalSandboxBackend

    backend = LocalSandboxBackend.from_settings(settings.sandbox)
    was_built = built_environment(backend.environment) is not None
    try:
        prepare_backend(backend, console)
        environment = backend.sandbox_environment()
    except SandboxUnavailable as exc:
        return Check("sandbox environment", False, str(exc), BUILD_FIX)
    state = "built" if was_built else f"built now, in {environment.build_seconds:.0f}s"
    return Check("sandbox environment", True, f"{state} at {environment.directory}; {environment.summary()}")


def check_limits(settings: Settings) -> list[Check]:
    """One row per whole-sandbox protection: enforced, or missing with the reason. A missing one
    fails only when sandbox_require_limits is set; unset, it warns (``fleet serve`` would refuse)."""
    from fleet_rlm.sandbox.base import SandboxLimits
    from fleet_rlm.sandbox.local import LIMITS_FIX, LocalSandboxBackend

    try:
        limits = SandboxLimits.from_settings(settings.sandbox, settings.budget)
        rows = LocalSandboxBackend.from_settings(settings.sandbox).protections_report(limits)
    except Exception as exc:
        return [Check("sandbox limits", False, f"{type(exc).__name__}: {exc}", "see docs/sandbox.md")]
    required = settings.sandbox.require_limits
    checks = []
    for row in rows:
        name = f"limit: {row.name}"
        if row.enforced:
            checks.append(Check(name, True, f"enforced: {row.reason}"))
            continue
        detail = f"missing: {row.reason}"
        if not row.required:
            checks.append(Check(name, True, detail, LIMITS_FIX, warn=True))
            continue
        if required is None:
            detail += " (`fleet serve` refuses sandboxes until it is enforced)"
        checks.append(Check(name, not required, detail, LIMITS_FIX, warn=not required))
    return checks


def check_model(settings: Settings) -> Check:
    probe = probe_endpoint(settings.lm)
    return Check("model endpoint", probe.ok, probe.message, probe.fix)


def check_reply_schema(settings: Settings) -> Check | None:
    """Whether the model endpoint constrains replies to a JSON schema (``lm.structured_output``); None
    when the endpoint does not answer (the model check says so)."""
    lm = settings.lm
    name = "reply schema"
    if lm.structured_output != "auto":
        return Check(name, True, f"lm.structured_output = {lm.structured_output} (not probed)")
    support = schema_support(lm)
    if not support.reached:
        return None
    if support.style is not None:
        return Check(name, True, f"the endpoint constrains replies to a JSON schema ({support.style})")
    return Check(
        name,
        True,
        f"{support.detail}: replies use DSPy's chat format, which a small model does not always follow",
        "serve the model where response_format takes a JSON schema (llama.cpp, vLLM), if you can",
        warn=True,
    )


def check_kernels(settings: Settings) -> Check:
    """The session kernels of the server these settings name, as its health endpoint reports them."""
    server = settings.server
    host = "127.0.0.1" if server.host in ("0.0.0.0", "::", "") else server.host
    url = f"http://{host}:{server.port}/api/v1/health"
    limits = (
        f"at most {settings.sandbox.max_kernels}, idle timeout {settings.sandbox.kernel_idle_timeout:g}s"
        if settings.sandbox.max_kernels
        else "off (sandbox.max_kernels = 0)"
    )
    headers = {}
    if server.api_token is not None:
        headers["Authorization"] = f"Bearer {server.api_token.get_secret_value()}"
    try:
        response = httpx.get(url, headers=headers, timeout=3.0)
        kernels = response.json()["kernels"]
        live, memory = int(kernels["live"]), int(kernels["memory_bytes"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return Check("kernels", True, f"no Fleet server answers at {url}; kernels: {limits}", warn=True)
    return Check("kernels", True, f"{live} live on the server at {url}, {human_size(memory)} resident; {limits}")


SMOKE_CSV = "region,revenue\nnorth,10\nsouth,32\nnorth,5\n"
SMOKE_CODE_1 = (
    "import csv\n"
    "rows = list(csv.DictReader(open('files/sales.csv')))\n"
    "totals = {}\n"
    "for r in rows:\n"
    "    totals[r['region']] = totals.get(r['region'], 0) + int(r['revenue'])\n"
    "print(totals)\n"
    "print(llm_query('Say ok'))"
)
SMOKE_CODE_2 = (
    "with open('artifacts/totals.csv', 'w') as f:\n"
    "    f.write('region,revenue\\n' + ''.join(f'{k},{v}\\n' for k, v in sorted(totals.items())))\n"
    "SUBMIT(answer=f\"north={totals['north']} south={totals['south']}\")"
)


def smoke_turn(settings: Settings) -> Check:
    """One complete turn against the built-in scripted model: sandbox, tool bridge and events."""
    events: list[Event] = []
    with ScriptedModelServer() as server, tempfile.TemporaryDirectory(prefix="fleet-smoke-") as tmp:
        server.script("smoke-root", rlm_step("Sum revenue per region.", SMOKE_CODE_1))
        server.script("smoke-root", rlm_step("Save and submit.", SMOKE_CODE_2))
        server.script("smoke-sub", "ok")
        smoke_settings = settings.with_values(
            {
                "lm_model": "openai/smoke-root",
                "lm_base_url": server.base_url,
                "lm_api_key": None,
                "sub_lm_model": "openai/smoke-sub",
                "sub_lm_base_url": None,
                "sub_lm_api_key": None,
                "max_iterations": 4,
                "mode": "rlm",
                "turn_timeout": 60.0,
            }
        )
        workspace = Path(tmp) / "workspace"
        (workspace / "files").mkdir(parents=True)
        (workspace / "files" / "sales.csv").write_text(SMOKE_CSV)
        turn = build_turn(smoke_settings, TurnRequest(task="Revenue by region", workspace=workspace), events.append)
        outcome = asyncio.run(turn.run())
        artifact = workspace / "artifacts" / "totals.csv"
        artifact_ok = artifact.is_file() and artifact.read_text() == "region,revenue\nnorth,15\nsouth,32\n"
    kinds = {e.type for e in events}
    problems = []
    if outcome.status is not TurnStatus.COMPLETED or outcome.answer != "north=15 south=32":
        problems.append(f"turn {outcome.status}: {outcome.error or outcome.answer}")
    if not {EventType.OUTPUT, EventType.TOOL_STARTED, EventType.TOOL_FINISHED} <= kinds:
        problems.append("missing output or tool events")
    if not artifact_ok:
        problems.append("artifact not written as expected")
    if problems:
        return Check("smoke turn", False, "; ".join(problems), "run `fleet doctor` for the failing part")
    return Check("smoke turn", True, f"answered in {outcome.usage.get('duration', 0):.1f}s with {len(events)} events")


REAL_MODEL_TASK = "What is the total of the revenue column in files/sales.csv? Answer with the number."
REAL_MODEL_TOTAL = "47"
REAL_MODEL_TURN_TIMEOUT = 300.0


def real_model_turn(settings: Settings, size: str) -> Check:
    """One RLM turn over the smoke CSV against a local real model, prepared first (with progress) if need be."""
    from fleet_rlm.models.local import RealModelError, RealModelServer, spec_for

    name = f"real-model turn ({size})"
    try:
        spec = spec_for(size)
    except ValueError as exc:
        return Check(name, False, str(exc), "use --real-model-size small or large")
    events: list[Event] = []
    try:
        with RealModelServer(spec) as server, tempfile.TemporaryDirectory(prefix="fleet-real-smoke-") as tmp:
            values = {**server.fleet_values(), "sub_lm_base_url": None, "sub_lm_api_key": None, "mode": "rlm"}
            values.update(max_iterations=4, turn_timeout=min(settings.budget.turn_timeout, REAL_MODEL_TURN_TIMEOUT))
            workspace = Path(tmp) / "workspace"
            (workspace / "files").mkdir(parents=True)
            (workspace / "files" / "sales.csv").write_text(SMOKE_CSV)
            request = TurnRequest(task=REAL_MODEL_TASK, workspace=workspace)
            outcome = asyncio.run(build_turn(settings.with_values(values), request, events.append).run())
            speed = server.speed().describe()
    except RealModelError as exc:
        return Check(name, False, str(exc), "see docs/testing.md, section 'The real model'")
    took = f"{float(outcome.usage.get('duration') or 0.0):.1f}s, {speed}"
    if outcome.status is not TurnStatus.COMPLETED:
        return Check(name, False, f"{spec.alias}: turn {outcome.status} after {took}: {outcome.error}", None)
    verdict = "right" if REAL_MODEL_TOTAL in (outcome.answer or "") else f"wrong: the total is {REAL_MODEL_TOTAL}"
    return Check(name, True, f"{spec.alias} answered {outcome.answer!r} ({verdict}) in {took}")
