"""Helpers of the ``pdf-text`` skill: text out of PDF, Word, HTML and text files; search; chunks.

Runs in the sandbox. PDFs are read with pypdf when it can be imported, otherwise with a small
standard-library reader that handles ordinary text PDFs (Flate-compressed content streams, simple
fonts); Word documents and HTML with the standard library.
"""

from __future__ import annotations

import os
import re
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser
from typing import Any
from xml.etree import ElementTree

try:
    import pypdf

    HAS_PYPDF = True
except ImportError:
    pypdf = None
    HAS_PYPDF = False

PAGE_BREAK = "\n\f\n"


def extract_text(path: str) -> str:
    """The text of the document at ``path``, chosen by its extension (PDF pages joined by a form feed)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".pdf":
        return PAGE_BREAK.join(pdf_pages(path))
    if suffix == ".docx":
        return docx_text(path)
    if suffix in (".html", ".htm", ".xhtml"):
        return html_text(read_text(path))
    return read_text(path)


def read_text(path: str) -> str:
    """A text file's content: UTF-8 (with or without a byte-order mark), else Windows-1252."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def pdf_pages(path: str) -> list[str]:
    """The text of each page of a PDF, in order."""
    if pypdf is not None:
        reader = pypdf.PdfReader(path)
        return [(page.extract_text() or "").strip() for page in reader.pages]
    with open(path, "rb") as handle:
        return _PdfText(handle.read()).pages()


def docx_text(path: str) -> str:
    """The paragraphs of a Word .docx document (tables' cells one per line), one per line."""
    namespace = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
    with zipfile.ZipFile(path) as document:
        root = ElementTree.fromstring(document.read("word/document.xml"))
    lines = []
    for paragraph in root.iter(f"{namespace}p"):
        parts = []
        for node in paragraph.iter():
            if node.tag == f"{namespace}t":
                parts.append(node.text or "")
            elif node.tag == f"{namespace}tab":
                parts.append("\t")
            elif node.tag in (f"{namespace}br", f"{namespace}cr"):
                parts.append("\n")
        lines.append("".join(parts))
    return "\n".join(lines)


