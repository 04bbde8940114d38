"""Intermediate frames shared by the analyses of one `analyse()` run.

Many analyses start from the same derived frames of a trace: the cpu_op tree
(`links.cpu_ops`), the launch links (`links.launch_ops`, `links.gpu_links`), the kernel
taxonomy of the GPU names (`taxonomy.classify_names`). Each computed them again, and
together the repeats cost more than most analyses themselves.

Inside `sharing()` (which `analyse()` enters), `remember(name, inputs, compute)` runs
`compute` once per name and identity of the `inputs` and hands back the same frame
afterwards. Outside it, it simply computes: standalone calls (tests, single-analysis
commands) behave as before, and nothing outlives the `with` block. An entry holds its
input objects, so their ids cannot be reused by other objects while it lives; a thread
that asks for an entry another thread is computing waits for that result. The memo is
a context variable: threads and tasks that did not enter `sharing()` never see it.
Results are Polars frames, never modified in place, so sharing one object is safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import polars as pl

from tracekit.model import ENGINE, GROUPING_ENGINE  # noqa: F401  (the analyses import them from here)

T = TypeVar("T")
# The analyses chain their steps into lazy plans on the model's engine rather than run them
# one by one (`tracekit.model.ENGINE`).
_MEMO: ContextVar[dict[Any, Any] | None] = ContextVar("tracekit_shared_frames", default=None)


@contextmanager
def sharing() -> Iterator[None]:
    """Share intermediates computed inside the block (nested blocks join the outer one)."""
    if _MEMO.get() is not None:
        yield
        return
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


class _Entry:
    """One remembered result: the thread that made the entry computes it, any other thread
    asking meanwhile waits for it (so two analyses on two threads never compute it twice)."""

    def __init__(self, inputs: tuple[Any, ...]) -> None:
        self.inputs = inputs  # held so that their ids are not reused while the entry lives
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


_LOCK = threading.Lock()


def remember(name: str, inputs: tuple[Any, ...], compute: Callable[[], T]) -> T:
    """`compute()`, once per (name, identity of each input) inside `sharing()`; a failure
    is raised to every caller of that entry."""
    memo = _MEMO.get()
    if memo is None:
        return compute()
    key = (name, *map(id, inputs))
    with _LOCK:
        entry = memo.get(key)
        mine = entry is None
        if mine:
            entry = memo[key] = _Entry(inputs)
    if mine:
        try:
            entry.value = compute()
        except BaseException as exc:
            entry.error = exc
            raise
        finally:
            entry.done.set()
    else:
        entry.done.wait()
        if entry.error is not None:
            raise entry.error
    return entry.value


def store() -> dict[Any, Any] | None:
    """The memo of the current `sharing()` block (None outside one), for caches of their own
    shape (e.g. the taxonomy by name)."""
    return _MEMO.get()


def sort_order(frame: pl.DataFrame, *by: str, maintain_order: bool = False) -> pl.Series:
    """The rows of `frame` in the order a sort on `by` puts them (ascending), moving none of
    its columns: a caller that keeps only some columns gathers those alone, each in its
    turn (a sort of the whole frame holds every column twice while it runs)."""
    row = pl.int_range(pl.len(), dtype=pl.get_index_type())
    return frame.select(row.sort_by(*by, maintain_order=maintain_order)).to_series()
