"""The intermediates the analyses start from (op tree, launch calls, GPU links, kernel classes,
blocking copies, launch statistics, occupancy per launch) are arguments: an analysis called
alone computes each of them once, and one handed them computes none of them again and gives
the same answer. An `OpTree` keeps the arrays derived from the tree for every analysis it is
handed to."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from conftest import real_trace
from test_graph import gpu_bound, launch_bound

import tracekit
from tracekit.analysis import attribution, launches, links, syncs, taxonomy
from tracekit.analysis.attention import analyze_attention
from tracekit.analysis.attribution import attribute, closure_pairs, op_instances, op_paths
from tracekit.analysis.breakdown import breakdown
from tracekit.analysis.compile import compile_stats
from tracekit.analysis.gaps import gaps
from tracekit.analysis.hostside import host_time
from tracekit.analysis.launches import launch_stats
from tracekit.analysis.memory import memory_stats
from tracekit.analysis.nesting import OpTree, tree_of
from tracekit.analysis.roofline import roofline
from tracekit.analysis.syncs import blocking_copies, copy_stats, sync_stats
from tracekit.analysis.windows import windows

# what is counted: the computations behind each intermediate
COUNTED = {"ops": (links, "cpu_ops"), "launches": (links, "_launch_ops"), "links": (links, "_gpu_links"),
           "blocking": (syncs, "blocking_copies"), "classify": (taxonomy, "_classify"),
           "stats": (launches, "_launch_stats")}


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each intermediate of `COUNTED` was computed."""
    counts: Counter[str] = Counter()
    for key, (module, name) in COUNTED.items():
        real = getattr(module, name)

        def counted(*args: Any, _real: Callable[..., Any] = real, _key: str = key, **kwargs: Any) -> Any:
            counts[_key] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return counts


def _given(trace: tracekit.Trace) -> dict[str, Any]:
    tree = links.op_tree(trace)
    calls = links.launch_ops(trace, ops=tree)
    gpu = links.gpu_links(trace, launches=calls)
    return {"ops": tree, "launches": calls, "links": gpu, "classes": taxonomy.classify_names(trace.gpu["name"]),
            "blocking": blocking_copies(trace), "stats": launch_stats(trace, calls=calls, gpu=gpu)}


# each analysis, called alone and called with what it takes (`g`: `_given`)
ANALYSES: dict[str, tuple[Callable[[tracekit.Trace], Any], Callable[[tracekit.Trace, dict[str, Any]], Any]]] = {
    "attribute": (attribute, lambda t, g: attribute(t, ops=g["ops"], launches=g["launches"], links=g["links"])),
    "sync_stats": (sync_stats, lambda t, g: sync_stats(t, ops=g["ops"], launches=g["launches"],
                                                        blocking=g["blocking"])),
    "copy_stats": (copy_stats, lambda t, g: copy_stats(t, ops=g["ops"], links=g["links"])),
    "memory_stats": (memory_stats, lambda t, g: memory_stats(t, ops=g["ops"])),
    "gaps": (gaps, lambda t, g: gaps(t, links=g["links"], ops=g["ops"], blocking=g["blocking"])),
    "windows": (windows, lambda t, g: windows(t, links=g["links"])),
    "launch_stats": (launch_stats, lambda t, g: launch_stats(t, calls=g["launches"], gpu=g["links"])),
    "compile_stats": (compile_stats, lambda t, g: compile_stats(t, launches=g["stats"], calls=g["launches"],
                                                                gpu=g["links"])),
    "roofline": (roofline, lambda t, g: roofline(t, ops=g["ops"], links=g["links"], classes=g["classes"])),
    "attention": (analyze_attention, lambda t, g: analyze_attention(t, ops=g["ops"], launches=g["launches"],
                                                                    links=g["links"])),
    "host_time": (host_time, lambda t, g: host_time(t, ops=g["ops"])),
    "breakdown": (breakdown, lambda t, g: breakdown(t, classes=g["classes"])),
    "kernel_table": (lambda t: taxonomy.kernel_table(t.gpu),
                     lambda t, g: taxonomy.kernel_table(t.gpu, classes=g["classes"])),
    "class_table": (lambda t: taxonomy.class_table(t.gpu, include_memory=True),
                    lambda t, g: taxonomy.class_table(t.gpu, include_memory=True, classes=g["classes"])),
    "tensor_core_share": (lambda t: taxonomy.tensor_core_share(t.gpu),
                          lambda t, g: taxonomy.tensor_core_share(t.gpu, classes=g["classes"])),
}
# what each analysis computes alone at most once, and never when it is given them; those that
# take the kernel classes classify no name when given them
ONCE = ("ops", "launches", "links", "blocking", "stats")
TAKE_CLASSES = {"roofline", "breakdown", "kernel_table", "class_table", "tensor_core_share"}
PRODUCES = {"launch_stats": "stats"}  # (an analysis that is an intermediate computes itself)


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, pl.DataFrame):
        return isinstance(b, pl.DataFrame) and a.equals(b)
    if hasattr(a, "__dataclass_fields__"):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


