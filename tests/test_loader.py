"""The loader: exact nanoseconds, categories, args, joins, broken input, real traces."""

from __future__ import annotations

import gzip
import json
import os

import polars as pl
import pytest
from builders import A100, TraceBuilder
from conftest import all_real_traces, real_trace

import tracekit
from tracekit.cache import Cache
from tracekit.errors import TraceError, TraceFormatError, TraceTooLargeError
from tracekit.model import SCHEMAS


def write(tmp_path, text: str | bytes, name: str = "t.json"):
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def test_golden_kernel_launch_exact_ns_and_links(tmp_path):
    b = TraceBuilder(base_time_ns=1_700_000_000_000_000_000)
    step = b.annotation("ProfilerStep#1", 1_712_195_495_519_689_047, 90_000, gpu=True)
    ext = b.op("aten::mm", 1_712_195_495_519_690_001, 50_001)
    corr = b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", ext=ext,
                           launch_ns=1_712_195_495_519_691_000, launch_dur_ns=4_999,
                           start_ns=1_712_195_495_519_700_500, dur_ns=30_123,
                           grid=(8, 4, 1), block=(256, 1, 1), registers=168, shared_memory=200_704)
    t = b.load(tmp_path)
    assert t.meta.base_time_ns == 1_700_000_000_000_000_000
    assert t.meta.format == "kineto"
    cpu = t.ops.filter(pl.col("cat") == "cpu_op").row(0, named=True)
    assert (cpu["name"], cpu["ts_ns"], cpu["dur_ns"], cpu["end_ns"]) == (
        "aten::mm", 1_712_195_495_519_690_001, 50_001, 1_712_195_495_519_740_002)
    assert cpu["external_id"] == ext
    rt = t.runtime.row(0, named=True)
    assert (rt["name"], rt["ts_ns"], rt["dur_ns"], rt["correlation"], rt["external_id"]) == (
        "cudaLaunchKernel", 1_712_195_495_519_691_000, 4_999, corr, ext)
    k = t.kernels.row(0, named=True)
    assert (k["ts_ns"], k["dur_ns"], k["device"], k["stream"], k["correlation"]) == (
        1_712_195_495_519_700_500, 30_123, 0, 7, corr)
    assert (k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"], k["block_y"], k["block_z"]) == (8, 4, 1, 256, 1, 1)
    assert (k["registers_per_thread"], k["shared_memory"]) == (168, 200_704)
    steps = t.ops.filter(pl.col("cat") == "user_annotation")
    assert steps["name"].to_list() == ["ProfilerStep#1"] and steps["external_id"].to_list() == [step]
    assert t.gpu.filter(pl.col("cat") == "gpu_user_annotation").height == 1
    assert t.flows.sort("ph")["flow_id"].to_list() == [corr, corr]
    assert t.flows.sort("ph")["binding_point"].to_list() == ["e", None]


def test_flows_text_is_categorical_with_the_files_values(tmp_path):
    """The flows' text columns hold codes (`model.FLOWS_SCHEMA`) and read back as the file's
    text, numbers and strings alike: from the JSON, from the trace cache, and joined or
    concatenated with another trace's flows."""
    from tracekit.model import FLOWS_SCHEMA, TEXT

    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 0, "dur": 10},
        {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 5, "pid": "main", "tid": 3, "ts": 1},
        {"ph": "t", "cat": "fwdbwd", "name": "fwdbwd", "id": 5, "pid": 1, "tid": "worker 1", "ts": 2},
        {"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": "0x7", "pid": 1, "tid": 2, "ts": 3},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    expected = [(1, "fwdbwd", "fwdbwd", 5, "s", "main", "3", 1000, None),
                (2, "fwdbwd", "fwdbwd", 5, "t", "1", "worker 1", 2000, None),
                (3, "ac2g", "ac2g", 7, "f", "1", "2", 3000, "e")]
    for trace in (tracekit.load(path), Cache(tmp_path / "c").load(path),
                  Cache(tmp_path / "c").load(path)):
        flows = trace.flows
        assert [c for c, t in flows.schema.items() if t == TEXT] == ["cat", "name", "ph", "pid", "tid", "binding_point"]
        assert dict(flows.schema) == FLOWS_SCHEMA and flows.rows() == expected
        assert flows.filter(pl.col("ph") == "t")["tid"].to_list() == ["worker 1"]
        assert flows.filter(pl.col("pid").is_in(["main"]))["eid"].to_list() == [1]
        both = pl.concat([flows, flows.head(1)])
        assert both.join(flows.select("pid", "tid", "eid"), on=["pid", "tid"]).height == 4


