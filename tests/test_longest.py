"""Longest paths on edge arrays: the C loops, the Python loops and networkx agree exactly."""

from __future__ import annotations

from itertools import pairwise

import networkx as nx
import polars as pl
import pytest
from conftest import both_ways, real_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import native
from tracekit.analysis.graph import DepGraph
from tracekit.analysis.longest import EdgeOrder, _longest_path, _longest_weight, longest_path, longest_weight
from tracekit.native import _paths, kernels

needs_c = pytest.mark.skipif(not native.BUILT, reason="the C loops are not built (no C compiler at install)")
I64 = pl.Int64


def _graph(edges: list[tuple[int, int, int]], order: list[int]) -> DepGraph:
    frame = pl.DataFrame(edges, schema={"src": I64, "dst": I64, "weight_ns": I64}, orient="row")
    empty = pl.DataFrame()
    return DepGraph(edges=frame, segments=empty, syncs=empty, slices=empty, start_ns=0, end_ns=0, order=order)


@st.composite
def dags(draw):
    """A DAG on nodes labelled in a shuffled topological order, with ties, negative weights
    and nodes without edges; each (src, dst) pair once, as `build_graph` makes them."""
    n = draw(st.integers(1, 25))
    labels = draw(st.permutations(range(n)))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] < p[1]),
                          max_size=60, unique=True))
    weights = draw(st.lists(st.sampled_from([-5, 0, 0, 1, 2, 3, 3, 7, 10**12]), min_size=len(pairs),
                            max_size=len(pairs)))
    edges = [(labels[a], labels[b], w) for (a, b), w in zip(pairs, weights)]
    return edges, list(labels)


def path(order: EdgeOrder, weights: pl.Series) -> tuple[list[int], int]:
    """`longest_path` with its nodes as a list (it returns them as an Int64 column)."""
    nodes, weight = longest_path(order, weights)
    assert nodes.dtype == pl.Int64
    return nodes.to_list(), weight


def c_path(*args) -> tuple[list[int], int]:
    """The C pass's answer with its positions (an Arrow column) as a list."""
    positions, weight = _paths.longest_path(*args)
    return kernels.series(positions).to_list(), weight


@settings(max_examples=300, deadline=None)
@given(dags())
def test_c_python_and_networkx_agree(case):
    edges, order = case
    dep = _graph(edges, order)
    eo = EdgeOrder.of(dep)
    weights = eo.weights(dep.edges["weight_ns"])
    reference = _longest_path(eo, weights)
    got, python = both_ways(lambda: path(eo, weights))  # the C loops (where built), the Python loops
    assert got == python == reference
    assert both_ways(lambda: longest_weight(eo, weights)) == (_longest_weight(eo, weights),) * 2
    graph = nx.DiGraph()
    graph.add_nodes_from(order)
    graph.add_edges_from((s, d, {"weight": w}) for s, d, w in edges)
    if edges:  # the edge arrays only know nodes that have edges: a lone node is a path of weight 0 either way
        expected = nx.dag_longest_path(graph, weight="weight", default_weight=0, topo_order=order)
        weight = sum(graph.edges[a, b]["weight"] for a, b in pairwise(expected))
        assert reference[1] == weight == max(0, nx.dag_longest_path_length(graph, weight="weight", default_weight=0))
        if weight > 0:
            assert reference[0] == expected


def test_hand_computed_path_and_ties(implementation):
    # 0 -> 1 -> 3 weighs 5 + 4 = 9; 0 -> 2 -> 3 weighs 6 + 3 = 9 too: the first edge into 3 (from 1) wins
    edges = [(0, 1, 5), (0, 2, 6), (1, 3, 4), (2, 3, 3), (3, 4, -2)]
    dep = _graph(edges, [0, 1, 2, 3, 4])
    eo = EdgeOrder.of(dep)
    weights = eo.weights(dep.edges["weight_ns"])
    assert path(eo, weights) == _longest_path(eo, weights) == ([0, 1, 3], 9)
    assert longest_weight(eo, weights) == _longest_weight(eo, weights) == 9


