// A small Markdown renderer that builds DOM nodes and never parses HTML: raw HTML in the text stays
// text, so nothing in a model's answer can run. Links keep only http(s) and mailto targets.
// Blocks: headings, paragraphs, fenced code, lists, block quotes, tables, rules.
import { highlight } from "./highlight.js";

const SAFE_URL = /^(https?:|mailto:)/i;
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|(?<!\w)__([^_]+)__(?!\w)|\*([^*\s][^*]*)\*|(?<!\w)_([^_\s][^_]*)_(?!\w)|!?\[([^\]]*)\]\(\s*([^)\s]*)(?:\s+"[^"]*")?\s*\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/g;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function safeLink(href, text) {
  if (!SAFE_URL.test(href)) return document.createTextNode(text);
  const link = el("a", "", text);
  link.href = href;
  link.rel = "noopener noreferrer nofollow";
  link.target = "_blank";
  return link;
}

export function inline(text, parent) {
  let at = 0;
  for (const match of text.matchAll(INLINE)) {
    if (match.index > at) parent.append(text.slice(at, match.index));
    at = match.index + match[0].length;
    const [whole, , code, strong1, strong2, em1, em2, label, href, bare] = match;
    if (code !== undefined) parent.append(el("code", "", code.trim() || code));
    else if (strong1 || strong2) inline(strong1 || strong2, parent.appendChild(el("strong")));
    else if (em1 || em2) inline(em1 || em2, parent.appendChild(el("em")));
    else if (whole.startsWith("!")) parent.append(label ? `[image: ${label}]` : "[image]");
    else if (href !== undefined) parent.append(safeLink(href, label || href));
    else if (bare) parent.append(safeLink(bare, bare));
  }
  if (at < text.length) parent.append(text.slice(at));
  return parent;
}

const cells = (line) => line.trim().replace(/^\||\|$/g, "").split("|").map((cell) => cell.trim());
const isTableRule = (line) => /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/.test(line);
const LIST_ITEM = /^(\s*)([-*+]|\d+[.)])\s+(.*)$/;

export function renderMarkdown(text) {
  const root = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+-]*)/);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[(i += 1) - 1]);
      i += 1;
      const pre = el("pre", "code");
      const code = pre.appendChild(el("code"));
      if (/^py(thon)?$/i.test(fence[2])) highlight(body.join("\n"), code);
      else code.textContent = body.join("\n");
      root.append(pre);
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*?)\s*#*\s*$/);
    if (heading) {
      // Headings inside an answer start at level 3: the page and the turn own 1 and 2.
      root.append(inline(heading[2], el(`h${Math.min(heading[1].length + 2, 6)}`)));
      i += 1;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      root.append(el("hr"));
      i += 1;
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && isTableRule(lines[i + 1])) {
      const table = el("table");
      const headRow = table.appendChild(el("thead")).appendChild(el("tr"));
      for (const cell of cells(line)) headRow.append(inline(cell, el("th")));
      const body = table.appendChild(el("tbody"));
      i += 2;
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
        const row = body.appendChild(el("tr"));
        for (const cell of cells(lines[i])) row.append(inline(cell, el("td")));
        i += 1;
      }
      root.append(table);
      continue;
    }
    if (/^\s*>/.test(line)) {
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[(i += 1) - 1].replace(/^\s*>\s?/, ""));
      const quote = el("blockquote");
      quote.append(renderMarkdown(quoted.join("\n")));
      root.append(quote);
      continue;
    }
    const item = line.match(LIST_ITEM);
    if (item) {
      const list = el(/\d/.test(item[2]) ? "ol" : "ul");
      while (i < lines.length) {
        const next = lines[i].match(LIST_ITEM);
        if (next) list.append(inline(next[3], el("li")));
        else if (lines[i].trim() && /^\s+/.test(lines[i]) && list.lastChild) list.lastChild.append(" ", ...inline(lines[i].trim(), el("span")).childNodes);
        else break;
        i += 1;
      }
      root.append(list);
      continue;
    }
    const paragraph = [];
    while (i < lines.length && lines[i].trim() && !/^\s*(```|~~~|#{1,6}\s|>)/.test(lines[i]) && !LIST_ITEM.test(lines[i])) {
      paragraph.push(lines[(i += 1) - 1].trim());
    }
    if (!paragraph.length) paragraph.push(lines[(i += 1) - 1].trim());
    root.append(inline(paragraph.join("\n"), el("p")));
  }
  return root;
}
