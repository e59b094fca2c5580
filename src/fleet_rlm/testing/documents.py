"""Small real documents built from scratch (PDF, .xlsx, .docx), for tests of what reads them."""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Sequence
from xml.sax.saxutils import escape

Cell = str | int | float | bool | None


def minimal_pdf(pages: Sequence[Sequence[str]], *, compress: bool = True) -> bytes:
    """A valid PDF with one page per item, each line of it shown with Helvetica; every second line
    is drawn as a TJ array with a small kern inside, as real PDFs often do."""
    objects: list[bytes] = [b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    contents = []
    for lines in pages:
        ops = [b"BT /F1 12 Tf 72 720 Td 14 TL"]
        for index, line in enumerate(lines):
            text = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")
            shown = b"(" + text + b") Tj" if index % 2 == 0 else b"[(" + text[:3] + b") -10 (" + text[3:] + b")] TJ"
            ops.append(shown + b" T*")
        ops.append(b"ET")
        data = b"\n".join(ops)
        if compress:
            data = zlib.compress(data)
        flate = b" /Filter /FlateDecode" if compress else b""
        objects.append(b"<< /Length %d%s >>\nstream\n" % (len(data), flate) + data + b"\nendstream")
        contents.append(len(objects))
    pages_number = len(objects) + len(contents) + 1
    kids = []
    for content in contents:
        objects.append(
            b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 1 0 R >> >> "
            b"/Contents %d 0 R >>" % (pages_number, content)
        )
        kids.append(b"%d 0 R" % len(objects))
    objects.append(b"<< /Type /Pages /Kids [" + b" ".join(kids) + b"] /Count %d >>" % len(kids))
    objects.append(b"<< /Type /Catalog /Pages %d 0 R >>" % pages_number)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, len(objects), xref)
    return bytes(out)


def minimal_xlsx(sheets: dict[str, Sequence[Sequence[Cell]]]) -> bytes:
    """A valid .xlsx workbook: text in the shared strings table, numbers and booleans inline."""
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    strings: list[str] = []
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as book:
        sheet_entries, sheet_rels = [], []
        for number, (name, rows) in enumerate(sheets.items(), 1):
            xml_rows = []
            for row_number, row in enumerate(rows, 1):
                cells = []
                for column, value in enumerate(row):
                    ref = f"{chr(ord('A') + column)}{row_number}"
                    if value is None:
                        continue
                    if isinstance(value, bool):
                        cells.append(f'<c r="{ref}" t="b"><v>{int(value)}</v></c>')
                    elif isinstance(value, int | float):
                        cells.append(f'<c r="{ref}"><v>{value}</v></c>')
                    else:
                        strings.append(str(value))
                        cells.append(f'<c r="{ref}" t="s"><v>{len(strings) - 1}</v></c>')
                xml_rows.append(f'<row r="{row_number}">{"".join(cells)}</row>')
            book.writestr(
                f"xl/worksheets/sheet{number}.xml",
                f'<worksheet xmlns="{main}"><sheetData>{"".join(xml_rows)}</sheetData></worksheet>',
            )
            sheet_entries.append(f'<sheet name="{escape(name)}" sheetId="{number}" r:id="rId{number}"/>')
            sheet_rels.append(
                f'<Relationship Id="rId{number}" Type="{rel}/worksheet" Target="worksheets/sheet{number}.xml"/>'
            )
        book.writestr(
            "xl/workbook.xml",
            f'<workbook xmlns="{main}" xmlns:r="{rel}"><sheets>{"".join(sheet_entries)}</sheets></workbook>',
        )
        book.writestr(
            "xl/_rels/workbook.xml.rels",
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            + "".join(sheet_rels)
            + "</Relationships>",
        )
        shared = "".join(f"<si><t>{escape(text)}</t></si>" for text in strings)
        book.writestr("xl/sharedStrings.xml", f'<sst xmlns="{main}" count="{len(strings)}">{shared}</sst>')
        book.writestr("_rels/.rels", _PACKAGE_RELS.format(rel=rel))
        overrides = "".join(
            f'<Override PartName="/xl/worksheets/sheet{number}.xml" ContentType="{_SHEET_TYPE}"/>'
            for number in range(1, len(sheets) + 1)
        )
        book.writestr("[Content_Types].xml", _CONTENT_TYPES.format(overrides=overrides))
    return buffer.getvalue()


_SHEETML = "application/vnd.openxmlformats-officedocument.spreadsheetml"
_SHEET_TYPE = f"{_SHEETML}.worksheet+xml"
_PACKAGE_RELS = (
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="{rel}/officeDocument" Target="xl/workbook.xml"/></Relationships>'
)
_CONTENT_TYPES = (
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    f'<Override PartName="/xl/workbook.xml" ContentType="{_SHEETML}.sheet.main+xml"/>'
    f'<Override PartName="/xl/sharedStrings.xml" ContentType="{_SHEETML}.sharedStrings+xml"/>'
    "{overrides}</Types>"
)


def minimal_docx(paragraphs: Sequence[str]) -> bytes:
    """A .docx whose body is ``paragraphs``, one run each."""
    namespace = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    body = "".join(f"<w:p><w:r><w:t>{escape(text)}</w:t></w:r></w:p>" for text in paragraphs)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as document:
        document.writestr(
            "word/document.xml", f'<w:document xmlns:w="{namespace}"><w:body>{body}</w:body></w:document>'
        )
        document.writestr(
            "[Content_Types].xml", '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>'
        )
    return buffer.getvalue()
