"""Process-wide settings of the `tracekit` command, applied at its start and nowhere else.

`configure(argv)` runs in `tracekit.cli.main` before anything imports Polars: it chooses
jemalloc's settings for Polars through `_RJEM_MALLOC_CONF` (read once, when Polars loads),
keeps glibc to one malloc arena, and raises the cycle collector's threshold. `trimming(on)`
is a block, entered by the command around a large trace's analyses, in which a thread hands
glibc's free heap back. The library (`tracekit.load`, `analyse`, `run_batch`) never imports
this package: a script keeps the allocators and collector it set up, or Python's and
Polars' defaults. `docs/loader.md` (Memory) says what each setting is for.
"""

from __future__ import annotations

import gc

from tracekit.runtime.allocator import analyses, configure_allocators, jemalloc_settings
from tracekit.runtime.trim import trimming
from tracekit.sizes import trace_bytes

__all__ = [
    "GC_THRESHOLD",
    "analyses",
    "configure",
    "configure_allocators",
    "configure_gc",
    "jemalloc_settings",
    "trace_bytes",
    "trimming",
]

# A command makes a few hundred thousand container objects that live until it exits
# (modules, frames' metadata, the report model, compiled templates) and little cyclic
# garbage: with Python's default threshold (700 allocations) the collector walks the same
# live objects again and again.
GC_THRESHOLD = 20_000


def configure(argv: list[str]) -> bool:
    """Set the process up for the command of `argv` (its arguments, without the program):
    the allocators for the size of its trace files and whether it analyses them, and the
    collector. False when Polars was imported already (jemalloc's settings are then fixed)."""
    configure_gc()
    return configure_allocators(trace_bytes(argv), analyses(argv))


def configure_gc() -> None:
    """The cycle collector's first threshold at `GC_THRESHOLD` (the others as they are)."""
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
