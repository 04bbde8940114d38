"""How much of the machine a command lets one trace's analyses take: one thread or two.

Two threads run the pipeline's independent steps faster, but their peaks add up: a command
uses them only with two CPUs to run on, when two steps at once cannot need more than half
the memory (the machine's, or the container's limit), and never for a large trace, where the
default order (the dependency graph let go before any other analysis starts) is what bounds
the peak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.sizes import machine_memory, usable_cpus

if TYPE_CHECKING:
    from tracekit.model import Trace
    from tracekit.pipeline import Runner

LARGE_BYTES = 300_000_000  # frames of this size (`frames_bytes`; about 500 MB of JSON) make a large trace
MEMORY_FACTOR = 13  # a process's peak with two threads, in multiples of `frames_bytes`


def runner_for(trace: Trace) -> Runner:
    """`Threaded(2)` where it is safe (see the module docstring), else the sequential default."""
    from tracekit.pipeline import Threaded, sequential

    size = frames_bytes(trace)
    memory = physical_memory()
    if usable_cpus() < 2 or size >= LARGE_BYTES or (memory is not None and size * MEMORY_FACTOR > memory // 2):
        return sequential
    return Threaded(2)


def large(trace: Trace) -> bool:
    """A trace of `LARGE_BYTES` of frames or more (the command then trims the heap as it goes)."""
    return frames_bytes(trace) >= LARGE_BYTES


def frames_bytes(trace: Trace) -> int:
    """The `estimated_size` of the frames the analyses read, less the columns they do not
    (`model.UNREAD_*_COLUMNS`, the flows: what a lean trace, `loader.lean`, leaves out, so
    that a lean trace counts as its whole)."""
    from tracekit.model import UNREAD_GPU_COLUMNS, UNREAD_OP_COLUMNS, UNREAD_RUNTIME_COLUMNS

    read = (trace.ops.drop(UNREAD_OP_COLUMNS, strict=False),
            trace.runtime.drop(UNREAD_RUNTIME_COLUMNS, strict=False),
            trace.gpu.drop(UNREAD_GPU_COLUMNS, strict=False))
    return sum(int(f.estimated_size()) for f in read)


def physical_memory() -> int | None:
    """The machine's memory, or the container's limit when lower (cgroup v2 `memory.max`)."""
    machine = machine_memory()
    if machine is None:
        return None
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
    except OSError:
        return machine
    return min(machine, int(limit)) if limit.isdigit() else machine
