"""Memory allocator settings for the `tracekit` command (a library import changes nothing).

A load frees large buffers at a high rate: decompressed text, each chunk's columns,
intermediate frames. Two allocators keep freed memory resident by default, so the
process's peak grows with everything allocated rather than with what is live:

- Polars' jemalloc returns freed pages after 500 ms (`dirty_decay_ms`); the CLI asks for
  `DECAY_MS` instead. This must be set before Polars is imported (it reads
  `_RJEM_MALLOC_CONF` then); a value the user set wins.
- glibc's malloc raises its mmap threshold after large frees, after which big buffers come
  from the heap and stay there; the CLI fixes the threshold at `MMAP_THRESHOLD`.

`python -c 'import tracekit.allocator as a; a.configure()'` before any other import does
the same for a script. `benchmarks/load.py` measures both ways.
"""

from __future__ import annotations

import ctypes
import os
import sys

DECAY_MS = 50
MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter


def configure() -> bool:
    """Apply the settings; False when Polars was imported already (jemalloc is then fixed)."""
    _glibc_threshold()
    if "polars" in sys.modules:
        return False
    if "_RJEM_MALLOC_CONF" not in os.environ:
        os.environ["_RJEM_MALLOC_CONF"] = f"dirty_decay_ms:{DECAY_MS},muzzy_decay_ms:0"
    return True


def release() -> None:
    """Hand free heap memory back to the system now (glibc; a no-op elsewhere)."""
    libc = _libc()
    if libc is not None:
        try:
            libc.malloc_trim(0)
        except AttributeError:
            pass


def _glibc_threshold() -> None:
    libc = _libc()
    if libc is not None:
        try:
            libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        except AttributeError:
            pass


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None
