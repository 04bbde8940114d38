"""Dependency graph: golden traces whose edges are known by construction.

The golden builders here are shared with test_critical_path, test_findings and
test_annotate (`from test_graph import ...`).
"""

from __future__ import annotations

import functools

import networkx as nx
import polars as pl
import pytest
from builders import TraceBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analysis.graph import build_graph

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16> >(int, T1, T2)"
COPY = "void at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"


def launch_bound(b: TraceBuilder | None = None, *, n: int = 10) -> TraceBuilder:
    """n ops of 20 µs, 5 µs Python between them; each launches a 2 µs kernel 3 µs after its
    5 µs launch call. All inside `nn.Module: LlamaAttention_0` and ProfilerStep#1."""
    b = b or TraceBuilder()
    end = 5_000 + n * 25_000
    b.annotation("ProfilerStep#1", 0, end)
    b.op("nn.Module: LlamaAttention_0", 0, end, cat="python_function")
    for i in range(n):
        t = 5_000 + i * 25_000
        ext = b.op("aten::add", t, 20_000)
        b.launch_kernel(ADD, launch_ns=t + 10_000, launch_dur_ns=5_000, start_ns=t + 18_000, dur_ns=2_000, ext=ext,
                        grid=(1, 1, 1))
    return b


def gpu_bound(b: TraceBuilder | None = None, *, record: bool = False) -> TraceBuilder:
    """10 ops launch 100 µs GEMMs queued back to back from 10 µs; cudaDeviceSynchronize from
    100 µs until 5 µs after the last kernel (1010 µs); step ends at 1020 µs."""
    b = b or TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1_020_000)
    for i in range(10):
        t = 1_000 + i * 10_000
        ext = b.op("aten::mm", t, 8_000)
        b.launch_kernel(GEMM, launch_ns=t + 2_000, launch_dur_ns=4_000, start_ns=10_000 + i * 100_000,
                        dur_ns=100_000, ext=ext)
    corr = b.runtime("cudaDeviceSynchronize", 100_000, 915_000)
    if record:
        b.sync("Context Sync", 100_000, 915_000, stream=-1, corr=corr)
    return b


def sync_stalled(b: TraceBuilder | None = None, *, steps: int = 3) -> TraceBuilder:
    """Per 200 µs step: aten::mm launches a 50 µs kernel; aten::item -> _local_scalar_dense
    copies 2 µs DtoH then cudaDeviceSynchronize returns 100 µs after the copy ended."""
    b = b or TraceBuilder()
    for s in range(steps):
        t = s * 200_000
        b.annotation(f"ProfilerStep#{s + 1}", t, 200_000)
        ext = b.op("aten::mm", t + 10_000, 20_000)
        b.launch_kernel(GEMM, launch_ns=t + 15_000, launch_dur_ns=5_000, start_ns=t + 25_000, dur_ns=50_000, ext=ext)
        b.op("aten::item", t + 35_000, 145_000)
        ext = b.op("aten::_local_scalar_dense", t + 36_000, 143_000)
        b.launch_copy("DtoH (Device -> Pinned)", launch_ns=t + 37_000, launch_dur_ns=3_000, start_ns=t + 76_000,
                      dur_ns=2_000, nbytes=4, ext=ext)
        b.runtime("cudaDeviceSynchronize", t + 41_000, 137_000, ext=ext)
    return b


def cross_stream(b: TraceBuilder | None = None, *, record: bool = True) -> TraceBuilder:
    """Kernel A (stream 7, 20-220 µs); event record + wait; kernel B on stream 20 waits for A
    (220.5-320.5 µs); cudaDeviceSynchronize ends 4.5 µs after B; step ends at 330 µs."""
    b = b or TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 330_000)
    ext = b.op("aten::mm", 1_000, 10_000)
    b.launch_kernel(GEMM, launch_ns=2_000, launch_dur_ns=5_000, start_ns=20_000, dur_ns=200_000, ext=ext)
    rec = b.runtime("cudaEventRecord", 12_000, 2_000)
    wait = b.runtime("cudaStreamWaitEvent", 15_000, 2_000)
    if record:
        b.gpu("cuda_sync", "Stream Wait Event", 15_000, 0, corr=wait, stream=20,
              args={"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": 7,
                    "wait_on_cuda_event_record_corr_id": rec})
    ext = b.op("aten::mm", 20_000, 10_000)
    b.launch_kernel(GEMM, launch_ns=22_000, launch_dur_ns=5_000, start_ns=220_500, dur_ns=100_000, ext=ext, stream=20)
    b.runtime("cudaDeviceSynchronize", 40_000, 285_000)
    return b


