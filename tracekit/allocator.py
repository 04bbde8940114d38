"""Memory allocator settings for the `tracekit` command (a library import changes nothing),
and the hand-backs of freed memory a load makes where nobody chose them (`purge`, `trim`).

A load frees large buffers at a high rate: decompressed text, each chunk's columns,
intermediate frames. Polars' jemalloc keeps freed pages for 500 ms by default
(`dirty_decay_ms`), so the peak grows with everything allocated in the last half second
rather than with what is live. The command asks for a shorter decay instead (below), and for one arena
(`narenas:1`: each arena keeps its own freed pages, and Polars' threads and ours would
otherwise spread over eight). This must be set before Polars is imported (it reads
`_RJEM_MALLOC_CONF` then); a value the user set wins.

One arena and 20 ms, against 50 ms and jemalloc's arenas per CPU, in 20 alternating runs
of a load of the 54 MB trace: peak RSS median 153 MiB (146-161) against 159 MiB (151-172),
time median 0.408 s against 0.424 s; `tracekit report` on it 316-329 MiB against 331-343 MiB
in the same time (6 runs each), and on the 1 GB trace 53.5 s and 4.71 GiB against 56.1 s
and 4.64 GiB (one run each). The decay alone (50 ms) had taken the 1 GB trace's load peak
from 2.11-2.25 GB to 1.57-2.18 GB in about the same time (7.3-8.7 s either way; the peak
depends on how the threads interleave).

It also keeps glibc to one malloc arena (`_one_arena`), unless `MALLOC_ARENA_MAX` is set.
Fixing glibc's mmap threshold as well saved little more and cost 45 % in time, so that is
left alone; `release()` hands glibc's free heap back once a load's text is gone.

The decay depends on how much JSON the command's trace files hold (`trace_bytes`, known
from their sizes before anything is read). Below `SMALL_TRACE_BYTES` the pages a short
decay hands back are a few MB, and fetching them again costs more than they save: on the
54 MB trace `tracekit report` took a median 1.757 s with `SMALL_DECAY_MS` against 1.883 s
with 20 ms (12 alternating runs; 68k page faults against 102k), peaking at 253 against
247 MiB. Above it, a command that analyses its traces takes `ANALYSIS_DECAY_MS`: the
analyses free and allocate Polars frames at a high rate, and with 20 ms most of the 1 GB
report's system time was page faults. In four alternating pairs of `tracekit report
--no-cache` on the 1 GB trace, 200 ms took 28.9-32.7 s against 31.4-40.1 s for 20 ms (each
pair faster, by 2.5-7.4 s), with 4.6-4.8 M page faults against 5.2-5.8 M and a peak 22-116 MB
(1-4 %) higher, at 2.86-2.91 GiB; 100 ms faulted as often as 20 ms, and 1000 ms had saved
1-2 s but peaked up to 170 MB higher. `tracekit info` only loads: there 200 ms raised the
1 GB trace's peak from 1.29-1.32 to 1.39-1.42 GiB for no time saved (two pairs), so the
commands of `LOAD_ONLY` keep `DECAY_MS`. Traces of unknown size (a folder, a file that is
not there yet) count as large.

jemalloc serves allocations over 8 MiB (`oversize_threshold`) from an arena of their own
that hands their pages back at once, whatever the decay: at scale most of a frame's
columns are that large, and every new one was faulted in afresh. The settings send them
through the one arena and its decay instead (`oversize_threshold:0`). On the 1 GB report
(`--no-cache`, five alternating pairs, `/usr/bin/time`) that took the page faults from a
median 4.46 M to 3.88 M, the system time from 13.4 s to 12.1 s, the CPU time from 46.6 s to
43.5 s and the wall time from 29.4 s to 27.3 s (the machine's spread: 26.1-37.8 s), with the
peak at 2.92 GB against 2.97 GB. `tracekit info` on it (load only, 20 ms) faulted 0.74-1.22 M
times against 1.14-1.31 M, peaking at 1.24-1.29 GB against 1.26-1.34 GB (three pairs);
the 54 MB report, with few allocations that large, kept its time, CPU and peak (eight pairs).

`tracekit.allocator.configure()` before any other import does the same for a script.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

DECAY_MS = 20  # commands that only load (LOAD_ONLY)
ANALYSIS_DECAY_MS = 200  # commands that analyse what they load
SMALL_DECAY_MS = 1000  # for traces under SMALL_TRACE_BYTES of JSON
SMALL_TRACE_BYTES = 128 * 10**6
LOAD_ONLY = ("info",)  # commands that load traces and analyse nothing
POLARS_DEFAULT = "dirty_decay_ms:500,muzzy_decay_ms:1000"  # what `import polars` (2.x) writes first
POLARS_THP = ",thp:always,metadata_thp:always"  # and after it with POLARS_THP=1


def _settings(decay_ms: int) -> str:
    """One arena, the decay, and large allocations through the arena (`oversize_threshold:0`)."""
    return f"narenas:1,dirty_decay_ms:{decay_ms},muzzy_decay_ms:0,oversize_threshold:0"


JEMALLOC = _settings(DECAY_MS)
ANALYSIS_JEMALLOC = _settings(ANALYSIS_DECAY_MS)
M_ARENA_MAX = -8  # glibc's mallopt parameter
GZIP_MAGIC = b"\x1f\x8b"


def configure(trace_bytes: int | None = None, analyses: bool = True) -> bool:
    """Apply the settings for traces of `trace_bytes` of JSON in all (None: unknown, as
    large), loaded to be analysed (`analyses`) or only loaded; False when Polars was
    imported already (jemalloc is then fixed)."""
    global _OURS
    if "polars" in sys.modules:
        return False
    if _users_jemalloc() is None:
        os.environ["_RJEM_MALLOC_CONF"] = jemalloc_settings(trace_bytes, analyses)
        _OURS = True
    if "MALLOC_ARENA_MAX" not in os.environ:
        _one_arena()
    return True


_OURS = False  # `configure` chose jemalloc's settings (not the user)
DIRTY_CAP_BYTES = 64 << 20  # freed pages jemalloc may keep while a large trace is analysed (`cap_dirty`)


def cap_dirty() -> bool:
    """While a large trace is analysed and reported (`analyse.bounded_memory`): hand
    jemalloc's freed pages back once it keeps more than `DIRTY_CAP_BYTES`, when `configure`
    chose its settings (its decay keeps them 200 ms, and at the 1 GB report's peaks it kept
    0.03-0.43 GiB; a user's own settings are left alone). Whether it did."""
    if not _OURS:
        return False
    from tracekit import jemalloc

    return jemalloc.purge_over(DIRTY_CAP_BYTES)


def jemalloc_settings(trace_bytes: int | None, analyses: bool = True) -> str:
    """One arena and a decay: `SMALL_DECAY_MS` when the traces are known to be small, else
    `ANALYSIS_DECAY_MS` for a command that analyses them (`ANALYSIS_JEMALLOC`) and
    `DECAY_MS` for one that only loads them (`JEMALLOC`)."""
    if trace_bytes is not None and trace_bytes < SMALL_TRACE_BYTES:
        return _settings(SMALL_DECAY_MS)
    return ANALYSIS_JEMALLOC if analyses else JEMALLOC


def analyses(args: list[str]) -> bool:
    """Whether the command of these arguments analyses its traces: all but `LOAD_ONLY`
    (the first argument that is not an option names the command)."""
    return next((a for a in args if not a.startswith("-")), None) not in LOAD_ONLY


def trace_bytes(args: list[str]) -> int | None:
    """The JSON text held by the files among a command's arguments (a gzip file counts
    the uncompressed size its trailer gives). None when no argument is a file, when one
    is a folder (a batch or a set of ranks: its size is not looked into), or when a gzip
    trailer cannot be trusted (it keeps the size modulo 4 GiB)."""
    total, files = 0, 0
    for arg in args:
        if arg.startswith("-"):
            continue
        try:
            if os.path.isdir(arg):
                return None
            if not os.path.isfile(arg):
                continue
            size = os.path.getsize(arg)
            with open(arg, "rb") as fh:
                if fh.read(2) == GZIP_MAGIC:
                    fh.seek(-4, os.SEEK_END)
                    inflated = int.from_bytes(fh.read(4), "little")
                    if inflated < size:  # past 4 GiB (or not one gzip member): unknown
                        return None
                    size = inflated
        except OSError:
            continue
        total += size
        files += 1
    return total if files else None


def _users_jemalloc() -> str | None:
    """The jemalloc settings a user gave, if any. `import polars` writes its own defaults
    into `_RJEM_MALLOC_CONF` (with a user's value appended), and every process started
    from that one inherits them: those defaults alone are not a user's choice."""
    conf = os.environ.get("_RJEM_MALLOC_CONF")
    if conf is None:
        return None
    rest = conf
    while rest.startswith(POLARS_DEFAULT):
        rest = rest.removeprefix(POLARS_DEFAULT).removeprefix(POLARS_THP).lstrip(",")
    return rest or None


def _one_arena() -> None:
    """glibc: one malloc arena for every thread (glibc reads MALLOC_ARENA_MAX only at start,
    hence `mallopt`). The reading threads' arenas each kept freed text buffers: one arena
    took the 54 MB trace's peak from 196-201 MB to 176-181 MB, in the same time."""
    _glibc("mallopt", M_ARENA_MAX, 1)


def release() -> None:
    """Hand free heap memory back to the system now: glibc's (`malloc_trim`) and jemalloc's
    (Polars', `purge`, unless the allocators were `chosen`); each a no-op where it cannot be done."""
    trim_heap()
    purge()


def purge() -> None:
    """Hand the pages Polars' jemalloc keeps after a free back to the system now
    (`tracekit.jemalloc`), unless the process's allocators were chosen (`chosen`): a load
    calls it as each frame is built and that frame's chunk parts go."""
    if chosen():
        return
    from tracekit import jemalloc

    jemalloc.purge()


def trim() -> None:
    """glibc's free heap back to the system, unless the process's allocators were chosen: a
    load calls it every `TRIM_EVERY` chunks of its read, whose threads each free their text
    buffers into a malloc arena of their own."""
    if not chosen():
        trim_heap()


def trim_heap() -> None:
    """glibc's free heap back to the system now (`malloc_trim`), whoever chose the
    allocators: jemalloc's decay is a choice, glibc keeping what it freed is not. The C
    passes of the analyses allocate their columns with glibc's malloc, and past its dynamic
    mmap threshold (raised by each large free, up to 32 MiB) those columns come from the
    heap, which keeps them once they go: in the 1 GB report the heap held 0.19-0.23 GiB free
    from the load's end on, and a trim gave 67-110 MiB of RSS back in 2-7 ms. While a large
    trace's analyses run, `analyse()` trims every `analyse.TRIM_EVERY_S`."""
    _glibc("malloc_trim", 0)


def chosen() -> bool:
    """Whether `configure` or the user (`_RJEM_MALLOC_CONF`, `MALLOC_ARENA_MAX`) set this
    process's allocators up (`configure` writes its settings into `_RJEM_MALLOC_CONF`, so
    `_users_jemalloc` finds them as it finds a user's). A load then leaves them to it (`purge`, `trim`): the command's
    decay is chosen for its traces' size, and pages kept on purpose would be fetched again.

    A script that left them as they come (jemalloc as Polars sets it, 500 ms; glibc's arena
    per thread) gets the purges and trims. Ten rounds of alternating loads of the 54 MB
    trace, each `tracekit.load` alone in a fresh process: peak RSS median 139 MiB (136-142)
    with both, 157 MiB (154-166) with the trims alone, 160.5 MiB (157-170) with neither.
    They cost time, as pages handed back are faulted in again: medians 0.380 s against
    0.367 s in that set, 0.507 s against 0.421 s in a slower hour (8 rounds), and 0.402 s
    against 0.339 s for the purges alone (8 rounds; 149 against 160 MiB). Purging after the
    three largest frames only saved a third of that time for a peak 1-9 MiB higher. On the
    1 GB trace the load took the same time or less (5.7 s against 6.0-6.1 s) and peaked at
    1,338 MiB against 1,642-1,655 MiB."""
    return _users_jemalloc() is not None or "MALLOC_ARENA_MAX" in os.environ


def _glibc(function: str, *args: int) -> None:
    """Call a glibc malloc function; nothing on other platforms or C libraries."""
    libc = _libc()
    if libc is not None:
        try:
            getattr(libc, function)(*args)
        except AttributeError:  # not glibc
            pass


@functools.cache
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None
