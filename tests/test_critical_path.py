"""Critical path: golden traces with the path known by construction, then real traces."""

from __future__ import annotations

import polars as pl
import pytest
from builders import TraceBuilder
from conftest import all_real_traces, real_trace
from test_graph import (
    critical_path_cached,
    cross_stream,
    gpu_bound,
    graph_replay,
    launch_bound,
    load_cached,
    sync_stalled,
)

from tracekit import Trace, UsageError
from tracekit.analysis.critical_path import critical_path, resolve_window


def _ns(cp, cls: str) -> int:
    return int(cp.by_class.filter(pl.col("cls") == cls)["ns"][0])


def _assert_tiles(cp) -> None:
    """Segments are contiguous and cover the window exactly."""
    s = cp.segments
    assert s["start_ns"][0] == cp.start_ns and s["end_ns"][-1] == cp.end_ns
    assert (s["start_ns"].slice(1) == s["end_ns"].slice(0, s.height - 1)).all()
    assert int(s["dur_ns"].sum()) == cp.window_ns == int(cp.by_class["ns"].sum())


def test_launch_bound(tmp_path):
    cp = critical_path(launch_bound().load(tmp_path))
    _assert_tiles(cp)
    assert cp.window_ns == 255_000
    assert _ns(cp, "launch_overhead") == 200_000  # 10 x (15 µs op self + 5 µs launch call)
    assert _ns(cp, "python_overhead") == 55_000  # 11 x 5 µs between and around the ops
    assert cp.verdict == "launch-bound" and cp.verdict_share == 1.0
    assert set(cp.segments["lane"]) == {"cpu:1000:1000"}
    assert "`nn.Module: LlamaAttention_0`" in cp.sentence and cp.sentence.startswith("this window is 100 % launch-bound")


def test_gpu_bound_without_sync_records(tmp_path):
    """No cuda_sync records: the sync edge is inferred and the path is GPU-bound (HTA: 100 % CPU)."""
    cp = critical_path(gpu_bound().load(tmp_path))
    _assert_tiles(cp)
    rows = cp.segments.select("start_ns", "end_ns", "cls", "edge").rows()
    assert rows[0] == (0, 1_000, "python_overhead", "cpu")
    assert rows[1] == (1_000, 3_000, "launch_overhead", "cpu")  # aten::mm until its launch call
    assert rows[2] == (3_000, 10_000, "launch_overhead", "launch")
    assert rows[-2] == (1_010_000, 1_015_000, "sync_wait", "sync")
    assert rows[-1] == (1_015_000, 1_020_000, "python_overhead", "cpu")
    assert _ns(cp, "gpu_compute") == 1_000_000
    assert cp.verdict == "gpu-bound" and cp.verdict_share == pytest.approx(1_000_000 / 1_020_000)
    assert cp.sentence.startswith("GPU-bound: 98 % of the critical path is GPU work") and "gemm kernels" in cp.sentence
    assert cp.inferred_edges == 1


def test_gpu_bound_with_sync_record_same_path(tmp_path):
    a = critical_path(gpu_bound().load(tmp_path, "a.json.gz"))
    b = critical_path(gpu_bound(record=True).load(tmp_path, "b.json.gz"))
    assert a.shares == b.shares and b.inferred_edges == 0


def test_sync_stalled(tmp_path):
    trace = sync_stalled().load(tmp_path)
    cp = critical_path(trace)
    _assert_tiles(cp)
    assert {c: _ns(cp, c) for c in ("sync_wait", "python_overhead", "launch_overhead", "gpu_compute",
                                    "gpu_memory", "idle")} == {
        "sync_wait": 300_000, "python_overhead": 90_000, "launch_overhead": 51_000, "gpu_compute": 150_000,
        "gpu_memory": 6_000, "idle": 3_000}
    assert cp.verdict == "sync-bound" and cp.verdict_share == 0.5
    assert "`cudaDeviceSynchronize`" in cp.sentence and "aten::item" in cp.sentence
    step = critical_path(trace, window="ProfilerStep#2")
    _assert_tiles(step)
    assert (step.start_ns, step.end_ns, step.window) == (200_000, 400_000, "ProfilerStep#2")
    assert _ns(step, "sync_wait") == 100_000 and step.verdict == "sync-bound"
    assert critical_path(trace, window="ProfilerStep", index=-1).start_ns == 400_000
    assert critical_path(trace, window="ProfilerStep").window == "ProfilerStep (3 instances)"


