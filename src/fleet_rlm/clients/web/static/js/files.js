// The Files view: the session's uploads, artifacts and memory files (preview, download with sha256,
// upload, delete) and the memory proposals its turns made (approve, edit, reject, delete).
import { call, filePath } from "./api.js";
import { formatBytes, h, showHidden } from "./dom.js";
import { artifactItem } from "./transcript.js";

export async function filesView(app, session, workbench) {
  const notice = h("p", { role: "status", "aria-live": "polite", class: "notice" });
  const picker = h("input", { type: "file", multiple: true, hidden: true, "aria-label": "Files to upload" });
  const upload = h("button", { type: "button" }, "Upload files");
  upload.addEventListener("click", () => picker.click());
  const list = h("ul", { class: "files", "aria-label": "Files" });
  const memory = h("ul", { class: "memory", "aria-label": "Memory proposals" });
  const refresh = async () => {
    const files = (await call("GET", `/sessions/${session.id}/files`)).items;
    list.replaceChildren(
      ...files.map((file) => {
        const item = artifactItem(session.id, file);
        const remove = h("button", { type: "button", class: "small danger", "aria-label": `Delete ${file.path}` }, "Delete");
        remove.addEventListener("click", async () => {
          try {
            await call("DELETE", filePath(session.id, file.path));
            notice.textContent = `Deleted ${file.path}`;
            await refresh();
          } catch (error) {
            notice.textContent = `Could not delete ${file.path}: ${error.message}`;
          }
        });
        item.querySelector(".meta").prepend(`${file.origin}, `);
        item.insertBefore(remove, item.querySelector(".preview"));
        return item;
      }),
    );
    if (!files.length) list.append(h("li", {}, "No files yet."));
    memory.replaceChildren(...(await memoryItems(session, notice, refresh)));
    if (workbench) await workbench.loadFiles();
  };
  picker.addEventListener("change", async () => {
    for (const file of picker.files) {
      const form = new FormData();
      form.append("file", file, file.name);
      try {
        const stored = await call("POST", `/sessions/${session.id}/files`, { body: form });
        notice.textContent = `Uploaded ${stored.path} (${formatBytes(stored.size)})`;
      } catch (error) {
        notice.textContent = `Could not upload ${file.name}: ${error.message}`;
      }
    }
    picker.value = "";
    await refresh();
  });
  await refresh();
  return h(
    "section",
    { class: "files-view", "aria-labelledby": "files-title" },
    h("h2", { id: "files-title" }, "Files"),
    h("div", { class: "toolbar" }, upload, picker),
    notice,
    list,
    h("h2", {}, "Memory"),
    h("p", {}, "What turns of this session proposed to remember. Only approved entries reach later turns."),
    memory,
  );
}

async function memoryItems(session, notice, refresh) {
  const entries = (await call("GET", `/memory?session=${encodeURIComponent(session.id)}&limit=200`)).items;
  if (!entries.length) return [h("li", {}, "No memory proposals.")];
  return entries.map((entry, index) => {
    const id = `memory-text-${index}`;
    const text = h("textarea", { id, rows: "2" }, showHidden(entry.text));
    text.disabled = entry.status !== "pending";
    const act = (label, method, path, body) => {
      const button = h("button", { type: "button", class: "small", "aria-label": `${label} memory entry ${index + 1}` }, label);
      button.addEventListener("click", async () => {
        try {
          await call(method, path, body ? { json: body() } : {});
          notice.textContent = `${label}: memory entry ${index + 1}`;
          await refresh();
        } catch (error) {
          notice.textContent = `${label} failed: ${error.message}`;
        }
      });
      return button;
    };
    const base = `/memory/${encodeURIComponent(entry.id)}`;
    const actions =
      entry.status === "pending"
        ? [act("Approve", "POST", `${base}/approve`, () => ({ text: text.value })), act("Reject", "POST", `${base}/reject`)]
        : [];
    return h(
      "li",
      { class: `memory-entry ${entry.status}` },
      h("label", { for: id }, `Entry ${index + 1} (${entry.status})`),
      text,
      h("p", { class: "why" }, `Why: ${showHidden(entry.why)}`),
      h("div", { class: "actions" }, ...actions, act("Delete", "DELETE", base)),
    );
  });
}