def graph_replay(b: TraceBuilder | None = None) -> TraceBuilder:
    """One cudaGraphLaunch (2-8 µs) replays 3 kernels of 50 µs from 10 µs; a stream sync
    ends 2 µs after them; step ends at 170 µs."""
    b = b or TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 170_000)
    ext = b.op("CUDAGraph::replay", 1_000, 10_000)
    corr = b.runtime("cudaGraphLaunch", 2_000, 6_000, ext=ext)
    for i in range(3):
        b.kernel(GEMM if i != 1 else ADD, 10_000 + i * 50_000, 50_000, corr=corr, ext=ext)
    b.runtime("cudaStreamSynchronize", 20_000, 142_000)
    return b


@functools.cache
def _load(path: str):
    import tracekit

    return tracekit.load(path)


def load_cached(path) -> object:
    """Load a real trace once per test session (the real-trace tests share it)."""
    return _load(str(path))


from tracekit.analysis.critical_path import critical_path as _critical_path  # noqa: E402  (the real one, even under monkeypatch)


@functools.cache
def _path(path: str):
    return _critical_path(_load(path))


def critical_path_cached(path) -> object:
    """The whole-trace critical path of a real trace, computed once per test session."""
    return _path(str(path))


def _edges(dep, kind: str) -> pl.DataFrame:
    return dep.edges.filter(pl.col("kind") == kind)


def test_launch_bound_graph(tmp_path):
    dep = build_graph(launch_bound().load(tmp_path))
    assert dep.graph.number_of_edges() == dep.edges.height
    assert nx.is_directed_acyclic_graph(dep.graph)
    assert dep.edge_counts["launch"] == 10 and dep.edge_counts["gpu"] == 10 and dep.edge_counts["stream"] == 9
    assert dep.edge_counts["sync"] == 0 and dep.inferred_edges == 0
    assert (dep.start_ns, dep.end_ns) == (0, 255_000)
    # the thread chain: one edge per pair of anchors (lane ends, launch call starts), weights = CPU time
    chain = _edges(dep, "cpu")
    assert chain.height == 11 and int(chain["weight_ns"].sum()) == 255_000
    assert set(dep.segments["cls"]) == {"python_overhead", "launch_overhead"}


def test_orders_forgotten_are_computed_again_the_same(tmp_path):
    dep = build_graph(launch_bound().load(tmp_path))
    longest, runs = dep.longest, dep.cpu_runs
    assert {"longest", "cpu_runs", "edge_order"} <= set(vars(dep))
    dep.forget_orders()
    assert not {"longest", "cpu_runs", "edge_order", "graph"} & set(vars(dep))
    assert dep.longest[0].equals(longest[0]) and dep.longest[1] == longest[1]
    assert all(a.equals(b) for a, b in zip(dep.cpu_runs, runs))


def test_gpu_bound_sync_edge_is_inferred_without_records(tmp_path):
    dep = build_graph(gpu_bound().load(tmp_path, "a.json.gz"))
    syncs = _edges(dep, "sync")
    assert syncs.height == 1 and syncs["inferred"].to_list() == [True]
    assert syncs.select("start_ns", "end_ns", "weight_ns").row(0) == (1_010_000, 1_015_000, 5_000)
    assert dep.inferred_edges == 1 and dep.graph.edges[syncs["src"][0], syncs["dst"][0]]["inferred"] is True
    # the blocked call weighs only its 5 µs tail on the thread too
    call = dep.segments.filter(pl.col("name") == "cudaDeviceSynchronize")
    assert call.select("cls", "weight_ns").row(0) == ("sync_wait", 5_000)
    dep = build_graph(gpu_bound(record=True).load(tmp_path, "b.json.gz"))
    assert _edges(dep, "sync")["inferred"].to_list() == [False] and dep.sync_records == 1