def test_every_frames_short_text_is_categorical_with_the_files_values(tmp_path):
    """`ph`, `cat`, `pid` and `tid` of every frame hold codes (`model.TEXT`) and read back
    as the file's text, numbers and strings alike, from the JSON and from the trace cache;
    the ops' threads join the runtime calls', the flows' and the metadata's thread and
    process names without a cast."""
    from tracekit.model import TEXT

    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": "main", "ts": 0, "dur": 10,
         "args": {"External id": 3}},
        {"ph": "B", "cat": "user_annotation", "name": "step", "pid": "p 2", "tid": 7, "ts": 1},
        {"ph": "E", "pid": "p 2", "tid": 7, "ts": 9},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": "main", "ts": 2, "dur": 3,
         "args": {"correlation": 11, "External id": 3}},
        {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 6, "dur": 2,
         "args": {"correlation": 11, "device": 0, "stream": 7}},
        {"ph": "i", "s": "t", "cat": "mark", "name": "here", "pid": 1, "tid": "main", "ts": 4},
        {"ph": "C", "cat": "c", "name": "load", "pid": 1, "tid": 0, "ts": 5, "args": {"v": 2}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 11, "pid": 1, "tid": "main", "ts": 2},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": "main", "args": {"name": "MainThread"}},
        {"ph": "M", "name": "process_name", "pid": "p 2", "args": {"name": "worker"}},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    text = {"ops": ["ph", "cat", "pid", "tid"], "runtime": ["cat", "pid", "tid"], "gpu": ["cat"],
            "instants": ["ph", "cat", "pid", "tid"], "counters": ["cat", "pid", "tid"]}
    for trace in (tracekit.load(path), Cache(tmp_path / "c").load(path),
                  Cache(tmp_path / "c").load(path)):
        for name, columns in text.items():
            frame = getattr(trace, name)
            assert [c for c in frame.columns if frame.schema[c] == TEXT] == columns, name
        assert trace.ops.select("ph", "cat", "pid", "tid").rows() == [("X", "cpu_op", "1", "main"),
                                                                       ("B", "user_annotation", "p 2", "7")]
        assert trace.runtime.select("cat", "pid", "tid").rows() == [("cuda_runtime", "1", "main")]
        assert trace.gpu.select("cat", "device", "stream").rows() == [("kernel", 0, 7)]
        assert trace.instants.select("ph", "cat", "pid", "tid").rows() == [("i", "mark", "1", "main")]
        assert trace.counters.select("cat", "pid", "tid", "value").rows() == [("c", "1", "0", 2.0)]
        assert trace.ops.filter(pl.col("pid") == "p 2")["name"].to_list() == ["step"]
        assert trace.ops.sort("pid")["pid"].to_list() == ["1", "p 2"]  # as text
        calls = trace.ops.join(trace.runtime, on=["pid", "tid"], suffix="_rt")
        assert calls.select("name", "name_rt").rows() == [("aten::mm", "cudaLaunchKernel")]
        assert trace.ops.join(trace.flows, on=["pid", "tid"]).height == 1
        # the metadata's threads and processes join the frames on the same dtypes
        named = trace.ops.join(trace.meta.threads, on=["pid", "tid"], suffix="_thread")
        assert named.select("name", "name_thread").rows() == [("aten::mm", "MainThread")]
        procs = trace.ops.join(trace.meta.processes, on="pid", suffix="_process")
        assert procs.select("name", "name_process").rows() == [("step", "worker")]


def test_frames_match_documented_schemas(tmp_path):
    t = TraceBuilder().load(tmp_path)
    for name, schema in SCHEMAS.items():
        assert dict(getattr(t, name).schema) == schema, name


def test_exact_ns_from_decimal_text(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        for i, (ts, dur) in enumerate([
            ("1712195495519689.047", "0.001"),  # beyond float precision: exact from text
            ("12", "3"),
            ("-5.5", "0.0005"),  # negative ts kept; sub-ns rounds half up
            ("1e3", "2.0004"),  # exponent form, rounding down
        ])
    ]
    text = json.dumps({"traceEvents": events})
    for ev in events:  # write the numbers unquoted
        text = text.replace(f'"{ev["ts"]}"', ev["ts"]).replace(f'"{ev["dur"]}"', ev["dur"])
    t = tracekit.load(write(tmp_path, text))
    got = dict(zip(t.ops["name"], zip(t.ops["ts_ns"], t.ops["dur_ns"])))
    assert got == {
        "op0": (1_712_195_495_519_689_047, 1),
        "op1": (12_000, 3_000),
        "op2": (-5_500, 1),
        "op3": (1_000_000, 2_000),
    }
    codes = dict(zip(t.warnings["code"], t.warnings["count"]))
    assert codes["negative_ts"] == 1


