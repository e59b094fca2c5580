"""Threads of their own for blocking work that must not queue behind other work.

``asyncio.to_thread`` shares the event loop's default executor (a few threads per core) among
everything: sandbox starts held all of its threads during a burst of turns, and a finished turn's few
milliseconds of file work waited behind them. A :class:`ThreadLane` is a named executor for one kind of
work; once closed it hands work to the default executor, so work still in flight at shutdown (a turn
that outlived the grace period tearing its sandbox down) runs rather than fails.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


class ThreadLane:
    def __init__(self, threads: int, name: str) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._closed = False

    async def run(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``function(*args, **kwargs)`` on one of the lane's threads, context variables included (as
        ``asyncio.to_thread``)."""
        if self._closed:
            return await asyncio.to_thread(function, *args, **kwargs)
        call = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def close(self) -> None:
        """Take no more work (what is queued still runs); later work goes to the default executor."""
        self._closed = True
        self._executor.shutdown(wait=False)
