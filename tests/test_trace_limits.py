"""What a trace cannot show: unclosed `B` slices, a GPU side not recorded, host and GPU
clocks that disagree. Each is said (a load warning), not read as a fact about the program."""

from __future__ import annotations

import json

import polars as pl
import pytest
from builders import TraceBuilder
from click.testing import CliRunner
from conftest import real_trace

import tracekit
from tracekit.analysis.gaps import gaps
from tracekit.analysis.nesting import with_parents
from tracekit.cli.main import cli
from tracekit.findings.engine import run_findings
from tracekit.loader.clocks import LAUNCH_CALL

ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4>"


def _codes(trace: tracekit.Trace) -> dict[str, int]:
    return dict(zip(trace.warnings["code"], trace.warnings["count"]))


# -- unclosed B ---------------------------------------------------------------------------------


@pytest.mark.parametrize("native", ["1", "0"])  # the native scanner, the Python path
def test_unclosed_begin_is_closed_at_its_threads_last_end_with_its_children(tmp_path, monkeypatch, native):
    monkeypatch.setenv("TRACEKIT_NATIVE", native)
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "before", "pid": 1, "tid": 1, "ts": 0, "dur": 1},
        {"ph": "B", "cat": "cpu_op", "name": "open", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "B", "cat": "cpu_op", "name": "child_be", "pid": 1, "tid": 1, "ts": 12},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 15.5},
        {"ph": "X", "cat": "cpu_op", "name": "child_x", "pid": 1, "tid": 1, "ts": 20, "dur": 7.25},
        {"ph": "X", "cat": "cpu_op", "name": "other_thread", "pid": 1, "tid": 2, "ts": 20, "dur": 500},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = tracekit.load(path)
    rows = {r["name"]: r for r in with_parents(t.ops).iter_rows(named=True)}
    # the thread's last end: child_x's, 20 µs + 7.25 µs = 27,250 ns (tid 2's later end is not its thread's)
    assert (rows["open"]["ts_ns"], rows["open"]["dur_ns"], rows["open"]["end_ns"]) == (10_000, 17_250, 27_250)
    assert (rows["child_be"]["ts_ns"], rows["child_be"]["dur_ns"]) == (12_000, 3_500)
    assert rows["child_be"]["parent_eid"] == rows["child_x"]["parent_eid"] == 1  # both nest under `open`
    assert rows["open"]["parent_eid"] is None
    assert _codes(t) == {"unclosed_begin": 1}
    warning = t.warnings.row(0, named=True)
    assert warning["level"] == "warning" and warning["first_eid"] == 1


