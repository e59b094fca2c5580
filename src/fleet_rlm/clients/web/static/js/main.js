// The shell: the token prompt, the session list, and the views of the chosen session, chosen by the
// URL's fragment (#/s/<session>[/files|/trace|/settings|/evaluation]) so that a reload comes back to the same place.
import { ApiError, call, onTokenNeeded } from "./api.js";
import { h } from "./dom.js";
import { evaluationView } from "./evaluation.js";
import { filesView } from "./files.js";
import { settingsView } from "./settings.js";
import { renderTrace } from "./trace.js";
import { Workbench } from "./workbench.js";

const VIEWS = [
  ["", "Workbench"],
  ["files", "Files"],
  ["trace", "Trace"],
  ["settings", "Settings"],
  ["evaluation", "Evaluation"],
];
const NEW_TITLE = "New session";

const main = document.getElementById("main");
const list = document.getElementById("session-list");
const search = document.getElementById("session-search");
const connection = document.getElementById("connection");
const state = { sessions: [], workbench: null, session: null, view: "" };

const titleOf = (session) => session.title || session.name || "Untitled session";

function status(text) {
  connection.textContent = text;
}

onTokenNeeded(
  (wrong) =>
    new Promise((resolve) => {
      const dialog = document.getElementById("token-dialog");
      const form = document.getElementById("token-form");
      const input = document.getElementById("token-input");
      document.getElementById("token-help").textContent = wrong
        ? "That token was refused; enter the server's API token (FLEET_API_TOKEN)."
        : "This server needs its API token (FLEET_API_TOKEN). It is kept for this tab only.";
      input.value = "";
      form.onsubmit = (event) => {
        event.preventDefault();
        if (!input.value) return;
        dialog.close();
        resolve(input.value);
      };
      dialog.addEventListener("cancel", (event) => event.preventDefault());
      if (!dialog.open) dialog.showModal();
      input.focus();
    }),
);

async function loadSessions() {
  const sessions = [];
  let offset = 0;
  while (offset !== null) {
    const page = await call("GET", `/sessions?limit=200&offset=${offset}`);
    sessions.push(...page.items);
    offset = page.next_offset;
  }
  state.sessions = sessions;
  renderSessions();
}

function renderSessions() {
  const needle = search.value.trim().toLowerCase();
  const shown = state.sessions.filter((session) =>
    [session.title, session.name, session.id].some((text) => text && text.toLowerCase().includes(needle)),
  );
  list.replaceChildren(...shown.map(sessionEntry));
  if (!shown.length) list.append(h("li", { class: "empty" }, needle ? "No session matches." : "No sessions yet."));
}

function sessionEntry(session) {
  const title = titleOf(session);
  const current = state.session?.id === session.id;
  const link = h("a", { href: `#/s/${session.id}`, "aria-current": current ? "page" : null }, title);
  const rename = h("button", { type: "button", class: "small", "aria-label": `Rename ${title}` }, "Rename");
  const remove = h("button", { type: "button", class: "small danger", "aria-label": `Delete ${title}` }, "Delete");
  const item = h("li", { class: current ? "current" : "" }, link, h("span", { class: "entry-actions" }, rename, remove));
  rename.addEventListener("click", () => {
    const input = h("input", { type: "text", value: title, "aria-label": `New title for ${title}`, maxlength: "200" });
    // Enter, Escape and the blur that removing the input causes each end the edit: only the first counts,
    // so the list is not reloaded twice (a second reload would undo a Delete's confirm step begun meanwhile).
    let ended = false;
    const save = async () => {
      if (ended) return;
      ended = true;
      if (input.value.trim() && input.value.trim() !== title) {
        try {
          await call("PATCH", `/sessions/${session.id}`, { json: { title: input.value.trim() } });
        } catch (error) {
          status(`Could not rename: ${error.message}`);
        }
      }
      await loadSessions();
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") save();
      if (event.key === "Escape" && !ended) {
        ended = true;
        renderSessions();
      }
    });
    input.addEventListener("blur", save, { once: true });
    item.replaceChildren(input);
    input.focus();
    input.select();
  });
  remove.addEventListener("click", async () => {
    if (remove.dataset.confirm !== "yes") {
      remove.dataset.confirm = "yes";
      remove.textContent = "Confirm delete";
      remove.setAttribute("aria-label", `Confirm delete ${title}`);
      return;
    }
    try {
      await call("DELETE", `/sessions/${session.id}`);
      if (state.session?.id === session.id) location.hash = "#/";
      status(`Deleted ${title}`);
    } catch (error) {
      status(`Could not delete ${title}: ${error.message}`);
    }
    await loadSessions();
  });
  return item;
}

