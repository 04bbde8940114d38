"""The analysis pipeline: one ordered list of steps, each on the results it names; runners
that change only when steps start, never what they find."""

from __future__ import annotations

import functools
import gc
import json
import threading
import time
import weakref
from dataclasses import replace

import polars as pl
import pytest
from test_graph import sync_stalled

from tracekit.pipeline import STEPS, Analysis, AnalysisOptions, Plan, Step, Threaded, analyse, run_steps, sequential
from tracekit.render.json import render_json
from tracekit.report.build import build_report
from tracekit.runtime import sizing


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return sync_stalled().load(tmp_path_factory.mktemp("pipeline"))


class Box:
    """A result that can be watched (weakref) for when the pipeline lets it go."""


def test_a_step_must_come_after_what_it_needs(trace):
    with pytest.raises(ValueError, match="'b': needs \\['a'\\]"):
        Plan(trace, None, [Step("b", lambda t, o, i: 1, ("a",)), Step("a", lambda t, o, i: 2)])
    with pytest.raises(ValueError, match="named twice"):
        Plan(trace, None, [Step("a", lambda t, o, i: 1), Step("a", lambda t, o, i: 2)])


def test_an_intermediate_is_let_go_once_its_last_reader_has_it(trace):
    seen: dict[str, object] = {}

    def make(t, o, i):
        box = Box()
        seen["ref"] = weakref.ref(box)
        return box

    def first(t, o, i):
        return i["tmp"] is not None

    def last(t, o, i):
        box = i.pop("tmp")  # the last reader: the plan holds it no more
        del box
        gc.collect()
        return seen["ref"]() is None  # (let go inside the step already)

    plan = run_steps(trace, AnalysisOptions(), [Step("tmp", make, kept=False), Step("first", first, ("tmp",)),
                                                Step("last", last, ("tmp",)), Step("after", lambda t, o, i: 3)])
    assert plan.results == {"first": True, "last": True, "after": 3}


def test_optional_failures_are_notes_and_their_readers_get_the_fallback(trace):
    def broken(t, o, i):
        raise RuntimeError("no graph")

    plan = run_steps(trace, AnalysisOptions(), [
        Step("graph", broken, kept=False, optional=True, note_as="critical_path"),
        Step("whatifs", lambda t, o, i: ["read", i["graph"]], ("graph",), optional=True),
        Step("other", lambda t, o, i: 1)])
    assert plan.notes == ["critical_path analysis failed: RuntimeError: no graph"]
    assert plan.results == {"whatifs": ["read", None], "other": 1}
    with pytest.raises(RuntimeError, match="no graph"):  # a step that is not optional: raised
        run_steps(trace, AnalysisOptions(), [Step("core", broken)])


def test_threaded_starts_a_step_only_after_its_inputs_and_raises_the_first_failure(trace):
    events: list[str] = []
    lock = threading.Lock()

    def step(name, pause=0.0, fail=False):
        def run(t, o, i):
            with lock:
                events.append(f"{name} start")
            time.sleep(pause)
            with lock:
                events.append(f"{name} end")
            if fail:
                raise ValueError(name)
            return name
        return run

    steps = [Step("slow", step("slow", 0.3)), Step("quick", step("quick")), Step("after", step("after"), ("slow",))]
    plan = run_steps(trace, AnalysisOptions(), steps, runner=Threaded(2))
    assert plan.results == {"slow": "slow", "quick": "quick", "after": "after"}
    assert events.index("slow end") < events.index("after start")
    assert events.index("quick end") < events.index("slow end")  # (beside the slow one, not after it)
    failing = [Step("a", step("a", 0.2, fail=True)), Step("b", step("b", 0.0, fail=True))]
    with pytest.raises(ValueError, match="^a$"):  # the first in list order, though b failed first
        run_steps(trace, AnalysisOptions(), failing, runner=Threaded(2))


def test_the_same_report_whichever_runner(trace):
    def report(runner):
        return json.loads(render_json(build_report(trace, analysis=analyse(trace, runner=runner))))

    one, two = report(sequential), report(Threaded(2))
    assert one == two
    assert one["findings"]  # a report with content, not empty ones


def test_every_kept_step_is_a_field_of_the_analysis_and_nothing_else():
    fields = set(Analysis.__dataclass_fields__) - {"trace", "options", "notes"}
    assert fields == {s.name for s in STEPS if s.kept}
    assert STEPS[-1].name == "findings"  # the findings read every analysis before them


def test_a_failed_dependency_graph_is_one_note_and_the_rest_stands(trace, monkeypatch):
    from tracekit.analysis import graph

    def broken(*args, **kwargs):
        raise RuntimeError("no path")

    monkeypatch.setattr(graph, "build_graph", broken)
    a = analyse(trace)
    assert a.critical_path is None and a.whatifs == [] and a.gaps.gaps.height
    assert a.notes == ["critical_path analysis failed: RuntimeError: no path"]
    assert a.findings is not None and a.findings.findings


def test_the_graph_is_gone_before_the_analyses_after_the_critical_path(trace, monkeypatch):
    """The dependency graph, the largest intermediate, is let go once the critical path has
    it, before any later step starts (unless `keep_graph`)."""
    import tracekit.pipeline as pipeline

    refs: list[weakref.ref] = []
    alive: list[bool] = []

    def watched(step):
        def graph(t, o, i):
            g = step.run(t, o, i)
            refs.append(weakref.ref(g))
            return g

        def timeline(t, o, i):
            gc.collect()
            alive.append(refs[-1]() is not None)
            return step.run(t, o, i)

        return replace(step, run={"graph": graph, "timeline": timeline}.get(step.name, step.run))

    monkeypatch.setattr(pipeline, "STEPS", tuple(map(watched, STEPS)))
    a = analyse(trace)
    kept = analyse(trace, options=AnalysisOptions(keep_graph=True))
    assert alive == [False, True]
    assert a.critical_path is not None and a.critical_path.graph is None
    assert kept.critical_path is not None and kept.critical_path.graph is not None


