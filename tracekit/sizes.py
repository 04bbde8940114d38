"""How much JSON a command's trace files hold, known from the files before anything is read."""

from __future__ import annotations

import os

GZIP_MAGIC = b"\x1f\x8b"


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
