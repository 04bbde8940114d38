"""`tracekit.native`: the one choice of C or reference, and every registered pass run both
ways (the `implementation` fixture) on a Kineto fixture and on small frames: the C route
answers where C is chosen, the reference alone runs otherwise, and both give the same.
(The passes' own cases, hand-computed and property-based, are in test_slices.py,
test_longest.py and test_pixel_runs.py, on the same fixture.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT, as_reference

import tracekit
from tracekit import native
from tracekit.analysis import intervals
from tracekit.analysis.attribution import attribute, op_paths
from tracekit.analysis.critical_path import critical_path
from tracekit.analysis.graph import build_graph
from tracekit.analysis.links import cpu_ops, launch_ops
from tracekit.analysis.longest import longest_path, longest_weight
from tracekit.analysis.nesting import rows_of, with_parents
from tracekit.report.timeline import pixel_runs

FIXTURE = Path(__file__).parent / "fixtures" / "kineto_step.json"
I64 = pl.Int64


@pytest.fixture(scope="module")
def trace():
    return tracekit.load(FIXTURE)


def _spans() -> tuple[pl.DataFrame, pl.DataFrame]:
    slices = pl.DataFrame({"eid": [1, 2, 3, 4, 5], "pid": ["1", "1", "1", "1", "2"], "tid": ["7", "7", "7", "8", "7"],
                           "ts_ns": [0, 10, 20, 5, 0], "end_ns": [100, 50, 30, 40, 10], "dur_ns": [100, 40, 10, 35, 10]})
    points = pl.DataFrame({"gid": [1, 2, 3, 4], "pid": ["1", "1", "1", "2"], "tid": ["7", "7", "8", "7"],
                           "t": [25, 60, 6, 9]})
    return points, slices


def _covered() -> pl.DataFrame:
    ivs = pl.DataFrame({"k": ["a", "a", "b"], "ts_ns": [0, 15, 5], "end_ns": [10, 30, 8]})
    qs = pl.DataFrame({"qid": [1, 2, 3], "k": ["a", "a", "b"], "q_start_ns": [5, 12, 0], "q_end_ns": [20, 40, 100]})
    return intervals.covered_ns(qs, ivs, on=["k"])


def _longest(t, path: bool):
    dep = build_graph(t)
    eo = dep.edge_order
    weights = eo.weights(dep.edges["weight_ns"])
    return longest_path(eo, weights) if path else longest_weight(eo, weights)


# pass -> what reaches it (the public function that calls it)
CASES = {
    "nest": lambda t: with_parents(t.ops.filter(pl.col("cat") == "cpu_op")),
    "rows_of": lambda t: rows_of(t.ops, t.ops["eid"].reverse().append(pl.Series([-5, None], dtype=I64))),
    "op_tree": lambda t: attribute(t).ops,
    "op_paths": lambda t: op_paths(cpu_ops(t), cpu_ops(t)["eid"]).sort("eid"),
    "covered_ns": lambda t: _covered().sort("qid"),
    "stab": lambda t: intervals.stab(*_spans()),
    "innermost": lambda t: intervals.innermost(*_spans(), on=["pid", "tid"]),
    "up_until": launch_ops,
    "flag_up": lambda t: build_graph(t).segments,
    "climb": lambda t: critical_path(t).segments,
    "longest_weight": lambda t: _longest(t, path=False),
    "longest_path": lambda t: _longest(t, path=True),
    "pixels": lambda t: pixel_runs(pl.DataFrame({"lane": [0, 0], "start_ns": [0, 20], "end_ns": [50, 45],
                                                 "cls": ["cpu", "sync"], "prio": [1, 3]}), 0, 100, 4),
}


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (pl.DataFrame, pl.Series)):
        return a.equals(b)
    return a == b


def test_every_registered_pass_has_a_case():
    assert set(native.PASSES) == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_pass_runs_its_chosen_route_with_the_same_answer(name, implementation, trace, monkeypatch):
    step = native.PASSES[name]
    calls: dict[str, list[bool]] = {"c": [], "reference": []}
    c, ref = step.c, step.reference
    monkeypatch.setattr(step, "c", lambda *a, **k: calls["c"].append((out := c(*a, **k)) is not None) or out)
    monkeypatch.setattr(step, "reference", lambda *a, **k: calls["reference"].append(True) or ref(*a, **k))
    got = CASES[name](trace)
    if implementation == native.C:
        assert any(calls["c"]), f"the C route of {name} never answered"
    else:
        assert not calls["c"] and calls["reference"]
    monkeypatch.setattr(step, "c", c)
    monkeypatch.setattr(step, "reference", ref)
    assert _same(got, as_reference(lambda: CASES[name](trace)))


def test_a_c_route_that_declines_leaves_the_input_to_the_reference():
    step = native.register("_test_declines", c=lambda x: None if x < 0 else ("c", x),
                           reference=lambda x: ("reference", x))
    try:
        with native.use(native.C if native.BUILT else native.REFERENCE):
            assert step(-1) == ("reference", -1)
            assert step(2) == (("c", 2) if native.BUILT else ("reference", 2))
        with native.use(native.REFERENCE):
            assert step(2) == ("reference", 2)
    finally:
        del native.PASSES["_test_declines"]


def test_use_restores_the_choice_and_refuses_what_is_not_there():
    before = native.enabled()
    with pytest.raises(ValueError), native.use("fortran"):
        pass
    with native.use(native.REFERENCE):
        assert not native.enabled()
    assert native.enabled() == before
    if not native.BUILT:
        with pytest.raises(RuntimeError), native.use(native.C):
            pass


@pytest.mark.parametrize("switch", ["0", "1"])
def test_the_switch_is_read_once_at_import(switch):
    """`TRACEKIT_NATIVE=0` at import: every pass is its reference, and the scanner is off;
    the scanner alone reads the switch again on each call (its helper processes)."""
    code = ("import os; from tracekit import native; a = native.enabled(); os.environ['TRACEKIT_NATIVE'] = "
            "'1' if os.environ['TRACEKIT_NATIVE'] == '0' else '0'; print(a, native.enabled(), native.BUILT)")
    env = {**os.environ, "TRACEKIT_NATIVE": switch, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout.split()
    built = out[2] == "True"
    on = switch == "1" and built
    assert out[:2] == [str(on), str(on)]