def test_an_end_with_nothing_open_is_dropped_and_shifts_no_later_pair(tmp_path):
    events = [{"ph": "E", "pid": 1, "tid": 1, "ts": 1},
              {"ph": "B", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 2},
              {"ph": "E", "pid": 1, "tid": 1, "ts": 5}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = tracekit.load(path)
    assert t.ops.select("name", "ts_ns", "dur_ns").rows() == [("b", 2_000, 3_000)]
    assert _codes(t) == {"unmatched_E": 1}


# -- no GPU side ---------------------------------------------------------------------------------


def _launches_only(tmp_path):
    b = TraceBuilder()
    for i in range(10):
        ext = b.op("aten::add", i * 10_000, 5_000)
        b.runtime("cudaLaunchKernel", i * 10_000 + 1_000, 3_000, ext=ext)
    b.runtime("cudaStreamSynchronize", 100_000, 3_000)  # not a launch
    return b.write(tmp_path / "nogpu.json.gz")


def test_launch_calls_without_gpu_activity_are_said_by_info_summary_and_report(tmp_path):
    path = _launches_only(tmp_path)
    t = tracekit.load(path)
    assert _codes(t) == {"no_gpu_activity": 10}
    message = t.warnings["message"][0]
    assert message.startswith("the trace has 10 launch calls but no GPU activity: the GPU side was not recorded")
    runner = CliRunner()
    for command in (["info"], ["summary"]):
        out = runner.invoke(cli, [*command, str(path), "--no-cache"])
        assert out.exit_code == 0 and message in out.output, out.output
    html = tmp_path / "r.html"
    out = runner.invoke(cli, ["report", str(path), "--no-cache", "-o", str(html)])
    assert out.exit_code == 0 and "the GPU side was not recorded" in html.read_text()


def test_the_loaders_launch_names_are_the_launch_families():
    from tracekit.analysis.launches import launch_family

    names = ["cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "hipLaunchKernel",
             "hipExtModuleLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "hipMemsetAsync",
             "cudaStreamSynchronize", "cudaEventRecord", "cudaMalloc", "cudaLaunchCooperativeKernel"]
    frame = pl.DataFrame({"name": names}).with_columns(launch_family(pl.col("name")),
                                                       loader=pl.col("name").str.contains(LAUNCH_CALL))
    assert frame["loader"].to_list() == frame["family"].is_not_null().to_list()


# -- clocks ---------------------------------------------------------------------------------------

PERIOD, OFFSET = 6_000_000, 5_000_000


def _offset_trace(tmp_path):
    """25 launches 6 ms apart, each inside a 5.9 ms `aten::add`; every kernel starts 5 ms after its
    launch call starts and runs 5 µs, so the GPU is idle through every wait."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 25 * PERIOD)
    for i in range(25):
        t0 = i * PERIOD
        ext = b.op("aten::add", t0, 5_900_000)
        b.launch_kernel(ELEMENTWISE, launch_ns=t0 + 5_890_000, launch_dur_ns=5_000,
                        start_ns=t0 + 5_890_000 + OFFSET, dur_ns=5_000, ext=ext)
    return b.load(tmp_path, "offset.json.gz")


def test_milliseconds_of_latency_on_an_idle_gpu_are_a_clock_offset_not_launch_overhead(tmp_path):
    t = _offset_trace(tmp_path)
    assert _codes(t) == {"clock_offset": 25}
    message = t.warnings["message"][0]
    assert "median launch latency (GPU start - call start, over 25 launches) is 5 ms" in message
    assert "GPU was busy 0% of those waits" in message
    result = run_findings(t)
    fired = {f.rule for f in result.findings}
    assert {"launch_bound", "host_bound_path"} <= set(result.ran) and not result.errors
    assert not fired & {"launch_bound", "host_bound_path"}, fired
    causes = gaps(t).gaps.filter(pl.col("scope") == "device")["cause"].cast(pl.String)
    assert "launch_bound" not in causes.to_list() and "cpu_work" not in causes.to_list()
    assert (causes == "other").sum() == 24  # the 24 gaps between the kernels


def test_a_deep_queue_is_no_clock_offset(tmp_path):
    """Every launch waits 6 ms, behind work already queued when the capture began: the GPU is busy
    through the waits, so the latency is real."""
    b = TraceBuilder()
    b.kernel("void launched_before_the_capture", 0, 6_000_000)
    for i in range(10):
        ext = b.op("aten::add", i * 100_000, 10_000)
        b.launch_kernel(ELEMENTWISE, launch_ns=i * 100_000 + 1_000, launch_dur_ns=4_000,
                        start_ns=6_000_000 + i * 100_000, dur_ns=100_000, ext=ext)
    t = b.load(tmp_path, "deep.json.gz")
    assert "clock_offset" not in _codes(t)


@pytest.mark.parametrize("name", ["a100_alexnet_cuda_sync.json.gz", "a100_dlrm_6streams_rank0.json.gz",
                                  "mi250_toy_train_rocm62.json.gz", "sampled_128rank_job/rank-0.json.gz",
                                  "diff_test_v100_dlrm.json.gz", "resnet50_2021_array_form.json.gz"])
def test_real_traces_with_long_waits_have_no_clock_offset(name):
    """Their quickest launches start within microseconds of their calls (2-20 µs, from the raw JSON),
    though the median wait is milliseconds on all but two (real queues, or waits on other ranks)."""
    t = tracekit.load(real_trace(name))
    assert not {"clock_offset", "no_gpu_activity", "unclosed_begin"} & set(_codes(t))
