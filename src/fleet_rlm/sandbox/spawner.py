"""Sandbox processes are started from one thread that lasts as long as Fleet's process.

bubblewrap's ``--die-with-parent`` (``PR_SET_PDEATHSIG``) kills the sandbox when the *thread* that
started it ends, not the process. A sandbox started lazily on a short-lived thread (``dspy.Parallel``'s,
``asyncio.to_thread``'s, a tool call's) would die with that thread, its state lost; started here, each
sandbox lives until it is shut down or Fleet's process ends.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

_Result = TypeVar("_Result")
_Job = tuple[Callable[[], Any], "Future[Any]"]

_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_lock = threading.Lock()
_thread: threading.Thread | None = None


def on_lasting_thread(job: Callable[[], _Result]) -> _Result:
    """``job()``, run on the spawner thread (started on first use); its exception is raised here."""
    global _thread
    if threading.current_thread() is _thread:
        return job()
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_serve, name="fleet-sandbox-spawner", daemon=True)
            _thread.start()
    future: Future[_Result] = Future()
    _jobs.put((job, future))
    return future.result()


def _serve() -> None:
    while True:
        job, future = _jobs.get()
        try:
            future.set_result(job())
        except BaseException as exc:  # the caller raises it
            future.set_exception(exc)
