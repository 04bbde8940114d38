"""The golden fixture traces in tests/fixtures: loaded frames and analyses against values
worked out by hand from the event tables in `tests/fixtures/generate.py`.

Times below are written as T0 + offset, in ns since `baseTimeNanoseconds`, as in the tables.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import polars as pl
import pytest

import tracekit
from tracekit.analysis.critical_path import critical_path
from tracekit.analysis.gaps import gaps
from tracekit.analysis.graph import build_graph
from tracekit.analysis.links import gpu_links
from tracekit.analysis.nesting import with_parents
from tracekit.analysis.occupancy import occupancy
from tracekit.analysis.taxonomy import classify_names, tensor_core_share
from tracekit.analysis.timeline import timeline
from tracekit.analysis.whatif import standard
from tracekit.cli.main import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
T0 = 5_000_000_123
BASE_NS = 1_700_000_000_000_000_000


def _generator():
    spec = importlib.util.spec_from_file_location("fixture_generator", FIXTURES / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(name: str) -> tracekit.Trace:
    return tracekit.load(FIXTURES / name)


def _rows(frame: pl.DataFrame, *cols: str) -> list[tuple]:
    return frame.select(cols).rows()


def _report(capsys, name: str, *extra: str) -> dict:
    assert main(["report", str(FIXTURES / name), "--format", "json", "--no-cache", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _table(report: dict, table_id: str) -> list[list[str]]:
    table = next(t for s in report["sections"] for t in s["tables"] if t["id"] == table_id)
    return [[cell["text"] for cell in row] for row in table["rows"]]


def test_committed_fixtures_are_what_the_generator_writes(tmp_path):
    gen = _generator()
    assert gen.T0 == T0 and gen.BASE_NS == BASE_NS
    assert gen.main(["generate.py", str(tmp_path)]) == 0
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(p.name for p in FIXTURES.iterdir() if p.name != "generate.py" and p.is_file())
    for name in made:
        new, old = (tmp_path / name).read_bytes(), (FIXTURES / name).read_bytes()
        if name.endswith(".gz"):  # compressed bytes may differ between zlib builds; the text may not
            new, old = gzip.decompress(new), gzip.decompress(old)
        assert new == old, f"tests/fixtures/{name} is stale: run python tests/fixtures/generate.py"


# -- kineto_step.json ------------------------------------------------------------------------

def test_kineto_step_frames_exact():
    t = _load("kineto_step.json")
    assert (t.meta.format, t.meta.schema_version, t.meta.base_time_ns, t.meta.vendor) == ("kineto", 1, BASE_NS, "nvidia")
    assert (t.meta.rank, t.meta.world_size, t.meta.trace_name, t.meta.event_count) == (0, 2, "golden-step", 29)
    assert t.meta.devices.select("id", "name").rows() == [(0, "NVIDIA A100-SXM4-80GB")]
    assert t.meta.processes.select("pid", "name").rows() == [("1000", "python3 (rank 0)")]  # the later name wins
    assert t.meta.metadata["model"] == "tiny-llama"
    assert _rows(t.ops, "eid", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "end_ns", "external_id") == [
        (3, "trace", "PyTorch Profiler (0)", "Spans", "PyTorch Profiler", T0, 100_000, T0 + 100_000, None),
        (4, "user_annotation", "ProfilerStep#1", "1000", "1000", T0, 100_000, T0 + 100_000, 1),
        (6, "cpu_op", "aten::mm", "1000", "1000", T0 + 1_001, 20_000, T0 + 21_001, 2),
        (11, "cpu_op", "aten::copy_", "1000", "1000", T0 + 25_000, 15_000, T0 + 40_000, 3),
        (15, "cpu_op", "aten::zero_", "1000", "1000", T0 + 45_000, 0, T0 + 45_000, 4),
        (16, "cpu_op", "aten::fill_", "1000", "1000", T0 + 50_000, 6_000, T0 + 56_000, 5),
        (20, "cpu_op", "aten::add", "1000", "1000", T0 + 70_000, 10_000, T0 + 80_000, 6),
        (27, "overhead", "Activity Buffer Request", "-1", "0", T0 + 85_000, 2_000, T0 + 87_000, None),
    ]
    mm = t.ops.filter(pl.col("eid") == 6).row(0, named=True)
    assert (mm["input_dims"], mm["input_types"]) == ("[[64,128],[128,256]]", '["float","float"]')
    assert _rows(t.runtime, "eid", "cat", "name", "ts_ns", "dur_ns", "correlation", "external_id") == [
        (7, "cuda_runtime", "cudaLaunchKernel", T0 + 2_000, 5_000, 1001, 2),
        (13, "cuda_runtime", "cudaMemcpyAsync", T0 + 26_000, 3_000, 1002, 3),
        (17, "cuda_runtime", "cudaMemsetAsync", T0 + 51_000, 2_000, 1003, 5),
        (19, "cuda_runtime", "cudaGetDevice", T0 + 60_000, 500, 1004, None),
        (21, "cuda_runtime", "cudaLaunchKernel", T0 + 71_000, 4_000, 1005, 6),
        (25, "cuda_runtime", "cudaDeviceSynchronize", T0 + 80_000, 15_000, 1006, None),
    ]
    assert _rows(t.gpu, "eid", "cat", "device", "stream", "ts_ns", "dur_ns", "correlation", "bytes", "sync_kind") == [
        (5, "gpu_user_annotation", 0, 7, T0, 100_000, None, None, None),
        (8, "kernel", 0, 7, T0 + 10_000, 30_123, 1001, None, None),
        (14, "gpu_memcpy", 0, 7, T0 + 41_000, 4_000, 1002, 1_048_576, None),
        (18, "gpu_memset", 0, 7, T0 + 56_000, 1_500, 1003, 4_096, None),
        (22, "kernel", 0, 7, T0 + 70_500, 5_000, 1005, None, None),
        (26, "cuda_sync", 0, 7, T0 + 94_000, 0, None, None, "Context Sync"),
    ]
    k = t.gpu.filter(pl.col("eid") == 8).row(0, named=True)
    assert (k["name"], k["grid_x"], k["grid_y"], k["block_x"], k["registers_per_thread"], k["shared_memory"]) == (
        "ampere_sgemm_128x64_tn", 4, 2, 256, 72, 16_384)
    assert _rows(t.flows, "eid", "ph", "flow_id", "pid", "tid", "ts_ns", "binding_point") == [
        (9, "s", 1001, "1000", "1000", T0 + 2_000, None),
        (10, "f", 1001, "0", "7", T0 + 10_000, "e"),
        (24, "f", 1005, "0", "7", T0 + 70_500, "e"),  # in time order: the skewed kernel's end first
        (23, "s", 1005, "1000", "1000", T0 + 71_000, None),
    ]
    assert _rows(t.memory, "eid", "ts_ns", "device_id", "bytes", "total_allocated", "total_reserved") == [
        (12, T0 + 25_500, 0, 1_048_576, 1_048_576, 2_097_152),
        (28, T0 + 96_000, 0, -1_048_576, 0, 2_097_152),
    ]
    assert _rows(t.warnings, "level", "code", "count", "first_eid") == [
        ("info", "zero_duration", 2, 15),  # aten::zero_ and the Context Sync record
        ("warning", "duplicate_metadata", 1, None),
        ("warning", "gpu_before_launch", 1, 22),  # the elementwise kernel, 500 ns before its launch
    ]


def test_kineto_step_gzip_is_the_same_trace():
    plain, packed = _load("kineto_step.json"), _load("kineto_step.json.gz")
    for name, frame in plain.frames().items():
        assert packed.frames()[name].equals(frame), name


def test_kineto_step_links_and_fingerprints():
    t = _load("kineto_step.json")
    links = gpu_links(t).sort("eid")
    assert _rows(links, "eid", "launch_eid", "launch_name", "op_eid", "op_name", "link") == [
        (8, 7, "cudaLaunchKernel", 6, "aten::mm", "external_id"),
        (14, 13, "cudaMemcpyAsync", 11, "aten::copy_", "external_id"),
        (18, 17, "cudaMemsetAsync", 16, "aten::fill_", "external_id"),
        (22, 21, "cudaLaunchKernel", 20, "aten::add", "external_id"),
    ]
    sgemm = classify_names(pl.Series(["ampere_sgemm_128x64_tn"])).row(0, named=True)
    assert (sgemm["kernel_class"], sgemm["precision"], sgemm["tensor_cores"]) == ("gemm", "fp32", False)
    assert tensor_core_share(t.gpu) == 0.0  # the only GEMM runs on CUDA cores


def test_kineto_step_busy_idle_and_gaps():
    t = _load("kineto_step.json")
    tl = timeline(t)
    # busy: 30,123 (sgemm) + 4,000 (copy) + 1,500 (memset) + 5,000 (add) over the device span
    # [T0 + 10,000, T0 + 75,500)
    assert (tl.span_ns, tl.busy_ns, tl.idle_ns) == (65_500, 40_623, 24_877)
    g = gaps(t)
    assert g.idle_ns == 24_877
    dev = g.gaps.filter(pl.col("scope") == "device").sort("start_ns")
    assert _rows(dev, "start_ns", "end_ns", "gap_ns", "cause", "late_ns", "launch_path_ns", "next_eid",
                 "launch_eid", "blame_op", "annotation") == [
        # 877 ns between the GEMM and the copy: under 1 us
        (T0 + 40_123, T0 + 41_000, 877, "short", 0, 0, 14, 13, None, None),
        # the memset's call returned at +53,000: 8,000 of the 11,000 ns late; of [+45,000, +53,000)
        # only aten::fill_ (from +50,000) was on the launch path: 3,000 < 4,000, so CPU work
        (T0 + 45_000, T0 + 56_000, 11_000, "cpu_work", 8_000, 3_000, 18, 17, None, "ProfilerStep#1"),
        # the add kernel started (clock skew) before its call returned: late for the whole gap;
        # aten::add covers its last 500 ns
        (T0 + 57_500, T0 + 70_500, 13_000, "cpu_work", 13_000, 500, 22, 21, None, "ProfilerStep#1"),
    ]
    assert g.by_cause["cpu_work"] == 24_000 and g.by_cause["short"] == 877
    assert sum(g.by_cause.values()) == g.idle_ns
    streams = g.gaps.filter(pl.col("scope") == "stream").sort("start_ns")
    assert _rows(streams, "stream", "gap_ns", "cause") == [(7, 877, "short"), (7, 11_000, "cpu_work"),
                                                         (7, 13_000, "cpu_work")]


# -- the other fixtures ----------------------------------------------------------------------

def test_legacy_2021_array_containment_links():
    t = _load("legacy_2021.json")
    assert (t.meta.format, t.meta.base_time_ns, t.meta.vendor) == ("kineto-array", 0, "nvidia")
    assert _rows(t.ops, "eid", "cat", "name", "ts_ns", "dur_ns") == [
        (0, "cpu_op", "aten::linear", 1_000, 40_000), (1, "cpu_op", "aten::addmm", 2_000, 30_000),
        (4, "cpu_op", "aten::copy_", 50_000, 10_000)]
    assert _rows(t.runtime, "eid", "cat", "correlation") == [(2, "cuda_runtime", 11), (5, "cuda_runtime", 12),
                                                              (7, "cuda_runtime", 13)]
    assert _rows(t.gpu, "eid", "cat", "ts_ns", "dur_ns", "bytes") == [
        (3, "kernel", 12_000, 20_000, None), (6, "gpu_memcpy", 56_000, 2_000, 65_536),
        (8, "gpu_memset", 63_000, 500, 512)]
    nested = with_parents(t.ops).sort("eid")
    assert _rows(nested, "eid", "depth", "parent_eid") == [(0, 0, None), (1, 1, 0), (4, 0, None)]
    links = gpu_links(t).sort("eid")
    # no External ids: the innermost op around each call; the memset's call is in no op
    assert _rows(links, "eid", "launch_eid", "op_name", "link") == [
        (3, 2, "aten::addmm", "containment"), (6, 5, "aten::copy_", "containment"), (8, 7, None, None)]
    assert timeline(t).busy_ns == 20_000 + 2_000 + 500


def test_rocm_names_device_and_unreadable_stream():
    t = _load("rocm_mi250.json")
    assert (t.meta.vendor, t.meta.rank, t.meta.world_size) == ("amd", 0, 1)
    assert t.meta.devices.select("id", "name").rows() == [(2, "AMD Instinct MI250X/MI250")]
    assert _rows(t.runtime, "eid", "cat", "name", "correlation", "args") == [
        (3, "cuda_runtime", "hipLaunchKernel", 1001, '{"stream":"0x0"}'),
        (6, "cuda_runtime", "hipExtModuleLaunchKernel", 1002, None),
        (9, "cuda_runtime", "hipMemcpyWithStream", 1003, None)]
    assert _rows(t.gpu, "eid", "cat", "device", "stream", "ts_ns", "dur_ns") == [
        (4, "kernel", 2, 0, 20_000, 6_880), (7, "kernel", 2, 0, 52_000, 12_000), (10, "gpu_memcpy", 2, 0, 84_000, 9_000)]
    links = gpu_links(t).sort("eid")
    assert _rows(links, "eid", "launch_name", "op_name") == [
        (4, "hipLaunchKernel", "aten::fill_"), (7, "hipExtModuleLaunchKernel", "aten::mm"),
        (10, "hipMemcpyWithStream", "aten::copy_")]
    tl = timeline(t)
    assert (tl.span_ns, tl.busy_ns) == (93_000 - 20_000, 6_880 + 12_000 + 9_000)


def test_chrome_generic_pairs_instants_counters_flows():
    t = _load("chrome_generic.json")
    assert t.meta.format == "chrome"
    assert _rows(t.ops, "eid", "ph", "cat", "name", "tid", "ts_ns", "dur_ns") == [
        (1, "B", "toplevel", "RunTask", "2", 1_000, 9_000),
        (2, "B", "toplevel", "ParseHTML", "2", 2_500, 5_000),
        (7, "b", "net", "Load", "2", 14_000, 5_000),
        (11, "X", "toplevel", "Paint", "3", 16_000, 1_250),
    ]
    assert _rows(t.instants, "eid", "name", "ts_ns", "scope") == [(5, "FirstPaint", 12_000, "t")]
    assert sorted(_rows(t.counters, "eid", "name", "ts_ns", "series", "value")) == [
        (6, "Heap", 13_000, "total", 4096.0), (6, "Heap", 13_000, "used", 1024.0)]
    assert _rows(t.flows, "eid", "ph", "flow_id", "tid", "ts_ns") == [(9, "s", 5, "2", 15_000), (10, "f", 5, "3", 16_000)]
    assert t.meta.threads.select("pid", "tid", "name").rows() == [("1", "2", "CrRendererMain")]
    assert _rows(t.warnings, "code", "count") == [("unmatched_E", 1)]


def test_crashed_tmp_recovers_every_complete_event():
    t = _load("crashed.json.tmp")
    assert t.meta.recovered and t.meta.event_count == 14  # the memcpy (event 14) was being written
    assert t.ops["eid"].to_list() == [3, 4, 6, 11]
    assert t.runtime["eid"].to_list() == [7, 13]
    assert t.gpu["eid"].to_list() == [5, 8]
    assert t.memory["eid"].to_list() == [12]
    assert _rows(t.warnings.filter(pl.col("code") == "truncated"), "level", "count") == [("warning", 1)]
    whole = _load("kineto_step.json")
    for name in ("ops", "runtime", "gpu", "flows", "memory"):  # what was recovered is what the whole file holds
        assert getattr(t, name).equals(getattr(whole, name).filter(pl.col("eid") < 14)), name


def test_kineto_step_critical_path_and_what_ifs():
    """The host thread is busy for the whole 100 us step and every GPU chain is shorter, so
    the path is the thread: classes by hand from the event table."""
    t = _load("kineto_step.json")
    cp = critical_path(t)
    assert (cp.start_ns, cp.end_ns, cp.weight_ns) == (T0, T0 + 100_000, 100_000)
    by_class = {row["cls"]: row["ns"] for row in cp.by_class.iter_rows(named=True)}
    assert by_class == {
        # the step's own time outside ops and calls: 100,000 - (20,000 + 15,000 + 6,000 + 500 + 10,000 + 15,000)
        "python_overhead": 33_500,
        # the four ops that launch work (mm, copy_, fill_, add) and cudaGetDevice, a call inside the step
        "launch_overhead": 20_000 + 15_000 + 6_000 + 10_000 + 500,
        # cudaDeviceSynchronize: the GPU had nothing left after +75,500, so the whole call is its tail
        "sync_wait": 15_000,
        "cpu_compute": 0, "gpu_compute": 0, "gpu_memory": 0, "communication": 0, "idle": 0,
    }
    assert (cp.verdict, round(cp.verdict_share, 6)) == ("launch-bound", 0.85)
    assert set(cp.segments["edge"].unique().to_list()) == {"cpu"}
    whatifs = {w.scenario: w.estimate_ns for w in standard(build_graph(t))}
    assert whatifs == {
        "no_launch_overhead": 40_623,  # host overhead gone: the GPU chain, its busy time, is the path
        "no_syncs": 85_000,  # the thread without the sync's 15,000
        "faster:gemm": 100_000,  # a 2x faster GEMM shortens only the GPU chain, which is not the path
    }


def test_kineto_step_report_findings_end_to_end(capsys):
    """`tracekit report --format json` on the fixture: every finding's time lost, by hand."""
    report = _report(capsys, "kineto_step.json")
    lost = {f["id"]: (f["severity"], f["time_lost_ns"]) for f in report["findings"]}
    # severities by the share of the 100 µs window lost (engine.band): a window under 1 ms is
    # never high, and a loss under 50 µs never above low
    assert lost == {
        # the no-launch-overhead what-if: 100,000 - 40,623
        "host_bound_path": ("medium", 59_377),
        # the step is 100,000 ns, the GPU busy 40,623 of it
        "low_gpu_utilisation": ("medium", 59_377),
        # the sgemm's grid is 4 x 2 = 8 blocks on 108 SMs: 100/108 of its 30,123 ns idle the other SMs
        "tiny_grids": ("low", 30_123 * 100 // 108),
        # the same sgemm in FP32 on CUDA cores, 4x slower than on tensor cores: 3/4 of it
        "fp32_gemm": ("low", 30_123 * 3 // 4),
        # the 4,000 ns pageable copy would take half as long from pinned memory
        "pageable_memcpy": ("low", 2_000),
        # Activity Buffer Request, 2,000 ns
        "profiler_overhead": ("low", 2_000),
        # the roofline: mm [64,128]x[128,256] in FP32 moves (64*128 + 128*256 + 64*256) * 4 =
        # 229,376 bytes, 112.5 ns at the A100 80GB's 2,039 GB/s (its 4.2 MFLOP take less):
        # 30,123 - 112.5 ns lost
        "gemm_below_ceiling": ("low", 30_010),
    }
    assert report["findings"][0]["id"] == "host_bound_path"  # the largest loss first
    assert dict(report["facts"])["steps"] == "1 ProfilerStep window"
    titles = {f["id"]: f["title"] for f in report["findings"]}
    assert titles["tiny_grids"].endswith("grids smaller than the SM count (1 launch, 1 kernel)")
    assert titles["fp32_gemm"] == "FP32 GEMM/conv kernels on CUDA cores take 30.1 µs over 1 launch (30.1 % of the window)"
    assert titles["pageable_memcpy"] == "1 copy of 1.0 MB uses pageable host memory (4 µs of copy time)"
    assert titles["profiler_overhead"].startswith("1 profiler overhead event (Activity Buffer Request) covers 2 µs")
    assert main(["findings", str(FIXTURES / "kineto_step.json")]) == 0
    assert capsys.readouterr().out.startswith(
        "7 findings in a window of 100 µs; 29 rules ran, 22 found nothing")  # (not: each over 100 us)
    assert dict(report["facts"])["GPU span"] == "65.5 µs"


def test_gpu_bound_step_path_runs_through_launch_kernel_and_sync():
    t = _load("kineto_gpu_bound.json")
    cp = critical_path(t)
    # the thread alone weighs 32,000 (its 70 us in the sync count only the 2,000 tail); through
    # the GPU: 2,000 of host up to the launch + 70,000 GEMM + 2,000 tail + 18,000 of host after
    assert cp.weight_ns == 92_000
    assert _rows(cp.segments, "start_ns", "end_ns", "cls", "edge", "weight_ns") == [
        (0, 1_000, "python_overhead", "cpu", 1_000),
        (1_000, 2_000, "launch_overhead", "cpu", 1_000),  # aten::mm up to its launch call
        (2_000, 10_000, "launch_overhead", "launch", 0),  # launch latency: waiting, no work
        (10_000, 80_000, "gpu_compute", "gpu", 70_000),
        (80_000, 82_000, "sync_wait", "sync", 2_000),  # the sync's tail after the GEMM ended
        (82_000, 100_000, "python_overhead", "cpu", 18_000),
    ]
    assert (cp.verdict, round(cp.verdict_share, 6)) == ("gpu-bound", 0.7)
    assert cp.edge_counts == {"cpu": 3, "gpu": 1, "stream": 0, "launch": 1, "cross_stream": 0, "sync": 1}
    whatifs = {w.scenario: w.estimate_ns for w in standard(build_graph(t))}  # window - (92,000 - new weight)
    assert whatifs == {
        "no_launch_overhead": 100_000 - (92_000 - 72_000),  # host weighs 0: GEMM + tail
        "no_syncs": 100_000 - (92_000 - 72_000),  # the sync edge cut: host up to the launch + GEMM
        "faster:gemm": 100_000 - (92_000 - 57_000),  # the GEMM in 35,000
    }
    assert gaps(t).idle_ns == 0  # one kernel: the device span is all busy


def test_two_streams_event_wait_edge_path_and_stream_gaps():
    t = _load("kineto_two_streams.json")
    graph = build_graph(t)
    # the Stream Wait Event record names stream 7 and the record call (corr 1003): the GEMM
    # (eid 5, the last work launched on stream 7 before the record) -> the add (the first
    # work launched on stream 8 after the wait), not inferred
    cross = graph.edges.filter(pl.col("kind") == "cross_stream")
    assert _rows(cross, "start_ns", "end_ns", "weight_ns", "src_eid", "lane", "inferred") == [
        (50_000, 50_000, 0, 5, "gpu:0:8", False)]
    # the only inferred edge: the sync, found by the call's name, from the add's end
    assert _rows(graph.edges.filter(pl.col("inferred")), "kind", "start_ns", "end_ns", "weight_ns") == [
        ("sync", 60_000, 62_000, 2_000)]
    cp = critical_path(t)
    # host to the GEMM's launch 2,000 + GEMM 40,000 + the wait 0 + add 10,000 + tail 2,000 + host 38,000;
    # beside it: the host alone 60,000, or through the relu and the stream order 67,500
    assert cp.weight_ns == 92_000
    assert _rows(cp.segments, "start_ns", "end_ns", "cls", "edge", "lane") == [
        (0, 1_000, "python_overhead", "cpu", "cpu:1000:1000"),
        (1_000, 2_000, "launch_overhead", "cpu", "cpu:1000:1000"),
        (2_000, 10_000, "launch_overhead", "launch", "gpu:0:7"),
        (10_000, 50_000, "gpu_compute", "gpu", "gpu:0:7"),
        (50_000, 50_000, "idle", "cross_stream", "gpu:0:8"),
        (50_000, 60_000, "gpu_compute", "gpu", "gpu:0:8"),
        (60_000, 62_000, "sync_wait", "sync", "cpu:1000:1000"),
        (62_000, 100_000, "python_overhead", "cpu", "cpu:1000:1000"),
    ]
    assert (cp.verdict, round(cp.verdict_share, 6)) == ("gpu-bound", 0.5)
    whatifs = {w.scenario: w.estimate_ns for w in standard(graph)}
    assert whatifs == {
        "no_launch_overhead": 100_000 - (92_000 - 52_000),  # GEMM + add + tail
        # the sync edge cut: the host alone is the longest, 20,000 before the sync + 38,000 after
        "no_syncs": 100_000 - (92_000 - 58_000),
        "faster:gemm": 100_000 - (92_000 - 72_000),  # the GEMM in 20,000: still on the path
    }
    g = gaps(t)
    assert g.idle_ns == 0  # the streams together cover the device span [10,000, 60,000)
    streams = g.gaps.filter(pl.col("scope") == "stream").sort("stream", "start_ns")
    assert _rows(streams, "stream", "start_ns", "end_ns", "position", "cause", "other_busy_ns") == [
        (7, 50_000, 60_000, "after_last", "after_last", 10_000),
        (8, 10_000, 11_000, "before_first", "before_first", 1_000),
        # the add was queued at +17,000, before the gap opened: it waited for the GEMM on stream 7
        (8, 20_000, 50_000, "between", "cross_stream_wait", 30_000),
    ]


def test_kineto_step_ops_launches_syncs_copies_memory_and_steps():
    from tracekit.pipeline import analyse

    a = analyse(_load("kineto_step.json"))
    busy = 30_123 + 4_000 + 1_500 + 5_000
    # GPU time under each op (self and inclusive: none nests another), and its share of the GPU work
    assert _rows(a.attribution.ops, "name", "gpu_incl_ns", "gpu_self_ns", "kernels_incl", "launches_nothing") == [
        ("aten::mm", 30_123, 30_123, 1, False), ("aten::add", 5_000, 5_000, 1, False),
        ("aten::copy_", 4_000, 4_000, 0, False), ("aten::fill_", 1_500, 1_500, 0, False),
        ("aten::zero_", 0, 0, 0, True)]
    assert a.attribution.ops["gpu_share"].to_list() == pytest.approx(
        [30_123 / busy, 5_000 / busy, 4_000 / busy, 1_500 / busy, 0.0])
    # launch latency: the GPU start after the call returned; the skewed add starts 4,500 before
    assert _rows(a.launches.launches, "eid", "family", "op_name", "latency_ns") == [
        (7, "kernel", "aten::mm", 10_000 - 7_000), (13, "memcpy", "aten::copy_", 41_000 - 29_000),
        (17, "memset", "aten::fill_", 56_000 - 53_000), (21, "kernel", "aten::add", 70_500 - 75_000)]
    kernel_api = a.launches.apis.filter(pl.col("name") == "cudaLaunchKernel").row(0, named=True)
    assert (kernel_api["calls"], kernel_api["median_latency_ns"], kernel_api["negative_latency"]) == (
        2, (3_000 - 4_500) / 2, 1)
    # the sync had nothing to wait for: all of its 15,000 is tail
    assert _rows(a.syncs.syncs, "eid", "kind", "dur_ns", "gpu_wait_ns", "tail_ns") == [
        (25, "device", 15_000, 0, 15_000)]
    assert _rows(a.copies.copies, "eid", "kind", "direction", "host_memory", "bytes", "bandwidth_gbps", "op_name") == [
        (14, "memcpy", "HtoD", "pageable", 1_048_576, 1_048_576 / 4_000, "aten::copy_"),
        (18, "memset", None, None, 4_096, 4_096 / 1_500, "aten::fill_")]
    dev = a.memory.devices.row(0, named=True)
    assert (dev["peak_allocated_bytes"], dev["peak_ts_ns"], dev["peak_op_name"], dev["final_allocated_bytes"],
            dev["peak_reserved_bytes"], dev["capacity_bytes"]) == (
        1_048_576, T0 + 25_500, "aten::copy_", 0, 2_097_152, 85_899_345_920)  # capacity: the A100's totalGlobalMem
    steps = {row["metric"]: row["median_ns"] for row in a.windows.stats.iter_rows(named=True)}
    assert steps == {"cpu_ns": 100_000, "gpu_ns": 75_500 - 10_000, "gpu_busy_ns": busy}
    b = a.breakdown
    assert (b.span_ns, b.compute_ns, b.memory_ns, b.idle_ns) == (65_500, 30_123 + 5_000, 4_000 + 1_500, 24_877)


def test_kineto_step_occupancy_from_device_properties():
    """The calculator's limits for the two kernels on the fixture's A100 (65,536 registers,
    2,048 threads and 167,936 B of shared memory per SM, 108 SMs), by hand."""
    t = _load("kineto_step.json")
    occ = occupancy(t.gpu, t.meta.devices)
    assert _rows(occ, "eid", "warps_per_block", "limit_warps", "limit_registers", "limit_shared_memory",
                 "limit_blocks", "active_blocks_per_sm", "limiting_factor") == [
        # sgemm, 256 threads, 72 registers, 16 KiB: 64 // 8 warps; 72 registers a thread are 2,304 a
        # warp, (65,536 / 4 // 2,304) * 4 = 28 warps, 3 blocks; 16,384 + 1,024 reserved -> 167,936 // 17,408
        (8, 8, 64 // 8, 3, 9, 32, 3, "grid"),
        # elementwise, 128 threads, 32 registers, no shared memory (1 KiB reserved)
        (22, 4, 16, 16, 167_936 // 1_024, 32, 16, "grid"),
    ]
    # both grids are too small to fill the slots: 8 and 132 blocks over 108 SMs
    assert occ["theoretical_occupancy"].to_list() == pytest.approx([8 / 108 * 8 / 64, 132 / 108 * 4 / 64])
    assert occ["sm_efficiency"].to_list() == pytest.approx([8 / 108, 1.0])


def test_diff_of_the_step_and_the_gpu_bound_step(capsys):
    """`tracekit diff` between two fixtures: the GPU busy time per step goes from the step
    fixture's 40,623 ns to the GEMM's 70,000 ns in a step of the same 100,000 ns."""
    before, after = FIXTURES / "kineto_step.json", FIXTURES / "kineto_gpu_bound.json"
    assert main(["diff", str(before), str(after), "--format", "json", "--metric", "gpu-busy"]) == 0
    report = json.loads(capsys.readouterr().out)
    head = report["extra"]["headline"]
    assert (head["before_ns"], head["after_ns"], head["delta_ns"], head["n_before"], head["n_after"]) == (
        40_623, 70_000, 70_000 - 40_623, 1, 1)
    assert head["delta_pct"] == pytest.approx(100 * (70_000 - 40_623) / 40_623)  # percent, as --fail-if-slower
    # a launch-bound step of four ops against one bf16 GEMM: no kernel family in common, and
    # only aten::mm of the ops, so the verdict first says they are different workloads
    assert report["verdict"].startswith("Not comparable: the two traces look like different workloads")
    assert report["extra"]["similarity"]["kernel_score"] == 0.0
    assert ("After is 72.3 % slower in GPU busy time per step (40.6 µs → 70 µs, median of 1 vs 1 steps); "
            "with a single sample on a side the noise is unknown.") in report["verdict"]
    # the GEMM work per step: the sgemm's 30,123 before, the bf16 GEMM's 70,000 after
    assert "gemm kernels take 39.9 µs more per step" in report["verdict"]
    assert ("new kernel ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn (+70 µs per step); "
            "kernel ampere_sgemm_128x64_tn is gone (−30.1 µs per step)") in report["verdict"]
    assert dict(report["facts"])["before"].endswith(" · kineto · 1 step")
    cards = {c["label"]: c["value"] for c in report["cards"]}
    assert cards["Step time"] == "100 µs → 100 µs"
    assert cards["GPU idle per step"] == "59.4 µs → 30 µs"  # 100,000 - 40,623 and 100,000 - 70,000
    assert cards["Kernels per step"] == "2 → 1"
    # by step time (unchanged) the changes are listed, but one step a side tells nothing of the noise
    assert main(["diff", str(before), str(after), "--format", "json"]) == 0
    text = json.loads(capsys.readouterr().out)["verdict"]
    assert "Step time is unchanged (100 µs, median of 1 vs 1 steps)." in text
    assert "Follows the configuration change: gemm kernels take 39.9 µs more per step" in text
    assert "beyond the noise" not in text


def test_report_gap_table_counts_from_the_trace_start(capsys):
    """The report's gap table and the findings' evidence place a gap at the same time."""
    t = _load("kineto_step.json")
    assert t.start_ns == T0  # the step and the profiler's span start the trace
    report = _report(capsys, "kineto_step.json")
    table = next(t for s in report["sections"] for t in s["tables"] if t["id"] == "gaps")
    keys = [c["key"] for c in table["columns"]]
    rows = [{k: cell["value"] for k, cell in zip(keys, row)} for row in table["rows"]]
    assert [(r["gap_ns"], r["at"], r["blame_op"], r["annotation"], r["next_op"]) for r in rows] == [
        # no op runs on the thread when either gap opens (fill_ ended at +56,000, copy_ at +40,000)
        (13_000, 57_500, None, "ProfilerStep#1", "aten::add"),
        (11_000, 45_000, None, "ProfilerStep#1", "aten::fill_"),
    ]
    evidence = " ".join(e for f in report["findings"] for e in f["evidence"])
    assert "Memset (Device) on device 0 at 45.0 µs" in evidence  # the same 45 us as the table


def test_kineto_step_roofline_of_the_fp32_matmul():
    """aten::mm of [64, 128] x [128, 256] floats on the A100 (19.5 TFLOP/s FP32, 2,039 GB/s)."""
    from tracekit.analysis.roofline import roofline

    r = roofline(_load("kineto_step.json"))
    mm = r.ops.row(0, named=True)
    flops, nbytes = 2 * 64 * 128 * 256, 4 * (64 * 128 + 128 * 256 + 64 * 256)  # A, B and the result, 4 bytes each
    assert (r.ops.height, mm["name"], mm["flops"], mm["bytes"], mm["gpu_ns"]) == (1, "aten::mm", flops, nbytes, 30_123)
    assert mm["intensity"] == pytest.approx(flops / nbytes)  # 18.3 FLOP/byte, past the ridge
    assert mm["ridge"] == pytest.approx(19.5e12 / 2039e9) and mm["bound"] == "compute"
    assert mm["efficiency"] == pytest.approx(flops / 30_123e-9 / 19.5e12)  # 0.7 % of the FP32 peak
    # host<->device copies are left out of the GPU time the roofline rates: the kernels and the memset
    assert (r.gpu_ns, r.covered_ns) == (30_123 + 5_000 + 1_500, 30_123)


def test_info_counts_the_same_activities_per_device_and_per_stream(capsys):
    """`tracekit info --json`: a device's activities are its work (sgemm, copy, memset, add),
    as its streams' are; the Context Sync record and the step's GPU annotation are not work."""
    assert main(["info", "--json", str(FIXTURES / "kineto_step.json")]) == 0
    (info,) = json.loads(capsys.readouterr().out)  # a list, for one trace too
    assert [(d["device"], d["streams"], d["activities"]) for d in info["devices"]] == [(0, 1, 4)]
    assert [(s["device"], s["stream"], s["kernels"], s["activities"]) for s in info["streams"]] == [(0, 7, 2, 4)]
    assert (info["events"], info["span"]["duration_ns"], info["rank"], info["world_size"]) == (29, 100_000, 0, 2)
    # most events first, ties by name (the order is the same on every run)
    assert list(info["categories"].items()) == [
        ("cuda_runtime", 6), ("cpu_op", 5), ("ac2g", 4), ("[memory]", 2), ("kernel", 2), ("cuda_sync", 1),
        ("gpu_memcpy", 1), ("gpu_memset", 1), ("gpu_user_annotation", 1), ("overhead", 1), ("trace", 1),
        ("user_annotation", 1)]


def test_gaps_inside_the_step_window(capsys):
    """`tracekit gaps --window ProfilerStep`: in the step's 100,000 ns the GPU is idle for
    100,000 - 40,623; the gaps before the first and after the last work count now."""
    path = str(FIXTURES / "kineto_step.json")
    assert main(["gaps", path, "--window", "ProfilerStep", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["idle_ns"] == 100_000 - 40_623
    assert {k: v for k, v in d["by_cause"].items() if v} == {
        "before_first": 10_000, "cpu_work": 11_000 + 13_000, "after_last": 100_000 - 75_500, "short": 877}
    assert [(g["offset_ns"], g["gap_ns"], g["cause"]) for g in d["longest"]] == [
        (75_500, 24_500, "after_last"), (57_500, 13_000, "cpu_work"), (45_000, 11_000, "cpu_work"),
        (0, 10_000, "before_first")]
    assert main(["gaps", path, "--window", "ProfilerStep"]) == 0
    text = capsys.readouterr().out
    assert "from window start" in text and "? -> None" not in text
    last = next(line for line in text.splitlines() if "after_last" in line and "+75.5 µs" in line)
    assert last.rstrip().endswith("-")  # no work after the last gap


def test_rocm_gaps_a_blocking_copy_that_launches_the_next_work_is_no_sync_stall():
    """hipMemcpyWithStream (a blocking copy) began at +81,000, long after the GPU went idle
    at +64,000: it launched the next work and stalled nothing before it."""
    g = gaps(_load("rocm_mi250.json"))
    dev = g.gaps.filter(pl.col("scope") == "device")
    assert _rows(dev, "start_ns", "end_ns", "cause", "late_ns", "sync_ns", "launch_path_ns", "launch_name") == [
        # the GEMM's call returned at +50,000; fill_ (to +31,000) and mm (from +40,000) launch work
        (26_880, 52_000, "launch_bound", 50_000 - 26_880, 0, (31_000 - 26_880) + (50_000 - 40_000),
         "hipExtModuleLaunchKernel"),
        # mm until +70,000 and copy_ from +80,000 are the launch path: 10,000 of the 20,000
        (64_000, 84_000, "launch_bound", 20_000, 0, (70_000 - 64_000) + (84_000 - 80_000), "hipMemcpyWithStream"),
    ]


def test_batch_over_the_fixtures_folder(tmp_path):
    """`run_batch` on tests/fixtures' traces (not its subfolders' regression cases): one row per
    file, with the figures the tests above work out."""
    from tracekit.batch import run_batch

    result = run_batch([str(FIXTURES / "*.json*")], out_dir=tmp_path / "out", jobs=1)
    assert (result.analysed, result.failed) == (8, 0)
    rows = {r["name"].rsplit("-", 1)[0] + ("|gz" if r["source"].endswith(".gz") else ""): r
            for r in result.summary.iter_rows(named=True)}
    assert sorted(rows) == ["chrome_generic", "crashed", "kineto_gpu_bound", "kineto_step", "kineto_step|gz",
                            "kineto_two_streams", "legacy_2021", "rocm_mi250"]
    figures = ("steps", "step_median_ns", "busy_ns", "idle_ns", "idle_cpu_work_ns", "idle_launch_bound_ns",
               "idle_sync_stall_ns", "critical_path_verdict", "recovered")
    expected = {
        "kineto_step": (1, 100_000, 40_623, 24_877, 24_000, 0, 0, "launch-bound", False),
        "kineto_gpu_bound": (1, 100_000, 70_000, 0, 0, 0, 0, "gpu-bound", False),
        "kineto_two_streams": (1, 100_000, 50_000, 0, 0, 0, 0, "gpu-bound", False),
        "crashed": (1, 100_000, 30_123, 0, 0, 0, 0, "launch-bound", True),  # only the sgemm was written
        "legacy_2021": (0, None, 22_500, 29_000, 0, 29_000, 0, "launch-bound", False),
        "rocm_mi250": (0, None, 27_880, 45_120, 0, 45_120, 0, "launch-bound", False),
        "chrome_generic": (0, None, 0, 0, 0, 0, 0, "no-gpu", False),
    }
    for name, values in expected.items():
        assert tuple(rows[name][f] for f in figures) == values, name
    assert tuple(rows["kineto_step|gz"][f] for f in figures) == expected["kineto_step"]



def test_report_critical_path_contexts(capsys):
    # the 2021 trace has no step ranges: host time between its ops belongs to no op
    assert _table(_report(capsys, "legacy_2021.json"), "path-context") == [
        ["aten::linear", "launch overhead", "40 µs", "64.0 %"],  # [1, 41) us of the 62.5 us window
        ["aten::copy_", "launch overhead", "10 µs", "16.0 %"],
        ["(outside any op)", "Python overhead", "10 µs", "16.0 %"],  # [41, 50) and [60, 61) us
        ["outside the path", "idle", "1.5 µs", "2.4 %"],
        ["cudaMemsetAsync", "launch overhead", "1 µs", "1.6 %"],  # a call in no op, [61, 62) us
    ]
    gpu_bound = _report(capsys, "kineto_gpu_bound.json")
    paras = [p for s in gpu_bound["sections"] if s["id"] == "critical-path" for p in s["paragraphs"]]
    assert paras[1].startswith("1 GPU→CPU sync edge was inferred from blocking calls")


def test_report_sections_appear_when_they_have_something_to_say(capsys):
    ids = [s["id"] for s in _report(capsys, "kineto_step.json")["sections"]]
    assert ids == ["timeline", "gpu", "gaps", "critical-path", "ops", "windows", "launches", "syncs", "occupancy",
                   "roofline", "memory"]
    # a browser trace: no GPU, no cpu_op, no step, no launch, sync or copy
    assert [s["id"] for s in _report(capsys, "chrome_generic.json")["sections"]] == ["critical-path"]
    # the GPU-bound step: no copies, but a sync; no memory samples
    ids = [s["id"] for s in _report(capsys, "kineto_gpu_bound.json")["sections"]]
    assert "syncs" in ids and "memory" not in ids and "launches" in ids


def test_summary_of_a_trace_without_idle_time(capsys):
    assert main(["summary", str(FIXTURES / "kineto_two_streams.json")]) == 0
    out = capsys.readouterr().out
    assert "GPU busy    50 µs of 50 µs (100.0 %)" in out  # the two streams cover [10, 60) us together
    assert "idle by cause (device gaps; under 1 µs = short)\n  none: the GPU was never idle in the window\n" in out


def test_the_metadata_token_is_redacted_unless_asked(capsys, tmp_path):
    token = "hf_notARealTokenButShapedLikeOne0123456789"  # in the step fixture's `metadata` block
    report = _report(capsys, "kineto_step.json")
    assert dict(map(tuple, report["metadata"]))["metadata.HF_TOKEN"] == "[redacted]"
    html = tmp_path / "r.html"
    assert main(["report", str(FIXTURES / "kineto_step.json"), "--no-cache", "-o", str(html)]) == 0
    diff = tmp_path / "d.html"
    assert main(["diff", str(FIXTURES / "kineto_step.json"), str(FIXTURES / "kineto_gpu_bound.json"), "-o", str(diff)]) == 0
    capsys.readouterr()
    assert token not in html.read_text() and token not in diff.read_text()
    assert token in json.dumps(_report(capsys, "kineto_step.json", "--no-redact"), ensure_ascii=False)