def test_cross_stream_wait(tmp_path):
    for record in (True, False):
        cp = critical_path(cross_stream(record=record).load(tmp_path, f"{record}.json.gz"))
        _assert_tiles(cp)
        edges = cp.segments.filter(pl.col("edge") != "cpu").select("start_ns", "end_ns", "edge", "lane").rows()
        assert edges == [(2_000, 20_000, "launch", "gpu:0:7"), (20_000, 220_000, "gpu", "gpu:0:7"),
                         (220_000, 220_500, "cross_stream", "gpu:0:20"), (220_500, 320_500, "gpu", "gpu:0:20"),
                         (320_500, 325_000, "sync", "cpu:1000:1000")]
        assert _ns(cp, "gpu_compute") == 300_000 and cp.verdict == "gpu-bound"
        assert bool(cp.segments.filter(pl.col("edge") == "cross_stream")["inferred"][0]) is not record


def test_graph_replay(tmp_path):
    cp = critical_path(graph_replay().load(tmp_path))
    _assert_tiles(cp)
    gpu = cp.segments.filter(pl.col("edge") == "gpu")
    assert gpu.height == 3 and int(gpu["dur_ns"].sum()) == 150_000
    assert set(gpu["context"]) == {"CUDAGraph::replay"}
    assert _ns(cp, "launch_overhead") == 9_000 and _ns(cp, "sync_wait") == 2_000
    assert cp.verdict == "gpu-bound" and cp.verdict_share == pytest.approx(150 / 170)


def test_cpu_only_and_empty(tmp_path):
    b = TraceBuilder()
    b.op("aten::add", 0, 10_000)
    cp = critical_path(b.load(tmp_path))
    assert cp.verdict == "no-gpu" and "no GPU work" in cp.sentence
    cp = critical_path(Trace.empty())
    assert cp.verdict == "empty" and cp.segments.height == 0


def test_window_errors(tmp_path):
    trace = sync_stalled().load(tmp_path)
    with pytest.raises(UsageError, match="no annotation"):
        resolve_window(trace, "nope")
    with pytest.raises(UsageError, match="out of range"):
        resolve_window(trace, "ProfilerStep", index=3)
    assert resolve_window(trace, "all") == ("whole trace", None, None)


def test_closed_vocabularies_are_enums(tmp_path):
    """`cls` and `edge` of the path, and `kind`, `cls` and `role` of the graph, are Enums with
    fixed categories: paths of two traces concatenate, and the values read as strings."""
    from tracekit.analysis.critical_path import EDGE
    from tracekit.analysis.graph import CLASS, CLASSES, KIND, ROLE

    cp = critical_path(gpu_bound().load(tmp_path))
    assert cp.segments.schema["cls"] == CLASS == pl.Enum(CLASSES)
    assert cp.segments.schema["edge"] == EDGE
    assert list(EDGE.categories) == ["cpu", "gpu", "stream", "launch", "cross_stream", "sync", "window"]
    dep = cp.graph
    assert (dep.edges.schema["kind"], dep.edges.schema["cls"]) == (KIND, CLASS)
    assert (dep.segments.schema["cls"], dep.segments.schema["role"]) == (CLASS, ROLE)
    other = critical_path(launch_bound().load(tmp_path, "other.json.gz"))
    both = pl.concat([cp.segments, other.segments])
    assert both.height == cp.segments.height + other.segments.height
    assert both.filter(pl.col("cls") == "launch_overhead")["dur_ns"].sum() == (
        _ns(cp, "launch_overhead") + _ns(other, "launch_overhead"))
    assert cp.segments["edge"].to_list()[:3] == ["cpu", "cpu", "launch"]


