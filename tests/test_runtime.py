"""The command sets the allocators and the collector up before Polars loads (`tracekit.runtime`);
the library (`tracekit.load`, `analyse`) changes no process state."""

from __future__ import annotations

import gzip
import json
import os
import platform
import subprocess
import sys
import threading
import time

import pytest

from tracekit import runtime
from tracekit.runtime import allocator, trim

PROBE = ("import os, sys; {imports}; "
         "print('polars' in sys.modules, os.environ.get('_RJEM_MALLOC_CONF', '-'))")


def probe(imports: str, *args: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = subprocess.run([sys.executable, "-c", PROBE.format(imports=imports), *args], capture_output=True,
                         text=True, check=True, env={**clean, **env})
    return out.stdout.strip()


def test_cli_import_sets_jemalloc_decay_before_polars():
    tail = "muzzy_decay_ms:0,oversize_threshold:0"
    assert probe("import tracekit.cli.main") == f"False narenas:1,dirty_decay_ms:200,{tail}"
    assert probe("import tracekit.cli.main", "info") == f"False narenas:1,dirty_decay_ms:20,{tail}"


SMALL = f"narenas:1,dirty_decay_ms:{allocator.SMALL_DECAY_MS},muzzy_decay_ms:0,oversize_threshold:0"


def test_cli_decay_follows_the_size_of_the_traces_it_is_given(tmp_path):
    small = tmp_path / "small.json"
    small.write_bytes(b'{"traceEvents": []}')
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:  # sparse: as large as SMALL_TRACE_BYTES without writing it
        fh.truncate(allocator.SMALL_TRACE_BYTES)
    cli = "import tracekit.cli.main"
    assert probe(cli, "report", str(small), "-o", str(tmp_path / "r.html")) == f"False {SMALL}"
    assert probe(cli, "report", str(big)) == f"False {allocator.ANALYSIS_JEMALLOC}"
    assert probe(cli, "info", str(big)) == f"False {allocator.JEMALLOC}"  # only loads: the short decay
    assert probe(cli, "info", str(small)) == f"False {SMALL}"
    assert probe(cli, "diff", str(small), str(small)) == f"False {SMALL}"
    assert probe(cli, "batch", str(tmp_path)) == f"False {allocator.ANALYSIS_JEMALLOC}"  # a folder: not looked into
    assert probe(cli, "info", str(tmp_path / "missing.json")) == f"False {allocator.JEMALLOC}"  # no file at all


def test_trace_bytes_reads_the_gzip_trailer(tmp_path):
    text = b'{"traceEvents": [' + b'{"ph": "i", "ts": 1},' * 10_000 + b'{}]}'
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(text))
    plain = tmp_path / "t.json"
    plain.write_bytes(text)
    assert runtime.trace_bytes(["report", str(packed)]) == len(text)
    assert runtime.trace_bytes([str(packed), str(plain), "--top", "5"]) == 2 * len(text)
    lying = tmp_path / "wrapped.json.gz"  # a trailer smaller than the file: the size wrapped past 4 GiB
    lying.write_bytes(b"\x1f\x8b" + b"\0" * 100 + (10).to_bytes(4, "little"))
    assert runtime.trace_bytes([str(lying)]) is None
    assert runtime.trace_bytes(["--help"]) is None
    assert allocator.jemalloc_settings(None) == allocator.ANALYSIS_JEMALLOC
    assert allocator.jemalloc_settings(None, analyses=False) == allocator.JEMALLOC
    assert allocator.jemalloc_settings(allocator.SMALL_TRACE_BYTES - 1) == SMALL
    assert allocator.jemalloc_settings(allocator.SMALL_TRACE_BYTES) == allocator.ANALYSIS_JEMALLOC
    assert allocator.jemalloc_settings(allocator.SMALL_TRACE_BYTES, analyses=False) == allocator.JEMALLOC


def test_the_command_decides_whether_traces_are_analysed():
    assert not allocator.analyses(["info", "t.json", "--json"])
    assert allocator.analyses(["report", "t.json", "-o", "info"])  # the first word is the command
    assert allocator.analyses(["--help"]) and allocator.analyses([])


def test_a_users_setting_wins():
    assert probe("import tracekit.cli.main", _RJEM_MALLOC_CONF="dirty_decay_ms:7") == "False dirty_decay_ms:7"
    inherited = "dirty_decay_ms:500,muzzy_decay_ms:1000,dirty_decay_ms:7"  # from a parent that imported Polars
    assert probe("import tracekit.cli.main", _RJEM_MALLOC_CONF=inherited) == f"False {inherited}"


