"""`analyse()`: how many threads it uses, and that the answer never depends on it."""

from __future__ import annotations

import json
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
def test_heaviest_wait_for_the_critical_path_on_large_traces(trace, monkeypatch, phased):
    events: list[str] = []
    path, gaps = A._path_and_whatifs, A.gaps

    def path_then_mark(*args, **kwargs):
        out = path(*args, **kwargs)
        time.sleep(0.5)  # a long critical path: the other thread reaches gaps meanwhile, unless it waits
        events.append("path done")
        return out

    def gaps_marked(*args, **kwargs):
        events.append("gaps start")
        return gaps(*args, **kwargs)

    monkeypatch.setattr(A, "_path_and_whatifs", path_then_mark)
    monkeypatch.setattr(A, "gaps", gaps_marked)
    monkeypatch.setattr(A, "PHASED_BYTES", 0 if phased else 2**62)
    A.analyse(trace, options=A.AnalysisOptions(workers=2))
    assert events == (["path done", "gaps start"] if phased else ["gaps start", "path done"])


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
