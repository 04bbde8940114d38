"""What is known before anything is read: how much JSON a command's trace files hold, and
the CPUs and memory of the machine it runs on."""

from __future__ import annotations

import os

GZIP_MAGIC = b"\x1f\x8b"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def machine_memory() -> int | None:
    """The machine's physical memory in bytes; None where it is not known (not POSIX)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


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
