"""A load can start before Polars is imported: the command's imports, the cache lookup and
the reading need no Polars; the ingest thread imports it, and meanwhile more decoded
chunks may wait for it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from test_loader_stream import assert_same, busy_trace

import tracekit
from tracekit.cache import Cache
from tracekit.loader import read as read_mod


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


# the commands that read one trace, and the modules that start its load
SINGLE_TRACE = ("info", "summary", "tables", "findings", "roofline", "attention", "report")


def test_the_single_trace_commands_and_the_loader_import_without_polars():
    modules = ", ".join([*(f"tracekit.cli.{m}" for m in SINGLE_TRACE), "tracekit.cli.main", "tracekit.cli.common",
                         "tracekit.loader", "tracekit.cache", "tracekit.cache.traces", "tracekit.loader.read"])
    out = _python(f"import sys, {modules}\nprint('polars' in sys.modules)")
    assert out.strip() == "False"


@pytest.mark.parametrize("command", ["info", "summary", "gaps", "kernels", "ops", "critical-path", "findings",
                                     "annotate", "roofline", "attention", "report"])
def test_each_command_starts_its_load_before_polars_is_imported(tmp_path, command):
    """The command starts reading the trace (`Loading`) while Polars is not imported yet,
    and imports its analyses (and Polars) while the trace is read."""
    path = busy_trace().write(tmp_path / "t.json")
    code = ("import sys\n"
            "import tracekit.cli.common as common\n"
            "seen = []\n"
            "real = common.Loading.__init__\n"
            "def spy(self, *a, **k):\n"
            "    seen.append('polars' in sys.modules)\n"
            "    real(self, *a, **k)\n"
            "common.Loading.__init__ = spy\n"
            "from tracekit.cli.main import main\n"
            f"args = [{command!r}, {str(path)!r}] + ([] if {command!r} == 'attention' else ['--no-cache'])\n"
            f"args += {{'report': ['-o', {str(tmp_path / 'r.html')!r}], "
            f"'annotate': ['-o', {str(tmp_path / 'a.json')!r}]}}.get({command!r}, [])\n"
            "assert main(args) == 0\n"
            "print(seen)")
    assert _python(code).strip().splitlines()[-1] == "[False]"


def test_a_load_that_imports_polars_itself_gives_the_same_trace(tmp_path):
    path = busy_trace().write(tmp_path / "t.json")
    code = ("import sys, tracekit.loader\nfrom tracekit.cache import Cache\nassert 'polars' not in sys.modules\n"
            f"t = Cache({str(tmp_path / 'c')!r}).load({str(path)!r})\n"
            "print(t.ops.height, t.runtime.height, t.gpu.height)")
    assert _python(code) == _python(code)  # the second run reads the cache entry the first wrote
    fresh = tracekit.load(path)
    assert _python(code).split() == [str(fresh.ops.height), str(fresh.runtime.height), str(fresh.gpu.height)]
    assert_same(Cache(tmp_path / "c").load(path), fresh)


def test_batches_queue_deeper_while_the_ingest_thread_imports_polars(monkeypatch):
    release = threading.Event()
    real = read_mod.Ingest._columns

    def slow_import():
        release.wait(10)
        return real()

    monkeypatch.setattr(read_mod.Ingest, "_columns", staticmethod(slow_import))
    ingest = read_mod.Ingest()
    feeder, put = _feed(ingest, read_mod.WARMUP_QUEUE + 1)
    deadline = time.monotonic() + 10
    while len(put) < read_mod.WARMUP_QUEUE and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert len(put) == read_mod.WARMUP_QUEUE  # the next one waits: the warm-up bound is reached
    release.set()
    feeder.join(10)
    parts = ingest.finish()
    assert len(put) == len(parts) == read_mod.WARMUP_QUEUE + 1


def test_after_the_import_the_queue_is_bounded_by_ingest_queue(monkeypatch):
    gate = threading.Event()
    real = read_mod.Ingest._columns

    def slow_parts():
        parts = real()

        def chunk_parts(batch):
            gate.wait(10)
            return parts(batch)

        return chunk_parts

    monkeypatch.setattr(read_mod.Ingest, "_columns", staticmethod(slow_parts))
    ingest = read_mod.Ingest()
    deadline = time.monotonic() + 10
    while not ingest._ready and time.monotonic() < deadline:
        time.sleep(0.01)
    feeder, put = _feed(ingest, read_mod.INGEST_QUEUE + 1)
    time.sleep(0.3)
    assert len(put) == read_mod.INGEST_QUEUE
    gate.set()
    feeder.join(10)
    assert len(ingest.finish()) == read_mod.INGEST_QUEUE + 1


def _feed(ingest: read_mod.Ingest, n: int) -> tuple[threading.Thread, list[int]]:
    """Put `n` empty batches from a thread of their own; the list grows as each put returns."""
    put: list[int] = []

    def feed() -> None:
        for i in range(n):
            ingest.put(i, _empty_batch())
            put.append(i)

    feeder = threading.Thread(target=feed)
    feeder.start()
    return feeder, put


def _empty_batch():
    from tracekit.loader.batch import empty_batch

    return empty_batch()
