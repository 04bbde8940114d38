"""Cache writes behind a command's back: on a thread of their own, while the command goes on.

A first `tracekit report` of a trace stores the loaded trace and then its analysis (the
two caches); written in line, they took 0.3 s of the 54 MB trace's 2.4 s report, time in
which the analysis or the report could have run. Inside `writes_behind()`, `run(write,
...)` hands the write to one background thread (in order, one at a time) and returns at
once; leaving the block waits for every write handed over, and raises the first error one
of them raised (as the write in line would have). Outside such a block `run` calls the
write in line, so a script's `Cache().load(path)` has its entry when it returns.

A block left by an interrupt (`KeyboardInterrupt`) does not wait: entries are written into
a temporary folder and renamed into place, so an abandoned write leaves no half entry (the
cache's pruning removes the folder later).

The block is per context (`contextvars`): a thread started inside it sees it only when
it runs in a copy of the context (`contextvars.copy_context().run`), as `cli.common.Loading` does.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

_WRITER: contextvars.ContextVar[_Writer | None] = contextvars.ContextVar("tracekit_cache_writer", default=None)


class _Writer:
    """One daemon thread running the writes handed to it, in order; the first error kept."""

    def __init__(self) -> None:
        # its count of unfinished items says whether a write is still to be waited for
        self._queue: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tracekit-cache-write", daemon=True)
        self._thread.start()

    def submit(self, write: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._queue.put((write, args))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            write, args = item
            try:
                write(*args)
            except BaseException as exc:  # noqa: BLE001 (raised in the block's thread on leaving)
                if self.error is None:
                    self.error = exc
            finally:
                self._queue.task_done()

    def finish(self, *, raise_error: bool = True,
               waiting: Callable[[], AbstractContextManager[Any]] | None = None) -> None:
        """Wait for every write handed over (inside `waiting()` when there is any left to
        wait for); raise the first error (if asked)."""
        busy = self._queue.unfinished_tasks > 0  # (read before the stop below is counted)
        self._queue.put(None)
        with waiting() if waiting is not None and busy else nullcontext():
            self._thread.join()
        if raise_error and self.error is not None:
            raise self.error

    def abandon(self) -> None:
        """Stop after the writes handed over, without waiting (the thread is a daemon)."""
        self._queue.put(None)


@contextmanager
def writes_behind(*, waiting: Callable[[], AbstractContextManager[Any]] | None = None) -> Iterator[None]:
    """Inside the block, cache writes run on a background thread; leaving it waits for them.

    waiting: a context manager to wait in when writes are left to wait for on leaving (the
        `tracekit` command shows "writing the cache" on its status line meanwhile)."""
    writer = _Writer()
    token = _WRITER.set(writer)
    try:
        yield
    except KeyboardInterrupt:
        writer.abandon()
        raise
    except BaseException:
        # the entries are still good (a command that failed after its load keeps them); the
        # command's own error is the one to raise
        writer.finish(raise_error=False, waiting=waiting)
        raise
    else:
        writer.finish(waiting=waiting)
    finally:
        _WRITER.reset(token)


def run(write: Callable[..., Any], *args: Any, now: bool = False) -> None:
    """`write(*args)`: on the block's background thread inside `writes_behind()`, else (or
    when `now`) in line."""
    writer = _WRITER.get()
    if writer is None or now:
        write(*args)
    else:
        writer.submit(write, args)
