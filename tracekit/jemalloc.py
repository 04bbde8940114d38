"""Hand the pages jemalloc keeps after a free back to the system, now.

Polars allocates with jemalloc, which keeps freed pages for `dirty_decay_ms` (500 ms by
Polars' default) before it returns them. A load frees its chunk parts while it builds
the frames, so with that decay a script's peak held both. jemalloc can be told to purge
at once (`mallctl("arena.<all>.purge")`), but Polars does not export `mallctl`: the
function is found here by name in the symbol table of Polars' shared library, at the
address that library is mapped at (`/proc/self/maps`).

Anything unexpected (not Linux, not a 64-bit little-endian ELF, no symbol table, no such
symbol, a `version` answer that is not jemalloc 5) leaves `purge` a no-op. The lookup reads
the library's symbol table once per process, from its end, where jemalloc's names are
(a millisecond or two on this machine; the whole table, 40 MB, would take 20 ms).
`TRACEKIT_JEMALLOC_PURGE=0` turns it off.
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
import sys
from collections.abc import Callable

SYMBOL = b"_rjem_mallctl"  # jemalloc's mallctl as Rust's tikv-jemallocator names it
ALL_ARENAS = 4096  # MALLCTL_ARENAS_ALL
STEP = 1 << 20  # bytes of the file read at a time
SHT_SYMTAB = 2
STT_FUNC = 2
PT_LOAD = 1

MallCtl = Callable[[bytes, object, object, object, int], int]


def purge() -> bool:
    """Return jemalloc's freed pages to the system; False when that cannot be done here."""
    mallctl = _mallctl()
    if mallctl is None:
        return False
    return mallctl(f"arena.{ALL_ARENAS}.purge".encode(), None, None, None, 0) == 0


@functools.cache
def _mallctl() -> MallCtl | None:
    if os.environ.get("TRACEKIT_JEMALLOC_PURGE", "1") == "0" or not sys.platform.startswith("linux"):
        return None
    try:
        return _resolve()
    except (OSError, ValueError, struct.error, StopIteration):
        return None


def _resolve() -> MallCtl | None:
    mapped = _polars_library()
    if mapped is None:
        return None
    path, start = mapped
    with open(path, "rb", buffering=0) as fh:
        found = _symbol(fh, SYMBOL)
        if found is None:
            return None
        base = start - _first_load_address(fh)
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_size_t)
    mallctl = proto(base + found)
    version = ctypes.c_char_p()
    size = ctypes.c_size_t(ctypes.sizeof(version))
    if mallctl(b"version", ctypes.byref(version), ctypes.byref(size), None, 0) != 0:
        return None
    if not (version.value or b"").startswith(b"5."):
        return None
    return mallctl


def _polars_library() -> tuple[str, int] | None:
    """The path of Polars' compiled library and where its first page is mapped, if Polars is loaded."""
    if "polars" not in sys.modules:
        return None
    with open("/proc/self/maps") as fh:
        for line in fh:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or int(fields[2], 16) != 0:
                continue
            path = fields[5].strip()
            name = os.path.basename(path)
            if name.endswith(".so") and "polars" in name:
                return path, int(fields[0].split("-")[0], 16)
    return None


def _header(fh) -> bytes:
    fh.seek(0)
    head = fh.read(64)
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:  # ELF, 64-bit, little-endian
        raise ValueError("not a 64-bit little-endian ELF file")
    return head


def _first_load_address(fh) -> int:
    """The virtual address of the segment mapped from the file's first page."""
    head = _header(fh)
    phoff, = struct.unpack_from("<Q", head, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
    fh.seek(phoff)
    table = fh.read(phentsize * phnum)
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr = struct.unpack_from("<IIQQ", table, i * phentsize)
        if p_type == PT_LOAD:
            if p_offset != 0:
                raise ValueError("first segment does not start at the file's start")
            return p_vaddr & ~0xFFF
    raise ValueError("no loadable segment")


def _symbol(fh, name: bytes) -> int | None:
    """The address of the function `name` in the file's symbol table (`.symtab`)."""
    head = _header(fh)
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
    fh.seek(shoff)
    table = fh.read(shentsize * shnum)
    sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
    symtab = next((s for s in sections if s[1] == SHT_SYMTAB), None)
    if symtab is None:  # stripped
        return None
    _n, _t, _f, _a, offset, size, link, _i, _al, entsize = symtab
    strings = sections[link]
    name_at = _find(fh, b"\0" + name + b"\0", strings[4], strings[5])
    if name_at is None:
        return None
    key = struct.pack("<I", name_at + 1 - strings[4])
    per = (STEP // entsize) * entsize
    for at in reversed(range(offset, offset + size, per)):  # from the end, as the names
        fh.seek(at)
        buf = fh.read(min(per, offset + size - at))
        i = buf.find(key)
        while i >= 0:
            if i % entsize == 0:
                info, = struct.unpack_from("<B", buf, i + 4)
                value, length = struct.unpack_from("<QQ", buf, i + 8)
                if info & 0xF == STT_FUNC and value and length:
                    return value
            i = buf.find(key, i + 1)
    return None


def _find(fh, needle: bytes, start: int, size: int) -> int | None:
    """The file offset of the last `needle` between `start` and `start + size`, read from
    the end (jemalloc is linked last: its names are at the end of the table)."""
    end = start + size
    while end > start:
        at = max(start, end - STEP - len(needle))
        fh.seek(at)
        i = fh.read(end - at).rfind(needle)
        if i >= 0:
            return at + i
        end -= STEP
    return None
