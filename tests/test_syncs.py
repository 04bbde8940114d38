"""Blocking syncs (what they waited for, who caused them) and copies (direction, memory, op)."""

from __future__ import annotations

import polars as pl
import pytest
from builders import TraceBuilder
from conftest import real_trace

import tracekit
from tracekit.analysis.syncs import COPY_SCHEMA, SYNC_SCHEMA, copy_stats, sync_kind, sync_stats


def sync_trace() -> TraceBuilder:
    """Syncs and copies with hand-checkable times (ns). Stream 7 unless said.

    long_kernel launched outside any op        GPU [100_000, 190_000]
    cudaDeviceSynchronize (+ Context Sync)     CPU [150_000, 195_000]   waits for long_kernel
    aten::item > aten::_local_scalar_dense     CPU [200_000, 260_000] > [201_000, 259_000]
      cudaMemcpyAsync DtoH (Device -> Pinned)  CPU [202_000, 212_000]   GPU [215_000, 217_000], 4 B
      cudaStreamSynchronize (+ Stream Sync 7)  CPU [213_000, 230_000]   waits for the copy
    other_stream_kernel, stream 8              GPU [218_000, 225_000]   (ends later, other stream)
    aten::masked_fill > aten::clone > aten::copy_   DtoD 2 MB           GPU [310_000, 312_000]
      aten::masked_fill_ kernel                                         GPU [330_000, 331_000]
    aten::to [400_000, 590_000]: HtoD pageable 1 MB [410_000, 510_000], HtoD pinned 1 MB
              [510_000, 560_000], DtoH pageable 0.5 MB [560_000, 580_000] (all cudaMemcpyAsync;
              the DtoH call CPU [540_000, 582_000]: it blocks), memset [585_000, 586_000]
    aten::copy_: cudaMemcpy (sync) DtoH pageable 100 kB  CPU [600_000, 630_000] GPU [610_000, 620_000]
    cudaStreamWaitEvent (+ Stream Wait Event)  CPU [700_000, 701_000]   not a host sync
    """
    b = TraceBuilder()
    b.launch_kernel("long_kernel", launch_ns=90_000, launch_dur_ns=2_000, start_ns=100_000, dur_ns=90_000)
    c = b.runtime("cudaDeviceSynchronize", 150_000, 45_000)
    b.sync("Context Sync", 150_500, 44_000, corr=c)
    b.op("aten::item", 200_000, 60_000)
    s = b.op("aten::_local_scalar_dense", 201_000, 58_000)
    b.launch_copy("DtoH (Device -> Pinned)", launch_ns=202_000, launch_dur_ns=10_000, start_ns=215_000,
                  dur_ns=2_000, nbytes=4, ext=s)
    c = b.runtime("cudaStreamSynchronize", 213_000, 17_000, ext=s)
    b.sync("Stream Sync", 213_500, 16_000, stream=7, corr=c)
    b.launch_kernel("other_stream_kernel", launch_ns=196_000, launch_dur_ns=1_000, start_ns=218_000,
                    dur_ns=7_000, stream=8)
    b.op("aten::masked_fill", 300_000, 40_000)
    b.op("aten::clone", 301_000, 19_000)
    cp = b.op("aten::copy_", 302_000, 16_000)
    b.launch_copy("DtoD (Device -> Device)", launch_ns=303_000, launch_dur_ns=5_000, start_ns=310_000,
                  dur_ns=2_000, nbytes=2_000_000, ext=cp)
    mf = b.op("aten::masked_fill_", 321_000, 18_000)
    b.launch_kernel("masked_fill_kernel", launch_ns=322_000, launch_dur_ns=3_000, start_ns=330_000, dur_ns=1_000, ext=mf)
    to = b.op("aten::to", 400_000, 190_000)
    for kind, ln, ld, s_ns, d, n in (("HtoD (Pageable -> Device)", 401_000, 2_000, 410_000, 100_000, 1_000_000),
                                     ("HtoD (Pinned -> Device)", 407_000, 2_000, 510_000, 50_000, 1_000_000),
                                     # to pageable memory: the async call returns when the copy is done
                                     ("DtoH (Device -> Pageable)", 540_000, 42_000, 560_000, 20_000, 500_000)):
        b.launch_copy(kind, launch_ns=ln, launch_dur_ns=ld, start_ns=s_ns, dur_ns=d, nbytes=n, ext=to)
    b.launch_copy("", launch_ns=430_000, launch_dur_ns=1_000, start_ns=585_000, dur_ns=1_000, nbytes=64,
                  ext=to, api="cudaMemsetAsync", memset=True)
    cp2 = b.op("aten::copy_", 590_000, 50_000)
    b.launch_copy("DtoH (Device -> Pageable)", launch_ns=600_000, launch_dur_ns=30_000, start_ns=610_000,
                  dur_ns=10_000, nbytes=100_000, ext=cp2, api="cudaMemcpy")
    c = b.runtime("cudaStreamWaitEvent", 700_000, 1_000)
    b.sync("Stream Wait Event", 700_000, 1_000, corr=c)
    return b


