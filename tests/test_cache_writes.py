"""Cache writes behind a command: in line outside `writes_behind()`; inside it on one
background thread, in order, waited for (errors raised) when the block is left."""

from __future__ import annotations

import contextlib
import threading

import pytest
from report_fixtures import decode_trace

import tracekit
from tracekit.cache import Cache
from tracekit.cache import traces as trace_cache
from tracekit.cache import writes as cache_writes
from tracekit.cache.entries import ANALYSES
from tracekit.cache.writes import writes_behind
from tracekit.cli.main import main


def test_outside_a_block_the_write_runs_in_line():
    seen = []
    cache_writes.run(lambda a, b: seen.append((a, b, threading.current_thread())), 1, 2)
    assert seen == [(1, 2, threading.current_thread())]


def test_inside_a_block_writes_run_behind_in_order_and_the_block_waits_for_them():
    gate, seen = threading.Event(), []

    def slow(tag):
        gate.wait(10)
        seen.append((tag, threading.current_thread().name))

    with writes_behind():
        cache_writes.run(slow, "a")
        cache_writes.run(seen.append, ("b", "queued"))
        assert seen == []  # `run` returned while the first write waits
        gate.set()
    assert seen == [("a", "tracekit-cache-write"), ("b", "queued")]


def _broken() -> None:
    raise OSError("disk gone")


@pytest.mark.parametrize("block_error", [None, ValueError("command failed")])
def test_writes_finish_and_the_first_error_is_raised_on_leaving(block_error):
    """A write's error is raised on leaving the block, after the other writes; an error of
    the block itself wins over it, and the writes still finish."""
    seen = []
    expected = OSError if block_error is None else ValueError
    with pytest.raises(expected), writes_behind():
        cache_writes.run(_broken)
        cache_writes.run(seen.append, "after")
        if block_error is not None:
            raise block_error
    assert seen == ["after"]


def test_an_interrupt_does_not_wait_for_the_writes():
    gate, seen = threading.Event(), []
    try:
        with pytest.raises(KeyboardInterrupt), writes_behind():
            cache_writes.run(lambda: (gate.wait(10), seen.append("written")))
            raise KeyboardInterrupt
        assert seen == []  # left while the write still waited
    finally:
        gate.set()


def test_blocks_do_not_leak_into_later_code():
    with writes_behind():
        pass
    here = []
    cache_writes.run(lambda: here.append(threading.current_thread()))
    assert here == [threading.current_thread()]


def test_load_outside_a_block_has_its_entry_when_it_returns(tmp_path):
    path = decode_trace(1).write(tmp_path / "t.json.gz")
    Cache(tmp_path / "c").load(path)
    key = trace_cache.entry_key(path, max_bytes=tracekit.loader.DEFAULT_MAX_BYTES)
    assert trace_cache.read(tmp_path / "c", key, path=str(path)) is not None


def test_the_command_writes_both_caches_behind_and_returns_once_they_are_written(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = decode_trace(2).write(tmp_path / "t.json.gz")
    threads: dict[str, str] = {}

    def recording(module, name):
        inner = getattr(module, name)

        def write(*args):
            threads[module.__name__] = threading.current_thread().name
            return inner(*args)

        monkeypatch.setattr(module, name, write)

    from tracekit.cache import analyses as analysis_cache

    recording(trace_cache, "write")
    recording(analysis_cache, "write")
    assert main(["report", str(path), "--cache", "-o", str(tmp_path / "a.md")]) == 0
    # the load runs on the command's loading thread; its write still goes behind
    assert threads == {"tracekit.cache.traces": "tracekit-cache-write",
                       "tracekit.cache.analyses": "tracekit-cache-write"}
    cache = tmp_path / "xdg" / "tracekit"
    assert trace_cache.read(cache, trace_cache.entry_key(path, max_bytes=tracekit.loader.DEFAULT_MAX_BYTES),
                            path=str(path)) is not None
    assert len([p for p in (cache / ANALYSES).iterdir() if not p.name.startswith(".")]) == 1
    assert main(["report", str(path), "--cache", "-o", str(tmp_path / "b.md")]) == 0
    assert (tmp_path / "a.md").read_text() == (tmp_path / "b.md").read_text()


def test_a_large_traces_entry_is_written_before_load_returns_even_inside_a_block(tmp_path, monkeypatch):
    """From `traces.WRITE_NOW_BYTES` of JSON on, the trace cache's write runs in line inside
    `writes_behind()` (the whole trace is not held beside the analyses); below, behind."""
    path = decode_trace(1).write(tmp_path / "t.json.gz")
    key = trace_cache.entry_key(path, max_bytes=tracekit.loader.DEFAULT_MAX_BYTES)
    threads = []
    write, checked = trace_cache.write, threading.Event()

    def recording(*args):
        threads.append(threading.current_thread().name)
        if threading.current_thread() is not threading.main_thread():
            checked.wait(10)  # (behind: not before the test has looked)
        return write(*args)

    monkeypatch.setattr(trace_cache, "write", recording)
    for limit, cache in ((0, "large"), (10**12, "small")):
        monkeypatch.setattr(trace_cache, "WRITE_NOW_BYTES", limit)
        with writes_behind():
            Cache(tmp_path / cache).load(path)
            written = trace_cache.read(tmp_path / cache, key, path=str(path)) is not None
            checked.set()
        assert written == (cache == "large")
        assert trace_cache.read(tmp_path / cache, key, path=str(path)) is not None
    assert threads == [threading.current_thread().name, "tracekit-cache-write"]


def test_leaving_waits_inside_waiting_only_when_writes_are_left():
    gate, events = threading.Event(), []

    @contextlib.contextmanager
    def waiting():
        events.append("wait")
        gate.set()  # the write may end now: the block is waiting for it
        yield
        events.append("done")

    with writes_behind(waiting=waiting):
        cache_writes.run(lambda: (gate.wait(10), events.append("written")))
    assert events == ["wait", "written", "done"]
    events.clear()
    with writes_behind(waiting=waiting):
        pass
    assert events == []


def test_the_commands_wait_for_its_writes_is_a_status_step(monkeypatch):
    from tracekit.cli import main as cli_main

    shown = []
    monkeypatch.setattr("tracekit.cli.progress.Status.step", lambda self, text: shown.append(text))
    with cli_main._storing():
        pass
    assert shown == ["writing the cache"]
