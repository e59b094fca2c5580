import hashlib
import json
import os
import tracemalloc
from pathlib import Path

import pytest

from fleet_rlm.workspace.hashing import DigestCache
from fleet_rlm.workspace.kinds import FileKind
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.manifest import ManifestEntry, build_manifest, manifest_to_json, render_manifest
from fleet_rlm.workspace.previews import JsonPreview, TablePreview, TextPreview
from fleet_rlm.workspace.walk import WorkspaceFile, stat_file


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.create(tmp_path / "ws")


def entry_for(ws: Workspace, rel: str, **options: int) -> ManifestEntry:
    entries = {e.path: e for e in build_manifest(ws, cache=DigestCache(), **options)}
    return entries[rel]


def write_sales_csv(path: Path, rows: int) -> None:
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write("date,region,product,amount\n")
        for i in range(rows):
            f.write(f"2024-01-{i % 28 + 1:02d},{('north', 'south')[i % 2]},widget-{i % 7},{i}.25\n")


def test_csv_preview_shows_header_first_rows_and_exact_counts(ws: Workspace) -> None:
    write_sales_csv(ws.files_dir / "sales.csv", 1234)

    entry = entry_for(ws, "files/sales.csv")

    assert entry.kind is FileKind.CSV
    preview = entry.preview
    assert isinstance(preview, TablePreview)
    assert preview.header == ("date", "region", "product", "amount")
    assert preview.rows[0] == ("2024-01-01", "north", "widget-0", "0.25")
    assert len(preview.rows) == 5
    assert (preview.row_count, preview.row_count_exact, preview.column_count) == (1234, True, 4)
    text = render_manifest([entry])
    assert "files/sales.csv  (" in text
    assert "1,234 rows x 4 columns" in text
    assert "date,region,product,amount" in text
    assert "2024-01-05,north,widget-4,4.25" in text
    assert "2024-01-06" not in text


def test_csv_row_count_respects_quoted_newlines_when_counted_exactly(ws: Workspace) -> None:
    body = 'id,comment\n1,"first line\nsecond line"\n2,plain\n\n3,"a, b"\n'
    (ws.files_dir / "notes.csv").write_text(body)

    preview = entry_for(ws, "files/notes.csv").preview

    assert isinstance(preview, TablePreview)
    assert (preview.row_count, preview.row_count_exact) == (3, True)
    assert preview.rows[0] == ("1", "first line\nsecond line")
    assert "1,first line\\nsecond line" in render_manifest([entry_for(ws, "files/notes.csv")])


def test_csv_beyond_the_sample_is_counted_exactly_when_small_enough(ws: Workspace) -> None:
    write_sales_csv(ws.files_dir / "medium.csv", 20_000)  # ~600 KB: more than the head sample
    preview = entry_for(ws, "files/medium.csv").preview
    assert isinstance(preview, TablePreview)
    assert (preview.row_count, preview.row_count_exact) == (20_000, True)


def test_large_csv_row_count_is_an_estimate_flagged_as_such(ws: Workspace) -> None:
    write_sales_csv(ws.files_dir / "big.csv", 200_000)  # ~6 MB: above the exact-count limit

    entry = entry_for(ws, "files/big.csv")

    preview = entry.preview
    assert isinstance(preview, TablePreview)
    assert (preview.row_count, preview.row_count_exact) == (200_000, False)
    text = render_manifest([entry])
    assert "~200,000 rows x 4 columns" in text
    assert "estimated" in text


def test_tsv_and_semicolon_csv_are_split_on_their_delimiter(ws: Workspace) -> None:
    (ws.files_dir / "a.tsv").write_text("name\tscore\nada\t9\n")
    (ws.files_dir / "b.csv").write_text("name;score;team\nada;9;x\n")

    tsv = entry_for(ws, "files/a.tsv").preview
    semi = entry_for(ws, "files/b.csv").preview

    assert isinstance(tsv, TablePreview) and isinstance(semi, TablePreview)
    assert (tsv.delimiter, tsv.header, tsv.rows) == ("\t", ("name", "score"), (("ada", "9"),))
    assert (semi.delimiter, semi.column_count) == (";", 3)


def test_wide_csv_shows_a_bounded_number_of_columns_and_cell_chars(ws: Workspace) -> None:
    header = ",".join(f"column_{i}" for i in range(500))
    row = ",".join("x" * 100 for _ in range(500))
    (ws.files_dir / "wide.csv").write_text(f"{header}\n{row}\n")

    entry = entry_for(ws, "files/wide.csv")

    preview = entry.preview
    assert isinstance(preview, TablePreview)
    assert preview.column_count == 500
    assert len(preview.header) == 40
    assert all(len(cell) <= 60 for cell in preview.rows[0])
    assert len(render_manifest([entry])) < 1500