def test_sync_edges_per_step(tmp_path):
    dep = build_graph(sync_stalled().load(tmp_path))
    syncs = _edges(dep, "sync").sort("start_ns")
    assert syncs["start_ns"].to_list() == [78_000, 278_000, 478_000]  # the DtoH copy's end
    assert syncs["weight_ns"].to_list() == [100_000] * 3
    assert dep.syncs["source"].to_list() == ["name"] * 3


def test_cross_stream_edge_from_record_and_inferred(tmp_path):
    for record, inferred in ((True, False), (False, True)):
        dep = build_graph(cross_stream(record=record).load(tmp_path, f"{record}.json.gz"))
        cross = _edges(dep, "cross_stream")
        assert cross.height == 1
        assert cross.select("start_ns", "end_ns", "lane", "inferred").row(0) == (220_000, 220_500, "gpu:0:20", inferred)


def _waits(wait_stream: int, times: tuple[int, ...]) -> TraceBuilder:
    """Kernel A (stream 7) recorded once; waits at `times` on stream `wait_stream`; kernel B
    launched after them on that stream."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 330_000)
    ext = b.op("aten::mm", 1_000, 10_000)
    b.launch_kernel(GEMM, launch_ns=2_000, launch_dur_ns=5_000, start_ns=20_000, dur_ns=200_000, ext=ext)
    rec = b.runtime("cudaEventRecord", 12_000, 2_000)
    for t in times:
        wait = b.runtime("cudaStreamWaitEvent", t, 1_000)
        b.gpu("cuda_sync", "Stream Wait Event", t, 0, corr=wait, stream=wait_stream,
              args={"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": rec})
    ext = b.op("aten::mm", 20_000, 10_000)
    b.launch_kernel(GEMM, launch_ns=22_000, launch_dur_ns=5_000, start_ns=220_500, dur_ns=100_000, ext=ext,
                    stream=wait_stream)
    b.runtime("cudaDeviceSynchronize", 40_000, 285_000)
    return b


def test_each_pair_of_nodes_has_one_edge(tmp_path):
    # two waits on one record: one cross-stream edge
    dep = build_graph(_waits(20, (15_000, 17_000)).load(tmp_path, "two.json.gz"))
    assert _edges(dep, "cross_stream").select("start_ns", "end_ns", "lane").rows() == [(220_000, 220_500, "gpu:0:20")]
    # a wait on its own stream repeats the stream edge from A to B: the stream edge stays
    dep = build_graph(_waits(7, (15_000,)).load(tmp_path, "own.json.gz"))
    assert _edges(dep, "cross_stream").height == 0
    assert _edges(dep, "stream").select("start_ns", "end_ns", "lane").rows() == [(220_000, 220_500, "gpu:0:7")]
    for each in (dep, build_graph(cross_stream().load(tmp_path, "one.json.gz"))):
        assert not each.edges.select("src", "dst").is_duplicated().any()


def test_graph_launch_fans_out(tmp_path):
    dep = build_graph(graph_replay().load(tmp_path))
    launch = _edges(dep, "launch")
    assert launch.height == 3 and launch["src"].n_unique() == 1
    assert sorted(launch["end_ns"].to_list()) == [10_000, 60_000, 110_000]


def test_blocked_launch_is_an_inferred_sync(tmp_path):
    """A launch call that returns right after a kernel ends (full queue) waits on the GPU."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 300_000)
    b.launch_kernel(GEMM, launch_ns=1_000, launch_dur_ns=4_000, start_ns=10_000, dur_ns=200_000)
    b.launch_kernel(GEMM, launch_ns=6_000, launch_dur_ns=206_000, start_ns=210_000, dur_ns=50_000)  # ends 2 µs after
    b.launch_kernel(ADD, launch_ns=213_000, launch_dur_ns=4_000, start_ns=260_000, dur_ns=2_000)  # 4 µs: too short
    dep = build_graph(b.load(tmp_path))
    assert dep.syncs.select("source", "tail_ns", "inferred").rows() == [("timing", 2_000, True)]


def test_tolerance_and_minimum_are_options(tmp_path):
    b = TraceBuilder()
    b.launch_kernel(GEMM, launch_ns=1_000, launch_dur_ns=4_000, start_ns=10_000, dur_ns=200_000)
    b.runtime("cudaFree", 6_000, 234_000)  # ends 30 µs after the kernel: over the 20 µs default
    trace = b.load(tmp_path)
    assert build_graph(trace).syncs.height == 0
    assert build_graph(trace, sync_tolerance_ns=40_000).syncs["source"].to_list() == ["timing"]
    assert build_graph(trace, sync_tolerance_ns=40_000, min_blocking_ns=500_000).syncs.height == 0


