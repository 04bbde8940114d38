"""Polars' jemalloc found by its symbol and told to purge; a no-op wherever that cannot be done."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import jemalloc

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps: Linux only")

# Frees 400 MB of Polars columns, then prints RSS (MiB) before and after a purge.
PURGE = """
import os, polars as pl
from tracekit import jemalloc
rss = lambda: int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') >> 20
cols = [pl.Series(range(5_000_000)) for _ in range(10)]
del cols
before = rss()
print(jemalloc.purge(), before, rss())
"""


def run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("_RJEM_MALLOC_CONF", "TRACEKIT_JEMALLOC_PURGE")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**clean, **env}).stdout.split()


@linux
def test_purge_hands_freed_polars_memory_back():
    done, before, after = run(PURGE)
    assert done == "True"
    assert int(before) - int(after) >= 300  # 400 MB of columns were freed and kept by jemalloc until now


# Holds, then frees, 400 MB of Polars columns: the active bytes (MiB) before, while and after.
ACTIVE = """
import polars as pl
from tracekit import jemalloc
mib = lambda: jemalloc.active_bytes() >> 20
before = mib()
cols = [pl.Series(range(5_000_000)) for _ in range(10)]
held = mib()
del cols
print(before, held, mib())
"""


@linux
def test_active_bytes_count_what_polars_holds_and_not_what_it_freed():
    before, held, after = map(int, run(ACTIVE))
    assert 380 <= held - before <= 420  # ten columns of 5M Int64 values: 381.5 MiB
    assert after - before < 10  # freed: no longer counted, though not handed back (no purge)


# Frees 400 MB of Polars columns: the freed pages jemalloc keeps (MiB), then a purge over a
# cap above them (nothing done), one below them (done), and what is kept after it.
DIRTY = """
import polars as pl
from tracekit import jemalloc
mib = lambda: jemalloc.dirty_bytes() >> 20
cols = [pl.Series(range(5_000_000)) for _ in range(10)]
kept_before = mib()
del cols
kept = mib()
print(kept_before, kept, jemalloc.purge_over(1 << 40), jemalloc.purge_over(64 << 20), mib())
"""


@linux
def test_dirty_bytes_count_the_freed_pages_kept_and_a_purge_over_a_cap_hands_them_back():
    kept_before, kept, over_huge, over_cap, after = run(DIRTY, _RJEM_MALLOC_CONF="dirty_decay_ms:10000")
    assert int(kept) - int(kept_before) >= 300  # 381.5 MiB of columns freed, kept by a long decay
    assert (over_huge, over_cap) == ("False", "True")
    assert int(after) < 16  # handed back


@linux
def test_no_active_bytes_where_mallctl_is_not_found():
    code = ("import sys; from tracekit import jemalloc; print(jemalloc.active_bytes()); "
            "import polars; print(jemalloc.active_bytes() is None)")
    assert run(code) == ["None", "False"]
    assert run(code, TRACEKIT_JEMALLOC_PURGE="0") == ["None", "True"]


@linux
def test_purge_can_be_turned_off():
    done, before, after = run(PURGE, TRACEKIT_JEMALLOC_PURGE="0")
    assert done == "False"
    assert int(before) - int(after) < 50


@linux
def test_nothing_to_purge_before_polars_is_imported_and_then_there_is():
    code = ("import sys; from tracekit import jemalloc; print(jemalloc.purge(), 'polars' in sys.modules); "
            "import polars; print(jemalloc.purge())")
    assert run(code) == ["False", "False", "True"]


@linux
def test_another_mapping_of_the_library_does_not_mislead_it():
    """A reader that maps Polars' library itself (a Rust backtrace does) adds a mapping of the
    file at offset 0 below the loader's: the address must not be taken from the mappings."""
    code = ("import mmap, sys, polars; from tracekit import jemalloc; "
            "f = open(sys.modules['polars._plr'].__file__, 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); "
            "print(jemalloc.purge())")
    assert run(code) == ["True"]