def test_names_and_lanes_are_categoricals(tmp_path):
    """The names, contexts and lanes of the path, and the names and lanes of the graph's
    edges and pieces, are Categoricals: codes a row, read back as the same text, joined and
    concatenated across paths; the summary's contexts are text."""
    from tracekit.analysis.graph import TEXT

    cp = critical_path(launch_bound().load(tmp_path))
    for frame, cols in ((cp.segments, ("name", "context", "lane")), (cp.graph.edges, ("name", "lane")),
                        (cp.graph.segments, ("name", "lane"))):
        assert [frame.schema[c] for c in cols] == [TEXT] * len(cols)
    segs = cp.segments
    as_text = segs.with_columns(pl.col("name", "context", "lane").cast(pl.String))
    assert segs.rows() == as_text.rows()  # the same values, read as str
    assert {r["lane"] for r in segs.to_dicts()} == {"cpu:1000:1000"}
    assert segs.filter(pl.col("name") == "cudaLaunchKernel").height == as_text.filter(
        pl.col("name") == "cudaLaunchKernel").height > 0
    assert cp.by_context.schema["context"] == pl.String
    assert cp.by_context["context"].to_list() == (as_text.group_by("cls", "context").agg(ns=pl.col("dur_ns").sum())
                                                  .sort(["ns", "cls", "context"], descending=[True, False, False],
                                                        nulls_last=True)["context"].to_list())
    other = critical_path(gpu_bound().load(tmp_path, "other.json.gz")).segments
    both = pl.concat([segs, other])
    assert both["lane"].cast(pl.String).to_list() == as_text["lane"].to_list() + other["lane"].cast(pl.String).to_list()


def test_to_dict(tmp_path):
    d = critical_path(gpu_bound().load(tmp_path)).to_dict()
    assert d["verdict"] == "gpu-bound" and d["segment_count"] == len(d["segments"])
    assert set(d["shares"]) >= {"gpu_compute", "sync_wait", "idle"}


# -- real traces ------------------------------------------------------------------------------

@pytest.mark.real
def test_real_v100_resnet_is_gpu_bound():
    cp = critical_path_cached(real_trace("v100_resnet_ns_timestamps.json.gz"))
    assert cp.verdict == "gpu-bound" and cp.verdict_share > 0.9
    assert cp.inferred_edges > 0  # blocked launches on a full queue


@pytest.mark.real
def test_real_alexnet_with_sync_records():
    cp = critical_path_cached(real_trace("a100_alexnet_cuda_sync.json.gz"))
    # the capture is dominated by CUDA initialisation (30 s in cudaDeviceGetStreamPriorityRange)
    assert cp.verdict == "cpu-bound" and cp.verdict_share < 0.9
    assert cp.edge_counts["sync"] > 0 and cp.graph.sync_records > 0  # record-backed sync edges


@pytest.mark.real
@pytest.mark.parametrize("name", ["h100_qwen15_05b_hf_inference.json.gz", "a100_ddp_cnn_nccl_rank0.json.gz",
                                  "mi250_toy_train_rocm62.json.gz", "dlrm_8rank_v100/worker0.json.gz"])
def test_real_no_sync_records_not_cpu_bound(name):
    trace = load_cached(real_trace(name))
    assert trace.gpu.filter(pl.col("cat") == "cuda_sync").is_empty()
    cp = critical_path_cached(real_trace(name))
    _assert_tiles(cp)
    assert cp.verdict != "cpu-bound" and cp.shares["cpu_compute"] < 0.5


@pytest.mark.real
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: p.name)
def test_real_no_trace_is_all_cpu_bound(path):
    cp = critical_path_cached(path)
    _assert_tiles(cp)
    assert not (cp.verdict == "cpu-bound" and cp.verdict_share > 0.99)


# -- what-if ------------------------------------------------------------------------------------

def test_whatif_exact(tmp_path):
    from tracekit.analysis import whatif

    cp = critical_path(launch_bound().load(tmp_path, "a.json.gz"))
    w = whatif.no_launch_overhead(cp.graph)
    assert whatif.path_weight(cp.graph) == cp.weight_ns == 255_000
    assert (w.saved_ns, w.estimate_ns) == (235_000, 20_000)  # only the ten 2 µs kernels remain
    cp = critical_path(gpu_bound().load(tmp_path, "b.json.gz"))
    w = whatif.faster(cp.graph, kernel_class="gemm", factor=2)
    assert w.saved_ns == 500_000 and w.scenario == "faster:gemm"  # Amdahl: 1 ms of GEMMs on the path
    assert whatif.faster(cp.graph, kernel_class="attention", factor=10).saved_ns == 0
    with pytest.raises(UsageError):
        whatif.faster(cp.graph, kernel_class="gemm", factor=0)


