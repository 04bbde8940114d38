"""Memory allocator settings for the `tracekit` command (a library import changes nothing).

A load frees large buffers at a high rate: decompressed text, each chunk's columns,
intermediate frames. Polars' jemalloc keeps freed pages for 500 ms by default
(`dirty_decay_ms`), so the peak grows with everything allocated in the last half second
rather than with what is live. The command asks for `DECAY_MS` instead. This must be set
before Polars is imported (it reads `_RJEM_MALLOC_CONF` then); a value the user set wins.
It also keeps glibc to one malloc arena (`_one_arena`), unless `MALLOC_ARENA_MAX` is set.

Measured on the 1 GB benchmark trace (one load per process, several runs each way): peak RSS
1.57-2.18 GB with this setting against 2.11-2.25 GB without, in about the same time
(7.3-8.7 s either way; the peak depends on how the threads interleave). Fixing glibc's mmap
threshold as well saved little more and cost 45 % in time, so that is left alone;
`release()` hands glibc's free heap back once a load's text is gone.

`tracekit.allocator.configure()` before any other import does the same for a script.
"""

from __future__ import annotations

import ctypes
import os
import sys

DECAY_MS = 50
M_ARENA_MAX = -8  # glibc's mallopt parameter


def configure() -> bool:
    """Apply the settings; False when Polars was imported already (jemalloc is then fixed)."""
    if "polars" in sys.modules:
        return False
    if "_RJEM_MALLOC_CONF" not in os.environ:
        os.environ["_RJEM_MALLOC_CONF"] = f"dirty_decay_ms:{DECAY_MS},muzzy_decay_ms:0"
    if "MALLOC_ARENA_MAX" not in os.environ:
        _one_arena()
    return True


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


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None