def test_old_2021_array_form_categories(tmp_path):
    events = [
        {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 9, "tid": "4093687616", "ts": 100, "dur": 50,
         "args": {"Input dims": [[1, 3, 8, 8]], "External id": 3}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": "4093687616", "ts": 110,
         "dur": 5, "args": {"correlation": 77, "external id": 3}},
        {"ph": "X", "cat": "Kernel", "name": "implicit_convolve_sgemm", "pid": 0, "tid": "stream 7", "ts": 120,
         "dur": 20, "args": {"device": 0, "stream": 7, "correlation": 77, "external id": 3}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7",
         "ts": 90, "dur": 4, "args": {"bytes": 1024}},
        {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 7", "ts": 95, "dur": 1},
    ]
    t = tracekit.load(write(tmp_path, json.dumps(events)))
    assert t.meta.format == "kineto-array"
    assert sorted(t.gpu["cat"].to_list()) == ["gpu_memcpy", "gpu_memset", "kernel"]
    assert t.gpu.filter(pl.col("cat") == "gpu_memset")["stream"].to_list() == [7]  # from tid "stream 7"
    assert t.runtime["cat"].to_list() == ["cuda_runtime"] and t.runtime["external_id"].to_list() == [3]
    assert t.ops["cat"].to_list() == ["cpu_op"] and t.ops["input_dims"].to_list() == ["[[1,3,8,8]]"]
    assert t.kernels["external_id"].to_list() == [3]
    assert t.ops["tid"].to_list() == ["4093687616"]


def test_rocm_names_and_vendor(tmp_path):
    b = TraceBuilder()
    b.launch_kernel("Cijk_Alik_Bljk_SB_MT64x16x32_MI16x16x1", api="hipLaunchKernel",
                    launch_ns=0, launch_dur_ns=10, start_ns=20, dur_ns=30)
    t = b.load(tmp_path)
    assert t.meta.vendor == "amd"
    assert t.runtime["name"].to_list() == ["hipLaunchKernel"]


def test_begin_end_pairs_instants_counters_async(tmp_path):
    events = [
        {"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 0},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 1, "ts": 2},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 5},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 9},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 9},  # E without B
        {"ph": "B", "name": "open", "pid": 1, "tid": 3, "ts": 1},  # B without E
        {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 3, "s": "t"},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 4, "args": {"heap": 10, "gpu": 2.5, "label": "x"}},
        {"ph": "b", "cat": "net", "id": "0x1f", "name": "req", "pid": 1, "tid": 4, "ts": 10},
        {"ph": "e", "cat": "net", "id": "0x1f", "name": "req", "pid": 1, "tid": 5, "ts": 15},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "renamed"}},
    ]
    t = tracekit.load(write(tmp_path, json.dumps({"traceEvents": events})))
    slices = {r["name"]: (r["ph"], r["ts_ns"], r["dur_ns"]) for r in t.ops.iter_rows(named=True)}
    assert slices == {"outer": ("B", 0, 9000), "inner": ("B", 2000, 3000), "req": ("b", 10000, 5000),
                      "open": ("B", 1000, 0)}  # closed at its thread's last end: its own time
    assert t.instants["name"].to_list() == ["mark"] and t.instants["scope"].to_list() == ["t"]
    assert sorted(zip(t.counters["series"], t.counters["value"])) == [("gpu", 2.5), ("heap", 10.0)]
    codes = dict(zip(t.warnings["code"], t.warnings["count"]))
    assert codes["unclosed_begin"] == 1 and codes["unmatched_E"] == 1 and codes["duplicate_metadata"] == 1
    assert t.meta.threads.filter(pl.col("tid") == "1")["name"].to_list() == ["renamed"]
    assert t.meta.format == "chrome"


