"""The web client's escape of hidden characters (static/js/dom.js) follows protocol/visible.py's rule
on every code point, run under Node (the one Playwright ships, so no other install), and that rule's
table is Unicode's whole Default_Ignorable_Code_Point set as Node's regular expressions know it."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

import playwright

from fleet_rlm.protocol.visible import DEFAULT_IGNORABLE, hidden_kind

DOM_JS = Path(__file__).resolve().parents[2] / "src/fleet_rlm/clients/web/static/js/dom.js"
NODE = Path(playwright.__file__).parent / "driver" / ("node.exe" if sys.platform == "win32" else "node")
LAST = 0x10FFFF
Context = tuple[Callable[[str], str], int]
CONTEXTS: dict[str, Context] = {
    "between letters": (lambda c: "x" + c + "x", 1),
    "selector after it": (lambda c: c + "\ufe0f", 1),
    "joiner after it": (lambda c: c + "\u200d😀", 1),
    "after a joiner": (lambda c: "😀\u200d" + c, 2),
    "after an emoji's selector": (lambda c: "❤\ufe0f" + c, 2),
}
"""How each code point is placed, with the index whose hiddenness is compared (mirrored in JS below)."""
NODE_CONTEXTS = [
    ('"x" + c + "x"', 1),
    ('c + "\\ufe0f"', 1),
    ('c + "\\u200d😀"', 1),
    ('"😀\\u200d" + c', 2),
    ('"❤\\ufe0f" + c', 2),
]
CATEGORIES = [f"{major}{minor}" for major, minors in {"L": "ultmo", "M": "nce", "N": "dlo"}.items() for minor in minors]
CATEGORIES += ["Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp"]
CATEGORIES += ["Cc", "Cf", "Cs", "Co", "Cn"]


def node(script: str) -> object:
    done = subprocess.run(
        [str(NODE), "--input-type=module"], input=script, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def javascript_signatures() -> dict[str, object]:
    contexts = ", ".join(f"[(c) => {text}, {index}]" for text, index in NODE_CONTEXTS)
    script = f"""
        const {{ isHidden }} = await import({json.dumps(DOM_JS.as_uri())});
        const contexts = [{contexts}];
        const hidden = contexts.map(() => []);
        const ignorable = [];
        for (let code = 0; code <= {LAST}; code++) {{
          const c = String.fromCodePoint(code);
          contexts.forEach(([place, index], n) => hidden[n].push(isHidden(Array.from(place(c)), index) ? "1" : "0"));
          ignorable.push(/\\p{{Default_Ignorable_Code_Point}}/u.test(c) ? "1" : "0");
        }}
        console.log(JSON.stringify({{ hidden: hidden.map((bits) => bits.join("")), ignorable: ignorable.join("") }}));
    """
    result = node(script)
    assert isinstance(result, dict)
    return result


def javascript_categories(codes: list[int]) -> list[str]:
    tests = ", ".join(f'["{name}", /\\p{{gc={name}}}/u]' for name in CATEGORIES)
    script = f"""
        const tests = [{tests}];
        const codes = {json.dumps(codes)};
        console.log(JSON.stringify(codes.map((code) => tests.find(([, re]) => re.test(String.fromCodePoint(code)))[0])));
    """
    result = node(script)
    assert isinstance(result, list)
    return [str(name) for name in result]


def python_signature(place: Callable[[str], str], index: int) -> str:
    """Which code points show_hidden escapes at ``index`` (it keeps line breaks and tabs)."""
    texts = (place(chr(code)) for code in range(LAST + 1))
    return "".join("0" if text[index] in "\n\t" or hidden_kind(text, index) is None else "1" for text in texts)


def test_the_ignorable_table_is_unicodes_default_ignorable_set() -> None:
    ignorable = str(javascript_signatures()["ignorable"])
    from_unicode = {code for code, bit in enumerate(ignorable) if bit == "1"}
    from_table = {code for first, last in DEFAULT_IGNORABLE for code in range(first, last + 1)}
    assert sorted(from_unicode - from_table) == [], "in Unicode's set, missing from the table"
    assert sorted(from_table - from_unicode) == [], "in the table, not in Unicode's set"
    for code in sorted(from_table):
        assert hidden_kind(f"x{chr(code)}x", 1) is not None, f"U+{code:04X}"


def test_the_web_client_hides_what_python_hides_on_every_code_point() -> None:
    signatures = javascript_signatures()["hidden"]
    assert isinstance(signatures, list)
    differ: dict[int, list[str]] = {}
    for (name, (place, index)), javascript in zip(CONTEXTS.items(), signatures, strict=True):
        python = python_signature(place, index)
        for code in (
            code for code, (ours, theirs) in enumerate(zip(python, javascript, strict=True)) if ours != theirs
        ):
            differ.setdefault(code, []).append(name)
    # Only where Node's Unicode (a later version) gives a code point another category than Python's.
    codes = sorted(differ)
    theirs = javascript_categories(codes)
    same_category = [
        f"U+{code:04X} {differ[code]}"
        for code, name in zip(codes, theirs, strict=True)
        if unicodedata.category(chr(code)) == name
    ]
    assert same_category[:20] == []
