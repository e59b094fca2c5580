"""The sections of Fleet's settings: ``[lm]``, ``[sub_lm]``, ``[budget]``, ``[sandbox]``, ``[memory]``,
``[quality]`` (with the ``[judge_lm]`` and ``[reflection_lm]`` models), ``[tracing]`` and ``[server]`` (with ``[server.ceilings]``). Each layer is handed the section it reads."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

SECTION_CONFIG = ConfigDict(extra="forbid", validate_default=True)
# A package as `sandbox_packages` takes it: a name, extras, version specifiers; no URL, path, marker or option.
_VERSION = r"\s*(===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*"
REQUIREMENT = re.compile(
    rf"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\s*(?:\[[A-Za-z0-9._-]+(?:\s*,\s*[A-Za-z0-9._-]+)*\])?(?:{_VERSION}(?:,{_VERSION})*)?"
)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def origin_of(scheme: str, host: str, port: int | None) -> str:
    """A web origin in the form browsers send (lower case, no default port)."""
    scheme, host = scheme.lower(), host.lower()
    bracketed = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{bracketed}" if port in (None, default) else f"{scheme}://{bracketed}:{port}"


class LMSettings(BaseModel):
    """The root model, which writes the code."""

    model_config = SECTION_CONFIG

    model: str | None = Field(default=None, description="Root model, e.g. openai/gpt-4.1-mini.")
    base_url: str | None = Field(
        default=None, description="OpenAI-compatible endpoint; the provider's default if unset."
    )
    api_key: SecretStr | None = None
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    timeout: float = Field(default=120.0, gt=0, description="Seconds to wait for one model response (sub-model too).")
    num_retries: int = Field(default=2, ge=0, description="Retries of a failed model call (sub-model too).")
    stream: bool = Field(default=True, description="Stream completions so reasoning and code arrive live.")
    structured_output: Literal["auto", "json_schema", "json_object_schema", "off"] = Field(
        default="auto",
        description=(
            "Ask the endpoint for replies that follow a JSON schema, so none is malformed: auto (probe the "
            "endpoint once and use what it honours), json_schema (OpenAI's response_format), json_object_schema "
            "(llama-cpp-python's), or off (DSPy's chat format)."
        ),
    )


class SubLMSettings(BaseModel):
    """The sub-model, which answers ``llm_query``; each unset field is the root's."""

    model_config = SECTION_CONFIG

    model: str | None = Field(default=None, description="Sub-model for llm_query; the root model if unset.")
    base_url: str | None = None
    api_key: SecretStr | None = None
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, gt=0)

    def over(self, root: LMSettings) -> LMSettings:
        """The sub-model as called: these fields where set, the root's elsewhere."""
        return root.model_copy(
            update={
                "model": self.model or root.model,
                "base_url": self.base_url or root.base_url,
                "api_key": self.api_key or root.api_key,
                "temperature": root.temperature if self.temperature is None else self.temperature,
                "max_tokens": self.max_tokens or root.max_tokens,
            }
        )


class JudgeLMSettings(SubLMSettings):
    """The judge model, which grades answers against their labels in ``fleet_metric``; each unset field is
    the root's."""


class ReflectionLMSettings(SubLMSettings):
    """The reflection model, which reads the metric's feedback and proposes new instructions to GEPA;
    each unset field is the root's."""


