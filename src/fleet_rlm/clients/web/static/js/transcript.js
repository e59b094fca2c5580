// One turn as an <article>, built from its events as they arrive. Events are queued and applied once
// per animation frame, so a fast stream costs one layout per frame; each applied event moves the
// article's data-last-seq (what the benchmark and tests watch).
import { download, filePath } from "./api.js";
import { formatBytes, formatSeconds, h, showHidden, uniqueId } from "./dom.js";
import { highlight } from "./highlight.js";
import { labelButton } from "./label.js";
import { renderMarkdown } from "./markdown.js";
import { isImage, preview } from "./preview.js";

const ENDINGS = {
  "turn.failed": ["Failed", "error"],
  "turn.cancelled": ["Cancelled", "warning"],
  "turn.interrupted": ["Interrupted", "warning"],
};

// The lines printed by code that ran without error that support the answer: sandbox output, so they go in
// as text with every hiding or reordering character shown as an escape (docs/events.md#evidence).
function evidenceList(evidence) {
  if (!Array.isArray(evidence) || !evidence.length) return [];
  const items = evidence.map((line) => h("li", {}, h("code", {}, showHidden(line))));
  return [h("p", { class: "evidence-heading" }, "Evidence"), h("ul", { class: "evidence", "aria-label": "Evidence" }, items)];
}

export function usageLine(usage) {
  if (!usage) return "";
  const parts = [];
  if (usage.iterations !== undefined) parts.push(`${usage.iterations} iterations`);
  if (usage.model_calls !== undefined) parts.push(`${usage.model_calls} model calls`);
  if (usage.input_tokens !== undefined)
    parts.push(`${usage.input_tokens} in / ${usage.output_tokens ?? 0} out tokens`);
  if (usage.cost !== undefined && usage.cost !== null) parts.push(`$${Number(usage.cost).toFixed(4)}`);
  if (usage.duration !== undefined) parts.push(formatSeconds(usage.duration));
  return parts.join(" · ");
}

export function artifactItem(sessionId, file) {
  const label = file.path;
  const previewBox = h("div", { class: "preview" });
  const show = async () => {
    previewBox.textContent = "Loading…";
    try {
      previewBox.replaceChildren(await preview(sessionId, file));
    } catch (error) {
      previewBox.textContent = `Cannot preview: ${error.message}`;
    }
  };
  const toggle = h("button", { type: "button", class: "small", "aria-expanded": "false" }, "Preview");
  toggle.setAttribute("aria-label", `Preview ${label}`);
  toggle.addEventListener("click", () => {
    const open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(open));
    if (open) show();
    else previewBox.replaceChildren();
  });
  const link = h("a", { href: `/api/v1${filePath(sessionId, label)}`, class: "artifact" }, label);
  link.addEventListener("click", (event) => {
    event.preventDefault();
    download(sessionId, label);
  });
  const meta = h("span", { class: "meta" }, file.size !== undefined ? formatBytes(file.size) : "");
  if (file.sha256) meta.append(" · sha256 ", h("code", { class: "sha" }, file.sha256));
  const item = h("li", { "data-path": label }, link, " ", meta, " ", toggle, previewBox);
  if (isImage(label, file.media_type)) {
    toggle.setAttribute("aria-expanded", "true");
    show();
  }
  return item;
}

class Iteration {
  constructor(container, number) {
    this.code = "";
    this.codeDirty = false;
    this.section = h("section", { class: "iteration", "aria-label": `Iteration ${number}` });
    this.section.append(h("h4", {}, `Iteration ${number}`));
    container.append(this.section);
  }

  part(name, make) {
    if (!this[name]) {
      this[name] = make();
      this.section.append(this[name]);
    }
    return this[name];
  }

  reasoning() {
    return this.part("reasoningBox", () => {
      const details = h("details", { class: "reasoning" }, h("summary", {}, "Reasoning"), h("div", { class: "text" }));
      return details;
    }).querySelector(".text");
  }

  codeBlock() {
    return this.part("codeBox", () => h("pre", { class: "code", "aria-label": "Code" }, h("code"))).firstChild;
  }

  output() {
    return this.part("outputBox", () => h("pre", { class: "output", "aria-label": "Output" }));
  }

  tools() {
    return this.part("toolBox", () => h("ul", { class: "tools", "aria-label": "Tool calls" }));
  }
}

