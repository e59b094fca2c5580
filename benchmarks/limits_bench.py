"""What the whole-sandbox limits (cgroups, sized /tmp, seccomp) cost, side by side with none of them.

Run: ``uv run python benchmarks/limits_bench.py [--repeats N] [--breakdown]``. Prints medians and
ratios for:

- cold start: create a sandbox and run its first execution, every limit on vs every limit off
  (``--breakdown`` adds each protection alone);
- teardown: ``shutdown()`` of a started sandbox (kill every process, unmount /tmp, remove cgroups);
- warm pool: from asking :class:`~fleet_rlm.service.kernels.pool.SandboxPool` for a sandbox to its first
  execution's result, with the sandbox started ahead of need, limits on vs off.

Target: the pool hides the limits' set-up: a warm lease with every limit on takes at most a tenth of
a cold start with them. Measurements alternate between the variants so that drift on a busy machine
hits all alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from fleet_rlm.sandbox.base import SandboxLimits, SandboxSpec
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.protections import ProtectionOptions
from fleet_rlm.service.kernels.pool import Lease, SandboxPool

ALL_ON = ProtectionOptions()
ALL_OFF = ProtectionOptions(cgroups=False, sized_tmp=False, seccomp=False)
ALONE = {
    "cgroups only": ProtectionOptions(sized_tmp=False, seccomp=False),
    "sized /tmp only": ProtectionOptions(cgroups=False, seccomp=False),
    "seccomp only": ProtectionOptions(cgroups=False, sized_tmp=False),
}
LIMITS = SandboxLimits(execution_timeout=600)


def cold_and_teardown(backend: LocalSandboxBackend, workspace: Path) -> tuple[float, float]:
    sandbox = backend.create(SandboxSpec(workspace, limits=LIMITS))
    started = time.perf_counter()
    sandbox.execute("1")
    cold = time.perf_counter() - started
    started = time.perf_counter()
    sandbox.shutdown()
    return cold, time.perf_counter() - started


def warm_leases(backend: LocalSandboxBackend, repeats: int) -> list[float]:
    """Seconds from acquire() to the first execution's result, the sandbox started by the pool."""

    def first_execution(lease: Lease) -> None:
        sandbox = lease.backend.create(SandboxSpec(lease.workspace.root, LIMITS))
        sandbox.start()
        sandbox.execute("1 + 1")

    async def measure() -> list[float]:
        with tempfile.TemporaryDirectory(prefix="fleet-limits-bench-") as root:
            pool = SandboxPool(backend, Path(root), 1, LIMITS, f"bench:{os.getpid()}:x")
            pool.start()
            laps: list[float] = []
            for index in range(repeats):
                while pool.idle_count < 1:
                    await asyncio.sleep(0.01)
                started = time.perf_counter()
                lease = await pool.acquire("ses_bench", f"turn_{index}")
                await asyncio.to_thread(first_execution, lease)
                laps.append(time.perf_counter() - started)
                await pool.release(lease)
            await pool.close()
            return laps

    return asyncio.run(measure())


def run(repeats: int, breakdown: bool) -> str:
    variants = {"limits on": ALL_ON, "limits off": ALL_OFF, **(ALONE if breakdown else {})}
    backends = {name: LocalSandboxBackend(protections=options) for name, options in variants.items()}
    cold: dict[str, list[float]] = {name: [] for name in backends}
    teardown: dict[str, list[float]] = {name: [] for name in backends}
    with tempfile.TemporaryDirectory(prefix="fleet-limits-bench-") as scratch:
        os.chmod(scratch, 0o777)  # the sandbox runs as a uid of its own, and the host chowns nothing
        workspace = Path(scratch)
        for backend in backends.values():  # detection, page cache, bytecode caches
            cold_and_teardown(backend, workspace)
        for _ in range(repeats):
            for name, backend in backends.items():
                started, ended = cold_and_teardown(backend, workspace)
                cold[name].append(started)
                teardown[name].append(ended)
    warm: dict[str, list[float]] = {"limits on": [], "limits off": []}
    for _ in range(max(1, repeats // 5)):
        for name in warm:
            warm[name] += warm_leases(backends[name], 5)

    median = {name: statistics.median(laps) for name, laps in cold.items()}
    off = median["limits off"]
    lines = [
        f"whole-sandbox limits vs none; medians over {repeats} cold starts each, alternating",
        f"{'cold start to first execution':<34}{'median':>11}{'vs off':>9}{'added':>11}",
    ]
    for name, value in median.items():
        lines.append(f"  {name:<32}{_ms(value):>11}{value / off:>8.2f}x{_ms(value - off):>11}")
    lines.append(f"{'teardown (shutdown)':<34}{'median':>11}")
    for name, laps in teardown.items():
        lines.append(f"  {name:<32}{_ms(statistics.median(laps)):>11}")
    warm_on, warm_off = statistics.median(warm["limits on"]), statistics.median(warm["limits off"])
    met = warm_on <= 0.1 * median["limits on"]
    lines += [
        f"{'warm pool lease to first result':<34}{'median':>11}",
        f"  {'limits on':<32}{_ms(warm_on):>11}",
        f"  {'limits off':<32}{_ms(warm_off):>11}",
        f"target: warm lease with limits <= 1/10 of a cold start with limits: "
        f"{warm_on / median['limits on']:.3f} -> {'yes' if met else 'NO'}",
    ]
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=15, help="cold starts per variant (warm leases: the same)")
    parser.add_argument("--breakdown", action="store_true", help="also time each protection alone")
    arguments = parser.parse_args()
    print(run(arguments.repeats, arguments.breakdown))


if __name__ == "__main__":
    main()