def test_50_mb_text_file_gives_a_bounded_head_and_tail_in_little_memory(ws: Workspace) -> None:
    line = "the quick brown fox jumps over the lazy dog 0123456789\n"
    lines = 50 * 1024 * 1024 // len(line)
    with (ws.files_dir / "huge.log").open("w") as f:
        f.write("FIRST LINE\n")
        for _ in range(lines // 1000):
            f.write(line * 1000)
        f.write("LAST LINE\n")
    size = (ws.files_dir / "huge.log").stat().st_size

    tracemalloc.start()
    try:
        entry = entry_for(ws, "files/huge.log")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert size > 50_000_000
    assert peak < 4 * 1024 * 1024, f"building the manifest allocated {peak:,} bytes at peak"
    preview = entry.preview
    assert isinstance(preview, TextPreview)
    assert preview.head.startswith("FIRST LINE\n") and len(preview.head) <= 1500
    assert preview.tail.endswith("LAST LINE\n") and len(preview.tail) <= 500
    assert preview.omitted_bytes == size - len(preview.head.encode()) - len(preview.tail.encode())
    assert preview.line_count == lines // 1000 * 1000 + 2
    assert entry.sha256 == hashlib.sha256((ws.files_dir / "huge.log").read_bytes()).hexdigest()
    text = render_manifest([entry])
    assert len(text) < 2500
    assert f"[... {preview.omitted_bytes:,} bytes omitted ...]" in text
    assert "50.0 MiB" in text


def test_small_text_is_shown_whole(ws: Workspace) -> None:
    (ws.files_dir / "README.md").write_text("# Data\n\nSales for Q1.\n")
    entry = entry_for(ws, "files/README.md")
    assert entry.kind is FileKind.MARKDOWN
    assert entry.preview == TextPreview("# Data\n\nSales for Q1.\n", "", 0, 3)
    assert "omitted" not in render_manifest([entry])


def test_preview_chars_bounds_the_text_preview(ws: Workspace) -> None:
    (ws.files_dir / "words.txt").write_text("word " * 10_000)
    preview = entry_for(ws, "files/words.txt", preview_chars=400).preview
    assert isinstance(preview, TextPreview)
    assert len(preview.head) + len(preview.tail) <= 400
    assert preview.omitted_bytes == 50_000 - len(preview.head) - len(preview.tail)


def test_multibyte_characters_cut_by_the_sample_stay_text(ws: Workspace) -> None:
    (ws.files_dir / "accents.txt").write_text("é" * 100_001)  # odd byte count: the tail read starts mid-char
    entry = entry_for(ws, "files/accents.txt")
    assert entry.kind is FileKind.TEXT
    assert isinstance(entry.preview, TextPreview)
    assert set(entry.preview.head + entry.preview.tail) == {"é"}


@pytest.mark.parametrize(
    ("name", "content", "kind"),
    [
        ("data.csv", b"a,b\n1,\x002\n", FileKind.BINARY),
        ("notes.txt", b"caf\xe9 au lait\n", FileKind.BINARY),
        ("blob", os.urandom(4096), FileKind.BINARY),
        ("picture", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, FileKind.IMAGE),
        ("doc", b"%PDF-1.7\n" + b"\x00" * 64, FileKind.PDF),
        ("report.pdf", b"%PDF-1.7\n" + b"x" * 64, FileKind.PDF),
        ("table.parquet", b"PAR1" + b"\x00" * 64 + b"PAR1", FileKind.PARQUET),
        ("script", b"#!/bin/sh\necho hi\n", FileKind.TEXT),
        ("main.py", b"print('hi')\n", FileKind.CODE),
        ("events.jsonl", b'{"a": 1}\n{"a": 2}\n', FileKind.JSONL),
    ],
)
def test_kind_is_detected_by_extension_then_content(ws: Workspace, name: str, content: bytes, kind: FileKind) -> None:
    (ws.files_dir / name).write_bytes(content)
    entry = entry_for(ws, f"files/{name}")
    assert entry.kind is kind
    assert (entry.preview is None) == (kind not in {FileKind.TEXT, FileKind.CODE, FileKind.JSONL})


def test_binary_file_with_a_nul_only_near_the_end_is_binary(ws: Workspace) -> None:
    (ws.files_dir / "mostly.txt").write_bytes(b"text line\n" * 50_000 + b"\x00tail")
    assert entry_for(ws, "files/mostly.txt").kind is FileKind.BINARY


def test_json_object_array_invalid_and_too_large(ws: Workspace) -> None:
    (ws.files_dir / "config.json").write_text(json.dumps({"name": "fleet", "version": 3, "tags": ["a"]}))
    (ws.files_dir / "list.json").write_text(json.dumps(list(range(1000))))
    (ws.files_dir / "broken.json").write_text('{"name": ')
    (ws.files_dir / "big.json").write_text(json.dumps([{"id": i, "pad": "x" * 100} for i in range(30_000)]))

    config = entry_for(ws, "files/config.json").preview
    array = entry_for(ws, "files/list.json").preview
    broken = entry_for(ws, "files/broken.json").preview
    big = entry_for(ws, "files/big.json").preview

    assert isinstance(config, JsonPreview) and isinstance(array, JsonPreview)
    assert isinstance(broken, JsonPreview) and isinstance(big, JsonPreview)
    assert (config.top_level, config.length, config.keys) == ("object", 3, ("name", "version", "tags"))
    assert (array.top_level, array.length) == ("array", 1000)
    assert broken.error is not None and "Expecting value" in broken.error
    assert (big.top_level, big.parsed, big.length) == ("array", False, None)
    assert len(big.head) <= 500
    text = render_manifest([entry_for(ws, "files/config.json"), entry_for(ws, "files/broken.json")])
    assert "object with 3 keys" in text and 'keys: "name", "version", "tags"' in text
    assert "invalid JSON" in text and "not valid JSON: Expecting value" in text


def test_tmp_is_skipped_and_inputs_come_first(ws: Workspace) -> None:
    ws.write_bytes("tmp/scratch.txt", b"scratch")
    ws.write_bytes("artifacts/out.txt", b"out")
    ws.write_bytes("memory/notes.md", b"remember")
    ws.write_bytes("files/z.txt", b"input")
    ws.write_bytes("loose.txt", b"top level")

    paths = [e.path for e in build_manifest(ws, cache=DigestCache())]

    assert paths == ["files/z.txt", "artifacts/out.txt", "memory/notes.md", "loose.txt"]


def test_symlinks_outside_are_left_out_and_fifos_do_not_block(ws: Workspace, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("host secret")
    (ws.files_dir / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (ws.files_dir / "outside-dir").symlink_to(tmp_path)
    (ws.files_dir / "real.txt").write_text("inside")
    (ws.files_dir / "alias.txt").symlink_to(ws.files_dir / "real.txt")
    os.mkfifo(ws.files_dir / "pipe")

    manifest = build_manifest(ws, cache=DigestCache())

    # No link is followed, not even one that stays inside the workspace.
    assert [e.path for e in manifest] == ["files/real.txt"]
    assert "host secret" not in render_manifest(manifest)


def test_sha256_is_cached_by_path_size_and_mtime(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_bytes(b"version one\n")
    cache = DigestCache()

    first, second = cache.digest(listed(path)), cache.digest(listed(path))

    assert first.sha256 == second.sha256 == hashlib.sha256(b"version one\n").hexdigest()
    assert (cache.misses, cache.hits) == (1, 1)

    # Same size and mtime: the cache answers without reading the file (so the digest is stale).
    stat = path.stat()
    path.write_bytes(b"version two\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert cache.digest(listed(path)).sha256 == first.sha256

    # A new mtime makes it hash again.
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert cache.digest(listed(path)).sha256 == hashlib.sha256(b"version two\n").hexdigest()
    assert cache.misses == 2


def test_a_file_written_while_hashed_is_not_cached(tmp_path: Path) -> None:
    path = tmp_path / "growing.log"
    path.write_text("a\n")
    cache = DigestCache()

    def hash_while_appending() -> str:
        with path.open("a") as f:
            f.write("b\n")
        return "digest of a moving target"

    assert cache.remember(listed(path), "sha256", hash_while_appending) == "digest of a moving target"
    assert cache.digest(listed(path)).sha256 == hashlib.sha256(b"a\nb\n").hexdigest()


def test_repeated_manifest_of_unchanged_files_reads_nothing_again(ws: Workspace) -> None:
    write_sales_csv(ws.files_dir / "sales.csv", 50_000)
    ws.write_bytes("files/notes.txt", b"version one\n")
    cache = DigestCache()
    first = build_manifest(ws, cache=cache)
    misses = cache.misses

    notes = ws.files_dir / "notes.txt"
    stat = notes.stat()
    notes.write_bytes(b"version two\n")  # same size; mtime restored: looks unchanged
    os.utime(notes, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    second = build_manifest(ws, cache=cache)

    assert second == first
    assert cache.misses == misses
    os.utime(notes, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    third = {e.path: e for e in build_manifest(ws, cache=cache)}
    assert third["files/notes.txt"].preview == TextPreview("version two\n", "", 0, 1)
    assert third["files/notes.txt"].sha256 == hashlib.sha256(b"version two\n").hexdigest()


def test_max_entries_leaves_files_out_and_says_so(ws: Workspace) -> None:
    for i in range(12):
        ws.write_bytes(f"files/f{i:02d}.txt", b"x")

    manifest = build_manifest(ws, max_entries=5, cache=DigestCache())

    assert [e.path for e in manifest] == [f"files/f{i:02d}.txt" for i in range(5)]
    assert manifest.left_out == 7
    assert "[7 more file(s) not listed here" in render_manifest(manifest)
    assert manifest_to_json(manifest)["left_out"] == 7


def test_render_stays_bounded_listing_many_files_and_previewing_the_first(ws: Workspace) -> None:
    for i in range(300):
        ws.write_bytes(f"files/doc{i:03d}.txt", f"document {i}\n".encode() * 400)

    manifest = build_manifest(ws, cache=DigestCache())
    text = render_manifest(manifest)

    assert len(manifest) == 300
    assert len(text) <= 12_000
    assert "  document 0\n" in text  # the first files get previews
    assert "document 50\n" not in text
    assert "files/doc050.txt  (4.7 KiB, text, 400 lines, sha256 " in text  # later ones a summary line
    listed = text.count("files/doc")
    assert listed > 60
    assert text.endswith(
        f"[{300 - listed:,} more file(s) not listed here; list the workspace with code to see them all]"
    )
    assert len(render_manifest(manifest, max_chars=3000)) <= 3000


def test_render_previews_every_file_when_they_fit(ws: Workspace) -> None:
    for i in range(4):  # each preview is ~2,000 characters of the 12,000
        ws.write_bytes(f"files/doc{i}.txt", f"document {i}\n".encode() * 1000)
    text = render_manifest(build_manifest(ws, cache=DigestCache()))
    assert all(text.count(f"\n  document {i}") > 100 for i in range(4))
    assert "not listed" not in text


def test_empty_workspace_renders_as_no_files(ws: Workspace) -> None:
    assert render_manifest(build_manifest(ws)) == "(no files)"


def test_manifest_json_is_plain_json_with_typed_previews(ws: Workspace) -> None:
    write_sales_csv(ws.files_dir / "sales.csv", 3)
    ws.write_bytes("files/photo.jpg", b"\xff\xd8\xff" + b"\x00" * 10)

    data = json.loads(json.dumps(manifest_to_json(build_manifest(ws, cache=DigestCache()))))

    photo, sales = data["entries"]
    assert photo == {
        "path": "files/photo.jpg",
        "size": 13,
        "mtime_ns": (ws.files_dir / "photo.jpg").stat().st_mtime_ns,
        "sha256": hashlib.sha256(b"\xff\xd8\xff" + b"\x00" * 10).hexdigest(),
        "kind": "image",
        "preview": None,
    }
    assert sales["preview"]["type"] == "table"
    assert sales["preview"]["header"] == ["date", "region", "product", "amount"]
    assert sales["preview"]["row_count"] == 3
    assert data["left_out"] == 0


def test_bad_options_are_refused_by_name(ws: Workspace) -> None:
    with pytest.raises(ValueError, match="preview_chars must be >= 1"):
        build_manifest(ws, preview_chars=0)


def listed(path: Path) -> WorkspaceFile:
    found = stat_file(path.parent, path.name)
    assert found is not None
    return found


def test_a_full_cache_forgets_the_least_recently_used_file(tmp_path: Path) -> None:
    paths = [tmp_path / f"{name}.txt" for name in ("a", "b", "c")]
    for path in paths:
        path.write_text(path.name)
    a, b, c = paths
    cache = DigestCache(max_entries=2)
    cache.digest(listed(a))
    cache.digest(listed(b))
    cache.digest(listed(a))  # a is now the most recently used
    cache.digest(listed(c))  # so b goes
    assert (cache.misses, cache.hits) == (3, 1)
    cache.digest(listed(a))
    cache.digest(listed(c))
    assert (cache.misses, cache.hits) == (3, 3)
    cache.digest(listed(b))
    assert cache.misses == 4