export class TurnView {
  constructor(sessionId, turn) {
    this.sessionId = sessionId;
    this.turnId = turn.id;
    this.events = [];
    this.queue = [];
    this.scheduled = false;
    this.spans = new Map();
    this.iterations = new Map();
    this.tools = new Map();
    this.children = new Map();
    this.artifactPaths = new Map();
    const headingId = uniqueId("turn");
    this.status = h("span", { class: "status" }, turn.status || "queued");
    this.article = h(
      "article",
      { class: "turn", "aria-labelledby": headingId, "data-turn-id": turn.id, "data-last-seq": "0" },
      h("h3", { id: headingId, class: "message" }, h("span", { class: "visually-hidden" }, "You: "), turn.message),
      h("p", { class: "turn-meta" }, this.status, " ", labelButton(this)),
    );
    this.body = h("div", { class: "work" });
    this.artifactList = h("ul", { class: "artifacts", "aria-label": "Artifacts" });
    this.article.append(this.body);
  }

  get lastSeq() {
    return this.events.length ? this.events[this.events.length - 1].seq : 0;
  }

  push(event) {
    this.queue.push(event);
    if (!this.scheduled) {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
  }

  flush() {
    this.scheduled = false;
    const batch = this.queue;
    this.queue = [];
    const dirty = new Set();
    for (const event of batch) {
      if (event.seq <= this.lastSeq) continue;
      this.events.push(event);
      const iteration = this.apply(event);
      if (iteration) dirty.add(iteration);
    }
    for (const iteration of dirty) {
      if (iteration.codeDirty) {
        highlight(iteration.code, iteration.codeBlock());
        iteration.codeDirty = false;
      }
    }
    if (batch.length) this.article.dataset.lastSeq = String(this.lastSeq);
  }

  container(event) {
    return this.spans.get(event.parent_span_id) || this.spans.get(event.span_id) || this.body;
  }

  iterationOf(event) {
    return this.iterations.get(event.span_id) || this.iterations.get(event.parent_span_id);
  }

  line(container, className, text, role) {
    container.append(h("p", { class: `line ${className}`, role }, text));
  }

  apply(event) {
    const data = event.data || {};
    const iteration = this.iterationOf(event);
    switch (event.type) {
      case "turn.started":
        this.spans.set(event.span_id, this.body);
        this.setStatus("running");
        return null;
      case "kernel.evicted":
        this.line(this.body, "warning", `Kernel ended (${data.reason}): ${data.detail}; its variables are gone`, "note");
        return null;
      case "kernel.started":
        this.line(this.body, "kernel", `Kernel started (sandbox ${data.sandbox_id}): its Python state lives on to the next turn`);
        return null;
      case "kernel.restored": {
        const restored = data.restored.length ? data.restored.join(", ") : "none";
        const lost = data.lost.map((item) => `${item.name} (${item.reason})`).join(", ");
        this.line(this.body, "kernel", `Kernel restored from the snapshot: ${restored}${lost ? `; lost: ${lost}` : ""}`);
        return null;
      }
      case "route.selected":
        this.line(this.body, "route", `Route: ${data.route} (${data.reason || data.mode})`);
        return null;
      case "iteration.started": {
        const it = new Iteration(this.container(event), data.iteration);
        this.iterations.set(event.span_id, it);
        this.spans.set(event.span_id, it.section);
        return null;
      }
      case "reasoning.delta":
        if (iteration) iteration.reasoning().append(data.text);
        return null;
      case "reasoning":
        if (iteration) iteration.reasoning().textContent = data.text;
        return null;
      case "code.delta":
        if (!iteration) return null;
        iteration.code += data.text;
        iteration.codeDirty = true;
        return iteration;
      case "code":
        if (!iteration) return null;
        iteration.code = data.code;
        iteration.codeDirty = true;
        return iteration;
      case "output":
        if (iteration) {
          const out = iteration.output();
          if (data.stream === "stderr") out.append(h("span", { class: "stderr" }, data.text));
          else out.append(data.text);
        }
        return null;
      case "execution.failed": {
        const where = data.line ? ` (line ${data.line})` : "";
        const box = h(
          "div",
          { class: "execution-error", role: "note", "aria-label": "Execution error" },
          h("p", {}, h("strong", {}, data.error_type), `: ${data.message}${where}`),
        );
        if (data.traceback) box.append(h("details", {}, h("summary", {}, "Traceback"), h("pre", {}, data.traceback)));
        if (iteration) {
          iteration.codeBox?.after(box);
          if (!iteration.codeBox) iteration.section.append(box);
        } else this.body.append(box);
        return null;
      }
      case "sandbox.restarted":
        this.line(this.container(event), "warning", `Sandbox restarted (${data.restart}/${data.max_restarts}): ${data.cause}`);
        return null;
      case "tool.started": {
        const target = iteration ? iteration.tools() : this.container(event);
        const state = h("span", { class: "tool-state" }, "running");
        const item = h("li", { class: "tool" }, h("code", {}, `${data.name}(${data.arguments})`), " ", state);
        target.append(item);
        this.tools.set(data.call_id, state);
        return null;
      }
      case "tool.finished": {
        const state = this.tools.get(data.call_id);
        if (state) {
          state.textContent = data.error ? `failed after ${formatSeconds(data.duration)}: ${data.error}` : formatSeconds(data.duration);
          state.classList.toggle("error", Boolean(data.error));
        }
        return null;
      }
      case "child.started": {
        const summaryState = h("span", { class: "child-state" }, "running");
        const inner = h("div", { class: "child-work" });
        const details = h(
          "details",
          { class: "child", open: true },
          h("summary", {}, `Child agent (depth ${data.depth}): ${data.task} — `, summaryState),
          inner,
        );
        this.container(event).append(details);
        this.spans.set(event.span_id, inner);
        this.children.set(data.child_id, summaryState);
        return null;
      }
      case "child.finished": {
        const state = this.children.get(data.child_id);
        if (state) {
          state.textContent = `${data.outcome} in ${formatSeconds(data.duration)}${data.error ? `: ${data.error}` : ""}`;
          state.className = `child-state ${data.outcome}`;
        }
        return null;
      }
      case "artifact.created":
        this.addArtifact({ path: data.path, size: data.size });
        return null;
      case "memory.proposed":
        this.line(this.body, "memory", `Proposed to remember: ${showHidden(data.text)} (review it in Files)`);
        return null;
      case "budget.exhausted":
        this.line(this.body, "warning", `Budget exhausted: ${data.budget} (limit ${data.limit})`, "note");
        return null;
      case "warning":
        this.line(this.container(event), "warning", `Warning: ${data.message}`, "note");
        return null;
      case "turn.completed":
      case "turn.incomplete":
        this.finish(event);
        return null;
      default:
        if (ENDINGS[event.type]) this.finish(event);
        return null;
    }
  }

  addArtifact(file) {
    const existing = this.artifactPaths.get(file.path);
    const item = artifactItem(this.sessionId, file);
    if (existing) existing.replaceWith(item);
    else this.artifactList.append(item);
    this.artifactPaths.set(file.path, item);
    if (!this.artifactList.isConnected) this.article.append(this.artifactList);
  }

  setStatus(status) {
    this.status.textContent = status;
    this.status.className = `status ${status}`;
  }

  finish(event) {
    const data = event.data || {};
    const ending = ENDINGS[event.type];
    if (ending) {
      this.setStatus(ending[0].toLowerCase());
      this.line(this.article, ending[1], `${ending[0]}: ${data.reason || "no reason given"}`, "status");
    } else {
      this.setStatus(event.type === "turn.completed" ? "completed" : "incomplete");
      const answer = h("section", { class: "answer", "aria-label": "Answer" });
      if (data.unverified) {
        answer.append(h("p", { class: "badge unverified" }, `Unverified (${data.answer_source}): ${data.unverified_reason || ""}`));
      }
      if (event.type === "turn.incomplete") answer.append(h("p", { class: "badge incomplete" }, `Incomplete: ${data.reason}`));
      const body = h("div", { class: "markdown" });
      this.answerText = data.answer || "";
      body.append(renderMarkdown(data.answer || ""));
      answer.append(body);
      answer.append(...evidenceList(data.evidence));
      this.article.append(answer);
    }
    for (const artifact of data.artifacts || []) this.addArtifact(artifact);
    if (this.artifactList.isConnected) this.article.append(this.artifactList);
    const usage = usageLine(data.usage);
    if (usage) this.article.append(h("p", { class: "usage", "aria-label": "Usage" }, usage));
  }
}
