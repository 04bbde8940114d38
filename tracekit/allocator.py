"""Memory allocator settings for the `tracekit` command (a library import changes nothing).

A load frees large buffers at a high rate: decompressed text, each chunk's columns,
intermediate frames. Polars' jemalloc keeps freed pages for 500 ms by default
(`dirty_decay_ms`), so the peak grows with everything allocated in the last half second
rather than with what is live. The command asks for `DECAY_MS` instead, and for one arena
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

`tracekit.allocator.configure()` before any other import does the same for a script.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

DECAY_MS = 20
POLARS_DEFAULT = "dirty_decay_ms:500,muzzy_decay_ms:1000"  # what `import polars` (2.x) writes first
POLARS_THP = ",thp:always,metadata_thp:always"  # and after it with POLARS_THP=1
JEMALLOC = f"narenas:1,dirty_decay_ms:{DECAY_MS},muzzy_decay_ms:0"
M_ARENA_MAX = -8  # glibc's mallopt parameter


def configure() -> bool:
    """Apply the settings; False when Polars was imported already (jemalloc is then fixed)."""
    if "polars" in sys.modules:
        return False
    if _users_jemalloc() is None:
        os.environ["_RJEM_MALLOC_CONF"] = JEMALLOC
    if "MALLOC_ARENA_MAX" not in os.environ:
        _one_arena()
    return True


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
    """Hand free heap memory back to the system now (glibc; a no-op elsewhere)."""
    _glibc("malloc_trim", 0)


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