class BudgetSettings(BaseModel):
    """What one turn may spend, its child agents included."""

    model_config = SECTION_CONFIG

    max_iterations: int = Field(default=20, gt=0, description="RLM iterations per turn.")
    max_model_calls: int = Field(default=60, gt=0, description="Root + sub-model calls per turn, one counter.")
    turn_timeout: float = Field(default=900.0, gt=0, description="Wall-clock seconds a turn may take.")
    execution_timeout: float = Field(default=120.0, gt=0, description="Wall-clock seconds one code execution may take.")
    max_output_chars: int = Field(default=20_000, gt=0, description="Output characters kept per execution.")
    max_tokens_per_turn: int | None = Field(
        default=None, gt=0, description="Optional ceiling on model tokens per turn."
    )
    loop_guard_warn_after: int = Field(
        default=2,
        ge=1,
        description="Identical failures of the same code in a row before the model is told to change course "
        "(also: the same work done again, the same output and files, in a row or not, before it is told to submit).",
    )
    loop_guard_stop_after: int = Field(
        default=4,
        ge=1,
        description="Identical failures of the same code in a row that end the turn as incomplete; also the same "
        "work done again (same output and files, in a row or not), or replies that could not be read in a row, "
        "that end the loop through the extract step.",
    )
    max_depth: int = Field(default=2, ge=0, description="How deep child agents may nest; 0 disables delegation.")
    max_children_per_turn: int = Field(default=16, ge=0, description="Child agents one turn may start, all levels.")
    max_concurrent_children: int = Field(default=4, gt=0, description="Child agents running at once per turn.")
    child_max_iterations: int = Field(default=10, gt=0, description="Iteration budget of each child agent.")
    child_timeout: float = Field(default=300.0, gt=0, description="Seconds a child may run; never beyond its parent.")
    max_sandbox_restarts: int = Field(
        default=3,
        ge=0,
        description="Fresh sandboxes per turn, child agents included, after the worker died or broke its protocol; "
        "one more crash fails the turn. 0: a crash fails the turn.",
    )
    max_cost_per_turn: float | None = Field(
        default=None, gt=0, description="Ceiling on model cost per turn (needs prices)."
    )
    model_prices: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="Per model (as in lm.model): (input, output) price per million tokens, for max_cost_per_turn.",
    )


class SandboxSettings(BaseModel):
    """Where sandbox code runs and the limits every sandbox gets (docs/sandbox.md)."""

    model_config = SECTION_CONFIG

    backend: str = Field(
        default="local", min_length=1, description="Where code runs: a backend of fleet_rlm.sandbox.registry ('local')."
    )
    allow_unisolated: bool = Field(
        default=False, description="Run the worker without bubblewrap when it is missing (no isolation!)."
    )
    memory_mb: int = Field(default=2048, gt=0)
    max_processes: int = Field(default=64, gt=0)
    max_file_size_mb: int = Field(default=1024, gt=0)
    cpu_seconds: int = Field(default=1800, gt=0)
    disk_mb: int = Field(
        default=10_240, gt=0, description="MiB a sandbox's workspace volume holds, inputs included (a sparse image)."
    )
    max_files: int = Field(default=100_000, ge=1000, description="Files and directories a workspace volume holds.")
    copy_out_turn_mb: int = Field(
        default=2048,
        gt=0,
        description="MiB the host copies out of one turn's workspace, all files together (a server's new "
        "artifacts, the files `fleet run` brings back); a file past it is skipped with a warning.",
    )
    copy_out_session_mb: int = Field(
        default=10_240,
        gt=0,
        description="MiB of artifacts a session keeps, all its turns together; a new artifact past it is "
        "skipped with a warning.",
    )
    cpu_weight: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description="What a sandbox, all its processes together, weighs on a busy CPU against a host process at "
        "100 (cgroup v2's scale): the server's event loop and the engine are served first.",
    )
    require_limits: bool | None = Field(
        default=None,
        description="Refuse sandboxes whose whole-sandbox limits (memory and process cgroups, sized /tmp, "
        "CPU time, seccomp) cannot be enforced here; unset: on for `fleet serve`, off for `fleet run`.",
    )
    pool_size: int = Field(default=2, ge=0, description="Sandboxes a server keeps started, ready for the next turn.")
    max_kernels: int = Field(
        default=8,
        ge=0,
        description="Session kernels (sandboxes whose Python state lives on between a session's turns) a server "
        "keeps; past it the least recently used ends. 0: every turn starts a fresh sandbox.",
    )
    kernel_idle_timeout: float = Field(
        default=900.0, gt=0, description="Seconds a session's kernel may sit idle before it ends (its memory counts)."
    )
    kernel_snapshot_mb: int = Field(
        default=256,
        ge=0,
        description="MiB of a session's picklable variables snapshotted after each turn, restored into a fresh "
        "kernel (inside the sandbox); 0: no snapshots.",
    )
    packages: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Packages sandbox code can import besides the locked ones (e.g. ['six', 'xlsxwriter>=3']); "
        "a change builds a new sandbox environment.",
    )
    environments_dir: Path | None = Field(
        default=None,
        description="Where sandbox environments are built and kept; sandbox-environments in the platform's "
        "user data directory if unset.",
    )

    @field_validator("packages", mode="before")
    @classmethod
    def _package_list(cls, value: Any) -> Any:
        """A list, a JSON list, or packages separated by spaces (commas stay inside version specifiers)."""
        if isinstance(value, str):
            text = value.strip()
            return json.loads(text) if text.startswith("[") else text.split()
        return value

    @field_validator("packages")
    @classmethod
    def _requirements(cls, packages: list[str]) -> list[str]:
        for package in packages:
            if not REQUIREMENT.fullmatch(package.strip()):
                raise ValueError(
                    f"{package!r} is not a package: give a name with optional extras and versions, e.g. "
                    "'xlsxwriter' or 'pandas-stubs>=2,<3', separated by spaces (no URL, path or pip option)"
                )
        return [package.strip() for package in packages]

    @field_validator("environments_dir")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return value.expanduser().resolve() if value is not None else None


