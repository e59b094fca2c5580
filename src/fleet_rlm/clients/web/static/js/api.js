// The API client: fetch with the bearer token (kept for the tab in sessionStorage) and turn streams
// over EventSource with stream tickets, resuming after the last event seen.
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
export async function call(method, path, { json, body, headers, raw, accept = [] } = {}) {
  for (let attempt = 0; ; attempt += 1) {
    const init = { method, headers: authHeaders(headers) };
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

// Saves a file through a blob URL and <a download>: the browser never renders it on this origin.
export async function download(sessionId, path) {
  const url = URL.createObjectURL(await fileBlob(sessionId, path));
  const link = document.createElement("a");
  link.href = url;
  link.download = path.split("/").pop();
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

export function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// Follows a turn's events from after `after`; each event reaches onEvent once, in order. A dropped
// connection reconnects with a fresh ticket from the last event seen. Returns a handle with close().
export function follow(turnId, { after = 0, onEvent, onEnd, onRetry }) {
  let last = after;
  let source = null;
  let closed = false;
  let retries = 0;
  const stop = () => {
    closed = true;
    if (source) source.close();
  };
  const deliver = (message) => {
    const event = JSON.parse(message.data);
    if (typeof event.seq !== "number" || event.seq <= last) return;
    last = event.seq;
    retries = 0;
    onEvent(event);
    if (isTerminal(event.type)) {
      stop();
      if (onEnd) onEnd(event);
    }
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
    source = new EventSource(`${ticket.url}&after=${last}`);
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
  return { close: stop, lastSeq: () => last };
}
