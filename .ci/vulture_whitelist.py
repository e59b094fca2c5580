# Reviewed false positives for vulture (`uv run vulture`, configured in pyproject.toml): names that a
# framework or library reads or calls, never Fleet's own code. Decorated entry points (FastAPI routes,
# typer commands, pydantic validators, SQLAlchemy listeners, key bindings, pytest fixtures) are skipped
# through `ignore_decorators` instead. Add a name here only with the reason it is used.
# ruff: noqa
_ = object()

# pydantic / pydantic-settings: model configuration, response fields serialised to clients, and the
# settings-source hooks pydantic-settings calls.
_.model_config
_.next_offset  # api.schemas: paging cursors returned to clients
_.next_after
_.expires_at
_.owned_by  # api.compat_schemas: OpenAI's response fields, read by OpenAI clients
_.total_tokens
_.reasoning_content
_.finish_reason
_.settings_customise_sources
file_secret_settings  # parameters settings_customise_sources must accept
env_settings
dotenv_settings
_._read_file  # TomlConfigSettingsSource's hook for reading one file (Fleet checks keys while reading)
_.get_field_value  # PydanticBaseSettingsSource's abstract method

# config: operator ceilings, read by name through service.overrides' field -> ceiling map.
_.lm_max_tokens

# DSPy calls these on Fleet's subclasses and implementations.
_.on_module_start  # dspy.utils.BaseCallback hooks
_.on_module_end
_.on_lm_start
_.on_interpreter_startup_start  # BaseCallback's interpreter hooks (the conformance suite records them)
_.on_interpreter_startup_end
_.on_interpreter_execute_start
_.on_interpreter_execute_end
_.on_interpreter_tool_call_start
_.on_interpreter_tool_call_end
_.on_interpreter_shutdown_start
_.on_interpreter_shutdown_end
_.sandbox_setup  # dspy.SandboxSerializable: how dspy.RLM puts a turn input into the sandbox
_.to_sandbox
_.sandbox_assignment
_.rlm_preview
_.tool_start_status_message  # dspy.streaming.StatusMessageProvider hooks
_.tool_end_status_message
_.module_start_status_message
_.module_end_status_message
_.lm_start_status_message
_.lm_end_status_message

# Python introspection and the standard library.
_.__qualname__  # set on the wrappers of bridged tools, read by inspect and error messages
_.__signature__
__getattr__  # fleet_rlm's module attribute hook: FleetInterpreter, imported on first use
owner  # a parameter the descriptor protocol passes to __get__
_.handlers  # logging.Logger.handlers
_.maxstring  # reprlib.Repr limits
_.maxother
_.maxdict
_.maxlist
_.maxtuple
_.maxlevel
_.mtime  # tarfile.TarInfo.mtime
_.isolation_level  # sqlite3.Connection.isolation_level
_.protocol_version  # http.server.BaseHTTPRequestHandler
_.close_connection
_.log_message
_.do_GET
_.do_POST
_.daemon_threads  # socketserver.ThreadingMixIn
_.should_exit  # uvicorn.Server.should_exit

# rich: text layout options.
_.no_wrap
_.overflow

# SQLAlchemy TypeDecorator and Alembic migration scripts.
_.impl
_.cache_ok
_.process_bind_param
_.process_result_value
dialect  # a parameter of the TypeDecorator hooks
down_revision
branch_labels
depends_on
downgrade

# Read by a subprocess a real-model test starts (the name is in the script's text).
_.log_path

# pytest: module markers and plugin hooks.
pytestmark
pytest_collection_finish
pytest_configure
pytest_terminal_summary
pytest_sessionstart
pytest_runtest_makereport

# protocol.payloads: event fields written to the wire by pydantic (the turn's usage is built from a
# dict of counters; the schema version is set through its wire alias "schema").
_.root_calls
_.sub_calls
_.child_calls
_.schema_version

# sandbox.worker: attributes the C JSON scanner (_json.make_scanner) reads off its context object.
_.object_hook
_.object_pairs_hook
_.parse_float
_.parse_int
_.parse_constant

# quality: dspy.GEPA calls a metric as (gold, pred, trace, pred_name, pred_trace); fleet_metric scores the
# whole program's outcome, so it reads neither of the last two. JudgeAnswer's fields are read by DSPy by name.
pred_name
pred_trace
_.reviewed_answer
_.candidate_answer
_.label_id  # quality.evaluation.EvalRow: in the JSON report (dataclasses.asdict)
_.reflection_lm  # config: the [reflection_lm] section, FLEET_REFLECTION_LM_* (read by fleet optimize)
# api.schemas.KernelOut / service.kernels.KernelStatus: a field pydantic reads off the status (asdict).
_.idle_seconds
# store.sqlite_inline.InlineConnection: SQLAlchemy's aiosqlite adapter puts calls on the connection's
# ``_tx`` queue to set its isolation level (tests/store/test_sqlite_inline.py).
_._tx
# engine.adapters.FleetChatAdapter: DSPy's ChatAdapter calls it for the adapter it falls back to.
_._make_json_adapter_fallback
# engine.adapters.SchemaAdapter: DSPy's JSONAdapter calls it before each call to put response_format in.
_._prepare_response_format