def test_whatif_remove_syncs(tmp_path):
    from tracekit.analysis import whatif

    cp = critical_path(sync_stalled().load(tmp_path))
    every = whatif.no_syncs(cp.graph)
    # without syncs each step's host work (63 µs) overlaps its GPU work: the path is two steps of
    # host work, step 3's host work up to its launch (15 µs), then its kernel and copy (52 µs)
    assert (every.weight_ns, every.scenario_weight_ns) == (567_000, 2 * 63_000 + 15_000 + 52_000)
    assert every.saved_ns == 374_000 and every.estimate_ns == 600_000 - 374_000
    one = whatif.no_syncs(cp.graph, call_eids=cp.graph.syncs["eid"].head(1))
    assert 0 < one.saved_ns < every.saved_ns and "1 sync call removed" in one.description
    names = [w.scenario for w in whatif.standard(cp.graph)]
    assert names == ["no_launch_overhead", "no_syncs", "faster:gemm"]


def test_whatif_needs_the_pieces_in_anchor_order(tmp_path):
    """A cpu edge's what-if weight sums one run of the pieces (sorted by `src`): a graph whose
    pieces are out of that order is refused, not summed wrong."""
    from dataclasses import replace

    from tracekit.analysis import whatif

    dep = critical_path(launch_bound().load(tmp_path, "a.json.gz")).graph
    assert dep.segments["src"].n_unique() > 1
    with pytest.raises(ValueError, match="sorted by src"):
        whatif.no_launch_overhead(replace(dep, segments=dep.segments.reverse()))


def test_analyse_releases_the_graph_after_its_readers(tmp_path):
    """`analyse()` keeps the path but not its dependency graph (unless asked): the what-ifs
    and the host_bound_path finding, its last readers, give the same results either way."""
    from tracekit.pipeline import AnalysisOptions, analyse

    trace = launch_bound(n=10).load(tmp_path)
    lean, full = analyse(trace), analyse(trace, options=AnalysisOptions(keep_graph=True))
    assert lean.critical_path.graph is None and full.critical_path.graph is not None
    assert lean.critical_path.segments.equals(full.critical_path.segments)
    assert [w.to_dict() for w in lean.whatifs] == [w.to_dict() for w in full.whatifs]
    assert [w.scenario for w in lean.whatifs] == ["no_launch_overhead", "no_syncs", "faster:elementwise"]
    assert (lean.whatifs[0].saved_ns, lean.whatifs[0].estimate_ns) == (235_000, 20_000)

    def host(a):
        return [f.to_dict() for f in a.findings.findings if f.rule == "host_bound_path"]

    assert host(lean) == host(full) and host(lean)[0]["time_lost_ns"] == 235_000



def test_a_graph_handed_over_is_let_go_and_a_lean_path_is_the_same_path(tmp_path):
    """A graph given with `handed_over` (the pipeline's, whose only reference it passes) is
    consumed like one the call built: without `keep_graph` the result is the same path,
    summary and counts, without the graph, and the graph's orders are let go; a graph given
    without it is left as it was."""
    from tracekit.analysis.graph import build_graph

    trace = launch_bound(n=10).load(tmp_path)
    full = critical_path(trace)
    given = build_graph(trace)
    handed = build_graph(trace)
    kept_by_caller = critical_path(trace, graph=given, keep_graph=False)
    lean = critical_path(trace, graph=handed, handed_over=True, keep_graph=False)
    assert "longest" in given.__dict__ and "longest" not in handed.__dict__  # (computed, then let go)
    for one in (lean, kept_by_caller, critical_path(trace, keep_graph=False)):
        assert one.graph is None
        assert one.segments.equals(full.segments) and one.by_context.equals(full.by_context)
        assert (one.nodes, one.edges, one.edge_counts, one.inferred_edges, one.sentence) == (
            full.nodes, full.edges, full.edge_counts, full.inferred_edges, full.sentence)
    assert lean.nodes == len(full.graph.order) and lean.edges == full.graph.edges.height > 0


# -- path segments ------------------------------------------------------------------------------