def test_window_clips(tmp_path):
    trace = sync_stalled().load(tmp_path)
    dep = build_graph(trace, start_ns=200_000, end_ns=400_000)
    assert (dep.start_ns, dep.window_ns) == (200_000, 200_000)
    assert dep.edge_counts["sync"] == 1 and dep.edge_counts["launch"] == 2
    assert dep.segments["start_ns"].min() >= 200_000 and dep.segments["end_ns"].max() <= 400_000


def test_empty_and_cpu_only(tmp_path):
    b = TraceBuilder()
    b.op("aten::add", 0, 10_000)
    dep = build_graph(b.load(tmp_path))
    assert dep.edge_counts["gpu"] == 0 and dep.edges.height == 1
    from tracekit import Trace
    dep = build_graph(Trace.empty())
    assert dep.graph.number_of_nodes() == 0 and dep.window_ns == 0


@pytest.mark.real
def test_real_alexnet_uses_sync_records():
    from conftest import real_trace

    dep = build_graph(load_cached(real_trace("a100_alexnet_cuda_sync.json.gz")))
    assert dep.sync_records > 0
    assert (dep.syncs["source"] == "record").sum() > 0
    # in call order, and the sync edges too (they followed a hash table's order, which changed
    # from run to run)
    assert dep.syncs["eid"].is_sorted() and dep.syncs.height > 1
    waited = dep.syncs.filter(pl.col("gpu_eid").is_not_null())["eid"]
    assert _edges(dep, "sync")["eid"].to_list() == waited.to_list()
    assert dep.edge_counts["cross_stream"] > 0
    assert nx.is_directed_acyclic_graph(dep.graph)
    assert not dep.edges.select("src", "dst").is_duplicated().any()


_SLICES = st.lists(st.tuples(st.sampled_from(["1", "2", None]), st.sampled_from(["7", "8"]), st.integers(0, 30),
                             st.sampled_from([0, 0, 1, 2, 5, 10, 30])), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_SLICES, st.randoms(use_true_random=False))
def test_points_come_in_the_order_of_their_five_keys(rows, rnd):
    """The CPU points are sorted by (thread, time, ends before starts, inner ends and outer
    starts first, eid), whatever the slices' overlaps, ties and ids."""
    from tracekit.analysis.graph_cpu import chain_points
    from tracekit.analysis.nesting import with_parents

    eids = list(range(100, 100 + len(rows)))
    rnd.shuffle(eids)  # ids in no relation to time
    frame = pl.DataFrame([(e, p, t, ts, dur) for e, (p, t, ts, dur) in zip(eids, rows)], orient="row",
                         schema={"eid": pl.Int64, "pid": pl.String, "tid": pl.String, "ts_ns": pl.Int64,
                                 "dur_ns": pl.Int64}).with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
    points, _ = chain_points(with_parents(frame))
    keys = ["_thread", "t", "opening", "key", "eid"]
    assert points["node"].to_list() == list(range(points.height))
    assert points.drop("node").equals(points.drop("node").sort(keys))
    assert points.height == frame.height + (frame["dur_ns"] > 0).sum()


def test_points_of_overlapping_slices_ending_together_come_in_eid_order():
    """P [0,5), A [1,10) and B [6,10) on one thread: A and B both sit one level down (P had
    ended by B's start) and end together, so their ends tie on every key but the eid: B's
    (eid 1) comes first although A started first."""
    from tracekit.analysis.graph_cpu import chain_points
    from tracekit.analysis.nesting import with_parents

    frame = pl.DataFrame({"eid": [3, 2, 1], "pid": "1", "tid": "1", "ts_ns": [0, 1, 6], "dur_ns": [5, 9, 4]})
    nested = with_parents(frame.with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns")))
    assert dict(nested.select("eid", "depth").iter_rows()) == {3: 0, 2: 1, 1: 1}
    points, _ = chain_points(nested)
    ends = points.filter(~pl.col("opening"))
    assert ends.select("eid", "t").rows() == [(3, 5), (1, 10), (2, 10)]