def test_sync_kind_by_family():
    names = {
        "cudaDeviceSynchronize": "device", "hipDeviceSynchronize": "device", "cuCtxSynchronize": "device",
        "cudaStreamSynchronize": "stream", "hipStreamSynchronize": "stream", "cuStreamSynchronize": "stream",
        "cudaEventSynchronize": "event", "hipEventSynchronize": "event",
        "cudaMemcpy": "memcpy", "hipMemcpyWithStream": "memcpy", "cuMemcpyDtoH_v2": "memcpy",
        "cudaMemcpyAsync": None, "hipMemcpyAsync": None, "cudaStreamWaitEvent": None,
        "cudaEventQuery": None, "cudaMemset": None, "cudaLaunchKernel": None,
    }
    got = pl.DataFrame({"name": list(names)}).select(sync_kind(pl.col("name")))["kind"].to_list()
    assert dict(zip(names, got)) == names


def test_golden_syncs(tmp_path):
    s = sync_stats(sync_trace().load(tmp_path))
    rows = {r["kind"]: r for r in s.syncs.iter_rows(named=True)}
    assert list(s.syncs["kind"]) == ["device", "stream", "memcpy", "memcpy"]
    pageable = s.syncs.row(2, named=True)  # an async call, blocking: its copy goes to pageable memory
    assert (pageable["name"], pageable["op_path"], pageable["waited_name"], pageable["gpu_wait_ns"],
            pageable["tail_ns"]) == ("cudaMemcpyAsync", "aten::to", "Memcpy DtoH (Device -> Pageable)", 40_000, 2_000)
    dev = rows["device"]
    assert (dev["waited_name"], dev["gpu_wait_ns"], dev["tail_ns"], dev["op_name"], dev["record"]) == (
        "long_kernel", 40_000, 5_000, None, "Context Sync")
    item = rows["stream"]
    # on stream 7 (from the Stream Sync record) the copy, not the later kernel on stream 8
    assert (item["waited_name"], item["waited_stream"], item["gpu_wait_ns"], item["tail_ns"]) == (
        "Memcpy DtoH (Device -> Pinned)", 7, 4_000, 13_000)
    assert (item["op_name"], item["op_path"], item["stream"]) == (
        "aten::_local_scalar_dense", "aten::item > aten::_local_scalar_dense", 7)
    mc = rows["memcpy"]
    assert (mc["name"], mc["op_path"], mc["gpu_wait_ns"], mc["tail_ns"]) == ("cudaMemcpy", "aten::copy_", 20_000, 10_000)
    assert (s.sync_calls, s.sync_ns, s.gpu_wait_ns, s.tail_ns) == (4, 134_000, 104_000, 30_000)
    assert (s.stream_waits, s.gpu_sync_records) == (1, 3)
    assert s.by_op.row(0, named=True)["kind"] == "device"
    assert s.syncs.schema == pl.Schema(SYNC_SCHEMA)


@pytest.mark.parametrize(("record", "waited"), [(False, "on_stream_8"), (True, "on_stream_7")])
def test_stream_sync_waits_on_its_stream_when_known(tmp_path, record, waited):
    b = TraceBuilder()
    b.launch_kernel("on_stream_7", launch_ns=1_000, launch_dur_ns=1_000, start_ns=10_000, dur_ns=10_000, stream=7)
    b.launch_kernel("on_stream_8", launch_ns=3_000, launch_dur_ns=1_000, start_ns=10_000, dur_ns=15_000, stream=8)
    c = b.runtime("cudaStreamSynchronize", 15_000, 15_000)
    if record:
        b.sync("Stream Sync", 15_000, 15_000, stream=7, corr=c)
    row = sync_stats(b.load(tmp_path)).syncs.row(0, named=True)
    assert row["waited_name"] == waited


