// The trace view: a turn's spans (iterations, model calls, code executions, tool calls, child agents)
// as a waterfall with durations, from its events; the raw events download as JSONL. A traced turn
// (OpenTelemetry or MLflow) shows its trace id, to find it in the tracing backend.
import { formatSeconds, h, saveBlob } from "./dom.js";
import { usageLine } from "./transcript.js";

export function spansOf(events) {
  const spans = new Map();
  const order = [];
  const start = events.length ? events[0].ts : 0;
  const end = events.length ? events[events.length - 1].ts : 0;
  const open = (id, parent, kind, label, ts) => {
    const span = { id, parent, kind, label, start: ts, end: null, depth: spans.has(parent) ? spans.get(parent).depth + 1 : 0 };
    spans.set(id, span);
    order.push(span);
    return span;
  };
  for (const event of events) {
    const data = event.data || {};
    const span = spans.get(event.span_id);
    if (event.type === "turn.started") open(event.span_id, null, "turn", "Turn", event.ts);
    else if (event.type === "iteration.started") {
      const iteration = open(event.span_id, event.parent_span_id, "iteration", `Iteration ${data.iteration}`, event.ts);
      iteration.model = open(`${event.span_id}/model`, event.span_id, "model", "Model call", event.ts);
    } else if (event.type === "code" && span?.model) {
      span.model.end = event.ts;
      span.execution = open(`${event.span_id}/exec`, event.span_id, "execution", "Code execution", event.ts);
    } else if (event.type === "tool.started") open(event.span_id, event.parent_span_id, "tool", `${data.name}(${data.arguments})`, event.ts);
    else if (event.type === "child.started") open(event.span_id, event.parent_span_id, "child", `Child: ${data.task}`, event.ts);
    else if ((event.type === "tool.finished" || event.type === "child.finished") && span) {
      span.end = event.ts;
      span.usage = data.usage;
      span.error = data.error;
    } else if (event.type === "execution.failed" && span?.execution) span.execution.error = `${data.error_type}: ${data.message}`;
  }
  // An iteration lasts until the next one of its loop, or until its loop (the turn or a child) ends.
  const endOf = (span) => {
    if (span.end === null) {
      const parent = spans.get(span.parent);
      const next = span.kind === "iteration" && order.find((other) => other.kind === "iteration" && other.parent === span.parent && other.start > span.start);
      span.end = next ? next.start : parent && parent.kind !== "turn" ? endOf(parent) : end;
    }
    return span.end;
  };
  for (const span of order) {
    if (span.kind === "model" || span.kind === "execution") {
      const iterationEnd = endOf(spans.get(span.parent));
      if (span.end === null) span.end = iterationEnd;
    } else endOf(span);
  }
  return { spans: order, start, end };
}

export function renderTrace(turn, events) {
  const { spans, start, end } = spansOf(events);
  const total = Math.max(end - start, 1e-3);
  const terminal = events.find((event) => event.type.startsWith("turn.") && event.type !== "turn.started");
  const download = h("button", { type: "button" }, "Download events (JSONL)");
  download.addEventListener("click", () => {
    saveBlob(new Blob([events.map((event) => JSON.stringify(event)).join("\n") + "\n"]), `${turn.id}.events.jsonl`);
  });
  const rows = spans.map((span) => {
    const bar = h("span", { class: `bar bar-${span.kind}` });
    bar.style.marginLeft = `${(((span.start - start) / total) * 100).toFixed(2)}%`;
    bar.style.width = `${Math.max(((span.end - span.start) / total) * 100, 0.3).toFixed(2)}%`;
    const label = h("span", { class: "span-label" }, span.label);
    label.style.paddingLeft = `${span.depth}em`;
    const extra = span.error ? ` — ${span.error}` : span.usage ? ` — ${usageLine(span.usage)}` : "";
    return h(
      "li",
      { class: `span span-${span.kind}` },
      label,
      h("span", { class: "track", "aria-hidden": "true" }, bar),
      h("span", { class: "duration" }, `${formatSeconds(span.end - span.start)}${extra}`),
    );
  });
  return h(
    "section",
    { class: "trace", "aria-label": `Trace of turn ${turn.position ?? ""}` },
    h("p", {}, `${turn.message}`),
    h("p", { class: "usage" }, terminal ? usageLine(terminal.data.usage) : "running"),
    h("p", { class: "trace-id" }, turn.trace_id ? `Trace id: ${turn.trace_id}` : ""),
    download,
    h("ol", { class: "waterfall", "aria-label": "Spans" }, rows),
  );
}