def test_loader_plans_run_on_the_in_memory_engine(tmp_path, monkeypatch):
    """Every lazy plan of a load (chunk parts, pairing, sorts, notes) names Polars' in-memory
    engine: the default picks the streaming one, slower to start and larger at these sizes."""
    engines: list[str] = []
    collect, collect_all = pl.LazyFrame.collect, pl.collect_all

    def spy(self, *args, **kwargs):
        engines.append(kwargs.get("engine", "auto"))
        return collect(self, *args, **kwargs)

    def spy_all(frames, *args, **kwargs):
        engines.append(kwargs.get("engine", "auto"))
        return collect_all(frames, *args, **kwargs)

    monkeypatch.setattr(pl.LazyFrame, "collect", spy)
    monkeypatch.setattr(pl, "collect_all", spy_all)
    events = [{"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 0}, {"ph": "E", "pid": 1, "tid": 1, "ts": 9},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2,
               "args": {"correlation": 5, "device": 0, "stream": 7}},
              {"ph": "C", "name": "mem", "pid": 1, "ts": 4, "args": {"heap": 10}}]
    t = tracekit.load(write(tmp_path, json.dumps({"traceEvents": events})))
    assert t.ops["name"].to_list() == ["outer"] and t.gpu["name"].to_list() == ["k"]
    assert len(engines) >= 5 and set(engines) == {"in-memory"}


def test_mixed_pid_tid_zero_missing_durations(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": "Spans", "tid": "", "ts": 1, "dur": 0},
        {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 7, "tid": 8, "ts": 2},
        {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 7, "tid": 8, "ts": 3, "dur": -4},
        {"ph": "X", "cat": "cpu_op", "name": "d", "pid": 7, "tid": 8, "dur": 4},
    ]
    t = tracekit.load(write(tmp_path, json.dumps({"traceEvents": events})))
    assert t.ops.select("name", "pid", "tid", "dur_ns").rows() == [
        ("a", "Spans", "", 0), ("b", "7", "8", 0), ("c", "7", "8", 0)]
    codes = dict(zip(t.warnings["code"], t.warnings["count"]))
    assert codes == {"missing_ts": 1, "missing_duration": 1, "negative_duration": 1, "zero_duration": 1}
    levels = dict(zip(t.warnings["code"], t.warnings["level"]))
    assert levels["zero_duration"] == "info" and levels["missing_ts"] == "warning"


def test_wrong_field_types_are_coerced_not_fatal(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
         "args": {"correlation": "12", "grid": "big", "stream": 7, "device": 0}},
        {"ph": 5, "cat": ["x"], "name": None, "pid": 1.0, "tid": True, "ts": "20", "dur": "2"},
        "not an event",
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    ]
    t = tracekit.load(write(tmp_path, json.dumps({"traceEvents": events})))
    assert t.kernels.select("name", "correlation", "grid_x").rows() == [("k", 12, None)]
    codes = dict(zip(t.warnings["code"], t.warnings["count"]))
    assert codes["bad_field_type"] == 1 and codes["not_an_event"] == 1
    assert "ok" in t.ops["name"].to_list()


@pytest.mark.parametrize("cut", [300, 555, 901])
def test_truncated_file_recovers_complete_events(tmp_path, cut):
    b = TraceBuilder()
    for i in range(100):
        b.op(f"op{i}", i * 100, 50, args={"Input Dims": [[i, 2], []], "Input type": ["float", "long int"]})
    full = b.text().encode()
    t = tracekit.load(write(tmp_path, full[: len(full) * cut // 1000], "crashed.json.tmp"))
    assert t.meta.recovered
    n = t.ops.height
    assert 0 < n < 100
    assert t.ops["name"].to_list() == [f"op{i}" for i in range(n)]
    msg = t.warnings.filter(pl.col("code") == "truncated")["message"].item()
    assert "recovered" in msg and "bytes" in msg


def test_truncated_gzip_stream(tmp_path):
    b = TraceBuilder()
    for i in range(2000):
        b.op(f"op{i}", i * 100, 50)
    data = gzip.compress(b.text().encode())
    t = tracekit.load(write(tmp_path, data[: len(data) // 2], "half.json.gz"))
    codes = set(t.warnings["code"])
    assert {"truncated_gzip", "truncated"} <= codes
    assert 0 < t.ops.height < 2000


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"", "empty"),
        (b"   \n  ", "empty"),
        (b"42", "expected a JSON object or array"),
        (b'{"foo": 1}', "traceEvents"),
        (b"\x00\x01\x02garbage", "expected a JSON object or array"),
        (b'{"traceEvents": {"a": 1}}', "not an array"),
    ],
)
def test_unreadable_input_raises_one_line_error(tmp_path, content, fragment):
    with pytest.raises(TraceFormatError) as info:
        tracekit.load(write(tmp_path, content))
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_missing_directory_bom_and_gzip_bomb(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        tracekit.load(tmp_path / "nope.json")
    with pytest.raises(TraceError, match="directory"):
        tracekit.load(tmp_path)
    bom = b"\xef\xbb\xbf" + json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}]}).encode()
    assert tracekit.load(write(tmp_path, bom)).ops.height == 1
    bomb = gzip.compress(b"[" + b" " * 5_000_000 + b"]")
    with pytest.raises(TraceTooLargeError):
        tracekit.load(write(tmp_path, bomb, "bomb.json.gz"), max_bytes=1_000_000)