class _HtmlText(HTMLParser):
    BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "section"})
    SKIPPED = frozenset({"script", "style", "noscript", "template"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIPPED:
            self.skipping += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append("\t")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIPPED:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The visible text of an HTML document (scripts and styles dropped, blocks on their own lines)."""
    parser = _HtmlText()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


# -- search and chunks --------------------------------------------------------------------------


def find(
    source: str | Sequence[str], pattern: str, *, context: int = 100, flags: int = re.IGNORECASE, limit: int = 50
) -> list[dict[str, Any]]:
    """Matches of the regular expression ``pattern`` in a text, or in a list of pages: each with its
    ``offset`` (in its page), ``page`` (from 1; None for a plain text), ``match`` and a ``snippet`` of
    ``context`` characters around it. At most ``limit`` matches."""
    pages: Sequence[str] = [source] if isinstance(source, str) else source
    compiled = re.compile(pattern, flags)
    hits: list[dict[str, Any]] = []
    for number, page in enumerate(pages, 1):
        for match in compiled.finditer(page):
            start, end = max(0, match.start() - context), min(len(page), match.end() + context)
            hits.append(
                {
                    "offset": match.start(),
                    "page": None if isinstance(source, str) else number,
                    "match": match.group(0),
                    "snippet": " ".join(page[start:end].split()),
                }
            )
            if len(hits) >= limit:
                return hits
    return hits


def chunk_text(text: str, max_chars: int = 6000, overlap: int = 300) -> list[str]:
    """``text`` cut into pieces of at most ``max_chars``, each starting ``overlap`` characters before
    the previous one ended, cut at a paragraph break, else a line break, else a space when possible."""
    if max_chars <= 0 or not 0 <= overlap < max_chars:
        raise ValueError("need max_chars > 0 and 0 <= overlap < max_chars")
    chunks, start = [], 0
    while start < len(text):
        end = min(len(text), start + max_chars)
        if end < len(text):
            window = text[start:end]
            for separator in ("\n\n", "\n", " "):
                cut = window.rfind(separator)
                if cut > max_chars // 2:
                    end = start + cut + len(separator)
                    break
        chunks.append(text[start:end])
        if end >= len(text):
            break
        start = max(end - overlap, start + 1)
    return chunks


# -- a small PDF text reader (no pypdf) ---------------------------------------------------------

_OBJECT = re.compile(rb"(\d+)\s+(\d+)\s+obj\b(.*?)\bendobj", re.DOTALL)
_STREAM = re.compile(rb"^(.*?)\bstream\r?\n(.*)\bendstream", re.DOTALL)
_REF = re.compile(rb"(\d+)\s+(\d+)\s+R\b")
_TOKEN = re.compile(
    rb"\((?:\\.|[^\\()]|\((?:\\.|[^\\()])*\))*\)|<[0-9A-Fa-f\s]*>|\[|\]|/[^\s/\[\]()<>{}]+|[A-Za-z'\"*]+|[-+.\d]+",
    re.DOTALL,
)
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f"}


class _PdfText:
    """Text of a PDF's pages from their content streams: strings shown by Tj, TJ, ' and ", with line
    breaks at T*, Td/TD (a move down) and each text object's end. Pages follow the page tree when it
    can be read (not inside compressed object streams), else all content streams in file order."""

    def __init__(self, data: bytes) -> None:
        self.objects: dict[int, bytes] = {int(m.group(1)): m.group(3) for m in _OBJECT.finditer(data)}

    def pages(self) -> list[str]:
        contents = self._page_contents()
        if not contents:  # no readable page tree: every stream that shows text, in file order
            streams = (self._stream(number) for number in sorted(self.objects))
            return ["\n".join(_text_of(stream) for stream in streams if stream and b"T" in stream)]
        return ["\n".join(_text_of(self._stream(number) or b"") for number in numbers) for numbers in contents]

    def _page_contents(self) -> list[list[int]]:
        root = next((body for body in self.objects.values() if re.search(rb"/Type\s*/Catalog\b", body)), None)
        pages_ref = re.search(rb"/Pages\s+(\d+)\s+\d+\s+R", root) if root else None
        found: list[list[int]] = []
        if pages_ref:
            self._walk(int(pages_ref.group(1)), found, set())
        return found

    def _walk(self, number: int, found: list[list[int]], seen: set[int]) -> None:
        if number in seen or number not in self.objects:
            return
        seen.add(number)
        body = self.objects[number].split(b"stream", 1)[0]
        kids = re.search(rb"/Kids\s*\[(.*?)\]", body, re.DOTALL)
        if kids:
            for ref in _REF.finditer(kids.group(1)):
                self._walk(int(ref.group(1)), found, seen)
            return
        contents = re.search(rb"/Contents\s*(\[.*?\]|\d+\s+\d+\s+R)", body, re.DOTALL)
        refs = [int(ref.group(1)) for ref in _REF.finditer(contents.group(1))] if contents else []
        found.append(refs)

    def _stream(self, number: int) -> bytes | None:
        match = _STREAM.match(self.objects.get(number, b""))
        if not match:
            return None
        header, raw = match.group(1), match.group(2).rstrip(b"\r\n")
        if b"/FlateDecode" in header:
            try:
                return zlib.decompressobj().decompress(raw)
            except zlib.error:
                return None
        if b"/Filter" in header:  # another filter (images, LZW, ...): no text for us
            return None
        return raw


def _tokens(stream: bytes) -> Iterator[bytes]:
    for match in _TOKEN.finditer(stream):
        yield match.group(0)


def _text_of(stream: bytes) -> str:
    lines: list[str] = []
    line: list[str] = []
    operands: list[bytes] = []
    in_array = False
    array: list[bytes] = []
    for token in _tokens(stream):
        if token == b"[":
            in_array, array = True, []
        elif token == b"]":
            in_array = False
            operands.append(b"[" + b"\x00".join(array) + b"]")
        elif in_array:
            array.append(token)
        elif token[:1] in (b"(", b"<") or token[:1].isdigit() or token[:1] in (b"-", b"+", b".", b"/"):
            operands.append(token)
        else:
            if token in (b"Tj", b"'", b'"') and operands:
                if token != b"Tj":
                    lines.append("".join(line))
                    line = []
                line.append(_string(operands[-1]))
            elif token == b"TJ" and operands:
                for part in operands[-1][1:-1].split(b"\x00"):
                    if part[:1] in (b"(", b"<"):
                        line.append(_string(part))
                    elif _is_number(part) and float(part) < -200:  # a wide kern is a word gap
                        line.append(" ")
            elif token in (b"T*", b"ET") or (token in (b"Td", b"TD") and len(operands) >= 2 and _moves_down(operands)):
                lines.append("".join(line))
                line = []
            elif token in (b"Td", b"TD") and line:
                line.append(" ")
            operands = []
    lines.append("".join(line))
    text = "\n".join(" ".join(part.split()) for part in lines)
    return re.sub(r"\n{2,}", "\n", text).strip()


def _is_number(token: bytes) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _moves_down(operands: list[bytes]) -> bool:
    return _is_number(operands[-1]) and float(operands[-1]) != 0


def _string(token: bytes) -> str:
    if token.startswith(b"<"):
        digits = re.sub(rb"\s", b"", token[1:-1])
        raw = bytes.fromhex((digits + b"0" * (len(digits) % 2)).decode())
        if raw.startswith(b"\xfe\xff"):
            return raw[2:].decode("utf-16-be", errors="replace")
        return raw.decode("latin-1")
    body, out, index = token[1:-1], bytearray(), 0
    while index < len(body):
        char = body[index : index + 1]
        if char == b"\\" and index + 1 < len(body):
            following = body[index + 1 : index + 2]
            if following in _ESCAPES:
                out += _ESCAPES[following]
                index += 2
            elif following.isdigit():
                octal = re.match(rb"[0-7]{1,3}", body[index + 1 : index + 4])
                digits = octal.group(0) if octal else b"0"
                out.append(int(digits, 8) & 0xFF)
                index += 1 + len(digits)
            elif following in (b"\r", b"\n"):
                index += 2
            else:
                out += following
                index += 2
        else:
            out += char
            index += 1
    return out.decode("latin-1")
