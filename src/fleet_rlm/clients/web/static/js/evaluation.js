// The Evaluation view (docs/evaluation.md): the session's labels, eval runs and optimization runs with
// their state (followed while one runs), and every program with its gate report condition by
// condition, Approve for a candidate and Roll back for the serving one.
import { call } from "./api.js";
import { h } from "./dom.js";

const POLL_MS = 1000;

function table(name, headings, rows, empty) {
  if (!rows.length) return h("p", {}, empty);
  return h(
    "table",
    { class: "listing", "aria-label": name },
    h("thead", {}, h("tr", {}, headings.map((text) => h("th", { scope: "col" }, text)))),
    h("tbody", {}, rows),
  );
}

function runState(run) {
  if (run.status === "failed") return `failed: ${run.error || "no reason given"}`;
  if (run.status === "running") return run.total ? `running (${run.done}/${run.total})` : "running";
  const result = run.result || {};
  if (run.kind === "eval") return `completed: mean ${Number(result.mean ?? 0).toFixed(2)} over ${run.total}`;
  return `completed: candidate ${result.version ?? "none"}, gate ${result.gate_passed ? "passed" : "failed"}`;
}

function runRows(runs) {
  return runs
    .slice()
    .reverse()
    .map((run) => h("tr", {}, h("th", { scope: "row" }, run.id), h("td", {}, run.kind), h("td", {}, runState(run))));
}

function evalDetails(run) {
  const rows = (run.result && run.result.rows) || [];
  if (run.kind !== "eval" || !rows.length) return null;
  return table(
    `Scores of ${run.id}`,
    ["Label", "Score", "Feedback"],
    rows.map((row) =>
      h("tr", {}, h("th", { scope: "row" }, row.label_id || row.turn_id || ""), h("td", {}, String(row.score)), h("td", {}, row.feedback || "")),
    ),
    "",
  );
}

function programSection(program, notice, reload) {
  const gate = (program.report && program.report.gate) || { passed: false, conditions: [] };
  const conditions = table(
    `Gate report ${program.version}`,
    ["Condition", "Result", "Numbers"],
    (gate.conditions || []).map((condition) =>
      h(
        "tr",
        {},
        h("th", { scope: "row" }, String(condition.name)),
        h("td", { class: condition.passed ? "ok" : "error" }, condition.passed ? "pass" : "fail"),
        h("td", {}, String(condition.detail ?? "")),
      ),
    ),
    "No gate conditions recorded.",
  );
  const state = `${program.status}${program.serving ? ", serving" : ""}; gate ${gate.passed ? "passed" : "failed"}`;
  const actions = [];
  if (program.status === "candidate") {
    const approve = h("button", { type: "button", class: "primary" }, "Approve");
    approve.setAttribute("aria-label", `Approve ${program.version}`);
    approve.addEventListener("click", async () => {
      try {
        await call("POST", `/programs/${encodeURIComponent(program.version)}/approve`);
        notice.textContent = `Approved ${program.version}: it serves from the next turn.`;
      } catch (error) {
        notice.textContent = `Not approved: ${error.message} (${error.code})`;
      }
      await reload();
    });
    actions.push(approve);
  }
  return h(
    "section",
    { class: "program", "aria-label": `Program ${program.version}` },
    h("h3", {}, `${program.version}: ${state}`),
    h("p", { class: "sha" }, `sha256 ${program.sha256}`),
    conditions,
    actions,
  );
}

