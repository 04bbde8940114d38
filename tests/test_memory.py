"""Memory over time, the peak and its op; torch.compile regions, Triton kernels, recompiles."""

from __future__ import annotations

import polars as pl
import pytest
from builders import H100, TraceBuilder
from conftest import real_trace

import tracekit
from tracekit.analysis.compile import KIND_SCHEMA, REGION_SCHEMA, compile_stats, region_kind
from tracekit.analysis.memory import DEVICE_SCHEMA, TIMELINE_SCHEMA, memory_stats
from tracekit.cache import Cache

MB = 1 << 20


def memory_trace() -> TraceBuilder:
    """Samples (ns, bytes -> allocated):

    aten::empty [1_000, 2_000]                 1_500  +1_000 -> 1_000
    aten::mul   [3_000, 10_000]
      aten::empty [3_500, 4_500]               4_000  +7_000 -> 8_000   the peak
                                               6_000  -2_000 -> 6_000   (in aten::mul)
    (no op)                                   12_000  -6_000 -> 0
    (no op)                                   13_000  +8_000 -> 8_000   ties the peak later
    a CPU sample (device type 0)               5_000
    """
    b = TraceBuilder()
    b.op("aten::empty", 1_000, 1_000)
    b.op("aten::mul", 3_000, 7_000)
    b.op("aten::empty", 3_500, 1_000)
    for ts, n, alloc, res in ((1_500, 1_000, 1_000, 2 * MB), (4_000, 7_000, 8_000, 2 * MB),
                              (6_000, -2_000, 6_000, 4 * MB), (12_000, -6_000, 0, 4 * MB),
                              (13_000, 8_000, 8_000, 4 * MB)):
        b.memory(ts, n, alloc, res)
    b.raw({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": b.pid, "tid": b.tid,
           "ts": 5, "args": {"Total Reserved": 0, "Total Allocated": 64, "Bytes": 64, "Addr": 7,
                             "Device Id": -1, "Device Type": 0}})
    return b


def test_golden_peak_and_op(tmp_path):
    m = memory_stats(memory_trace().load(tmp_path))
    gpu = m.devices.filter(pl.col("device") == "cuda:0").row(0, named=True)
    assert (gpu["samples"], gpu["peak_allocated_bytes"], gpu["peak_ts_ns"]) == (5, 8_000, 4_000)
    assert (gpu["peak_op_name"], gpu["peak_op_path"]) == ("aten::empty", "aten::mul > aten::empty")
    assert (gpu["peak_reserved_bytes"], gpu["final_allocated_bytes"]) == (4 * MB, 8_000)
    assert gpu["capacity_bytes"] == H100["totalGlobalMem"]
    assert gpu["peak_fraction"] == 8_000 / H100["totalGlobalMem"]
    cpu = m.devices.filter(pl.col("device") == "cpu").row(0, named=True)
    assert (cpu["peak_allocated_bytes"], cpu["capacity_bytes"]) == (64, None)
    assert (m.peak_allocated_bytes, m.peak_device, m.peak_op_name) == (8_000, "cuda:0", "aten::empty")
    assert m.devices.schema == pl.Schema(DEVICE_SCHEMA) and m.timeline.schema == pl.Schema(TIMELINE_SCHEMA)


def test_golden_timeline_and_by_op(tmp_path):
    m = memory_stats(memory_trace().load(tmp_path))
    gpu = m.timeline.filter(pl.col("device") == "cuda:0")
    assert gpu["total_allocated"].to_list() == [1_000, 8_000, 6_000, 0, 8_000]
    assert gpu["op_name"].to_list() == ["aten::empty", "aten::empty", "aten::mul", None, None]
    rows = {(r["device"], r["op_name"]): r for r in m.by_op.iter_rows(named=True)}
    empty, mul = rows[("cuda:0", "aten::empty")], rows[("cuda:0", "aten::mul")]
    assert (empty["allocations"], empty["allocated_bytes"], mul["frees"], mul["freed_bytes"]) == (2, 8_000, 1, 2_000)
    assert (rows[("cuda:0", None)]["allocations"], rows[("cuda:0", None)]["frees"]) == (1, 1)


def test_memory_empty():
    m = memory_stats(tracekit.Trace.empty())
    assert m.timeline.is_empty() and m.devices.schema == pl.Schema(DEVICE_SCHEMA)
    assert (m.peak_allocated_bytes, m.peak_op_name) == (None, None)


