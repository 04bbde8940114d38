"""`analyse()`: how many threads it uses, and that the answer never depends on it."""

from __future__ import annotations

import json
import threading
import time

import pytest
from test_graph import sync_stalled

import tracekit.analyse as A
from tracekit.render.json import render_json
from tracekit.report.build import build_report


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return sync_stalled().load(tmp_path_factory.mktemp("analyse"))


def test_two_threads_unless_memory_is_short(trace, monkeypatch):
    need = A._frames_bytes(trace) * A.MEMORY_FACTOR  # two analyses at once, about
    monkeypatch.setattr(A, "_physical_memory", lambda: 2 * need)  # exactly half: still fits
    assert A.workers_for(trace) == 2
    monkeypatch.setattr(A, "_physical_memory", lambda: 2 * need - 2)
    assert A.workers_for(trace) == 1
    monkeypatch.setattr(A, "_physical_memory", lambda: None)  # unknown: the default
    assert A.workers_for(trace) == 2


def test_same_report_on_one_thread_or_two_and_in_phases(trace, monkeypatch):
    def report(workers):
        return json.loads(render_json(build_report(trace, analysis=A.analyse(trace, options=A.AnalysisOptions(workers=workers)))))

    reports = [report(1), report(2)]
    monkeypatch.setattr(A, "PHASED_BYTES", 0)  # the heaviest analyses after the critical path
    reports.append(report(2))
    assert reports[0] == reports[1] == reports[2]
    assert reports[0]["findings"]  # a report with content, not empty ones


@pytest.mark.parametrize("phased", [True, False])
def test_heaviest_wait_for_the_critical_path_graph_on_large_traces(trace, monkeypatch, phased):
    """On large traces the gaps start once the critical path has let its graph go: after a
    slow graph, and before the rest of the path (its segments and summary) is done."""

    from tracekit.analysis import critical_path as cp_module

    events: list[str] = []
    path, gaps = cp_module.critical_path, A.gaps
    gaps_started = threading.Event()

    def slow_path(*args, on_released=None, **kwargs):
        def released():
            # a long graph: the other thread reaches the gaps meanwhile, unless they wait (not
            # phased: the graph lasts until they start, however slow the other tasks before
            # them run, e.g. on a loaded machine; a minute at most, should they wait after all)
            if phased:
                time.sleep(0.5)
            else:
                gaps_started.wait(60)
            events.append("graph gone")
            on_released()

        out = path(*args, on_released=released, **kwargs)
        time.sleep(0.5)  # the path's tail: the gaps run beside it
        events.append("path done")
        return out

    def gaps_marked(*args, **kwargs):
        events.append("gaps start")
        gaps_started.set()
        return gaps(*args, **kwargs)

    monkeypatch.setattr(cp_module, "critical_path", slow_path)
    monkeypatch.setattr(A, "gaps", gaps_marked)
    monkeypatch.setattr(A, "PHASED_BYTES", 0 if phased else 2**62)
    a = A.analyse(trace, options=A.AnalysisOptions(workers=2))
    assert events == (["graph gone", "gaps start", "path done"] if phased else ["gaps start", "graph gone", "path done"])
    assert a.critical_path is not None and a.gaps.gaps.height


@pytest.mark.parametrize("where", ["graph", "links"])
def test_a_failed_critical_path_does_not_hold_the_gaps_back(trace, monkeypatch, where):
    """The gaps wait for the path's graph to go; a path that fails (a note) or whose links
    fail (an error) never lets one go, and the gaps must not wait for ever."""

    from tracekit.analysis import critical_path as cp_module

    def broken(*args, **kwargs):
        raise RuntimeError("no path")

    monkeypatch.setattr(cp_module, "critical_path", broken)
    if where == "links":
        monkeypatch.setattr(A, "_links", broken)
    monkeypatch.setattr(A, "PHASED_BYTES", 0)
    out: list[object] = []

    def run():
        try:
            out.append(A.analyse(trace, options=A.AnalysisOptions(workers=2)))
        except RuntimeError as exc:
            out.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive() and len(out) == 1
    if where == "graph":
        assert out[0].critical_path is None and out[0].gaps.gaps.height
        assert "critical_path analysis failed: RuntimeError: no path" in out[0].notes
    else:
        assert str(out[0]) == "no path"


