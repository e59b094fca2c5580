// "Label" on a turn's article: records the reviewed answer as an approved gold label (POST /labels,
// docs/evaluation.md). A turn that ran without capture_replays is refused, and the reason shown.
import { call } from "./api.js";
import { h, uniqueId } from "./dom.js";

function field(label, input) {
  input.id = uniqueId("label-field");
  return h("div", { class: "label-field" }, h("label", { for: input.id }, label), input);
}

export function labelButton(view) {
  const button = h("button", { type: "button", class: "small", "aria-expanded": "false" }, "Label");
  button.setAttribute("aria-label", "Label this turn");
  let form = null;
  button.addEventListener("click", () => {
    if (form) {
      form.remove();
      form = null;
      button.setAttribute("aria-expanded", "false");
      return;
    }
    form = labelForm(view);
    view.article.append(form);
    button.setAttribute("aria-expanded", "true");
    form.querySelector("textarea").focus();
  });
  return button;
}

function labelForm(view) {
  const answer = h("textarea", { rows: "3", required: true });
  answer.value = view.answerText || "";
  const value = h("input", { type: "text" });
  const group = h("input", { type: "text", maxlength: "64" });
  group.placeholder = "the session's name";
  const critical = h("input", { type: "checkbox" });
  const benchmark = h("input", { type: "checkbox" });
  const notice = h("p", { role: "status", "aria-live": "polite", class: "notice" });
  const form = h(
    "form",
    { class: "label-form", "aria-label": "Label" },
    field("Reviewed answer", answer),
    field("Value", value),
    field("Group", group),
    h("label", { class: "check" }, critical, " Critical"),
    h("label", { class: "check" }, benchmark, " Benchmark"),
    h("button", { type: "submit", class: "primary" }, "Save label"),
    notice,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { turn_id: view.turnId, answer: answer.value, critical: critical.checked, benchmark: benchmark.checked };
    const raw = value.value.trim();
    if (raw) body.value = Number.isFinite(Number(raw)) ? Number(raw) : raw;
    if (group.value.trim()) body.group = group.value.trim();
    try {
      const label = await call("POST", "/labels", { json: body });
      notice.textContent = `Labeled (${label.id}, group ${label.group}${label.critical ? ", critical" : ""}).`;
    } catch (error) {
      notice.textContent = `Not labeled: ${error.message}`;
    }
  });
  return form;
}
