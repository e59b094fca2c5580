// A small Python highlighter: one pass of a sticky regex, tokens become <span class="tok-…"> nodes
// holding text (never HTML). Strings left open (code still streaming in) run to the end.
const KEYWORDS = new Set(
  ("False None True and as assert async await break class continue def del elif else except finally for " +
    "from global if import in is lambda nonlocal not or pass raise return try while with yield match case").split(" "),
);
const BUILTINS = new Set(
  ("print len range open str int float list dict set tuple sorted sum min max abs enumerate zip map filter " +
    "isinstance type round any all repr SUBMIT llm_query llm_query_batched spawn_agent spawn_agents").split(" "),
);
const TOKEN =
  /(#[^\n]*)|([rRbBuUfF]{0,2}(?:"""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)|"(?:\\.|[^"\\\n])*(?:"|$)|'(?:\\.|[^'\\\n])*(?:'|$)))|(\b\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?\b)|([A-Za-z_]\w*)|([^#"'A-Za-z_\d]+|.)/gy;

export function highlight(code, target) {
  target.textContent = "";
  const out = document.createDocumentFragment();
  let plain = "";
  let previous = "";
  const flush = () => {
    if (plain) out.append(plain);
    plain = "";
  };
  const span = (kind, text) => {
    flush();
    const node = document.createElement("span");
    node.className = `tok-${kind}`;
    node.textContent = text;
    out.append(node);
  };
  TOKEN.lastIndex = 0;
  let match;
  while (TOKEN.lastIndex < code.length && (match = TOKEN.exec(code))) {
    const [text, comment, string, number, word] = match;
    if (comment) span("comment", text);
    else if (string) span("string", text);
    else if (number) span("number", text);
    else if (word && KEYWORDS.has(word)) span("keyword", text);
    else if (word && (previous === "def" || previous === "class")) span("name", text);
    else if (word && BUILTINS.has(word)) span("builtin", text);
    else plain += text;
    if (word) previous = word;
    else if (text.trim()) previous = "";
  }
  flush();
  target.append(out);
}
