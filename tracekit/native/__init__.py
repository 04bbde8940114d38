"""The C parts of tracekit, and the one place that decides whether they run.

`_scan.c` (the loader's scanner), `_slices.c` and `_paths.c` (passes of the analysis and
the report) are built with the package when a C compiler is there; `_arrow.h` is the
Arrow C data interface they hand columns to Polars through. Every analysis pass has a
Polars or Python reference that gives the same answers without them.

The choice is made once, at import: the C passes run when they are built and
`TRACEKIT_NATIVE=0` is not in the environment (the same switch turns off the loader's
scanner, `available`). An analysis registers each pass once (`register`: its C route and
its reference, one signature) and calls the function it gets back: no branch on the
choice outside this package. A C route returns None for input outside its shape (a null,
sparse ids, sums beyond 64 bits); the reference answers those. `use` switches the choice
for a block (the parity tests run every pass both ways).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar


def _built(name: str) -> Any:
    """The extension module `name`, or None where it was not built (no C compiler)."""
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError:
        return None


_paths, _slices, _scan = _built("_paths"), _built("_slices"), _built("_scan")

C, REFERENCE = "c", "reference"
SWITCH = "TRACEKIT_NATIVE"  # "0" turns every C part off
T = TypeVar("T")


def switched_off() -> bool:
    """`TRACEKIT_NATIVE=0` is in the environment now."""
    return os.environ.get(SWITCH, "1") == "0"


BUILT = _paths is not None and _slices is not None  # the analysis's C passes are importable
_choice = C if BUILT and not switched_off() else REFERENCE


def enabled() -> bool:
    """The analysis's passes run in C (decided at import; `use` switches it for a block)."""
    return _choice == C


def available() -> bool:
    """The loader's scanner is built and not turned off (the switch read on each call, so
    that a test or a script can turn the scanner off for one load)."""
    return _scan is not None and not switched_off()


@contextmanager
def use(kind: str) -> Iterator[None]:
    """Run every registered pass as `kind` (C or REFERENCE) inside the block."""
    global _choice
    if kind not in (C, REFERENCE):
        raise ValueError(f"no implementation {kind!r}: {C!r} or {REFERENCE!r}")
    if kind == C and not BUILT:
        raise RuntimeError("the C passes are not built (no C compiler at install)")
    before, _choice = _choice, kind
    try:
        yield
    finally:
        _choice = before


class Pass(Generic[T]):
    """One pass: its C route (None: not in its shape) and its reference, one signature."""

    def __init__(self, name: str, c: Callable[..., T | None], reference: Callable[..., T]) -> None:
        self.name, self.c, self.reference = name, c, reference
        self.__doc__ = reference.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> T:
        if _choice == C:
            found = self.c(*args, **kwargs)
            if found is not None:
                return found
        return self.reference(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<pass {self.name}>"


PASSES: dict[str, Pass[Any]] = {}


def register(name: str, *, c: Callable[..., T | None], reference: Callable[..., T]) -> Pass[T]:
    """The pass `name` as one function: its C route where the choice is C, else (or where
    the C route returns None) the reference."""
    found = PASSES[name] = Pass(name, c, reference)  # (a module imported again replaces its own)
    return found