@pytest.mark.parametrize("inherited", ["dirty_decay_ms:500,muzzy_decay_ms:1000",
                                       "dirty_decay_ms:500,muzzy_decay_ms:1000,thp:always,metadata_thp:always",
                                       "dirty_decay_ms:500,muzzy_decay_ms:1000,dirty_decay_ms:500,muzzy_decay_ms:1000"])
def test_polars_defaults_inherited_from_a_parent_are_not_a_users_setting(inherited):
    """A process started by one that imported Polars inherits Polars' own defaults in
    `_RJEM_MALLOC_CONF`: the command still applies its settings."""
    import polars  # noqa: F401  (the value Polars writes is the one this test expects)

    assert os.environ["_RJEM_MALLOC_CONF"].startswith(allocator.POLARS_DEFAULT)
    assert probe("import tracekit.cli.main", _RJEM_MALLOC_CONF=inherited) == f"False {allocator.ANALYSIS_JEMALLOC}"


def test_library_import_changes_nothing():
    # `import tracekit` loads neither Polars nor any allocator setting; Polars then sets its own default
    assert probe("import tracekit") == "False -"
    assert probe("import tracekit; tracekit.load") == "False -"  # the loader imports Polars when it reads
    loaded, conf = probe("import tracekit; tracekit.Trace").split()
    assert loaded == "True" and f"dirty_decay_ms:{allocator.DECAY_MS}," not in conf  # Polars' own default


def test_configure_after_polars_says_so():
    assert probe("import polars, tracekit.runtime as r; print(r.configure([]))").splitlines()[0] == "False"


ARENAS = ("import ctypes, sys, threading; {imports}; "
          "work = lambda: [bytearray(200_000) for _ in range(50)]; "
          "threads = [threading.Thread(target=work) for _ in range(4)]; "
          "[t.start() for t in threads]; [t.join() for t in threads]; "
          "sys.stderr.flush(); ctypes.CDLL('libc.so.6').malloc_stats()")


def arenas(imports: str, **env: str) -> int:
    """How many glibc malloc arenas four allocating threads end up with (malloc_stats)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("_RJEM_MALLOC_CONF", "MALLOC_ARENA_MAX")}
    out = subprocess.run([sys.executable, "-c", ARENAS.format(imports=imports)], capture_output=True, text=True,
                         check=True, env={**clean, **env})
    return out.stderr.count("Arena ")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc arenas (this is not glibc)")
def test_cli_keeps_glibc_to_one_arena_unless_told_otherwise():
    assert arenas("import tracekit.cli.main") == 1
    assert arenas("import tracekit") > 1  # the library changes nothing
    assert arenas("import tracekit.cli.main", MALLOC_ARENA_MAX="2") == 2  # the user's setting wins


# 300 blocks of 1 MiB freed below a live one: glibc keeps them (RSS in MiB before and after a trim)
HEAP = """
import os
from tracekit.runtime import allocator
rss = lambda: int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') >> 20
first = bytearray(1 << 20); del first  # (raises glibc's mmap threshold past 1 MiB: the rest go on the heap)
blocks = [bytearray(1 << 20) for _ in range(300)]
pin = bytearray(1 << 20)  # above them: their space is not at the heap's top, which glibc trims itself
del blocks
before = rss()
allocator.trim_heap()
print(before, rss())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_heap_hands_glibcs_free_heap_back_whatever_the_arenas():
    for env in ({}, {"MALLOC_ARENA_MAX": "1"}):  # (as the command leaves it)
        # a bare environment: the suite's own (its workers') must not decide glibc's behaviour
        clean = {k: os.environ[k] for k in ("PATH", "HOME", "PYTHONPATH", "TMPDIR") if k in os.environ}
        seen = []
        for _ in range(3):  # (once in a parallel suite the freed heap was not yet counted before: try again)
            out = subprocess.run([sys.executable, "-c", HEAP], capture_output=True, text=True, check=True,
                                 env={**clean, **env})
            seen.append(tuple(map(int, out.stdout.split())))
            if seen[-1][0] - seen[-1][1] >= 250:  # the 300 MiB freed went back
                break
        else:
            raise AssertionError(f"{env}: RSS before and after the trim, MiB: {seen}")


