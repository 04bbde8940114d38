"""The block `analyse()` runs its analyses in (`sharing()`), kept while `analyse()` enters it.

Nothing is shared through it any more: each analysis takes the intermediates it starts
from (op tree, launch calls, GPU links, kernel classes, ...) as arguments and computes
them when not given. The context variable stays so that `sharing()` behaves as before
(nested blocks join the outer one; nothing outlives the block).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_MEMO: ContextVar[dict[Any, Any] | None] = ContextVar("tracekit_shared_frames", default=None)


@contextmanager
def sharing() -> Iterator[None]:
    """A block (nested blocks join the outer one); nothing reads it any more."""
    if _MEMO.get() is not None:
        yield
        return
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)