@pytest.mark.parametrize("phased", [True, False])
def test_findings_rules_on_one_thread_on_large_traces_or_when_asked(trace, monkeypatch, phased):
    from tracekit.findings import engine, run_findings

    threads, run = [], engine._run_rules
    monkeypatch.setattr(engine, "_run_rules", lambda ctx, cfg, rules, workers: threads.append(workers) or run(
        ctx, cfg, rules, workers))
    monkeypatch.setattr(A, "PHASED_BYTES", 0 if phased else 2**62)
    assert A.analyse(trace).findings.findings
    assert run_findings(trace).findings  # (the command line's `findings`: the same choice)
    assert A.analyse(trace, options=A.AnalysisOptions(workers=1)).findings.findings
    assert threads == ([1, 1, 1] if phased else [2, 2, 1])
    monkeypatch.setattr(A, "_physical_memory", lambda: 1)  # two analyses at once would not fit
    run_findings(trace)
    assert threads[-1] == 1


@pytest.mark.real
@pytest.mark.parametrize("name", ["v100_ddp_mlp_memory_rank1.json.gz", "h100_qwen15_05b_hf_inference.json.gz"])
def test_the_analyses_and_report_leave_constant_columns_constant(name):
    """Columns of one value stay one value (`loader.constants`) through every analysis, the
    findings and the report: none reads them as a Series, which would give them their rows
    for as long as the trace lives."""
    from conftest import real_trace

    import tracekit

    trace = tracekit.load(real_trace(name))
    frames = ("ops", "runtime", "gpu", "flows")
    constant = [(f, c) for f in frames for c in getattr(trace, f).columns if getattr(trace, f).select(c).estimated_size() < 64]
    assert ("ops", "ph") in constant and ("runtime", "pid") in constant and len(constant) >= 10
    build_report(trace, analysis=A.analyse(trace))
    assert [(f, c) for f, c in constant if getattr(trace, f).select(c).estimated_size() >= 64] == []


def test_run_all_starts_a_later_task_first_once_ready():
    """`_run_all`: a `later` task waits for `ready`, then goes before every task not yet
    started; results come back by name, in order."""

    ready, started = threading.Event(), []

    def task(name, wait=0.0, then=None):
        def run():
            started.append(name)
            time.sleep(wait)
            if then is not None:
                then()
            return name.upper()
        return run

    # thread 1 runs the long "path", which sets `ready` part way; thread 2 runs the queue
    tasks = {"path": task("path", 0.3, ready.set), "a": task("a", 0.1), "b": task("b", 0.1), "c": task("c", 0.1),
             "d": task("d", 0.1), "e": task("e", 0.1)}
    done = A._run_all(tasks, workers=2, later={"gaps": task("gaps")}, ready=ready)
    assert done == {n: n.upper() for n in ["path", "a", "b", "c", "d", "e", "gaps"]}
    assert list(done) == ["path", "a", "b", "c", "d", "e", "gaps"]
    assert set(started[:2]) == {"path", "a"} and started.index("gaps") < started.index("e")
    # on one thread: in order, the later ones last
    started.clear()
    ready.clear()
    done = A._run_all(tasks | {"path": task("path", 0, ready.set)}, workers=1, later={"gaps": task("gaps")},
                      ready=ready)
    assert started == ["path", "a", "b", "c", "d", "e", "gaps"]


def test_run_all_never_waits_for_a_ready_that_no_task_sets():

    never = threading.Event()
    done = A._run_all({"a": lambda: 1}, workers=2, later={"b": lambda: 2}, ready=never)
    assert done == {"a": 1, "b": 2}


def test_run_all_raises_the_first_failure_in_order_after_every_task():

    ended = []

    def fail(name):
        def run():
            time.sleep(0.05 if name == "first" else 0)
            ended.append(name)
            raise ValueError(name)
        return run

    with pytest.raises(ValueError, match="first"):
        A._run_all({"first": fail("first"), "second": fail("second"), "ok": lambda: ended.append("ok")}, workers=2,
                   later={"late": lambda: ended.append("late")}, ready=threading.Event())
    assert sorted(ended) == ["first", "late", "ok", "second"]