def test_non_utf8_bytes_do_not_lose_the_trace(tmp_path):
    text = json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1},
                                       {"ph": "X", "name": "bXb", "ts": 2, "dur": 1}]}).encode()
    t = tracekit.load(write(tmp_path, text.replace(b"bXb", b"b\xffb")))
    assert t.ops.height >= 1


def test_device_properties_and_distributed_info(tmp_path):
    b = TraceBuilder(devices=[A100, {**A100, "id": 1}], extra_top={"distributedInfo": {"rank": 3, "world_size": 8}})
    t = b.load(tmp_path)
    assert t.meta.rank == 3 and t.meta.world_size == 8
    assert t.meta.devices.select("id", "num_sms", "shared_mem_per_block_optin").rows() == [(0, 108, 166912), (1, 108, 166912)]


def test_load_ranks_by_distributed_info_and_name(tmp_path):
    for rank in (1, 0):
        TraceBuilder(extra_top={"distributedInfo": {"rank": rank}}).write(tmp_path / f"host-a-{rank + 5}.json.gz")
    ranks = tracekit.load_ranks(tmp_path)
    assert list(ranks) == [0, 1]
    other = tmp_path / "byname"
    other.mkdir()
    TraceBuilder().write(other / "rank-2.json")
    TraceBuilder().write(other / "rank-2.pt.trace.json")
    with pytest.raises(tracekit.UsageError, match="rank 2 appears twice"):
        tracekit.load_ranks(other)


def test_input_is_never_modified(tmp_path):
    p = TraceBuilder().write(tmp_path / "t.json.gz")
    before = (p.read_bytes(), os.stat(p).st_mtime_ns)
    tracekit.load(p)
    assert (p.read_bytes(), os.stat(p).st_mtime_ns) == before


# -- real traces --------------------------------------------------------------------------


@pytest.mark.real
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: p.name)
def test_every_real_trace_loads(path):
    t = tracekit.load(path)
    for name, schema in SCHEMAS.items():
        assert dict(getattr(t, name).schema) == schema
    assert t.meta.event_count > 0
    slices = pl.concat([t.ops.select("ts_ns", "dur_ns", "end_ns"), t.gpu.select("ts_ns", "dur_ns", "end_ns")])
    assert slices["ts_ns"].null_count() == 0
    assert (slices["dur_ns"] >= 0).all()
    assert (slices["end_ns"] == slices["ts_ns"] + slices["dur_ns"]).all()
    for name in ("ops", "runtime", "gpu", "flows", "instants", "memory", "counters"):
        frame = getattr(t, name)  # in time order, ties in file order
        assert frame.equals(frame.sort(["ts_ns", "eid"], nulls_last=True)), name


@pytest.mark.real
def test_real_h100_trace_contents():
    t = tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz"))
    assert t.meta.devices["name"].to_list() == ["NVIDIA H100 80GB HBM3"]
    assert t.meta.base_time_ns == 1751410836000000000
    assert t.meta.profiler_flags["with_flops"] == 1
    assert t.kernels.filter(pl.col("name").str.contains("pytorch_flash::flash_fwd_kernel")).height > 0
    assert t.runtime.filter(pl.col("cat") == "cuda_driver")["name"].to_list() == ["cuLaunchKernel"]
    assert t.memory.height == 2450
    emb = t.ops.filter(pl.col("name") == "aten::embedding").row(0, named=True)
    assert emb["input_dims"] == "[[151936,1024],[16,559],[],[],[]]"
    assert json.loads(emb["input_types"]) == ["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"]


@pytest.mark.real
def test_real_ns_precision_trace_is_exact():
    t = tracekit.load(real_trace("v100_resnet_ns_timestamps.json.gz"))
    # the file writes 1712195495505582.988 for this kernel: exact to the nanosecond
    k = t.kernels.filter(pl.col("correlation") == 135071)
    assert k.select("ts_ns", "dur_ns").rows() == [(1712195495505582988, 4928)]


