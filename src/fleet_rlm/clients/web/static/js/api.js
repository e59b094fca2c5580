// The API client: fetch with the bearer token (kept for the tab in sessionStorage); a new turn's
// events read from the response to its submission, other turn streams over EventSource with stream
// tickets, each resuming after the last event seen.
import { saveBlob } from "./dom.js";

const BASE = "/api/v1";
const TOKEN_KEY = "fleet.token";
const TERMINAL = new Set(["turn.completed", "turn.incomplete", "turn.failed", "turn.cancelled", "turn.interrupted"]);
// EventSource delivers named events only to listeners of that name: every type of docs/events.md.
export const EVENT_TYPES = [
  "turn.started", "kernel.evicted", "kernel.started", "kernel.restored", "route.selected", "iteration.started", "reasoning.delta", "code.delta", "reasoning", "code",
  "output", "execution.failed", "sandbox.restarted", "tool.started", "tool.finished", "child.started",
  "child.finished", "artifact.created", "memory.proposed", "budget.exhausted", "warning", ...TERMINAL,
];
export const isTerminal = (type) => TERMINAL.has(type);

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let askToken = null;
export function onTokenNeeded(prompt) {
  askToken = prompt;
}

function authHeaders(extra) {
  const headers = new Headers(extra || {});
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.set("Authorization", `Bearer ${token}`);
  return headers;
}

async function errorOf(response) {
  try {
    const body = await response.json();
    return new ApiError(response.status, body.code, body.message);
  } catch {
    return new ApiError(response.status, `http_${response.status}`, response.statusText);
  }
}

// One call; on 401 asks for the token (once per wrong token) and tries again.
export async function call(method, path, { json, body, headers, raw, signal, accept = [] } = {}) {
  for (let attempt = 0; ; attempt += 1) {
    const init = { method, headers: authHeaders(headers), signal };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers.set("Content-Type", "application/json");
    } else if (body !== undefined) {
      init.body = body;
    }
    const response = await fetch(BASE + path, init);
    if (response.status === 401 && askToken) {
      sessionStorage.setItem(TOKEN_KEY, await askToken(attempt > 0));
      continue;
    }
    if (!response.ok && !accept.includes(response.status)) throw await errorOf(response);
    if (raw) return response;
    return response.status === 204 ? null : response.json();
  }
}

export const filePath = (sessionId, path) =>
  `/sessions/${encodeURIComponent(sessionId)}/files/${path.split("/").map(encodeURIComponent).join("/")}`;

export async function fileBlob(sessionId, path) {
  return (await call("GET", filePath(sessionId, path), { raw: true })).blob();
}

// Saves a file as opaque bytes (saveBlob): the browser never renders it on this origin.
export async function download(sessionId, path) {
  saveBlob(await fileBlob(sessionId, path), path.split("/").pop());
}

function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// Follows a turn's events from after `after`; each event reaches onEvent once, in order. A dropped
// connection reconnects with a fresh ticket from the last event seen. Returns a handle with close().
export function follow(turnId, { after = 0, onEvent, onEnd, onRetry }) {
  let source = null;
  let closed = false;
  let retries = 0;
  const stop = () => {
    closed = true;
    if (source) source.close();
  };
  const events = inOrder(after, { onEvent, onEnd }, stop);
  const deliver = (message) => {
    if (events.deliver(JSON.parse(message.data))) retries = 0;
  };
  const open = async () => {
    if (closed) return;
    let ticket;
    try {
      ticket = await call("POST", `/turns/${encodeURIComponent(turnId)}/events/ticket`);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) return stop();
      return retry();
    }
    if (closed) return;
    source = new EventSource(`${ticket.url}&after=${events.last()}`);
    for (const type of EVENT_TYPES) source.addEventListener(type, deliver);
    source.addEventListener("error", () => {
      source.close();
      if (!closed) retry();
    });
  };
  const retry = () => {
    retries += 1;
    if (onRetry) onRetry(retries);
    setTimeout(open, Math.min(250 * 2 ** Math.min(retries, 4), 4000));
  };
  open();
  return { close: stop, lastSeq: events.last };
}

// Hands each event whose seq follows the last one seen to onEvent, once and in order (a resumed
// stream may repeat some); after the terminal event, calls stop() and then onEnd. deliver(event)
// says whether the event was new.
function inOrder(after, { onEvent, onEnd }, stop) {
  let last = after;
  const deliver = (event) => {
    if (typeof event.seq !== "number" || event.seq <= last) return false;
    last = event.seq;
    onEvent(event);
    if (isTerminal(event.type)) {
      stop();
      if (onEnd) onEnd(event);
    }
    return true;
  };
  return { deliver, last: () => last };
}

// The data of each complete server-sent event in `buffer` (a frame ends with a blank line; lines end
// with LF, CRLF or CR), and what is left of an incomplete one.
function sseFrames(buffer) {
  const data = [];
  const frames = buffer.split(/\r\n\r\n|\n\n|\r\r/);
  const rest = frames.pop();
  for (const frame of frames) {
    const lines = frame.split(/\r\n|\n|\r/).filter((line) => line.startsWith("data:"));
    if (lines.length) data.push(lines.map((line) => line.slice(line[5] === " " ? 6 : 5)).join("\n"));
  }
  return { data, rest };
}

// Submits a turn and reads its events from the same response (POST with Accept: text/event-stream:
// one request before the first event, where a POST, a ticket and an EventSource take three). Resolves
// once the server accepted the turn, with its id and follow(handlers), which takes the handlers of
// follow() and returns the same kind of handle; a stream that drops before the turn's end carries on
// through follow() from the last event seen. Rejects with ApiError as call() does.
export async function submitTurn(sessionId, json) {
  const abort = new AbortController();
  const response = await call("POST", `/sessions/${encodeURIComponent(sessionId)}/turns`, {
    json,
    headers: { "Idempotency-Key": newKey(), Accept: "text/event-stream" },
    raw: true,
    signal: abort.signal,
  });
  const streamed = (response.headers.get("Content-Type") || "").startsWith("text/event-stream");
  let turnId;
  try {
    turnId = streamed
      ? decodeURIComponent((response.headers.get("Location") || "").split("/").pop())
      : (await response.json()).id;
  } catch {
    turnId = "";
  }
  if (!turnId) {
    abort.abort();
    throw new ApiError(response.status, "unusable_location", "The server accepted the message but did not say which turn it started");
  }
  return { turnId, follow: (handlers) => readTurn(turnId, streamed ? response : null, abort, handlers) };
}

function readTurn(turnId, response, abort, { after = 0, onEvent, onEnd, onRetry }) {
  let closed = false;
  let rest = null;
  const stop = () => {
    closed = true;
    abort.abort();
  };
  const events = inOrder(after, { onEvent, onEnd }, stop);
  const handle = {
    close: () => {
      stop();
      if (rest) rest.close();
    },
    lastSeq: () => (rest ? rest.lastSeq() : events.last()),
  };
  const carryOn = () => {
    if (closed) return;
    if (onRetry) onRetry(1);
    rest = follow(turnId, { after: events.last(), onEvent, onEnd, onRetry });
  };
  if (!response) {
    rest = follow(turnId, { after, onEvent, onEnd, onRetry });
    return handle;
  }
  (async () => {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done || closed) return;
      const frames = sseFrames(buffer + value);
      buffer = frames.rest;
      for (const data of frames.data) {
        events.deliver(JSON.parse(data));
        if (closed) return;
      }
    }
  })()
    .catch((error) => {
      if (!closed && error.name !== "AbortError") console.error("the turn's stream broke off:", error);
    })
    .finally(carryOn);
  return handle;
}
