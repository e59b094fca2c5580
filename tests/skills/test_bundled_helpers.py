"""The bundled skills' helpers, on the standard library alone (what the sandbox has without its data stack)."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from fleet_rlm.testing.documents import minimal_docx, minimal_pdf, minimal_xlsx
from fleet_rlm.testing.skills import bundled_helpers

SALES = "region;revenue;units\nnorth;1,200.50;3\nsouth;80;\nnorth;70;2\neast;n/a;1\n"


def test_tabular_reads_csv_with_a_sniffed_delimiter_and_converts_numbers(tmp_path: Path) -> None:
    tab = bundled_helpers("tabular")
    (tmp_path / "sales.csv").write_text(SALES)
    rows = tab.read_rows(str(tmp_path / "sales.csv"))
    assert rows[0] == {"region": "north", "revenue": 1200.5, "units": 3}
    assert rows[1]["units"] is None and rows[3]["revenue"] is None
    assert tab.aggregate(rows, by="region", values={"revenue": "sum", "units": "count"}) == [
        {"region": "east", "revenue": 0, "units": 1},
        {"region": "north", "revenue": 1270.5, "units": 2},
        {"region": "south", "revenue": 80, "units": 0},
    ]
    profile = tab.profile(str(tmp_path / "sales.csv"))
    assert profile.splitlines()[0] == "4 rows, 3 columns"
    assert "- revenue: number, 1 missing, 3 distinct, min 70, max 1200.5" in profile
    assert "- region: text, 0 missing, 3 distinct, top: 'north' (2)" in profile


def test_tabular_reads_excel_json_and_json_lines_without_pandas(tmp_path: Path) -> None:
    tab = bundled_helpers("tabular")
    book = tmp_path / "book.xlsx"
    book.write_bytes(minimal_xlsx({"Q1": [["region", "revenue"], ["north", 3], ["south", 4.5]], "Q2": [["x"], [1]]}))
    assert tab.sheet_names(str(book)) == ["Q1", "Q2"]
    assert tab.read_rows(str(book)) == [{"region": "north", "revenue": 3}, {"region": "south", "revenue": 4.5}]
    assert tab.read_rows(str(book), sheet="Q2") == [{"x": 1}]
    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n\n{"a": "2"}\n')
    assert tab.read_rows(str(tmp_path / "rows.jsonl")) == [{"a": 1}, {"a": 2}]
    (tmp_path / "rows.json").write_text(json.dumps({"data": [{"a": 1}, {"a": 2}]}))
    assert tab.read_rows(str(tmp_path / "rows.json"), limit=1) == [{"a": 1}]


def test_tabular_writes_csv_and_markdown(tmp_path: Path) -> None:
    tab = bundled_helpers("tabular")
    rows = [{"region": "north", "revenue": 1270.5}, {"region": "a|b", "revenue": None}]
    path = tab.write_csv(rows, str(tmp_path / "out" / "totals.csv"))
    assert Path(path).read_bytes() == b"region,revenue\nnorth,1270.5\na|b,\n"
    assert tab.markdown_table(rows, limit=1) == (
        "| region | revenue |\n| --- | --- |\n| north | 1,270.5 |\n\n(1 more rows)\n"
    )
    assert tab.to_number("00123") == "00123"  # a code, not a number
    assert str(tab.excel_date(45292)) == "2024-01-01"
    if not tab.HAS_PANDAS:
        with pytest.raises(ImportError, match="use read_rows"):
            tab.load(path)


def test_charts_without_matplotlib_write_an_svg_beside_the_png(tmp_path: Path) -> None:
    charts = bundled_helpers("charts")
    if charts.HAS_MATPLOTLIB:
        pytest.skip("matplotlib is installed: the PNG path is covered by the sandbox environment's tests")
    asked = str(tmp_path / "artifacts" / "revenue.png")
    written = charts.bar_chart(["north", "south <&>"], [170, 200], asked, title="Revenue", ylabel="USD")
    assert written == str(tmp_path / "artifacts" / "revenue.svg")
    svg = ElementTree.parse(written).getroot()  # well-formed, labels escaped
    texts = [node.text for node in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "Revenue" in texts and "south <&>" in texts
    assert len(list(svg.iter("{http://www.w3.org/2000/svg}rect"))) == 3  # background + 2 bars
    for draw in (
        lambda: charts.line_chart(["Q1", "Q2"], {"a": [1, 2], "b": [2, 1]}, asked),
        lambda: charts.scatter_chart([1, 2, 3], [3, 1, 2], asked),
        lambda: charts.histogram([1, 2, 2, 3, 9], asked, bins=4),
    ):
        ElementTree.parse(draw())
    with pytest.raises(ValueError, match="2 labels but 1 values"):
        charts.bar_chart(["a", "b"], [1], asked)


def test_pdf_text_reads_pdf_pages_word_and_html(tmp_path: Path) -> None:
    docs = bundled_helpers("pdf-text")
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(minimal_pdf([["Annual report (2024)", "Net revenue was 1,234 USD"], ["Outlook", "Growth ahead"]]))
    pages = docs.pdf_pages(str(pdf))
    assert pages == ["Annual report (2024)\nNet revenue was 1,234 USD", "Outlook\nGrowth ahead"]
    assert docs.extract_text(str(pdf)) == docs.PAGE_BREAK.join(pages)
    hits = docs.find(pages, r"revenue was ([\d,]+)")
    assert [(hit["page"], hit["match"]) for hit in hits] == [(1, "revenue was 1,234")]
    uncompressed = tmp_path / "plain.pdf"
    uncompressed.write_bytes(minimal_pdf([["Plain text"]], compress=False))
    assert docs.pdf_pages(str(uncompressed)) == ["Plain text"]

    (tmp_path / "memo.docx").write_bytes(minimal_docx(["Dear team,", "Q3 & Q4 look good."]))
    assert docs.extract_text(str(tmp_path / "memo.docx")) == "Dear team,\nQ3 & Q4 look good."
    (tmp_path / "page.html").write_text(
        "<html><head><style>p {}</style><script>alert(1)</script></head>"
        "<body><h1>Title</h1><p>First &amp; <b>bold</b></p><table><tr><td>a</td><td>b</td></tr></table></body></html>"
    )
    assert docs.extract_text(str(tmp_path / "page.html")) == "Title\n\nFirst & bold\n\na b"
    (tmp_path / "legacy.txt").write_bytes("café".encode("cp1252"))
    assert docs.extract_text(str(tmp_path / "legacy.txt")) == "café"


@pytest.mark.parametrize("skill", ["pdf-text", "map-reduce"])
def test_chunks_cover_the_text_within_bounds(skill: str) -> None:
    helpers = bundled_helpers(skill)
    text = "\n\n".join(f"Paragraph {i}: " + "word " * 40 for i in range(50))
    chunks = helpers.chunk_text(text, max_chars=1000, overlap=100)
    assert all(len(chunk) <= 1000 for chunk in chunks)
    assert all(f"Paragraph {i}:" in "".join(chunks) for i in range(50))
    assert chunks[0].endswith("\n\n")  # cut at a paragraph break
    assert helpers.chunk_text("", 10, 0) == []


def test_map_reduce_maps_every_chunk_in_one_batch_and_reduces_what_was_found() -> None:
    mr = bundled_helpers("map-reduce")
    batches: list[list[str]] = []

    def batched(prompts: list[str]) -> list[str]:
        batches.append(prompts)
        return ["NONE" if "nothing here" in prompt else "Revenue was 5." for prompt in prompts]

    def single(prompt: str) -> str:
        assert "[chunk 2] Revenue was 5." in prompt and "[chunk 1]" not in prompt
        return "Revenue was 5 [chunk 2]."

    result = mr.map_reduce(["nothing here", "Revenue: 5", "nothing here either"], "What was revenue?", batched, single)
    assert result == {
        "answer": "Revenue was 5 [chunk 2].",
        "partials": ["[chunk 2] Revenue was 5."],
        "chunks": 3,
        "calls": 4,
    }
    assert len(batches) == 1 and "chunk 2 of 3" in batches[0][1] and "What was revenue?" in batches[0][1]
    assert mr.prefilter(["a Revenue b", "c"], ["revenue"]) == ["a Revenue b"]
    with pytest.raises(ValueError, match="3 chunks would take 3 model calls"):
        mr.map_reduce(["a", "b", "c"], "q", batched, max_chunks=2)


def test_map_reduce_combines_long_partials_in_rounds() -> None:
    mr = bundled_helpers("map-reduce")
    calls: list[int] = []

    def batched(prompts: list[str]) -> list[str]:
        calls.append(len(prompts))
        return ["x" * 300 for _ in prompts]

    result = mr.map_reduce([f"chunk {i}" for i in range(8)], "q", batched, reduce_chars=700)
    assert result["answer"] == "x" * 300
    assert calls[0] == 8 and calls[-1] == 1 and len(calls) > 2
    assert result["calls"] == sum(calls)
