// Previews of workspace files: text, JSON, CSV (a table), images. HTML and SVG are never put in the
// page as markup: an SVG shows only as an <img> (where scripts never run), HTML as its source text.
import { fileBlob } from "./api.js";
import { h } from "./dom.js";

const MAX_TEXT = 200_000;
const MAX_ROWS = 200;
const IMAGE_TYPES = /^image\/(png|jpeg|gif|webp|svg\+xml)$/;

export function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < text.length && rows.length <= MAX_ROWS; i += 1) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') (field += '"'), (i += 1);
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") row.push(field), (field = "");
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i += 1;
      row.push(field);
      rows.push(row);
      row = [];
      field = "";
    } else field += c;
  }
  if (field || row.length) rows.push([...row, field]);
  return rows;
}

function csvTable(text, path) {
  const [head = [], ...rows] = parseCsv(text);
  return h(
    "table",
    { class: "csv" },
    h("caption", {}, `${path} (first ${Math.min(rows.length, MAX_ROWS)} rows)`),
    h("thead", {}, h("tr", {}, head.map((cell) => h("th", { scope: "col" }, cell)))),
    h("tbody", {}, rows.slice(0, MAX_ROWS).map((row) => h("tr", {}, row.map((cell) => h("td", {}, cell))))),
  );
}

export const isImage = (path, mediaType) =>
  IMAGE_TYPES.test(mediaType || "") || /\.(png|jpe?g|gif|webp|svg)$/i.test(path);

export async function preview(sessionId, file) {
  const blob = await fileBlob(sessionId, file.path);
  const type = file.media_type || blob.type;
  if (isImage(file.path, type)) {
    const url = URL.createObjectURL(blob.type ? blob : new Blob([blob], { type }));
    return h("img", { src: url, alt: `Preview of ${file.path}`, class: "preview-image" });
  }
  let text = await blob.slice(0, MAX_TEXT).text();
  const kind = file.kind || "";
  if (kind === "csv" || /\.csv$/i.test(file.path)) return csvTable(text, file.path);
  if (kind === "json" || /\.json$/i.test(file.path)) {
    try {
      text = JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      // shown as it is
    }
  }
  if (blob.size > MAX_TEXT) text += `\n… (${blob.size - MAX_TEXT} more bytes; download for all)`;
  return h("pre", { class: "preview-text", tabindex: "0", "aria-label": `Preview of ${file.path}` }, text);
}
