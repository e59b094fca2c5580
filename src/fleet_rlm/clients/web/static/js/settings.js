// The Settings view: the session's mode and budgets, its kernel, and the server's readiness (GET /ready).
import { call } from "./api.js";
import { h } from "./dom.js";
import { kernelSection } from "./kernel.js";

const BUDGETS = [
  ["max_iterations", "Most iterations per turn", "1"],
  ["max_model_calls", "Most model calls per turn", "1"],
  ["turn_timeout", "Turn timeout (seconds)", "any"],
  ["execution_timeout", "Execution timeout (seconds)", "any"],
  ["max_tokens_per_turn", "Most tokens per turn", "1"],
];

// What GET /ready reports, as `fleet doctor` does; the model endpoint is reported, not required.
const READINESS = [
  ["database", "Database"],
  ["sandbox", "Sandbox"],
  ["model", "Model endpoint"],
];

export async function settingsView(app, session) {
  const notice = h("p", { role: "status", "aria-live": "polite", class: "notice" });
  const mode = h(
    "select",
    { id: "settings-mode" },
    h("option", { value: "" }, "Server default"),
    ["hybrid", "rlm", "flex", "direct"].map((name) => h("option", { value: name, selected: session.mode === name }, name)),
  );
  const inputs = BUDGETS.map(([name, label, step]) => {
    const input = h("input", { type: "number", id: `setting-${name}`, min: "0", step, value: session.settings?.[name] ?? "" });
    input.placeholder = "server default";
    return [name, label, input];
  });
  const form = h(
    "form",
    { class: "settings", "aria-labelledby": "settings-title" },
    h("h2", { id: "settings-title" }, "Session settings"),
    h("label", { for: "settings-mode" }, "Mode"),
    mode,
    inputs.map(([name, label, input]) => [h("label", { for: input.id }, label), input]),
    h("button", { type: "submit", class: "primary" }, "Save settings"),
    notice,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const settings = { ...session.settings };
    for (const [name, , input] of inputs) {
      if (input.value === "") delete settings[name];
      else settings[name] = Number(input.value);
    }
    try {
      const saved = await call("PATCH", `/sessions/${session.id}`, { json: { mode: mode.value || null, settings } });
      Object.assign(session, saved);
      notice.textContent = "Saved.";
    } catch (error) {
      notice.textContent = `Not saved: ${error.message}`;
    }
  });
  const readiness = h("dl", { class: "readiness" });
  const check = async () => {
    readiness.replaceChildren(h("dt", {}, "Server"), h("dd", {}, "Checking…"));
    const body = await call("GET", "/ready", { accept: [503] });
    const health = await call("GET", "/health");
    readiness.replaceChildren(
      h("dt", {}, "Server"),
      h("dd", { class: "ok" }, `up, version ${health.version}`),
      ...READINESS.flatMap(([name, title]) => [
        h("dt", {}, title),
        h("dd", { class: body[name].ok ? "ok" : "error" }, `${body[name].ok ? "ok" : "failing"}: ${body[name].message}`),
      ]),
    );
  };
  const again = h("button", { type: "button" }, "Check again");
  const checkNow = () =>
    check().catch((error) => readiness.replaceChildren(h("dt", {}, "Server"), h("dd", { class: "error" }, error.message)));
  again.addEventListener("click", checkNow);
  const forget = h("button", { type: "button" }, "Forget the token");
  forget.addEventListener("click", () => {
    sessionStorage.removeItem("fleet.token");
    location.reload();
  });
  checkNow();
  return h(
    "div",
    { class: "settings-view" },
    form,
    kernelSection(session),
    h("section", { "aria-labelledby": "ready-title" }, h("h2", { id: "ready-title" }, "Server readiness"), readiness, again, " ", forget),
  );
}
