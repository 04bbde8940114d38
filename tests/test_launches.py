"""Launch statistics: API families, latency, clock skew, queue depth, graph replays."""

from __future__ import annotations

import polars as pl
import pytest
from builders import TraceBuilder
from conftest import real_trace

import tracekit
from tracekit.analysis.attribution import attribute
from tracekit.analysis.launches import API_SCHEMA, LAUNCH_SCHEMA, QUEUE_SCHEMA, launch_family, launch_stats


def launch_trace() -> TraceBuilder:
    """One op launching on three streams, by runtime, driver and graph APIs.

    call (API)                     CPU span          GPU work, stream 7 unless said
    L1 cudaLaunchKernel            [1_000, 3_000]    k1 [5_000, 50_000]
    L2 cudaLaunchKernel            [4_000, 6_000]    k2 [50_000, 60_000]
    L3 cuLaunchKernelEx (driver)   [7_000, 9_000]    k3 [60_000, 61_000]
    L4 cudaLaunchKernel            [10_000, 11_000]  k4 [12_000, 20_000] stream 8
    L5 cudaLaunchKernel            [70_000, 72_000]  k5 [73_000, 74_000]
    G  cudaGraphLaunch             [80_000, 85_000]  g1 [86_000, 87_000] g2 [87_000, 89_000] g3 [89_000, 92_000]
    L6 cudaLaunchKernel            [93_000, 95_000]  k6 [90_000, 91_000] stream 9: starts before its call
    cudaGetDeviceCount             [96_000, 97_000]  (not a launch)
    """
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 100_000)
    for name, (ln, ld, s, d), stream, api in (
        ("k1", (1_000, 2_000, 5_000, 45_000), 7, "cudaLaunchKernel"),
        ("k2", (4_000, 2_000, 50_000, 10_000), 7, "cudaLaunchKernel"),
        ("k3_cudnn_sdpa", (7_000, 2_000, 60_000, 1_000), 7, "cuLaunchKernelEx"),
        ("k4", (10_000, 1_000, 12_000, 8_000), 8, "cudaLaunchKernel"),
        ("k5", (70_000, 2_000, 73_000, 1_000), 7, "cudaLaunchKernel"),
    ):
        b.launch_kernel(name, launch_ns=ln, launch_dur_ns=ld, start_ns=s, dur_ns=d, ext=ext, stream=stream, api=api)
    corr = b.runtime("cudaGraphLaunch", 80_000, 5_000, ext=ext)
    for name, s, d in (("g1", 86_000, 1_000), ("g2", 87_000, 2_000), ("g3", 89_000, 3_000)):
        b.kernel(name, s, d, corr=corr)
    b.launch_kernel("k6", launch_ns=93_000, launch_dur_ns=2_000, start_ns=90_000, dur_ns=1_000, ext=ext, stream=9)
    b.runtime("cudaGetDeviceCount", 96_000, 1_000, ext=ext)
    return b


def test_launch_family_by_prefix():
    names = {
        "cudaLaunchKernel": "kernel", "cudaLaunchKernel_ptsz": "kernel", "cudaLaunchKernelExC": "kernel",
        "cuLaunchKernel": "kernel", "cuLaunchKernelEx": "kernel", "cudaLaunchCooperativeKernel": "kernel",
        "hipLaunchKernel": "kernel", "hipExtModuleLaunchKernel": "kernel", "hipModuleLaunchKernel": "kernel",
        "cudaGraphLaunch": "graph", "hipGraphLaunch": "graph", "cuGraphLaunch": "graph",
        "cudaMemcpyAsync": "memcpy", "cudaMemcpy": "memcpy", "hipMemcpyWithStream": "memcpy",
        "cuMemcpyHtoDAsync_v2": "memcpy", "cudaMemsetAsync": "memset", "hipMemsetAsync": "memset",
        "cudaLaunchHostFunc": None, "cudaStreamWaitEvent": None, "cudaEventRecord": None,
        "cudaGetDeviceCount": None, "cudaDeviceSynchronize": None, "INVALID": None,
    }
    got = pl.DataFrame({"name": list(names)}).select(launch_family(pl.col("name")))["family"].to_list()
    assert dict(zip(names, got)) == names