@needs_c
def test_weights_beyond_64_bits_take_the_python_loop():
    big = 2**62
    edges = [(0, 1, big), (1, 2, big), (2, 3, big)]
    dep = _graph(edges, [0, 1, 2, 3])
    eo = EdgeOrder.of(dep)
    weights = eo.weights(dep.edges["weight_ns"])
    with pytest.raises(OverflowError):
        _paths.longest_path(eo.src, eo.dst, weights, eo.nodes)
    with pytest.raises(OverflowError):
        _paths.longest_weight(eo.src, eo.dst, weights, eo.nodes)
    assert path(eo, weights) == ([0, 1, 2, 3], 3 * big)
    assert longest_weight(eo, weights) == 3 * big


@needs_c
def test_c_loops_check_their_input():
    with pytest.raises(IndexError):
        _paths.longest_path([0], [5], [1], 2)
    with pytest.raises(IndexError):
        _paths.longest_weight([-1], [1], [1], 2)
    with pytest.raises(ValueError, match="differ in length"):
        _paths.longest_weight([0, 1], [1], [1], 3)
    with pytest.raises(TypeError):
        _paths.longest_path([0], ["1"], [1], 2)
    assert _paths.longest_weight([], [], [], 0) == 0


@needs_c
def test_c_loops_read_arrow_columns():
    """The edge columns cross as Arrow arrays (what `longest_path` hands over), with the same
    answers as lists; a column with nulls or of another type is refused."""
    edges = [(0, 1, 5), (0, 2, 6), (1, 3, 4), (2, 3, 3), (3, 4, -2)]
    dep = _graph(edges, [0, 1, 2, 3, 4])
    eo = EdgeOrder.of(dep)
    weights = eo.weights(dep.edges["weight_ns"])
    columns = [kernels.arrow(c) for c in (eo.src, eo.dst, weights)]
    assert c_path(*columns, eo.nodes) == ([0, 1, 3], 9)
    lists = (eo.src.to_list(), eo.dst.to_list(), weights.to_list())
    assert c_path(*lists, eo.nodes) == ([0, 1, 3], 9)
    assert _paths.longest_weight(*[kernels.arrow(c) for c in (eo.src, eo.dst, weights)], eo.nodes) == 9
    with_null = pl.Series([1, None, 1, 1, 1], dtype=I64).__arrow_c_stream__()
    with pytest.raises(ValueError, match="without nulls"):
        _paths.longest_weight(kernels.arrow(eo.src), kernels.arrow(eo.dst), with_null, eo.nodes)
    floats = pl.Series([1.0] * 5).__arrow_c_stream__()
    with pytest.raises(TypeError, match="Int64"):
        _paths.longest_weight(kernels.arrow(eo.src), kernels.arrow(eo.dst), floats, eo.nodes)


def test_native_can_be_turned_off():
    with native.use(native.REFERENCE):
        assert not native.enabled()
    edges = [(0, 1, 2), (1, 2, 3)]
    dep = _graph(edges, [0, 1, 2])
    eo = EdgeOrder.of(dep)
    assert path(eo, eo.weights(dep.edges["weight_ns"])) == ([0, 1, 2], 5)


@pytest.mark.real
@needs_c
def test_real_trace_paths_agree():
    import tracekit
    from tracekit.analysis.graph import build_graph

    dep = build_graph(tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz")))
    eo = dep.edge_order
    weights = eo.weights(dep.edges["weight_ns"])
    assert eo.nodes > 1000
    assert path(eo, weights) == _longest_path(eo, weights)
    assert longest_weight(eo, weights) == _longest_weight(eo, weights)


@pytest.mark.real
def test_real_trace_path_is_networkx_s(implementation):
    """The critical path's graph is a networkx DiGraph for the user's own queries, and the
    path found on the edge arrays is the one `nx.dag_longest_path` finds on it."""
    import tracekit
    from tracekit.analysis.critical_path import critical_path

    cp = critical_path(tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz")))
    dep = cp.graph
    assert dep is not None and isinstance(dep.graph, nx.DiGraph)
    eo = dep.edge_order
    nodes, weight = longest_path(eo, eo.weights(dep.edges["weight_ns"]))
    topo = [n for n in dep.order.to_list() if n in dep.graph]
    assert nodes.to_list() == nx.dag_longest_path(dep.graph, weight="weight", default_weight=0, topo_order=topo)
    assert weight == nx.dag_longest_path_length(dep.graph, weight="weight", default_weight=0) == cp.weight_ns
