// Previews of workspace files: text, JSON, CSV (a table), raster images. A format that can carry
// script (SVG, HTML, XML) is never previewed: an <img> of it is safe, but its blob URL has the app's
// origin, and opened in a tab ("Open image in new tab") it would run its script here. An image shows
// only when its bytes are PNG, JPEG, GIF or WebP, whatever its name or declared type say.
import { fileBlob } from "./api.js";
import { h } from "./dom.js";

const MAX_TEXT = 200_000;
const MAX_ROWS = 200;
const RASTER_TYPES = /^image\/(png|jpeg|gif|webp)$/;
const RASTER_NAMES = /\.(png|jpe?g|gif|webp)$/i;
const ACTIVE_FORMATS = [
  ["SVG", /\.svgz?$/i, /^image\/svg\+xml\b/],
  ["HTML", /\.(html?|xht(ml)?|mht(ml)?|shtml)$/i, /^(text\/html|application\/xhtml\+xml|multipart\/related|message\/rfc822)\b/],
  ["XML", /\.(xml|xsl|xslt|rss|atom|rdf)$/i, /^[a-z]+\/([a-z0-9.+-]+\+)?xml\b/],
];

// The name of the active format the file is in by its path or media type (SVG, HTML, XML), or null.
function activeFormat(path, mediaType) {
  const type = (mediaType || "").toLowerCase();
  const found = ACTIVE_FORMATS.find(([, name, media]) => name.test(path) || media.test(type));
  return found ? found[0] : null;
}

// The media type of a raster image by its first bytes, or null when they are not PNG, JPEG, GIF or WebP.
async function rasterType(blob) {
  const bytes = new Uint8Array(await blob.slice(0, 12).arrayBuffer());
  const ascii = (from, to) => String.fromCharCode(...bytes.subarray(from, to));
  if (ascii(0, 8) === "\x89PNG\r\n\x1a\n") return "image/png";
  if (bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return "image/jpeg";
  if (ascii(0, 6) === "GIF87a" || ascii(0, 6) === "GIF89a") return "image/gif";
  if (ascii(0, 4) === "RIFF" && ascii(8, 12) === "WEBP") return "image/webp";
  return null;
}

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

// Named or typed as a raster image: previewed at once (if its bytes agree).
export const isImage = (path, mediaType) => RASTER_TYPES.test(mediaType || "") || RASTER_NAMES.test(path);

const note = (text) => h("p", { class: "preview-note" }, text);

export async function preview(sessionId, file) {
  const blob = await fileBlob(sessionId, file.path);
  const active = activeFormat(file.path, file.media_type || blob.type);
  if (active) return note(`Not previewed: ${active} can carry scripts; download it to open it.`);
  const raster = await rasterType(blob);
  if (raster) {
    const url = URL.createObjectURL(blob.slice(0, blob.size, raster));
    return h("img", { src: url, alt: `Preview of ${file.path}`, class: "preview-image" });
  }
  if (isImage(file.path, file.media_type))
    return note(`Not previewed: ${file.path} is not a PNG, JPEG, GIF or WebP image (by its bytes); download it.`);
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