def test_golden_api_time_and_latency(tmp_path):
    s = launch_stats(launch_trace().load(tmp_path))
    apis = {r["name"]: r for r in s.apis.iter_rows(named=True)}
    assert set(apis) == {"cudaLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch"}
    assert (apis["cudaLaunchKernel"]["calls"], apis["cudaLaunchKernel"]["total_ns"]) == (5, 9_000)
    assert (apis["cuLaunchKernelEx"]["family"], apis["cuLaunchKernelEx"]["total_ns"]) == ("kernel", 2_000)
    assert (apis["cudaGraphLaunch"]["family"], apis["cudaGraphLaunch"]["gpu_events"]) == ("graph", 3)
    assert (s.launch_calls, s.launch_api_ns, s.calls_without_gpu, s.launched_events) == (7, 16_000, 0, 9)
    lat = dict(zip(s.launches["eid"].to_list(), s.launches["latency_ns"].to_list()))
    assert sorted(lat.values()) == [-5_000, 1_000, 1_000, 1_000, 2_000, 44_000, 51_000]
    assert (s.negative_latency, s.clock_skew, s.median_latency_ns) == (1, 1, 1_000.0)
    assert apis["cudaLaunchKernel"]["clock_skew"] == 1
    assert s.launches.schema == pl.Schema(LAUNCH_SCHEMA) and s.apis.schema == pl.Schema(API_SCHEMA)


def test_golden_graph_replay(tmp_path):
    s = launch_stats(launch_trace().load(tmp_path))
    assert (s.graph_launches, s.graph_events) == (1, 3)
    g = s.graphs.row(0, named=True)
    assert (g["gpu_events"], g["gpu_ns"], g["span_ns"], g["streams"], g["op_name"]) == (3, 6_000, 6_000, 1, "aten::mm")
    assert (g["first_gpu_ts_ns"], g["last_gpu_end_ns"]) == (86_000, 92_000)


def test_golden_queue_depth(tmp_path):
    s = launch_stats(launch_trace().load(tmp_path))
    assert "queue" not in s.__dict__  # made from the GPU links when first read, then kept
    q7 = s.queue.filter(pl.col("stream") == 7)
    assert s.queue is s.__dict__["queue"]
    assert q7["depth"].to_list() == [1, 2, 3, 1, 1, 2, 3]
    streams = {r["stream"]: r for r in s.streams.iter_rows(named=True)}
    assert (streams[7]["launched"], streams[7]["max_depth"]) == (7, 3)
    assert streams[7]["mean_depth"] == pytest.approx(13 / 7)
    assert (streams[8]["max_depth"], streams[9]["max_depth"]) == (1, 1)
    assert s.max_queue_depth == 3
    assert s.queue.schema == pl.Schema(QUEUE_SCHEMA)


def test_golden_driver_and_graph_attributed_to_op(tmp_path):
    a = attribute(launch_trace().load(tmp_path))
    mm = a.ops.row(0, named=True)
    total = 45_000 + 10_000 + 1_000 + 8_000 + 1_000 + 6_000 + 1_000
    assert (mm["name"], mm["gpu_events_incl"], mm["gpu_incl_ns"]) == ("aten::mm", 9, total)
    cudnn = a.gpu.filter(pl.col("name") == "k3_cudnn_sdpa").row(0, named=True)
    assert (cudnn["launch_name"], cudnn["op_name"]) == ("cuLaunchKernelEx", "aten::mm")


def test_empty_trace():
    s = launch_stats(tracekit.Trace.empty())
    assert s.launches.is_empty() and s.queue.is_empty() and s.graphs.is_empty()
    assert (s.launch_calls, s.max_queue_depth, s.median_latency_ns) == (0, 0, None)


@pytest.mark.real
def test_real_rocm_and_driver_launches():
    # graph replays on a real trace: tests/test_memory.py::test_real_compiled_function_with_graph_replays
    amd = launch_stats(tracekit.load(real_trace("mi250_toy_train_rocm62.json.gz")))
    assert set(amd.apis["name"]) >= {"hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyWithStream"}
    qwen = launch_stats(tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz")))
    assert "cuLaunchKernel" in set(qwen.apis["name"]) and qwen.launch_calls == 1_198
