// Building DOM nodes: text always goes in as text (textContent), never as HTML.
export function h(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name in node && typeof value !== "string") node[name] = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
}

export function formatBytes(size) {
  if (size < 1024) return `${size} B`;
  const units = ["KiB", "MiB", "GiB"];
  let value = size / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

export const formatSeconds = (seconds) =>
  seconds === undefined || seconds === null ? "" : seconds < 10 ? `${seconds.toFixed(2)} s` : `${seconds.toFixed(1)} s`;

let ids = 0;
export const uniqueId = (prefix) => `${prefix}-${(ids += 1)}`;

// Memory text as its reviewer must see it (the rule is protocol/visible.py's, and so are these
// tables; tests/protocol/test_visible_js.py checks both agree on every code point): a character that
// would hide or reorder text, stored before memory refused them, is shown as an escape (\u202e).
// Line breaks, tabs, a zero-width joiner between emoji and one presentation selector after a
// character that can be an emoji stay as they are.
const DIRECTION_CHANGING = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/u;
const VARIATION_SELECTOR = /[\u180b-\u180d\u180f\ufe00-\ufe0f\u{e0100}-\u{e01ef}]/u;
// Unicode's Default_Ignorable_Code_Point, whatever the category, and the categories that hide.
const DEFAULT_IGNORABLE =
  /[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\u{1bca0}-\u{1bca3}\u{1d173}-\u{1d17a}\u{e0000}-\u{e0fff}]/u;
const HIDING_CATEGORY = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]/u;
const CAN_BE_EMOJI = /[\p{So}\p{Sm}\p{Sk}#*0-9\u203c\u2049\u2139\u3030\u303d]/u;

export function isHidden(chars, index) {
  const [char, before, after] = [chars[index], chars[index - 1] ?? "\0", chars[index + 1] ?? "\0"];
  if (char === "\n" || char === "\t") return false;
  if (DIRECTION_CHANGING.test(char)) return true;
  if (char === "\u200d") return !(/\p{So}/u.test(after) && /[\p{So}\p{Sk}\ufe0e\ufe0f]/u.test(before));
  if (VARIATION_SELECTOR.test(char)) return !(/[\ufe0e\ufe0f]/u.test(char) && CAN_BE_EMOJI.test(before));
  return HIDING_CATEGORY.test(char) || DEFAULT_IGNORABLE.test(char);
}

export function showHidden(text) {
  const chars = Array.from(String(text ?? ""));
  return chars
    .map((char, index) => {
      if (!isHidden(chars, index)) return char;
      const code = char.codePointAt(0).toString(16);
      return code.length <= 4 ? `\\u${code.padStart(4, "0")}` : `\\U${code.padStart(8, "0")}`;
    })
    .join("");
}

// Saves bytes through a blob URL and <a download>. The blob is always application/octet-stream: a
// blob URL has the app's origin and no response header applies to it, so one of an active type
// (SVG, HTML) opened in a tab would run its script here; opaque bytes only ever download again.
export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob.slice(0, blob.size, "application/octet-stream"));
  const link = h("a", { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