def test_cli_raises_the_collectors_threshold_and_the_library_does_not():
    show = "import gc; {imports}; print(gc.get_threshold()[0])"
    clean = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}

    def threshold(imports: str) -> int:
        out = subprocess.run([sys.executable, "-c", show.format(imports=imports)], capture_output=True, text=True,
                             check=True, env=clean)
        return int(out.stdout.strip())

    assert threshold("import tracekit.cli.main") == runtime.GC_THRESHOLD
    assert threshold("import tracekit") == 700  # Python's default


# What the runtime could change, before and after `tracekit.load` + `analyse` of a fixture in a
# fresh process, on two threads (`Threaded`, as the command runs them), and the threads are
# looked at while it runs (`progress`, on its threads).
STATE = r"""
import gc, json, os, sys, threading
def state():
    return {"env": {k: os.environ.get(k) for k in ("_RJEM_MALLOC_CONF", "MALLOC_CONF", "MALLOC_ARENA_MAX")},
            "gc": [list(gc.get_threshold()), gc.isenabled()],
            "modules": sorted(m for m in sys.modules if m.split(".")[:2] in (["tracekit", "runtime"],
                              ["tracekit", "allocator"], ["tracekit", "jemalloc"]))}
import polars  # (Polars writes its own jemalloc defaults as it loads: not tracekit's doing)
before = state()
import tracekit, tracekit.pipeline
seen = set()
trace = tracekit.load(sys.argv[1])
tracekit.analyse(trace, progress=lambda *_: seen.update(t.name for t in threading.enumerate()),
                 runner=tracekit.pipeline.Threaded(2))
after = state()
print(json.dumps({"before": before, "after": after, "seen": sorted(seen),
                  "left": sorted(t.name for t in threading.enumerate() if t.is_alive())}))
"""


def test_load_and_analyse_change_no_process_state():
    fixture = os.path.join(os.path.dirname(__file__), "fixtures", "kineto_step.json.gz")
    clean = {k: v for k, v in os.environ.items() if k not in ("_RJEM_MALLOC_CONF", "MALLOC_CONF", "MALLOC_ARENA_MAX")}
    out = subprocess.run([sys.executable, "-c", STATE, fixture], capture_output=True, text=True, check=True,
                         env=clean)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["after"] == got["before"]
    assert got["after"]["modules"] == []  # nothing that sets allocators up was imported
    assert got["after"]["gc"] == [[700, 10, 10], True]  # Python's defaults, as the process started
    assert got["seen"] and not [n for n in got["seen"] if "trim" in n]  # no trimming thread while it ran
    assert got["left"] == ["MainThread"]


def trimmers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == trim.THREAD_NAME]


def test_trimming_trims_while_the_block_runs_and_stops_with_it(monkeypatch):
    """On, a thread trims every `TRIM_EVERY_S` while the block runs and once at its end, then
    stops; off, nothing; inside another block, nothing more."""
    calls = []
    monkeypatch.setattr(allocator, "trim_heap", lambda: calls.append(time.monotonic()))
    monkeypatch.setattr(trim, "TRIM_EVERY_S", 0.02)
    with runtime.trimming(False):
        time.sleep(0.1)
    assert calls == [] and trimmers() == []
    start = time.monotonic()
    with runtime.trimming(True):
        with runtime.trimming(True):  # (nested: the outer block's thread alone)
            time.sleep(0.2)
        assert len(trimmers()) == 1
    took = time.monotonic() - start
    inside = len(calls)
    assert 2 <= inside <= took / 0.02 + 1  # every 0.02 s at most while the block ran, and once at its end
    assert calls[-1] >= start + 0.2  # (the last: at the end)
    time.sleep(0.1)
    assert len(calls) == inside and trimmers() == []  # stopped with the block


def test_blocks_on_two_threads_share_one_trimming_thread_until_the_last_ends(monkeypatch):
    monkeypatch.setattr(allocator, "trim_heap", lambda: None)
    monkeypatch.setattr(trim, "TRIM_EVERY_S", 0.01)
    entered, release = threading.Event(), threading.Event()

    def second() -> None:
        with runtime.trimming(True):
            entered.set()
            release.wait(5)

    other = threading.Thread(target=second)
    with runtime.trimming(True):
        other.start()
        assert entered.wait(5)
        assert len(trimmers()) == 1
    assert len(trimmers()) == 1  # the first block ended, the second still runs
    release.set()
    other.join()
    assert trimmers() == []
