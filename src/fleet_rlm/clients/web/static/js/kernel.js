// The session's kernel in the Settings view: whether one is live, since when, idle for how long, its
// memory and variables (GET .../kernel), and "Restart kernel" (POST .../kernel/restart; 409 while a
// turn runs on it). Everything shown is text: variable previews come from sandbox code.
import { call } from "./api.js";
import { formatBytes, formatSeconds, h } from "./dom.js";

const when = (seconds) => (seconds ? new Date(seconds * 1000).toLocaleString() : "unknown");

function describe(kernel) {
  const rows = [["State", kernel.live ? (kernel.busy ? "live, a turn is running on it" : "live") : "none"]];
  if (kernel.live) {
    rows.push(["Started", when(kernel.started_at)]);
    rows.push(["Idle for", kernel.idle_seconds === null ? "busy" : formatSeconds(kernel.idle_seconds)]);
    rows.push(["Memory", kernel.memory_bytes === null ? "unknown" : formatBytes(kernel.memory_bytes)]);
  } else if (kernel.ended) {
    rows.push(["Last kernel ended", `${kernel.ended.reason}: ${kernel.ended.detail}`]);
  }
  if (kernel.snapshot) {
    const lost = kernel.snapshot.lost.map((item) => `${item.name} (${item.reason})`).join(", ");
    rows.push(["Snapshot", `${kernel.snapshot.saved.length} variable${kernel.snapshot.saved.length === 1 ? "" : "s"}, ${formatBytes(kernel.snapshot.bytes)}${lost ? `; not kept: ${lost}` : ""}`]);
  }
  return rows;
}

function variablesTable(variables) {
  if (!variables.length) return h("p", {}, "No variables.");
  return h(
    "table",
    { class: "kernel-variables", "aria-label": "Kernel variables" },
    h("thead", {}, h("tr", {}, ["Name", "Type", "Size", "Preview"].map((name) => h("th", { scope: "col" }, name)))),
    h(
      "tbody",
      {},
      variables.map((variable) =>
        h(
          "tr",
          {},
          h("th", { scope: "row" }, variable.name),
          h("td", {}, variable.type),
          h("td", {}, formatBytes(variable.size)),
          h("td", {}, h("code", {}, variable.preview ?? "")),
        ),
      ),
    ),
  );
}

export function kernelSection(session) {
  const details = h("dl", { class: "kernel-state" });
  const variables = h("div", {});
  const notice = h("p", { role: "status", "aria-live": "polite", class: "notice" });
  const show = (kernel) => {
    details.replaceChildren(...describe(kernel).flatMap(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]));
    variables.replaceChildren(h("h3", {}, "Variables"), variablesTable(kernel.variables));
  };
  const path = `/sessions/${encodeURIComponent(session.id)}/kernel`;
  const load = () =>
    call("GET", path)
      .then(show)
      .catch((error) => {
        notice.textContent = `Could not read the kernel: ${error.message}`;
      });
  const restart = h("button", { type: "button" }, "Restart kernel");
  restart.addEventListener("click", async () => {
    notice.textContent = "Restarting…";
    try {
      show(await call("POST", `${path}/restart`));
      notice.textContent = "Kernel restarted: the next turn starts from nothing and is told which variables are gone.";
    } catch (error) {
      notice.textContent =
        error.code === "kernel_busy"
          ? "Not restarted: a turn is running on this kernel; stop it first."
          : `Not restarted: ${error.message}`;
    }
  });
  const refresh = h("button", { type: "button" }, "Refresh kernel");
  refresh.addEventListener("click", load);
  load();
  return h(
    "section",
    { "aria-labelledby": "kernel-title", class: "kernel" },
    h("h2", { id: "kernel-title" }, "Kernel"),
    details,
    variables,
    restart,
    " ",
    refresh,
    notice,
  );
}