@pytest.mark.real
def test_real_bare_array_and_truncated():
    old = tracekit.load(real_trace("resnet50_2021_array_form.json.gz"))
    assert old.meta.format == "kineto-array" and old.kernels.height > 9000
    cut = tracekit.load(real_trace("truncated_trailing_comma.json"))
    assert cut.meta.recovered
    assert cut.ops.sort("ts_ns").select("name", "ts_ns", "dur_ns").rows() == [
        ("alpha", 0, 14000), ("beta", 1000, 12000), ("gamma", 2000, 5000), ("epsilon", 7000, 0)]


def test_trace_files_skips_capture_indexes(tmp_path):
    TraceBuilder().write(tmp_path / "a.json.gz")
    (tmp_path / "sub").mkdir()
    TraceBuilder().write(tmp_path / "sub" / "b.pt.trace.json")
    (tmp_path / "index.json").write_text('[{"variant": "sdpa", "path": "a.json.gz"}]')
    from tracekit.loader import trace_files

    assert [p.relative_to(tmp_path).as_posix() for p in trace_files(tmp_path)] == ["a.json.gz", "sub/b.pt.trace.json"]


def test_gpu_work_before_its_launch_is_noted_against_the_first_call_of_its_id():
    """Clock skew: a kernel that starts before the host call that launched it. When two calls
    share a correlation id, the earlier one is the launch."""
    b = TraceBuilder()
    b.launch_kernel("k_ok", launch_ns=1_000, launch_dur_ns=500, start_ns=2_000, dur_ns=100)
    b.launch_kernel("k_early", launch_ns=10_000, launch_dur_ns=500, start_ns=9_000, dur_ns=100)
    shared = b.runtime("cudaLaunchKernel", 20_000, 500)
    b.runtime("cudaLaunchKernel", 12_000, 500, corr=shared)  # the same id, earlier in time
    b.kernel("k_shared", 15_000, 100, corr=shared)  # after the first call (12,000): not early
    t = tracekit.loads(b.text().encode())
    row = t.warnings.filter(pl.col("code") == "gpu_before_launch").row(0, named=True)
    assert row["count"] == 1
    assert row["first_eid"] == t.gpu.filter(pl.col("name") == "k_early")["eid"].item()


def test_stable_time_sort_only_for_rows_in_file_order():
    """Rows in file order sort on time alone (stable: ties keep file order); a chunk whose
    rows are not in file order is sorted on (time, eid)."""
    from tracekit.loader.columns import Parts
    from tracekit.loader.frames import Frames, _sorted

    def part(eids, ts):
        frame = pl.DataFrame({"eid": eids, "ts_ns": ts}, schema={"eid": pl.Int64, "ts_ns": pl.Int64})
        frame = frame.with_columns(pl.lit(None, t).alias(c) for c, t in SCHEMAS["gpu"].items() if c not in frame.columns)
        return Parts(n=len(eids), frames={"gpu": frame}, stats={}, kineto=True, bad_types=0, dropped=0)

    ordered = Frames([part([0, 1, 2], [30, 10, 10]), part([0, 1], [10, None])])
    assert ordered.in_file_order("gpu")
    got = _sorted(ordered.cat("gpu"), "gpu", in_file_order=True).collect()
    assert got.select("eid", "ts_ns").rows() == [(1, 10), (2, 10), (3, 10), (0, 30), (4, None)]
    assert not Frames([part([1, 0], [5, 5])]).in_file_order("gpu")
    got = _sorted(Frames([part([1, 0], [5, 5])]).cat("gpu"), "gpu").collect()
    assert got["eid"].to_list() == [0, 1]


@pytest.mark.real
def test_info_json_on_every_real_trace_at_once(capsys):
    """`tracekit info --json` on every shared trace in one call: exit 0, a list of one object
    per file in the order given (a one-file call gives a list too)."""
    from tracekit.cli.main import main

    paths = all_real_traces()
    if not paths:
        pytest.skip("../shared/traces is absent")
    assert main(["info", "--json", "--no-cache", *map(str, paths)]) == 0
    infos = json.loads(capsys.readouterr().out)
    assert [i["file"] for i in infos] == [str(p) for p in paths]
    assert all(i["events"] > 0 and i["span"]["duration_ns"] >= 0 for i in infos)
    assert main(["info", "--json", "--no-cache", str(paths[0])]) == 0
    assert [i["file"] for i in json.loads(capsys.readouterr().out)] == [str(paths[0])]
