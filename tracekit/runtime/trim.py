"""A thread that hands glibc's free heap back while the command analyses a large trace."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tracekit.runtime import allocator

TRIM_EVERY_S = 0.25  # how often the thread trims
THREAD_NAME = "tracekit-trim"


@contextmanager
def trimming(on: bool) -> Iterator[None]:
    """While the block runs (and `on`: the command passes `runtime.sizing.large(trace)`), a thread
    trims glibc's free heap every `TRIM_EVERY_S` (`allocator.trim_heap`, a few ms each), and
    once more as the block ends. One thread serves every block running at once (on other
    threads, or nested): it starts with the first and stops with the last."""
    if not on:
        yield
        return
    with _LOCK:
        _STATE["blocks"] += 1
        if _STATE["blocks"] == 1:
            stop = threading.Event()
            thread = threading.Thread(target=_trim, args=(stop,), name=THREAD_NAME, daemon=True)
            _STATE.update(stop=stop, thread=thread)
            thread.start()
    try:
        yield
    finally:
        with _LOCK:
            _STATE["blocks"] -= 1
            last = None if _STATE["blocks"] else (_STATE.pop("stop"), _STATE.pop("thread"))
        if last is not None:
            last[0].set()
            last[1].join()
            allocator.trim_heap()


def _trim(stop: threading.Event) -> None:
    while not stop.wait(TRIM_EVERY_S):
        allocator.trim_heap()


_STATE: dict[str, Any] = {"blocks": 0}  # blocks running, and their thread while any is
_LOCK = threading.Lock()