def _segments_one_edge_at_a_time(dep, nodes: list[int]) -> list[tuple]:
    """`path_segments` spelled out: each step of the path is its edge's row, a cpu edge its
    pieces in their order; the window before and after the path is idle."""
    cols = ["start_ns", "end_ns", "cls", "name", "eid", "lane", "weight_ns"]
    rows = []
    for src, dst in zip(nodes[:-1], nodes[1:]):
        edge = dep.edges.filter((pl.col("src") == src) & (pl.col("dst") == dst))
        if edge.is_empty():
            continue
        e = edge.row(0, named=True)
        if e["kind"] == "cpu":
            pieces = dep.segments.filter(pl.col("src") == src).select(cols)
            rows += [(*p, "cpu", False, None) for p in pieces.iter_rows()]
        else:
            rows.append((*(e[c] for c in cols), e["kind"], e["inferred"], e["src_eid"]))
    first = rows[0][0] if rows else dep.end_ns
    last = rows[-1][1] if rows else dep.end_ns
    idle = ("idle", "outside the path", None, None, 0, "window", False, None)
    return ([(dep.start_ns, first, *idle)] if first > dep.start_ns else []) + rows + (
        [(last, dep.end_ns, *idle)] if dep.end_ns > last else [])


@pytest.mark.parametrize("part", [slice(None), slice(1, -1), slice(2, 5), slice(0, 1), slice(0, 0)])
def test_path_segments_are_the_path_edges_one_at_a_time(tmp_path, part):
    from tracekit.analysis.critical_path import PATH_SCHEMA, path_nodes, path_segments
    from tracekit.analysis.graph import build_graph

    dep = build_graph(launch_bound().load(tmp_path))
    nodes = path_nodes(dep)[part]
    segs = path_segments(dep, nodes)
    assert segs.schema == pl.Schema(PATH_SCHEMA)
    cols = ["start_ns", "end_ns", "cls", "name", "eid", "lane", "weight_ns", "edge", "inferred", "src_eid"]
    expected = _segments_one_edge_at_a_time(dep, nodes)
    assert segs.select(cols).rows() == expected and len(expected) > 0
    assert segs["dur_ns"].to_list() == [e - s for s, e, *_ in expected]
    if part == slice(1, -1):  # both ends of the window are outside this part of the path
        assert segs["edge"][0] == segs["edge"][-1] == "window"


@pytest.mark.real
def test_real_path_segments_are_the_path_edges_one_at_a_time():
    from tracekit.analysis.critical_path import path_nodes, path_segments
    from tracekit.analysis.graph import build_graph

    dep = build_graph(load_cached(real_trace("h100_qwen15_05b_hf_inference.json.gz")))
    nodes = path_nodes(dep)[100:400]
    cols = ["start_ns", "end_ns", "cls", "name", "eid", "lane", "weight_ns", "edge", "inferred", "src_eid"]
    assert path_segments(dep, nodes).select(cols).rows() == _segments_one_edge_at_a_time(dep, nodes)


@pytest.mark.parametrize("base", [0, 1 << 31])
def test_path_steps_are_the_path_edges_in_path_order(base):
    """`path_steps` gives each step of the path its edge row, in path order, whatever the
    node numbers (a pair is one number below 2^31, two columns from there)."""
    from types import SimpleNamespace

    from tracekit.analysis.critical_path import path_steps

    edges = pl.DataFrame({"src": [0, 0, 1, 2, 2, 3], "dst": [1, 2, 3, 3, 4, 4], "weight_ns": [5, 1, 7, 2, 9, 3],
                          "name": ["a", "b", "c", "d", "e", "f"]}).with_columns(pl.col("src", "dst") + base)
    nodes = pl.Series("node", [0, 2, 3, 4]) + base
    steps = path_steps(SimpleNamespace(edges=edges), nodes)
    assert steps.columns == edges.columns
    assert steps.select(pl.col("src", "dst") - base).rows() == [(0, 2), (2, 3), (3, 4)]
    assert steps["name"].to_list() == ["b", "d", "f"] and steps["weight_ns"].to_list() == [1, 2, 3]
    assert path_steps(SimpleNamespace(edges=edges), nodes.head(1)).height == 0