async function newSession() {
  const session = await call("POST", "/sessions", { json: { title: NEW_TITLE } });
  state.sessions.unshift(session);
  location.hash = `#/s/${session.id}`;
  return session;
}

function renderViewNav() {
  const nav = document.getElementById("views");
  const id = state.session?.id;
  nav.replaceChildren(
    ...VIEWS.map(([view, label]) =>
      id
        ? h("a", { href: `#/s/${id}${view ? `/${view}` : ""}`, "aria-current": state.view === view ? "page" : null }, label)
        : h("span", { class: "disabled" }, label),
    ),
  );
}

async function route() {
  const [, sessionId, view = ""] = location.hash.match(/^#\/s\/([^/]+)(?:\/(\w+))?/) || [];
  if (!sessionId) {
    state.workbench?.close();
    state.workbench = null;
    state.session = null;
    state.view = "";
    renderViewNav();
    renderSessions();
    main.replaceChildren(
      h("h2", {}, "Fleet workbench"),
      h("p", {}, "Choose a session, or start a new one: write a task, attach its files, and watch the model work."),
    );
    return;
  }
  if (state.session?.id !== sessionId) {
    state.workbench?.close();
    try {
      state.session = await call("GET", `/sessions/${encodeURIComponent(sessionId)}`);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        status("That session no longer exists.");
        location.hash = "#/";
        return;
      }
      throw error;
    }
    state.workbench = new Workbench(app, state.session);
    await state.workbench.load();
  }
  state.view = view;
  renderViewNav();
  renderSessions();
  const heading = h("h2", { class: "session-title" }, titleOf(state.session));
  if (view === "files") main.replaceChildren(heading, await filesView(app, state.session, state.workbench));
  else if (view === "settings") main.replaceChildren(heading, await settingsView(app, state.session));
  else if (view === "evaluation") main.replaceChildren(heading, await evaluationView(app, state.session));
  else if (view === "trace") main.replaceChildren(heading, traceView());
  else main.replaceChildren(heading, state.workbench.element);
}

function traceView() {
  const workbench = state.workbench;
  const holder = h("div", { class: "trace-holder" });
  const show = (turn) => {
    const view = workbench.views.get(turn.id);
    holder.replaceChildren(renderTrace(turn, view ? view.events : []));
    // The trace id is stored moments after a traced turn starts: read the turn's record afresh.
    call("GET", `/turns/${turn.id}`)
      .then((fresh) => {
        Object.assign(turn, { trace_id: fresh.trace_id });
        const line = holder.querySelector(".trace-id");
        if (line && fresh.trace_id) line.textContent = `Trace id: ${fresh.trace_id}`;
      })
      .catch(() => {});
  };
  const turns = workbench.turns;
  if (!turns.length) return h("p", {}, "No turns yet.");
  const picker = h(
    "ol",
    { class: "turn-picker", "aria-label": "Turns" },
    turns.map((turn, index) => {
      const button = h("button", { type: "button", class: "small" }, `Turn ${index + 1}: ${turn.message.slice(0, 60)}`);
      button.addEventListener("click", () => show(turn));
      return h("li", {}, button);
    }),
  );
  show(turns[turns.length - 1]);
  return h("div", { class: "trace-view" }, picker, holder);
}

const app = {
  status,
  async turnStarted(session, message) {
    if (session.title === NEW_TITLE || !session.title) {
      const title = message.replace(/\s+/g, " ").slice(0, 60);
      Object.assign(session, await call("PATCH", `/sessions/${session.id}`, { json: { title } }));
      main.querySelector(".session-title").textContent = title;
    }
    await loadSessions();
  },
  async turnEnded() {
    status("");
    await loadSessions();
  },
};

async function start() {
  search.addEventListener("input", renderSessions);
  document.getElementById("new-session").addEventListener("click", () =>
    newSession().catch((error) => status(`Could not create a session: ${error.message}`)),
  );
  window.addEventListener("hashchange", () => route().catch(failed));
  await call("GET", "/health");
  // The list and the chosen session load side by side; the list is drawn again once both are in.
  await Promise.all([loadSessions(), route()]);
  renderSessions();
  document.body.dataset.ready = "true";
}

function failed(error) {
  status(`Error: ${error.message}`);
}

start().catch(failed);
