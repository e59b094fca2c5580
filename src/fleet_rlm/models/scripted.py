"""An OpenAI-compatible chat completions server whose replies a test scripts.

It speaks the real protocol over real HTTP (streaming and not), so tests drive Fleet's real
``dspy.LM`` client path without any model provider. Replies are queued per model name: the root
model's replies are RLM steps (reasoning + code), the sub-model's are plain answers for
``llm_query``.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Responder = Callable[[dict[str, Any]], "str | Reply"]
"""Answers a request from its content: the reply's text, or a whole :class:`Reply`."""


@dataclass
class Reply:
    """One scripted completion: its text, an optional delay before answering, or an HTTP error."""

    text: str = ""
    delay: float = 0.0
    status: int = 200
    prompt_tokens: int = 10
    completion_tokens: int = 5


def rlm_step(reasoning: str, code: str) -> str:
    """The text a root model writes for one RLM iteration, in DSPy's chat adapter format."""
    return f"[[ ## reasoning ## ]]\n{reasoning}\n\n[[ ## code ## ]]\n```python\n{code}\n```\n\n[[ ## completed ## ]]"


def fields_reply(**fields: str) -> str:
    """A reply in DSPy's chat adapter format carrying arbitrary output fields."""
    parts = [f"[[ ## {name} ## ]]\n{value}" for name, value in fields.items()]
    return "\n\n".join([*parts, "[[ ## completed ## ]]"])


def json_reply(**fields: Any) -> str:
    """A reply as a server enforcing the signature's schema writes it: one JSON object of the fields."""
    return json.dumps(fields)


_TASK_PREVIEW = re.compile(r"Variable: `task`.*?Preview:\n(\s*)```\n(.*?)\n\s*```", re.DOTALL)


def task_of(request: dict[str, Any]) -> str | None:
    """The ``task`` input of an RLM request (as DSPy shows it in ``variables_info``), if any."""
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            match = _TASK_PREVIEW.search(content)
            if match:
                indent = match.group(1).strip("\n")
                return "\n".join(line.removeprefix(indent) for line in match.group(2).splitlines()).strip()
    return None


