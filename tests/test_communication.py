"""One definition of communication (taxonomy class `communication`) in the breakdown, the
kernel table, the critical path and the findings, checked on built traces with hand-computed
answers and on the shared real traces against figures recomputed from the raw JSON."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest
from builders import BATCH_GEMM, TraceBuilder
from conftest import real_trace

import tracekit
from tracekit.analysis.breakdown import breakdown
from tracekit.analysis.critical_path import critical_path
from tracekit.analysis.taxonomy import is_communication, kernel_table
from tracekit.findings import run_findings

# real names: vLLM/SGLang custom all-reduce (kernel in vllm-project/vllm csrc/custom_all_reduce.cuh,
# this instance from an SGLang profile), DeepEP (deepseek-ai/DeepEP csrc/kernels/intranode.cu)
CUSTOM_AR = ("void sglang::cross_device_reduce_1stage<__half, 8>(sglang::RankData*, sglang::RankSignals, "
             "sglang::Signal*, __half*, int, int)")
DEEP_EP = ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int const*, int*, int, int, int, "
           "bool const*, int*, int*, int, int, void**, int**, int)")
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _mixed(tmp_path) -> tracekit.Trace:
    """A GEMM (stream 7, 0-100 µs) and three collectives on stream 20: a custom all-reduce
    (50-150 µs, half under the GEMM), a DeepEP notify (200-230 µs), an NCCL all-reduce (250-270 µs)."""
    b = TraceBuilder()
    b.launch_kernel(BATCH_GEMM, launch_ns=0, launch_dur_ns=1_000, start_ns=0, dur_ns=100_000)
    b.launch_kernel(CUSTOM_AR, launch_ns=2_000, launch_dur_ns=1_000, start_ns=50_000, dur_ns=100_000, stream=20)
    b.launch_kernel(DEEP_EP, launch_ns=4_000, launch_dur_ns=1_000, start_ns=200_000, dur_ns=30_000, stream=20)
    b.launch_kernel(NCCL, launch_ns=6_000, launch_dur_ns=1_000, start_ns=250_000, dur_ns=20_000, stream=20)
    return b.load(tmp_path)


def test_breakdown_counts_every_communication_kernel(tmp_path):
    bd = breakdown(_mixed(tmp_path))
    # N = 100 + 30 + 20 µs; C ∪ N = [0, 150] + 30 + 20 = 200 µs; exposed = 200 - 100; overlap = 100 + 150 - 200
    assert (bd.span_ns, bd.compute_ns, bd.communication_total_ns) == (270_000, 100_000, 150_000)
    assert (bd.communication_ns, bd.overlap_ns, bd.idle_ns) == (100_000, 50_000, 70_000)
    assert bd.overlap_share == pytest.approx(1 / 3)


def test_critical_path_and_kernel_table_agree_with_the_breakdown(tmp_path):
    trace = _mixed(tmp_path)
    table = kernel_table(trace.gpu)
    comm = table.filter(pl.col("kernel_class") == "communication")
    assert sorted(comm["name"]) == sorted([CUSTOM_AR, DEEP_EP, NCCL])
    assert comm["total_ns"].sum() == breakdown(trace).communication_total_ns == 150_000
    segs = critical_path(trace).segments
    gpu = segs.filter(pl.col("cls").is_in(["gpu_compute", "gpu_memory", "communication"]))
    names = gpu.with_columns(pl.col("name").cast(pl.String))
    on_path = dict(zip(names["name"], names["cls"].cast(pl.String)))
    assert on_path == {CUSTOM_AR: "communication", DEEP_EP: "communication", NCCL: "communication"}


def test_low_comm_overlap_sees_custom_all_reduce(tmp_path):
    result = run_findings(_mixed(tmp_path), rules=["low_comm_overlap"])
    (f,) = result.findings
    assert f.time_lost_ns == 100_000  # the exposed communication
    assert f.evidence[0].name == CUSTOM_AR  # the longest collective


def test_is_communication_on_categorical_names_and_nulls():
    frame = pl.DataFrame({"name": pl.Series([NCCL, BATCH_GEMM, None, DEEP_EP], dtype=pl.Categorical)})
    assert frame.select(is_communication(frame["name"]))["name"].to_list() == [True, False, False, True]


# -- real traces: the same figure everywhere -------------------------------------------------

def _raw_kernels(path) -> pl.DataFrame:
    """Kernel events of the raw JSON: device (args.device, else pid), start and end in ns."""
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    events = data if isinstance(data, list) else data["traceEvents"]
    rows = []
    for e in events:
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel" and "dur" in e:
            ts, dur = round(float(e["ts"]) * 1000), round(float(e["dur"]) * 1000)
            device = (e.get("args") or {}).get("device", e.get("pid"))
            rows.append((e["name"], int(device), ts, ts + max(dur, 0)))
    return pl.DataFrame(rows, schema=["name", "device", "ts_ns", "end_ns"], orient="row")


def _union_ns(rows: pl.DataFrame) -> int:
    """Σ over devices of |∪ [ts, end)|, by a sweep in plain Python."""
    total = 0
    for _, part in rows.sort("ts_ns").group_by("device", maintain_order=True):
        end = None
        for ts, e in part.select("ts_ns", "end_ns").iter_rows():
            if end is None or ts >= end:
                total += e - ts
                end = e
            elif e > end:
                total += e - end
                end = e
    return total


@pytest.mark.real
@pytest.mark.parametrize("name", ["a100_ddp_cnn_nccl_rank0.json.gz", "dlrm_8rank_v100/worker0.json.gz"])
def test_breakdown_communication_is_the_union_of_nccl_kernels(name):
    path = real_trace(name)
    raw = _raw_kernels(path)
    nccl = raw.filter(pl.col("name").str.contains(r"(?i)nccl"))
    assert nccl.height > 0
    assert breakdown(tracekit.load(path)).communication_total_ns == _union_ns(nccl)
