"""The allocator settings of the `tracekit` command: jemalloc's (Polars') through its
documented `_RJEM_MALLOC_CONF` variable, and glibc's arena count through `mallopt`.

jemalloc keeps freed pages for `dirty_decay_ms` (Polars sets 500 ms), so a process that
frees large buffers at a high rate peaks with everything freed in the last half second.
The command asks for one arena (`narenas:1`: each arena keeps its own freed pages),
a decay that follows its traces' size and whether it analyses them, no muzzy pages, and
large allocations through that arena (`oversize_threshold:0`: else each is faulted in
afresh). A value the user set wins; Polars' own defaults, inherited from a parent process
that imported Polars, are not a user's choice.
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
M_ARENA_MAX = -8  # glibc's mallopt parameter


def _settings(decay_ms: int) -> str:
    """One arena, the decay, and large allocations through the arena (`oversize_threshold:0`)."""
    return f"narenas:1,dirty_decay_ms:{decay_ms},muzzy_decay_ms:0,oversize_threshold:0"


JEMALLOC = _settings(DECAY_MS)
ANALYSIS_JEMALLOC = _settings(ANALYSIS_DECAY_MS)


def configure_allocators(trace_bytes: int | None = None, analyses: bool = True) -> bool:
    """Apply the settings for traces of `trace_bytes` of JSON in all (None: unknown, as
    large), loaded to be analysed (`analyses`) or only loaded; False when Polars was
    imported already (jemalloc is then fixed). `MALLOC_ARENA_MAX`, when set, wins."""
    if "polars" in sys.modules:
        return False
    if users_jemalloc() is None:
        os.environ["_RJEM_MALLOC_CONF"] = jemalloc_settings(trace_bytes, analyses)
    if "MALLOC_ARENA_MAX" not in os.environ:
        glibc("mallopt", M_ARENA_MAX, 1)  # glibc reads MALLOC_ARENA_MAX only at start
    return True


def jemalloc_settings(trace_bytes: int | None, analyses: bool = True) -> str:
    """One arena and a decay: `SMALL_DECAY_MS` when the traces are known to be small (the
    few MB a short decay hands back cost more to fault in again than they save), else
    `ANALYSIS_DECAY_MS` for a command that analyses them and `DECAY_MS` for one that only
    loads them."""
    if trace_bytes is not None and trace_bytes < SMALL_TRACE_BYTES:
        return _settings(SMALL_DECAY_MS)
    return ANALYSIS_JEMALLOC if analyses else JEMALLOC


def analyses(args: list[str]) -> bool:
    """Whether the command of these arguments analyses its traces: all but `LOAD_ONLY`
    (the first argument that is not an option names the command)."""
    return next((a for a in args if not a.startswith("-")), None) not in LOAD_ONLY


def users_jemalloc() -> str | None:
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


def trim_heap() -> None:
    """glibc's free heap back to the system now (`malloc_trim`): the C passes allocate
    their columns with glibc's malloc, and the heap keeps them once they go."""
    glibc("malloc_trim", 0)


def glibc(function: str, *args: int) -> None:
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
