"""`analyse()`: how many threads it uses, and that the answer never depends on it."""

from __future__ import annotations

import json

import pytest
from test_graph import sync_stalled

import tracekit.analyse as A
from tracekit.render.json import render_json
from tracekit.report.build import build_report


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return sync_stalled().load(tmp_path_factory.mktemp("analyse"))


def _frames_bytes(trace) -> int:
    return sum(f.estimated_size() for f in (trace.ops, trace.runtime, trace.gpu, trace.flows))


def test_two_threads_unless_memory_is_short(trace, monkeypatch):
    need = _frames_bytes(trace) * A.MEMORY_FACTOR  # two analyses at once, about
    monkeypatch.setattr(A, "_physical_memory", lambda: 2 * need)  # exactly half: still fits
    assert A.workers_for(trace) == 2
    monkeypatch.setattr(A, "_physical_memory", lambda: 2 * need - 2)
    assert A.workers_for(trace) == 1
    monkeypatch.setattr(A, "_physical_memory", lambda: None)  # unknown: the default
    assert A.workers_for(trace) == 2


def test_same_report_on_one_thread_or_two(trace):
    reports = [json.loads(render_json(build_report(trace, analysis=A.analyse(trace, options=A.AnalysisOptions(workers=n)))))
               for n in (1, 2)]
    assert reports[0] == reports[1]
    assert reports[0]["findings"]  # a report with content, not two empty ones