@dataclass
class ScriptedModel:
    """Queues of replies per model name, plus a record of every request received."""

    replies: dict[str, deque[Reply | Responder]] = field(default_factory=dict)
    task_replies: list[tuple[str, str, deque[Reply | Responder]]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    default: Responder | None = None
    json_schema: Literal["refuse", "ignore", "honour"] = "refuse"
    """What this model does with a JSON schema in ``response_format`` (OpenAI's style or
    llama-cpp-python's): refuse the request (400, no reply taken), ignore the schema, or honour it (each
    scripted reply is checked against it, since a constraining server never breaks it)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, model: str, *replies: str | Reply | Responder) -> None:
        with self.lock:
            queue = self.replies.setdefault(model, deque())
            for reply in replies:
                queue.append(Reply(text=reply) if isinstance(reply, str) else reply)

    def script_for_task(self, model: str, marker: str, *replies: str | Reply | Responder) -> None:
        """Replies for requests whose RLM ``task`` input contains ``marker``, ahead of the model's queue.

        Concurrent agents (a parent and its children) share one model name; this keeps each one's
        script apart whatever order their requests arrive in.
        """
        queue: deque[Reply | Responder] = deque(Reply(text=r) if isinstance(r, str) else r for r in replies)
        with self.lock:
            self.task_replies.append((model, marker, queue))

    def next_reply(self, request: dict[str, Any]) -> Reply:
        model = str(request.get("model", ""))
        task = task_of(request)
        with self.lock:
            self.requests.append(request)
            item: Reply | Responder | None = None
            for rule_model, marker, task_queue in self.task_replies:
                if rule_model == model and task is not None and marker in task and task_queue:
                    item = task_queue.popleft()
                    break
            if item is None:
                queue = self.replies.get(model)
                item = queue.popleft() if queue else self.default
        if item is None:
            return Reply(status=500, text=f"scripted model has no reply left for model {model!r}")
        if isinstance(item, Reply):
            return item
        answer = item(request)
        return answer if isinstance(answer, Reply) else Reply(text=answer)

    def requests_for(self, model: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r.get("model") == model]

    def remaining(self, model: str) -> int:
        with self.lock:
            return len(self.replies.get(model, ()))


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            models = [{"id": name, "object": "model"} for name in self.server.model.replies]
            self._json(200, {"object": "list", "data": models})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._json(400, {"error": {"message": "malformed JSON"}})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"unknown path {self.path}"}})
            return
        schema = requested_schema(request)
        if schema is not None and self.server.model.json_schema == "refuse":
            self._json(400, {"error": {"message": "response_format with a JSON schema is not supported"}})
            return
        reply = self.server.model.next_reply(request)
        if schema is not None and self.server.model.json_schema == "honour" and reply.status == 200:
            broken = schema_problem(reply.text, schema)
            if broken:
                reply = Reply(status=500, text=f"scripted reply breaks the requested schema: {broken}")
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status != 200:
            self._json(reply.status, {"error": {"message": reply.text, "type": "scripted_error"}})
            return
        if request.get("stream"):
            self._stream(request, reply)
        else:
            self._json(200, _completion(request, reply))

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, request: dict[str, Any], reply: Reply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        model = request.get("model", "")
        chunk_size = self.server.stream_chunk_chars
        pieces = [reply.text[i : i + chunk_size] for i in range(0, len(reply.text), chunk_size)] or [""]
        for index, piece in enumerate(pieces):
            delta: dict[str, Any] = {"content": piece}
            if index == 0:
                delta["role"] = "assistant"
            self._event(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                }
            )
            if self.server.stream_chunk_delay:
                time.sleep(self.server.stream_chunk_delay)
        final: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        final["usage"] = _usage(reply)
        self._event(final)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def handle(self) -> None:
        # A client that hangs up early (a cancelled turn) is not the server's error.
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            super().handle()

    def _event(self, body: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")
        self.wfile.flush()


def requested_schema(request: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a request's ``response_format`` asks replies to follow, in either style, if any."""
    format_ = request.get("response_format")
    if not isinstance(format_, dict):
        return None
    if format_.get("type") == "json_schema":
        schema = (format_.get("json_schema") or {}).get("schema")
    else:
        schema = format_.get("schema")
    return schema if isinstance(schema, dict) else None


def schema_problem(text: str, schema: dict[str, Any]) -> str | None:
    """What in ``text`` breaks ``schema`` (a JSON object and its required properties), or None."""
    try:
        value = json.loads(text)
    except ValueError:
        return "not JSON"
    if not isinstance(value, dict):
        return "not a JSON object"
    missing = [name for name in schema.get("required", []) if name not in value]
    return f"missing {', '.join(missing)}" if missing else None


def _usage(reply: Reply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def _completion(request: dict[str, Any], reply: Reply) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", ""),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text}, "finish_reason": "stop"}],
        "usage": _usage(reply),
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, model: ScriptedModel, stream_chunk_chars: int, stream_chunk_delay: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model = model
        self.stream_chunk_chars = stream_chunk_chars
        self.stream_chunk_delay = stream_chunk_delay


class ScriptedModelServer:
    """Runs a :class:`ScriptedModel` on a loopback port in a background thread.

    Use as a context manager; ``base_url`` is the OpenAI-compatible root (ending in ``/v1``).
    """

    def __init__(
        self,
        model: ScriptedModel | None = None,
        *,
        stream_chunk_chars: int = 16,
        stream_chunk_delay: float = 0.0,
    ) -> None:
        self.model = model or ScriptedModel()
        self._server = _Server(self.model, stream_chunk_chars, stream_chunk_delay)
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-model", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, model: str, *replies: str | Reply | Responder) -> None:
        self.model.script(model, *replies)

    def script_for_task(self, model: str, marker: str, *replies: str | Reply | Responder) -> None:
        self.model.script_for_task(model, marker, *replies)

    def start(self) -> ScriptedModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