def test_a_step_that_merges_gives_over_windows_what_it_gives_over_the_whole(trace):
    """The windowed contract: a step with `merge`, run on each window of a split of the
    trace's events, merges into its result on the whole trace."""
    from tracekit.analysis.occupancy import occupancy

    (step,) = [s for s in STEPS if s.name == "per_launch"]
    assert step.merge is not None
    gpu, devices = trace.gpu, trace.meta.devices
    cut = int(gpu["ts_ns"].sort()[gpu.height // 2])
    parts = [occupancy(gpu.filter(w), devices) for w in (pl.col("ts_ns") < cut, pl.col("ts_ns") >= cut)]
    assert all(p.height for p in parts)  # (both windows hold launches)
    assert step.merge(parts).sort("eid").equals(occupancy(gpu, devices).sort("eid"))
    assert [s.name for s in STEPS if s.merge is not None] == ["per_launch"]  # (the others see the whole trace)


def test_two_threads_unless_memory_is_short_or_the_trace_large(trace, monkeypatch):
    monkeypatch.setattr(sizing, "usable_cpus", lambda: 2)
    need = sizing.frames_bytes(trace) * sizing.MEMORY_FACTOR  # two analyses at once, about
    monkeypatch.setattr(sizing, "physical_memory", lambda: 2 * need)  # exactly half: still fits
    assert isinstance(sizing.runner_for(trace), Threaded)
    monkeypatch.setattr(sizing, "physical_memory", lambda: 2 * need - 2)
    assert sizing.runner_for(trace) is sequential
    monkeypatch.setattr(sizing, "physical_memory", lambda: None)  # unknown: two
    assert isinstance(sizing.runner_for(trace), Threaded)
    monkeypatch.setattr(sizing, "usable_cpus", lambda: 1)  # one CPU: no second thread to gain
    assert sizing.runner_for(trace) is sequential
    monkeypatch.setattr(sizing, "usable_cpus", lambda: 2)
    monkeypatch.setattr(sizing, "LARGE_BYTES", 0)
    assert sizing.runner_for(trace) is sequential and sizing.large(trace)


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
    constant = [(f, c) for f, c in ((f, c) for f in frames for c in getattr(trace, f).columns)
                if getattr(trace, f).select(c).estimated_size() < 64]
    assert ("ops", "ph") in constant and ("runtime", "pid") in constant and len(constant) >= 10
    build_report(trace, analysis=analyse(trace))
    assert [(f, c) for f, c in constant if getattr(trace, f).select(c).estimated_size() >= 64] == []


@pytest.mark.real
@pytest.mark.parametrize("name", ["v100_ddp_mlp_memory_rank1.json.gz", "h100_qwen15_05b_hf_inference.json.gz"])
def test_every_gpu_name_is_classified_once(name, monkeypatch):
    """The taxonomy step classifies the trace's GPU names; every analysis and rule after it is
    handed that classification, so none classifies a GPU name again."""
    from conftest import real_trace

    import tracekit
    from tracekit.analysis import taxonomy

    trace = tracekit.load(real_trace(name))
    real, seen = taxonomy._classify, []
    monkeypatch.setattr(taxonomy, "_classify", lambda frame: seen.append(frame["name"].to_list()) or real(frame))
    analyse(trace)
    gpu = set(trace.gpu["name"].drop_nulls())
    assert set(seen[0]) == gpu
    assert [n for names in seen[1:] for n in names if n in gpu] == []


def test_the_what_ifs_read_the_graph_before_the_critical_path_consumes_it(trace, monkeypatch):
    """On any runner: the critical path lets the graph's orders go, so it must start after
    the what-ifs, which read them (else each computes them again, at once, on two threads)."""
    from tracekit.analysis import graph as graph_mod

    made: list[str] = []
    real = graph_mod.DepGraph.edge_order.func

    def counted(self):
        made.append("edge_order")
        return real(self)

    monkeypatch.setattr(graph_mod.DepGraph, "edge_order", functools.cached_property(counted))
    graph_mod.DepGraph.edge_order.__set_name__(graph_mod.DepGraph, "edge_order")
    for runner in (sequential, Threaded(2)):
        made.clear()
        a = analyse(trace, runner=runner)
        assert made == ["edge_order"] and a.whatifs and a.critical_path is not None
    (path,) = [s for s in STEPS if s.name == "critical_path"]
    assert "whatifs" in path.needs


def test_a_failed_analysis_is_not_computed_again_by_the_findings(trace, monkeypatch):
    """A failed optional analysis is one note; the rules that read it are errors that say so,
    and nothing computes it a second time."""
    from tracekit.analysis import attention

    calls: list[int] = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise MemoryError("no room")

    monkeypatch.setattr(attention, "analyze_attention", broken)
    a = analyse(trace)
    assert calls == [1] and a.attention is None
    assert a.notes == ["attention analysis failed: MemoryError: no room"]
    assert a.findings is not None and a.findings.errors
    assert {msg for _, msg in a.findings.errors} == {
        "AnalysisFailed: needs the attention analysis, which failed (see the notes)"}
    errored = {rule for rule, _ in a.findings.errors}
    assert len(errored) >= 5 and all(rule.startswith("attention") for rule in errored)  # (the attention rules)


def test_the_findings_refuse_a_seed_that_is_not_an_analysis(trace):
    from tracekit.findings import run_findings

    with pytest.raises(ValueError, match="seed 'links_typo' is not an analysis"):
        run_findings(trace, seed={"links_typo": None})
