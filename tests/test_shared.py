"""The memo that `analyse()` shares intermediate frames through (`tracekit.analysis.shared`)."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest
from test_graph import gpu_bound

from tracekit.pipeline import AnalysisOptions, analyse
from tracekit.analysis import launches as launches_mod
from tracekit.analysis.shared import remember, sharing


class _Key:
    """An input object (the memo keys on identity)."""


def test_outside_sharing_every_call_computes():
    key = _Key()
    calls = []
    for _ in range(2):
        remember("x", (key,), lambda: calls.append(1) or len(calls))
    assert calls == [1, 1]


def test_inside_sharing_once_per_name_and_identity():
    a, b = _Key(), _Key()
    calls: list[str] = []

    def make(tag: str):
        return lambda: calls.append(tag) or [tag]

    with sharing():
        first = remember("x", (a,), make("xa"))
        assert remember("x", (a,), make("again")) is first
        assert remember("x", (b,), make("xb")) == ["xb"]
        assert remember("y", (a,), make("ya")) == ["ya"]
        with sharing():  # a nested block joins the outer memo
            assert remember("x", (a,), make("nested")) is first
    assert calls == ["xa", "xb", "ya"]
    assert remember("x", (a,), make("after")) == ["after"]  # nothing outlives the block


def test_a_second_thread_waits_for_the_first_computation():
    key = _Key()
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []
    results: dict[str, object] = {}

    def compute():
        calls.append(1)
        started.set()
        release.wait(10)
        return object()

    def ask(name: str) -> None:
        results[name] = remember("slow", (key,), compute)

    with sharing():
        one = threading.Thread(target=contextvars.copy_context().run, args=(ask, "one"))
        one.start()
        assert started.wait(10)
        two = threading.Thread(target=contextvars.copy_context().run, args=(ask, "two"))
        two.start()
        time.sleep(0.2)
        assert two.is_alive()  # waiting for the first thread's result, not computing its own
        release.set()
        one.join(10)
        two.join(10)
    assert calls == [1]
    assert results["one"] is results["two"]


def test_a_failure_reaches_every_caller_of_the_entry():
    key = _Key()
    calls = []

    def broken():
        calls.append(1)
        raise ValueError("no memory")

    with sharing():
        for _ in range(2):
            with pytest.raises(ValueError, match="no memory"):
                remember("bad", (key,), broken)
    assert calls == [1]


def test_launch_statistics_are_computed_once_for_the_launch_and_compile_analyses(tmp_path, monkeypatch):
    trace = gpu_bound().load(tmp_path)
    made = []
    real = launches_mod._launch_stats
    monkeypatch.setattr(launches_mod, "_launch_stats", lambda *a: made.append(1) or real(*a))
    result = analyse(trace, options=AnalysisOptions(workers=2))
    assert made == [1]
    assert result.launches.launch_calls == 10  # the fixture's ten kernel launches
    assert result.launches.launch_api_ns == 10 * 4_000
    assert result.compile.graph_launches == result.launches.graph_launches == 0