def test_sync_over_an_idle_gpu_waited_for_nothing(tmp_path):
    b = TraceBuilder()
    b.launch_kernel("done_long_ago", launch_ns=1_000, launch_dur_ns=1_000, start_ns=3_000, dur_ns=1_000)
    b.runtime("cudaDeviceSynchronize", 10_000, 5_000)
    row = sync_stats(b.load(tmp_path)).syncs.row(0, named=True)
    assert (row["waited_eid"], row["gpu_wait_ns"], row["tail_ns"]) == (None, 0, 5_000)


def test_golden_copies(tmp_path):
    c = copy_stats(sync_trace().load(tmp_path))
    mem = c.copies.filter(pl.col("kind") == "memcpy")
    rows = {(r["direction"], r["host_memory"], r["api"]): r for r in mem.iter_rows(named=True)}
    dtod = rows[("DtoD", None, "cudaMemcpyAsync")]
    assert dtod["op_path"] == "aten::masked_fill > aten::clone > aten::copy_"
    assert (dtod["bandwidth_gbps"], dtod["api_async"], dtod["host_blocking"], dtod["src"], dtod["dst"]) == (
        1000.0, True, False, "Device", "Device")
    pageable = rows[("HtoD", "pageable", "cudaMemcpyAsync")]
    pinned = rows[("HtoD", "pinned", "cudaMemcpyAsync")]
    assert (pageable["bandwidth_gbps"], pinned["bandwidth_gbps"]) == (10.0, 20.0)
    assert not pageable["host_blocking"] and pageable["op_name"] == "aten::to"
    assert rows[("DtoH", "pageable", "cudaMemcpyAsync")]["host_blocking"]  # async API, still blocks
    sync = rows[("DtoH", "pageable", "cudaMemcpy")]
    assert (sync["api_async"], sync["host_blocking"], sync["bytes"]) == (False, True, 100_000)
    item = rows[("DtoH", "pinned", "cudaMemcpyAsync")]
    assert item["op_path"] == "aten::item > aten::_local_scalar_dense"
    assert (c.memcpys, c.memsets, c.pageable, c.dtod, c.sync_api, c.host_blocking) == (6, 1, 3, 1, 1, 2)
    assert c.memcpy_bytes == 4 + 2_000_000 + 1_000_000 + 1_000_000 + 500_000 + 100_000
    kinds = {(r["kind"], r["direction"], r["host_memory"], r["api_async"]): r
             for r in c.kinds.iter_rows(named=True)}
    assert kinds[("memcpy", "DtoH", "pageable", True)]["bandwidth_gbps"] == 25.0
    assert c.copies.schema == pl.Schema(COPY_SCHEMA)


def test_empty_trace():
    s, c = sync_stats(tracekit.Trace.empty()), copy_stats(tracekit.Trace.empty())
    assert s.syncs.is_empty() and s.syncs.schema == pl.Schema(SYNC_SCHEMA) and s.sync_calls == 0
    assert c.copies.is_empty() and c.copies.schema == pl.Schema(COPY_SCHEMA) and c.memcpys == 0


@pytest.mark.real
def test_real_qwen_item_sync():
    t = tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz"))
    s = sync_stats(t)
    stream = s.syncs.filter(pl.col("kind") == "stream").row(0, named=True)
    assert stream["op_path"] == "aten::is_nonzero > aten::item > aten::_local_scalar_dense"
    assert stream["waited_name"] == "Memcpy DtoH (Device -> Pinned)"
    c = copy_stats(t)
    copy = c.copies.filter(pl.col("kind") == "memcpy").row(0, named=True)
    assert (copy["direction"], copy["host_memory"], copy["op_name"]) == ("DtoH", "pinned", "aten::_local_scalar_dense")


@pytest.mark.real
def test_real_cuda_sync_records_and_rocm():
    s = sync_stats(tracekit.load(real_trace("a100_alexnet_cuda_sync.json.gz")))
    assert s.gpu_sync_records == 41 and s.stream_waits == 34
    streams = s.syncs.filter(pl.col("kind") == "stream")
    assert streams.height == 16 and set(streams["record"]) == {"Stream Sync"}
    amd = sync_stats(tracekit.load(real_trace("mi250_toy_train_rocm62.json.gz")))
    assert amd.syncs["name"].to_list() == ["hipMemcpyWithStream", "hipMemcpyWithStream", "hipDeviceSynchronize"]
