"""What a bounded workspace volume costs, side by side with a plain directory.

Run: ``uv run python benchmarks/volume_bench.py [--repeats N] [--input-mb M]`` (as root, where loop
devices exist). Prints medians and ratios for:

- volume set-up and teardown: make the volume and its workspace layout, then release it (sparse
  ext4 image, ``mkfs.ext4``, loop mount, unmount; against ``mkdir`` and ``rmtree``);
- a cold sandbox start on each (the pool hides both when a warm sandbox is waiting);
- ``fleet run``'s copy of a workspace into the volume and of the turn's results back out, with one
  input of ``--input-mb`` MiB and one new artifact of the same size.

Measurements alternate between the two so that drift on a busy machine hits both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fleet_rlm.sandbox.base import SandboxLimits, SandboxSpec
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.volume import Volume, bounded_volume, plain_volume, quota_support
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.mirror import Mirror
from fleet_rlm.workspace.tree import SHARED_DIR_MODE

LIMITS = SandboxLimits(execution_timeout=30)
MakeVolume = Callable[[Path], Volume]


def plain(directory: Path) -> Volume:
    return plain_volume(directory)


def bounded(directory: Path) -> Volume:
    return bounded_volume(directory, disk_mb=LIMITS.disk_mb, max_files=LIMITS.max_files)


def set_up_and_release(make: MakeVolume, root: Path, n: int) -> float:
    started = time.perf_counter()
    volume = make(root / f"v{n}")
    Workspace.create(volume.workspace, mode=SHARED_DIR_MODE)
    volume.release()
    return time.perf_counter() - started


def cold_start(make: MakeVolume, root: Path, n: int, backend: LocalSandboxBackend) -> float:
    volume = make(root / f"s{n}")
    try:
        workspace = Workspace.create(volume.workspace, mode=SHARED_DIR_MODE)
        started = time.perf_counter()
        sandbox = backend.create(SandboxSpec(workspace.root, LIMITS))
        sandbox.start()
        sandbox.execute("x = 1")
        elapsed = time.perf_counter() - started
        sandbox.shutdown()
    finally:
        volume.release()
    return elapsed


def copy_in_and_out(make: MakeVolume, root: Path, n: int, home: Workspace, size: int) -> float:
    volume = make(root / f"c{n}")
    try:
        live = Workspace.create(volume.workspace, mode=SHARED_DIR_MODE)
        started = time.perf_counter()
        mirror = Mirror(home.tree, live.tree)
        mirror.copy_in()
        live.tree.write(f"artifacts/result-{n}.bin", os.urandom(size))
        mirror.copy_back()
        elapsed = time.perf_counter() - started
    finally:
        volume.release()
    (home.artifacts_dir / f"result-{n}.bin").unlink()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--input-mb", type=int, default=100)
    args = parser.parse_args()
    support = quota_support()
    if not support.available:
        raise SystemExit(f"no bounded volumes here: {support.reason}")
    backend = LocalSandboxBackend()
    size = args.input_mb * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="fleet-volume-bench-") as scratch:
        root = Path(scratch)
        home = Workspace.create(root / "home")
        home.write_bytes("files/input.bin", os.urandom(size))
        results: dict[str, dict[str, list[float]]] = {}
        for n in range(args.repeats):
            for name, make in (("plain", plain), ("bounded", bounded)):
                runs = results.setdefault(name, {"setup": [], "cold": [], "copy": []})
                runs["setup"].append(set_up_and_release(make, root, n))
                runs["cold"].append(cold_start(make, root, n, backend))
                runs["copy"].append(copy_in_and_out(make, root, n, home, size))
    print(f"{'measure':<34}{'plain dir':>12}{'bounded':>12}{'ratio':>8}")
    labels = {
        "setup": "volume set-up + teardown (ms)",
        "cold": "cold sandbox start (ms)",
        "copy": f"copy {args.input_mb} MiB in + {args.input_mb} MiB out (ms)",
    }
    for key, label in labels.items():
        plain_ms = statistics.median(results["plain"][key]) * 1000
        bounded_ms = statistics.median(results["bounded"][key]) * 1000
        print(f"{label:<34}{plain_ms:>12.1f}{bounded_ms:>12.1f}{bounded_ms / plain_ms:>7.2f}x")


if __name__ == "__main__":
    main()