export async function evaluationView(app, session) {
  const notice = h("p", { role: "status", "aria-live": "polite", class: "notice" });
  const labels = h("div", {});
  const runs = h("div", {});
  const programs = h("div", {});
  const serving = h("p", {});
  let timer = null;

  const loadLabels = async () => {
    const body = await call("GET", `/labels?session=${encodeURIComponent(session.id)}`);
    labels.replaceChildren(
      table(
        "Labels",
        ["Turn", "Reviewed answer", "Value", "Group", "Flags", ""],
        body.items.map((label) => {
          const remove = h("button", { type: "button", class: "small danger" }, "Delete");
          remove.setAttribute("aria-label", `Delete label ${label.id}`);
          remove.addEventListener("click", async () => {
            await call("DELETE", `/labels/${encodeURIComponent(label.id)}`).catch((error) => {
              notice.textContent = `Not deleted: ${error.message}`;
            });
            await loadLabels();
          });
          const flags = [label.critical ? "critical" : "", label.benchmark ? "benchmark" : ""].filter(Boolean).join(", ");
          return h(
            "tr",
            {},
            h("th", { scope: "row" }, label.turn_id),
            h("td", {}, label.answer),
            h("td", {}, label.value === null || label.value === undefined ? "" : String(label.value)),
            h("td", {}, label.group),
            h("td", {}, flags),
            h("td", {}, remove),
          );
        }),
        "No labels in this session yet: use Label on a turn of the Workbench.",
      ),
    );
  };
  const loadRuns = async () => {
    const [evals, optimizations] = await Promise.all([call("GET", "/eval-runs"), call("GET", "/optimizations")]);
    const all = [...evals.items, ...optimizations.items];
    runs.replaceChildren(
      table("Runs", ["Run", "Kind", "State"], runRows(all), "No runs yet."),
      ...evals.items.slice().reverse().map(evalDetails).filter(Boolean),
    );
    if (timer) clearTimeout(timer);
    timer = all.some((run) => run.status === "running")
      ? setTimeout(() => (runs.isConnected ? loadRuns().catch(shown) : null), POLL_MS)
      : null;
  };
  const loadPrograms = async () => {
    const body = await call("GET", "/programs");
    serving.textContent = `Serving: ${body.serving}`;
    programs.replaceChildren(
      ...(body.items.length
        ? body.items.slice().reverse().map((program) => programSection(program, notice, loadPrograms))
        : [h("p", {}, "No candidates yet: an optimization saves one.")]),
    );
  };
  const shown = (error) => {
    notice.textContent = `Error: ${error.message}`;
  };

  const start = (path, body, what) => async () => {
    try {
      const run = await call("POST", path, { json: body() });
      notice.textContent = `${what} ${run.id} started.`;
    } catch (error) {
      notice.textContent = `${what} not started: ${error.message} (${error.code})`;
    }
    await loadRuns().catch(shown);
  };
  const runEval = h("button", { type: "button" }, "Run evaluation");
  runEval.addEventListener("click", start("/eval-runs", () => ({ session: session.id }), "Evaluation"));
  const budget = h(
    "select",
    { id: "gepa-budget" },
    ["light", "medium", "heavy"].map((name) => h("option", { value: name }, name)),
  );
  const optimize = h("button", { type: "button" }, "Optimize");
  optimize.addEventListener(
    "click",
    start("/optimizations", () => ({ session: session.id, gepa_budget: budget.value }), "Optimization"),
  );
  const rollback = h("button", { type: "button" }, "Roll back");
  rollback.addEventListener("click", async () => {
    try {
      const program = await call("POST", "/programs/rollback");
      notice.textContent = `Rolled back ${program.version}.`;
    } catch (error) {
      notice.textContent = `Not rolled back: ${error.message} (${error.code})`;
    }
    await loadPrograms().catch(shown);
  });
  const refresh = h("button", { type: "button" }, "Refresh");
  refresh.addEventListener("click", () => Promise.all([loadLabels(), loadRuns(), loadPrograms()]).catch(shown));

  await Promise.all([loadLabels(), loadRuns(), loadPrograms()]).catch(shown);
  return h(
    "div",
    { class: "evaluation-view" },
    notice,
    h("section", { "aria-labelledby": "labels-title" }, h("h2", { id: "labels-title" }, "Labels"), labels),
    h(
      "section",
      { "aria-labelledby": "runs-title" },
      h("h2", { id: "runs-title" }, "Runs"),
      runEval,
      " ",
      h("label", { for: "gepa-budget" }, "GEPA budget"),
      " ",
      budget,
      " ",
      optimize,
      " ",
      refresh,
      runs,
    ),
    h("section", { "aria-labelledby": "programs-title" }, h("h2", { id: "programs-title" }, "Programs"), serving, rollback, programs),
  );
}
