"""``python -m fleet_rlm.models.local --prepare``: fill the cache (runtime and models) with progress,
or ``--serve``: run the server until interrupted and print the settings that point Fleet at it."""

from __future__ import annotations

import argparse
import sys
import threading
import time

from fleet_rlm.models.local import SPECS, RealModelError, RealModelServer, cache_root, prepare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleet_rlm.models.local", description=__doc__)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--prepare", action="store_true", help="install the runtime and fetch the model(s)")
    action.add_argument("--serve", action="store_true", help="serve one model until interrupted")
    parser.add_argument("--size", choices=[*SPECS, "all"], default=None, help="small, large or all")
    args = parser.parse_args(argv)
    root = cache_root()
    try:
        if args.prepare:
            sizes = list(SPECS) if args.size in (None, "all") else [args.size]
            for size in sizes:
                started = time.monotonic()
                python, model = prepare(SPECS[size], root)
                print(f"{size}: {model} ready ({time.monotonic() - started:.1f}s; runtime {python})", file=sys.stderr)
            return 0
        if args.size == "all":
            parser.error("--serve takes one --size")
        with RealModelServer(SPECS[args.size or "small"], root=root) as server:
            for key, value in server.fleet_env().items():
                print(f"export {key}={value}")
            sys.stdout.flush()
            threading.Event().wait()
    except RealModelError as exc:
        print(f"real model: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