class MemorySettings(BaseModel):
    """Reviewed memory: what turns may propose and how much approved memory a turn is shown (docs/memory.md)."""

    model_config = SECTION_CONFIG

    max_chars: int = Field(
        default=4000,
        ge=100,
        description="Characters of approved memory a turn is shown (memory/MEMORIES.md); older entries beyond are left out.",
    )
    max_entry_chars: int = Field(
        default=1000, gt=0, le=20_000, description="Longest memory entry a turn may propose or a person may save."
    )
    max_proposals_per_turn: int = Field(
        default=10, ge=0, description="remember() calls one turn may make (0: turns get no remember tool)."
    )
    max_pending: int = Field(
        default=100, gt=0, description="Proposals waiting for review at most; beyond, remember() is refused."
    )


class QualitySettings(BaseModel):
    """Evaluation and optimization: replay capture, eval runs (docs/evaluation.md)."""

    model_config = SECTION_CONFIG

    capture_replays: bool = Field(
        default=False,
        description="Keep an immutable snapshot of each turn's inputs, so the turn can be labeled and replayed "
        "(per session too).",
    )
    eval_concurrency: int = Field(default=2, gt=0, le=64, description="Replays an eval run runs at once.")


class TracingSettings(BaseModel):
    """Tracing of turns, with the optional extra ``fleet-rlm[tracing]`` (docs/integrations.md)."""

    model_config = SECTION_CONFIG

    otel_exporter_otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP endpoint (e.g. http://localhost:4318) that receives one span tree per turn, at "
        "<endpoint>/v1/traces; off if unset.",
    )
    trace_turns: bool = Field(
        default=False,
        description="Trace each turn to MLflow: to mlflow_tracking_uri, else a local store under Fleet's data dir.",
    )
    mlflow_tracking_uri: str | None = Field(
        default=None,
        description="MLflow tracking URI (e.g. http://localhost:5000, sqlite:///path/mlflow.db) for the turns' "
        "traces; setting it turns MLflow tracing on.",
    )

    @property
    def mlflow_on(self) -> bool:
        return self.trace_turns or self.mlflow_tracking_uri is not None

    @property
    def on(self) -> bool:
        return self.mlflow_on or self.otel_exporter_otlp_endpoint is not None

    @field_validator("mlflow_tracking_uri")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        return value.strip() if value is not None and value.strip() else None

    @field_validator("otel_exporter_otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an http:// or https:// URL with a host, not {value!r}")
        if parts.query or parts.fragment:
            raise ValueError(f"must have no query or fragment: {value!r}")
        return value.strip().rstrip("/")


class Ceilings(BaseModel):
    """The most a session's settings or a turn's options may ask for (docs/api.md)."""

    model_config = SECTION_CONFIG

    max_iterations: int = Field(default=100, gt=0)
    max_model_calls: int = Field(default=500, gt=0)
    turn_timeout: float = Field(default=3600.0, gt=0)
    execution_timeout: float = Field(default=600.0, gt=0)
    max_output_chars: int = Field(default=200_000, gt=0)
    max_tokens_per_turn: int = Field(default=10_000_000, gt=0)
    lm_max_tokens: int = Field(default=200_000, gt=0, description="For lm.max_tokens and sub_lm.max_tokens.")