def test_a_file_that_is_not_elf_has_no_symbol(tmp_path):
    path = tmp_path / "lib.so"
    path.write_bytes(b"MZ" + b"\0" * 200)
    with open(path, "rb") as fh, pytest.raises(ValueError, match="ELF"):
        jemalloc._symbol(fh, b"_rjem_mallctl")


def elf(symbols: list[tuple[bytes, int, int, int]]) -> bytes:
    """A minimal 64-bit ELF: a section table with a string table and a symbol table of
    (name, info, value, size), and nothing else (`jemalloc` reads no program header)."""
    strtab = b"\0"
    entries = [b"\0" * 24]
    for name, info, value, size in symbols:
        entries.append(struct.pack("<IBBHQQ", len(strtab), info, 0, 1, value, size))
        strtab += name + b"\0"
    symtab = b"".join(entries)
    strtab_at = 64
    symtab_at = strtab_at + len(strtab)
    shoff = symtab_at + len(symtab)
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, 3, 0)
    sections = (b"\0" * 64
                + struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, strtab_at, len(strtab), 0, 0, 1, 0)
                + struct.pack("<IIQQQQIIQQ", 0, 2, 0, 0, symtab_at, len(symtab), 1, 0, 8, 24))
    return bytes(head) + strtab + symtab + sections


def test_symbol_of_a_made_elf(tmp_path):
    path = tmp_path / "lib.so"
    path.write_bytes(elf([(b"x_rjem_mallctl", 0x12, 0x500, 10),  # a longer name that ends the same
                          (b"_rjem_mallctl", 0x11, 0x600, 8),  # an object, not a function
                          (b"_rjem_mallctl", 0x12, 0x700, 140),
                          (b"other", 0x12, 0x800, 4)]))
    with open(path, "rb") as fh:
        assert jemalloc._symbol(fh, b"_rjem_mallctl") == 0x700
        assert jemalloc._symbol(fh, b"missing") is None
        assert jemalloc._symbol(fh, b"_rjem_mallctl", jemalloc.SHT_DYNSYM) is None  # not exported


def test_a_stripped_file_has_no_symbol(tmp_path):
    data = bytearray(elf([(b"_rjem_mallctl", 0x12, 0x700, 140)]))
    shoff, = struct.unpack_from("<Q", data, 0x28)
    struct.pack_into("<I", data, shoff + 2 * 64 + 4, 8)  # the symbol table's type -> SHT_NOBITS
    path = tmp_path / "lib.so"
    path.write_bytes(bytes(data))
    with open(path, "rb") as fh:
        assert jemalloc._symbol(fh, b"_rjem_mallctl") is None


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 300), at=st.lists(st.integers(0, 299), max_size=4), step=st.integers(1, 64))
def test_find_returns_the_last_match_wherever_the_reads_cut(size, at, step):
    needle = b"\0ab\0"
    data = bytearray(b"x" * size)
    places = sorted({a for a in at if a + len(needle) <= size})
    for a in places:
        data[a:a + len(needle)] = needle
    expected = data.rfind(needle)  # overlapping writes may have broken earlier ones
    old = jemalloc.STEP
    jemalloc.STEP = step
    try:
        found = jemalloc._find(io.BytesIO(b"HEAD" + bytes(data) + b"TAIL"), needle, 4, size)
    finally:
        jemalloc.STEP = old
    assert found == (None if expected < 0 else expected + 4)


@linux
def test_odd_modules_and_mapped_names_neither_raise_nor_stop_the_purge(tmp_path):
    """A non-text key in sys.modules, and a mapped file whose name is not UTF-8 listed before
    Polars' code, must not escape `purge()` or turn it off."""
    odd = os.fsencode(str(tmp_path)) + b"/\xff.bin"
    code = ("import mmap, os, sys, polars; from tracekit import jemalloc; "
            "sys.modules[('not', 'text')] = sys; "
            f"fd = os.open({odd!r}, os.O_RDWR | os.O_CREAT); os.ftruncate(fd, 1 << 20); "
            "m = mmap.mmap(fd, 1 << 20); m[0] = 1; print(jemalloc.purge())")
    assert run(code) == ["True"]
