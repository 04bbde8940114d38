"""jemalloc's own count of the pages Polars holds (`active_bytes`), for the benchmarks only.

Polars allocates with jemalloc but does not export `mallctl`: it is found here by name in
the symbol table of Polars' shared library, and placed by an exported function of the same
library whose address the dynamic loader gives. Anything unexpected (not Linux, not a
64-bit little-endian ELF, no symbol table, no such symbol, an address outside the
library's code, a `version` answer that is not jemalloc 5) gives None. tracekit itself
never looks it up.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading
from collections.abc import Callable

SYMBOL = b"_rjem_mallctl"  # jemalloc's mallctl as Rust's tikv-jemallocator names it
ACTIVE = b"stats.arenas.4096.pactive"  # pages in use, every arena together
STEP = 1 << 20  # bytes of the file read at a time
SHT_SYMTAB = 2
SHT_DYNSYM = 11
STT_FUNC = 2

MallCtl = Callable[[bytes, object, object, object, int], int]
_resolved: list[MallCtl | None] = []  # [mallctl or None] once Polars' library was looked at
_lock = threading.Lock()


def _pages(name: bytes) -> int | None:
    """A page count of jemalloc's statistics, in bytes (the counts refreshed first)."""
    mallctl = _mallctl()
    if mallctl is None:
        return None
    epoch = ctypes.c_uint64(1)
    pages, page = ctypes.c_size_t(0), ctypes.c_size_t(0)
    size = ctypes.c_size_t(ctypes.sizeof(pages))
    if mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.sizeof(epoch)) != 0:
        return None
    if mallctl(name, ctypes.byref(pages), ctypes.byref(size), None, 0) != 0:
        return None
    if mallctl(b"arenas.page", ctypes.byref(page), ctypes.byref(size), None, 0) != 0:
        return None
    return pages.value * page.value


def active_bytes() -> int | None:
    """The bytes of the pages jemalloc has handed out and not had back, in every arena: what
    Polars holds, to the page (its active pages, `stats.arenas.<all>.pactive`, counted even
    where jemalloc was built without its statistics, as Polars' is). Unlike RSS it does not
    count the freed pages jemalloc keeps for a while, so it does not move with the
    allocator's timing; it does count pages handed out and not touched yet, which RSS does
    not. None where `mallctl` cannot be found.

    The benchmarks read it to say what each result and each step holds
    (`benchmarks/phases.py`)."""
    return _pages(ACTIVE)


def _mallctl() -> MallCtl | None:
    """jemalloc's `mallctl`, looked up once Polars' library is loaded (None before, and for
    good when it cannot be found or trusted). Never raises."""
    if _resolved:
        return _resolved[0]
    try:
        if not sys.platform.startswith("linux"):
            return None
        library = _polars_library()
        if library is None:  # not imported yet: look again next time
            return None
        with _lock:
            if not _resolved:
                try:
                    _resolved.append(_resolve(library))
                except Exception:  # noqa: BLE001 (a file not as expected: no figure)
                    _resolved.append(None)
        return _resolved[0]
    except Exception:  # noqa: BLE001 (an odd sys.modules or environment: no figure)
        return None


def _resolve(path: str) -> MallCtl | None:
    """`mallctl` in the loaded library at `path`: its address in the symbol table plus where
    the dynamic loader put the library, measured on an exported function (`PyInit_…`,
    whose address the loader gives and whose place in the table is known). The library
    must be the one already loaded (`RTLD_NOLOAD`: never a second copy), the result must fall
    in an executable mapping of the very file the tables were read from (device and inode),
    and it must answer `version` as jemalloc 5."""
    anchor = "PyInit_" + os.path.basename(path).split(".")[0]
    with open(path, "rb", buffering=0) as fh:
        found = _symbol(fh, SYMBOL)
        at = _symbol(fh, anchor.encode(), SHT_DYNSYM)  # a small table: quick to read
        read = os.fstat(fh.fileno())
    if found is None or at is None:
        return None
    loaded = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)  # OSError when not loaded
    exported = ctypes.cast(getattr(loaded, anchor), ctypes.c_void_p).value
    if not exported:
        return None
    address = exported - at + found
    if not _executable(address, read.st_dev, read.st_ino):
        return None
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_size_t)
    mallctl = proto(address)
    version = ctypes.c_char_p()
    size = ctypes.c_size_t(ctypes.sizeof(version))
    if mallctl(b"version", ctypes.byref(version), ctypes.byref(size), None, 0) != 0:
        return None
    if not (version.value or b"").startswith(b"5."):
        return None
    return mallctl


def _polars_library() -> str | None:
    """The path of the compiled library Polars uses (`polars._plr`'s; else a runtime
    package's module), if Polars was imported."""
    modules = dict(sys.modules)
    plr = modules.get("polars._plr")
    runtime = [m for name, m in modules.items() if isinstance(name, str) and name.startswith("_polars_runtime")]
    for module in ([plr] if plr is not None else runtime):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(".so"):
            return os.path.realpath(path)
    return None


def _executable(address: int, device: int, inode: int) -> bool:
    """Whether `address` lies in an executable mapping of the file (`device`, `inode`)."""
    dev = f"{os.major(device):02x}:{os.minor(device):02x}".encode()
    with open("/proc/self/maps", "rb") as fh:  # bytes: mapped names need not be UTF-8
        for line in fh:
            fields = line.split(maxsplit=5)
            if len(fields) < 5 or b"x" not in fields[1] or fields[3] != dev or int(fields[4]) != inode:
                continue
            lo, hi = (int(x, 16) for x in fields[0].split(b"-"))
            if lo <= address < hi:
                return True
    return False


def _header(fh) -> bytes:
    fh.seek(0)
    head = fh.read(64)
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:  # ELF, 64-bit, little-endian
        raise ValueError("not a 64-bit little-endian ELF file")
    return head


def _symbol(fh, name: bytes, table: int = SHT_SYMTAB) -> int | None:
    """The address of the function `name` in the file's symbol table (`.symtab`; or the
    table of exported symbols, `.dynsym`, with SHT_DYNSYM)."""
    head = _header(fh)
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
    fh.seek(shoff)
    headers = fh.read(shentsize * shnum)
    sections = [struct.unpack_from("<IIQQQQIIQQ", headers, i * shentsize) for i in range(shnum)]
    symtab = next((s for s in sections if s[1] == table), None)
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