class WorkerSettings(BaseModel):
    """Who runs turns: the server itself, or ``fleet worker`` processes sharing its database (docs/deploy.md)."""

    model_config = SECTION_CONFIG

    in_server: bool = Field(
        default=True,
        description="fleet serve runs turns itself as well (always on SQLite); off: only fleet worker processes do.",
    )
    lease_seconds: float = Field(
        default=10.0,
        ge=1.0,
        le=300.0,
        description="A runner's claim on a turn; renewed every third of it; a turn whose lease lapsed ends interrupted.",
    )
    drain_seconds: float = Field(
        default=60.0,
        ge=0,
        description="On SIGTERM, how long fleet worker (and fleet serve on PostgreSQL) lets its running turns finish.",
    )
    turn_processes: int = Field(
        default=2,
        ge=0,
        le=64,
        description=(
            "Processes of its own in which a process that runs turns runs their engines (DSPy, the model "
            "calls), so its event loop is not slowed by them; 0: on its own threads."
        ),
    )
    kernel_affinity_seconds: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description=(
            "On PostgreSQL, how long a queued turn is left to the process that ran its session's previous "
            "turn (which keeps the session's kernel) before any process may claim it; 0: no preference."
        ),
    )
    file_store: Literal["local", "database"] = Field(
        default="local",
        description=(
            "Where session file bytes are kept: local (the data directory: one machine, or a file system "
            "they all mount) or database (also in the database, streamed in chunks; each process keeps "
            "what it reads under its data directory), for replicas and workers on several machines."
        ),
    )


class ServerSettings(BaseModel):
    """The HTTP API: where it listens and what it accepts (docs/api.md, docs/security.md)."""

    model_config = SECTION_CONFIG

    host: str = "127.0.0.1"
    port: int = Field(default=8765, gt=0, lt=65536)
    api_token: SecretStr | None = None
    max_running_turns: int = Field(
        default=32, ge=0, description="Turns one server runs at once (0: no limit); more wait queued, in order."
    )
    sse_heartbeat_seconds: float = Field(
        default=15.0, gt=0, le=15.0, description="Seconds between SSE heartbeats (at most 15)."
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names the API answers besides loopback ones ('*.example.com': its subdomains; '*': any).",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Browser origins (scheme://host[:port]) allowed to call the API cross-site."
    )
    json_body_limit_kb: int = Field(default=1024, gt=0, description="Largest JSON request body, in KiB.")
    upload_limit_mb: int = Field(default=100, gt=0, description="Largest upload, in MiB.")
    import_limit_mb: int = Field(default=1024, gt=0, description="Largest session archive to import (as sent), in MiB.")
    import_unpacked_limit_mb: int = Field(
        default=4096, gt=0, description="Most bytes an archive may unpack to, in MiB."
    )
    import_file_limit_mb: int = Field(default=1024, gt=0, description="Largest single file inside an archive, in MiB.")
    import_max_entries: int = Field(default=20_000, gt=0, description="Most entries an archive may hold.")
    ceilings: Ceilings = Field(default_factory=lambda: Ceilings())

    @field_validator("api_token")
    @classmethod
    def _empty_token_is_none(cls, value: SecretStr | None) -> SecretStr | None:
        """``FLEET_API_TOKEN=""`` means no token, never a token everyone knows."""
        return value if value is not None and value.get_secret_value().strip() else None

    @field_validator("allowed_hosts", "cors_origins", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        """A list, a JSON list, or names separated by commas (handy in the environment)."""
        if isinstance(value, str):
            text = value.strip()
            return (
                json.loads(text) if text.startswith("[") else [part.strip() for part in text.split(",") if part.strip()]
            )
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _host_patterns(cls, hosts: list[str]) -> list[str]:
        normal = []
        for host in hosts:
            name = host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")
            bare = name.removeprefix("*.")
            if name != "*" and not ((bare and _is_ip(bare)) or (bare and not any(c in bare for c in "*/:@?# "))):
                raise ValueError(f"{host!r} is not a host name: give names like fleet.example.com or *.example.com")
            normal.append(name)
        return normal

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        normal = []
        for origin in origins:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/") or parts.query:
                raise ValueError(f"{origin!r} is not an origin: give scheme://host[:port], e.g. https://ui.example.com")
            normal.append(origin_of(parts.scheme, parts.hostname, parts.port))
        return normal
