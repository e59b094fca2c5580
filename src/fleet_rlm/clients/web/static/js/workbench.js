// The workbench of one session: its transcript (one article per turn, replayed then followed live)
// and the composer (message, mode, attachments, context files, Send and Stop).
import { ApiError, call, follow, isTerminal, submitTurn } from "./api.js";
import { formatBytes, h } from "./dom.js";
import { TurnView } from "./transcript.js";

const ACTIVE = new Set(["queued", "running"]);
const REPLAY_AT_ONCE = 2;

export class Workbench {
  constructor(app, session) {
    this.app = app;
    this.session = session;
    this.views = new Map();
    this.streams = new Map();
    this.turns = [];
    this.activeTurn = null;
    this.files = [];
    this.context = new Set();
    this.transcript = h("section", { class: "transcript", "aria-label": "Transcript" });
    this.element = h("div", { class: "workbench" }, this.transcript, this.composer());
  }

  composer() {
    this.message = h("textarea", { id: "message", rows: "3", placeholder: "Ask a task; Enter sends, Shift+Enter adds a line" });
    this.message.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.send();
      }
    });
    this.mode = h(
      "select",
      { id: "mode" },
      h("option", { value: "" }, "Session default"),
      ["hybrid", "rlm", "flex", "direct"].map((mode) => h("option", { value: mode }, mode)),
    );
    this.picker = h("input", { type: "file", multiple: true, hidden: true, id: "attach-input", "aria-label": "Files to attach" });
    this.picker.addEventListener("change", () => this.attach([...this.picker.files]).then(() => (this.picker.value = "")));
    this.sendButton = h("button", { type: "submit", class: "primary" }, "Send");
    this.stopButton = h("button", { type: "button", disabled: true }, "Stop");
    this.stopButton.addEventListener("click", () => this.stop());
    this.contextList = h("ul", { class: "context-files" });
    this.contextBox = h("details", { class: "context" }, h("summary", {}, "Context files"), this.contextList);
    this.notice = h("p", { class: "composer-notice", role: "status", "aria-live": "polite" });
    const attach = h("button", { type: "button" }, "Attach files");
    attach.addEventListener("click", () => this.picker.click());
    const form = h(
      "form",
      { class: "composer", "aria-label": "Composer" },
      this.contextBox,
      h("label", { for: "message" }, "Message"),
      this.message,
      h("div", { class: "composer-row" }, h("label", { for: "mode" }, "Mode"), this.mode, attach, this.picker, this.stopButton, this.sendButton),
      this.notice,
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    form.addEventListener("dragover", (event) => {
      event.preventDefault();
      form.classList.add("dropping");
    });
    form.addEventListener("dragleave", () => form.classList.remove("dropping"));
    form.addEventListener("drop", (event) => {
      event.preventDefault();
      form.classList.remove("dropping");
      this.attach([...(event.dataTransfer?.files || [])]);
    });
    return form;
  }

  async load() {
    const files = this.loadFiles();
    let after = null;
    do {
      const page = await call("GET", `/sessions/${this.session.id}/turns?limit=200${after === null ? "" : `&after=${after}`}`);
      this.turns.push(...page.items);
      after = page.next_after;
    } while (after !== null);
    await files;
    const finished = [];
    for (const turn of this.turns) {
      this.addTurn(turn);
      if (ACTIVE.has(turn.status)) this.followTurn(turn);
      else finished.push(turn);
    }
    // Finished turns replay a few at a time (a browser opens at most six connections to a server).
    const next = () => {
      const turn = finished.pop();
      if (turn) this.followTurn(turn, next);
    };
    for (let i = 0; i < REPLAY_AT_ONCE; i += 1) next();
  }

  async loadFiles() {
    this.files = (await call("GET", `/sessions/${this.session.id}/files`)).items;
    this.renderContext();
  }

  renderContext() {
    this.contextList.replaceChildren(
      ...this.files.map((file) => {
        const box = h("input", { type: "checkbox", checked: this.context.has(file.path) });
        box.addEventListener("change", () => {
          if (box.checked) this.context.add(file.path);
          else this.context.delete(file.path);
          this.contextBox.firstChild.textContent = this.contextSummary();
        });
        return h("li", {}, h("label", {}, box, ` ${file.path} (${formatBytes(file.size)})`));
      }),
    );
    this.contextBox.firstChild.textContent = this.contextSummary();
  }

  contextSummary() {
    return `Context files (${this.context.size} of ${this.files.length} chosen)`;
  }

  async attach(files) {
    for (const file of files) {
      const form = new FormData();
      form.append("file", file, file.name);
      this.notice.textContent = `Uploading ${file.name}…`;
      try {
        const stored = await call("POST", `/sessions/${this.session.id}/files`, { body: form });
        this.context.add(stored.path);
        this.notice.textContent = `Attached ${stored.path} (${formatBytes(stored.size)})`;
      } catch (error) {
        this.notice.textContent = `Could not attach ${file.name}: ${error.message}`;
      }
    }
    await this.loadFiles();
  }

  addTurn(turn) {
    const view = new TurnView(this.session.id, turn);
    this.views.set(turn.id, view);
    this.transcript.append(view.article);
    return view;
  }

  // `open` starts the stream with follow()'s handlers: by default follow() itself; a turn just sent
  // reads the response to its submission.
  followTurn(turn, done, open = (handlers) => follow(turn.id, handlers)) {
    const view = this.views.get(turn.id);
    const live = ACTIVE.has(turn.status);
    if (live) this.setActive(turn.id);
    const handle = open({
      after: view.lastSeq,
      onEvent: (event) => {
        view.push(event);
        if (event.type === "turn.started" || event.type === "iteration.started") this.setActive(turn.id);
      },
      onEnd: (event) => {
        this.streams.delete(turn.id);
        if (this.activeTurn === turn.id) this.setActive(null);
        if (live && isTerminal(event.type)) this.app.turnEnded(this.session.id);
        if (done) done();
      },
      onRetry: () => this.app.status("Reconnecting to the event stream…"),
    });
    this.streams.set(turn.id, handle);
  }

  setActive(turnId) {
    this.activeTurn = turnId;
    this.stopButton.disabled = turnId === null;
    this.sendButton.disabled = turnId !== null;
  }

  async send() {
    const message = this.message.value.trim();
    if (!message || this.activeTurn) return;
    const body = { message, context_paths: [...this.context] };
    if (this.mode.value) body.mode = this.mode.value;
    this.sendButton.disabled = true;
    try {
      const submitted = await submitTurn(this.session.id, body);
      const turn = { id: submitted.turnId, status: "queued", message };
      this.message.value = "";
      this.notice.textContent = "";
      this.turns.push(turn);
      const view = this.addTurn(turn);
      view.article.scrollIntoView({ block: "nearest" });
      this.followTurn(turn, undefined, submitted.follow);
      this.app.turnStarted(this.session, message);
    } catch (error) {
      this.sendButton.disabled = false;
      this.notice.textContent = error instanceof ApiError ? `Not sent: ${error.message}` : `Not sent: ${error}`;
    }
  }

  async stop() {
    if (!this.activeTurn) return;
    try {
      await call("POST", `/turns/${this.activeTurn}/cancel`);
      this.notice.textContent = "Stopping…";
    } catch (error) {
      this.notice.textContent = `Could not stop: ${error.message}`;
    }
  }

  close() {
    for (const handle of this.streams.values()) handle.close();
    this.streams.clear();
  }
}