@functools.cache
def _fixtures(tmp: str) -> dict[str, tracekit.Trace]:
    from pathlib import Path

    return {"launch_bound": launch_bound().load(Path(tmp), "l.json.gz"),
            "gpu_bound": gpu_bound(record=True).load(Path(tmp), "g.json.gz")}


@pytest.mark.parametrize("name", list(ANALYSES))
@pytest.mark.parametrize("fixture", ["launch_bound", "gpu_bound"])
def test_alone_each_intermediate_once_given_none(name, fixture, made, tmp_path_factory):
    trace = _fixtures(str(tmp_path_factory.getbasetemp()))[fixture]
    alone, with_args = ANALYSES[name]
    given = _given(trace)
    made.clear()
    expected = alone(trace)
    assert all(made[k] <= 1 for k in ONCE), dict(made)
    made.clear()
    got = with_args(trace, given)
    again = {k: n for k, n in made.items() if n and k != PRODUCES.get(name)
             and (k in ONCE or (k == "classify" and name in TAKE_CLASSES))}
    assert not again, f"{name} computed {again} although given"
    assert _same(got, expected)


@pytest.mark.real
def test_given_intermediates_give_the_same_answers_on_a_real_trace():
    trace = tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz"))
    given = _given(trace)
    for name, (alone, with_args) in ANALYSES.items():
        assert _same(with_args(trace, given), alone(trace)), name


def test_op_instances_take_the_intermediates(tmp_path, made):
    trace = launch_bound().load(tmp_path)
    given = _given(trace)
    kept = attribute(trace)
    made.clear()
    rows = op_instances(attribute(trace, instances=False, ops=given["ops"], launches=given["launches"],
                                  links=given["links"]), trace, ops=given["ops"], launches=given["launches"],
                        links=given["links"])
    assert not any(made[k] for k in ONCE) and rows.equals(kept.instances)


def test_an_op_tree_keeps_what_is_derived_from_it(tmp_path, monkeypatch):
    from tracekit import native

    trace = launch_bound().load(tmp_path)
    tree = links.op_tree(trace)
    assert tree_of(tree) is tree and tree_of(tree.frame) is not tree
    assert tree.parent_rows is tree.parent_rows and tree.closure is closure_pairs(tree)
    assert closure_pairs(tree.frame).equals(tree.closure)  # (a bare frame: made afresh, the same)
    chains = []
    real = attribution._chain_paths
    monkeypatch.setattr(attribution, "_chain_paths", lambda *a: chains.append(1) or real(*a))
    eids = tree.frame["eid"]
    first = op_paths(tree, eids).sort("eid")  # (the rows come in no set order)
    assert op_paths(tree, eids).sort("eid").equals(first)
    assert first.equals(op_paths(tree.frame, eids).sort("eid"))
    # with the C passes: once for the tree, once for the bare frame (a tree of its own)
    assert len(chains) == (2 if native.enabled() else 0)
    assert set(tree.paths) == ({" > "} if native.enabled() else set())


def test_an_op_tree_shares_its_parent_rows_with_the_containment_walk(tmp_path, monkeypatch):
    """`launch_ops` on an `OpTree` reads the tree's parent rows (computed once for it), and
    `op_paths` on the same tree reads them again without computing them."""
    from tracekit.analysis import nesting

    trace = launch_bound().load(tmp_path)
    tree = OpTree(links.cpu_ops(trace))
    calls = []
    real = nesting.parent_rows
    monkeypatch.setattr(nesting, "parent_rows", lambda frame: calls.append(1) or real(frame))
    links.launch_ops(trace, ops=tree)
    op_paths(tree, tree.frame["eid"])
    attribute(trace, ops=tree)
    assert len(calls) <= 1