@pytest.mark.real
def test_real_memory_peak():
    m = memory_stats(tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz")))
    assert (m.peak_device, m.peak_allocated_bytes, m.peak_op_name) == ("cuda:0", 2_088_508_416, "aten::mul")


# -- torch.compile --------------------------------------------------------------------

def compile_trace() -> TraceBuilder:
    """Torch-Compiled Region: 0/1        [0, 100_000]          (frame 0 compiled a second time)
         ## Call CompiledFxGraph abc ##  [10_000, 90_000]
           cuLaunchKernel [20_000, 25_000] -> triton_poi_fused_add_0   [30_000, 40_000]
           cuLaunchKernel [50_000, 52_000] -> triton_red_fused_sum_1   [60_000, 65_000]
       Torch-Compiled Region: 1/0        [200_000, 210_000]    no launches
       entire_frame_compile (dynamo_timed) [300_000, 400_000]  compile work inside the trace
       cudaLaunchKernel [500_000, 501_000] -> triton_poi_fused_mul_2 outside any region
    """
    b = TraceBuilder()
    b.annotation("Torch-Compiled Region: 0/1", 0, 100_000)
    b.annotation("## Call CompiledFxGraph abc ##", 10_000, 80_000)
    b.launch_kernel("triton_poi_fused_add_0", launch_ns=20_000, launch_dur_ns=5_000, start_ns=30_000, dur_ns=10_000,
                    api="cuLaunchKernel")
    b.launch_kernel("triton_red_fused_sum_1", launch_ns=50_000, launch_dur_ns=2_000, start_ns=60_000, dur_ns=5_000,
                    api="cuLaunchKernel")
    b.annotation("Torch-Compiled Region: 1/0", 200_000, 10_000)
    b.annotation("entire_frame_compile (dynamo_timed)", 300_000, 100_000)
    b.launch_kernel("triton_poi_fused_mul_2", launch_ns=500_000, launch_dur_ns=1_000, start_ns=502_000, dur_ns=1_000)
    return b


def test_region_kinds():
    names = ["Torch-Compiled Region: 3/0", "Torch-Compiled Region", "## Call CompiledFxGraph f3x ##",
             "CompiledFunction", "CompiledFunctionBackward", "TorchDynamo Cache Lookup",
             "autograd::engine::evaluate_function: CompiledFunctionBackward", "aten::mm"]
    got = pl.DataFrame({"name": names}).select(region_kind(pl.col("name")))["kind"].to_list()
    assert got == ["compiled_region", "compiled_region", "compiled_graph", "compiled_function",
                   "compiled_function", "cache_lookup", None, None]


def test_golden_compile(tmp_path):
    c = compile_stats(compile_trace().load(tmp_path))
    regions = {r["name"]: r for r in c.regions.iter_rows(named=True)}
    outer = regions["Torch-Compiled Region: 0/1"]
    graph = regions["## Call CompiledFxGraph abc ##"]
    assert (outer["launches"], outer["launch_ns"], outer["wrapper_ns"]) == (2, 7_000, 93_000)
    assert (outer["triton_events"], outer["triton_ns"]) == (2, 15_000)
    assert (graph["kind"], graph["wrapper_ns"], graph["parent_eid"]) == ("compiled_graph", 73_000, outer["eid"])
    assert regions["Torch-Compiled Region: 1/0"]["wrapper_ns"] == 10_000
    assert (c.regions_outer, c.region_cpu_ns, c.wrapper_ns) == (2, 110_000, 103_000)
    assert (c.triton_events, c.triton_ns, c.triton_in_regions) == (3, 16_000, 2)
    assert (c.compile_events, c.compile_ns, c.compiled_frames, c.recompiled_frames) == (1, 100_000, 2, 1)
    tri = {r["name"]: r for r in c.triton.iter_rows(named=True)}
    assert tri["triton_poi_fused_add_0"]["region"] == "## Call CompiledFxGraph abc ##"
    assert (tri["triton_poi_fused_mul_2"]["region"], tri["triton_poi_fused_mul_2"]["in_region"]) == (None, 0)
    kinds = {r["kind"]: r for r in c.kinds.iter_rows(named=True)}
    assert (kinds["compiled_region"]["regions"], kinds["compiled_graph"]["triton_events"]) == (2, 2)
    assert c.regions.schema == pl.Schema(REGION_SCHEMA) and c.kinds.schema == pl.Schema(KIND_SCHEMA)


def test_compile_empty():
    c = compile_stats(tracekit.Trace.empty())
    assert c.regions.is_empty() and c.triton.is_empty() and (c.regions_outer, c.graph_launches) == (0, 0)


@pytest.mark.real
def test_real_compiled_function_with_graph_replays():
    c = compile_stats(tracekit.load(real_trace("a100_dlrm_6streams_rank0.json.gz")))
    assert (c.regions_outer, c.graph_launches, c.graph_events) == (70, 70, 345)
    assert (c.triton_events, c.triton_in_regions) == (81, 75)
    assert set(c.kinds["kind"]) == {"compiled_function"}
    assert 0 < c.wrapper_ns < c.region_cpu_ns


def test_the_timeline_is_made_when_first_read(tmp_path):
    """The stats keep the trace, not the timeline: it is made (and kept) when first read, the
    same as it was made for the peaks, and an analysis read back from the cache makes it
    from the trace it is read for."""
    import dataclasses

    trace = memory_trace().load(tmp_path)
    m = memory_stats(trace)
    assert "timeline" not in m.__dict__ and m.trace is trace
    assert "timeline" not in [f.name for f in dataclasses.fields(m)]
    first = m.timeline
    assert m.timeline is first and first.height == trace.memory.height
    assert first.schema == pl.Schema(TIMELINE_SCHEMA)
    cached = Cache(tmp_path / "cache").analyse(trace)
    hit = Cache(tmp_path / "cache").analyse(trace)
    assert hit is not cached and hit.memory.trace is trace and hit.memory.timeline.equals(first)
