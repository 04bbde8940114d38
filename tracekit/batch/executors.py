"""Where a batch's jobs run: in-line (`jobs=1`), a local pool of spawned processes that die
with the batch and is restarted once one has died (`Pool`), a Dask cluster
(`dask://HOST:PORT`) or any `concurrent.futures.Executor` (`open_executor`)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any

from tracekit.batch.worker import die_with_parent
from tracekit.errors import UsageError
from tracekit.sizes import usable_cpus


class InlineExecutor(Executor):
    """Runs each job at once in this process (`jobs=1`): no pool, no pickling."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001  (delivered through the future, like a pool would)
            fut.set_exception(exc)
        return fut


@contextlib.contextmanager
def open_executor(
    executor: Executor | str | None, jobs: int | None, *, tasks: int | None = None
) -> Iterator[tuple[Executor | Pool, int]]:
    """(executor, how many jobs may be in flight); pools opened here are closed here.

    The local pool has `jobs` processes (default: the CPUs this process may use), never more
    than `tasks`; one process means in-line.
    """
    if isinstance(executor, Executor):
        yield executor, 2 * _workers(executor)
        return
    if isinstance(executor, str):
        with _dask(executor) as pair:
            yield pair
        return
    if executor is not None:
        raise UsageError(
            f"executor must be a concurrent.futures.Executor or 'dask://HOST:PORT', not {executor!r}"
        )
    n = min(jobs or default_jobs(), tasks or sys.maxsize)
    if n <= 1:
        yield InlineExecutor(), 1
        return
    pool = Pool(n)
    try:
        yield pool, 2 * n
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


class Pool:
    """The local worker processes (spawn), which die with this process
    (`worker.die_with_parent`), and which `restart` replaces once one has died."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool = self._start()

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=die_with_parent, initargs=(os.getpid(),))

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future:
        return self._pool.submit(fn, *args)

    def restart(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._start()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def default_jobs() -> int:
    """One job per CPU this process may run on."""
    return usable_cpus()


@contextlib.contextmanager
def _dask(address: str) -> Iterator[tuple[Executor, int]]:
    if not address.startswith("dask://"):
        raise UsageError(f"unknown executor {address!r}: expected dask://HOST:PORT")
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--executor dask://... needs Dask: pip install 'tracekit-gpu[cluster]'") from None
    try:
        client = Client("tcp://" + address[len("dask://") :], timeout=30)
    except OSError as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    try:
        yield client.get_executor(), 2 * max(1, sum(client.nthreads().values()))
    finally:
        client.close()


def _workers(executor: Executor) -> int:
    client = getattr(executor, "_client", None)  # distributed's ClientExecutor
    if client is not None:
        return max(1, sum(client.nthreads().values()))
    return int(getattr(executor, "_max_workers", 0) or 8)
