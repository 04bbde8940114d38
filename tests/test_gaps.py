"""Idle gaps: a golden trace with one gap of every cause (exact ns), blame, thresholds,
the identity "causes sum to idle" on random traces, the CLI, and every real trace."""

from __future__ import annotations

import json

import polars as pl
import pytest
from builders import TraceBuilder
from click.testing import CliRunner
from conftest import SHARED_TRACES, all_real_traces
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit
from tracekit.analysis import gaps as gaps_module
from tracekit.analysis.gaps import CAUSES, GAP_SCHEMA, gaps
from tracekit.analysis.timeline import timeline
from tracekit.analysis.windows import steps, window_bounds
from tracekit.cli.main import cli, main
from tracekit.model import GPU_WORK_CATS, TEXT, Trace


def golden_builder() -> TraceBuilder:
    """One thread; step [0, 200) µs; kernels K1..K9 (stream 7 except K6 on stream 8).

    device gaps: [0,20) before_first, [30,46) launch_bound, [50,90) cpu_work,
    [95,104) sync_stall, [108,121) profiler_overhead, [145,145.5) short, [150,160) other,
    [170,200) after_last; stream 7 also waits [125,140) on stream 8 (cross_stream_wait).
    """
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 200_000)
    ext = b.op("aten::mm", 2_000, 10_000)
    b.launch_kernel("K1", launch_ns=5_000, launch_dur_ns=5_000, start_ns=20_000, dur_ns=10_000, ext=ext)
    # launch-bound: the CPU is inside attn > Linear_0 > aten::linear > aten::add until 44 µs
    b.annotation("attn", 22_000, 25_000)
    b.op("nn.Module: Linear_0", 23_000, 23_000, cat="python_function")
    b.op("aten::linear", 24_000, 21_500)
    ext = b.op("aten::add", 25_000, 20_000)
    b.launch_kernel("K2", launch_ns=40_000, launch_dur_ns=4_000, start_ns=46_000, dur_ns=4_000, ext=ext)
    # cpu work: aten::sort launches nothing for 31 µs
    b.op("aten::sort", 49_000, 31_000)
    ext = b.op("aten::relu", 82_000, 8_000)
    b.launch_kernel("K3", launch_ns=85_000, launch_dur_ns=3_000, start_ns=90_000, dur_ns=5_000, ext=ext)
    # sync stall: cudaDeviceSynchronize [91, 96) drains the queue
    b.runtime("cudaDeviceSynchronize", 91_000, 5_000)
    ext = b.op("aten::mul", 97_000, 6_000)
    b.launch_kernel("K4", launch_ns=99_000, launch_dur_ns=3_000, start_ns=104_000, dur_ns=4_000, ext=ext)
    # profiler overhead [108.5, 118) on pid -1
    b.raw({"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0,
           "ts": 108.5, "dur": 9.5})
    ext = b.op("aten::sub", 118_500, 2_500)
    b.launch_kernel("K5", launch_ns=119_000, launch_dur_ns=1_000, start_ns=121_000, dur_ns=4_000, ext=ext)
    # cross-stream wait: K7 is queued at 125 µs on stream 7 but waits for K6 on stream 8
    ext = b.op("aten::bmm", 121_500, 2_000)
    b.launch_kernel("K6", launch_ns=122_000, launch_dur_ns=1_000, start_ns=125_000, dur_ns=15_000, ext=ext,
                    stream=8)
    ext = b.op("aten::add_", 123_600, 1_900)
    b.launch_kernel("K7", launch_ns=124_000, launch_dur_ns=1_000, start_ns=140_000, dur_ns=5_000, ext=ext)
    # a 500 ns gap: short
    ext = b.op("aten::neg", 140_500, 2_000)
    b.launch_kernel("K8", launch_ns=141_000, launch_dur_ns=1_000, start_ns=145_500, dur_ns=4_500, ext=ext)
    # queued early, started late with nothing else running: other
    ext = b.op("aten::abs", 142_600, 1_900)
    b.launch_kernel("K9", launch_ns=143_000, launch_dur_ns=1_000, start_ns=160_000, dur_ns=10_000, ext=ext)
    return b


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Trace:
    return golden_builder().load(tmp_path_factory.mktemp("gaps"))


def _rows(result, scope: str, stream: int | None = None) -> list[tuple]:
    f = result.gaps.filter(pl.col("scope") == scope)
    if stream is not None:
        f = f.filter(pl.col("stream") == stream)
    return f.sort("start_ns").select("start_ns", "gap_ns", "cause").rows()


def test_device_gaps_in_step_window(golden: Trace) -> None:
    result = gaps(golden, windows=window_bounds(golden, "ProfilerStep"))
    assert _rows(result, "device") == [
        (0, 20_000, "before_first"), (30_000, 16_000, "launch_bound"), (50_000, 40_000, "cpu_work"),
        (95_000, 9_000, "sync_stall"), (108_000, 13_000, "profiler_overhead"), (145_000, 500, "short"),
        (150_000, 10_000, "other"), (170_000, 30_000, "after_last"),
    ]
    tl = timeline(golden, windows=window_bounds(golden, "ProfilerStep"))
    assert result.idle_ns == 138_500 == tl.idle_ns
    assert result.by_cause == {
        "launch_bound": 16_000, "cpu_work": 40_000, "sync_stall": 9_000, "cross_stream_wait": 0,
        "profiler_overhead": 13_000, "before_first": 20_000, "after_last": 30_000, "other": 10_000,
        "short": 500,
    }
    assert result.gaps.schema == pl.Schema(GAP_SCHEMA)
    # the text as codes (`model.TEXT`), read back as text
    text = [c for c, t in GAP_SCHEMA.items() if t == TEXT]
    assert text == ["scope", "window_name", "position", "cause", "next_name", "launch_name", "launch_pid",
                    "launch_tid", "next_op", "blame_op", "annotation", "module"]
    first = result.gaps.filter(pl.col("cause") == "launch_bound").row(0, named=True)
    assert {c: first[c] for c in ("scope", "window_name", "position", "cause")} == {
        "scope": "device", "window_name": "ProfilerStep#1", "position": "between", "cause": "launch_bound"}
    assert result.totals.schema["cause"] == pl.String


def test_stream_gaps_see_cross_stream_waits(golden: Trace) -> None:
    result = gaps(golden, windows=window_bounds(golden, "ProfilerStep#1"))
    assert _rows(result, "stream", 7) == [
        (0, 20_000, "before_first"), (30_000, 16_000, "launch_bound"), (50_000, 40_000, "cpu_work"),
        (95_000, 9_000, "sync_stall"), (108_000, 13_000, "profiler_overhead"),
        (125_000, 15_000, "cross_stream_wait"), (145_000, 500, "short"), (150_000, 10_000, "other"),
        (170_000, 30_000, "after_last"),
    ]
    assert _rows(result, "stream", 8) == [(0, 125_000, "before_first"), (140_000, 60_000, "after_last")]
    wait = result.gaps.filter(pl.col("cause") == "cross_stream_wait").row(0, named=True)
    assert (wait["late_ns"], wait["other_busy_ns"], wait["next_name"]) == (0, 15_000, "K7")


def test_device_span_window_has_no_edge_gaps(golden: Trace) -> None:
    result = gaps(golden)
    assert _rows(result, "device") == [
        (30_000, 16_000, "launch_bound"), (50_000, 40_000, "cpu_work"), (95_000, 9_000, "sync_stall"),
        (108_000, 13_000, "profiler_overhead"), (145_000, 500, "short"), (150_000, 10_000, "other"),
    ]
    assert result.idle_ns == 88_500 == timeline(golden).idle_ns
    # streams are measured in their device's window: stream 8 idles before and after K6
    assert _rows(result, "stream", 8) == [(20_000, 105_000, "before_first"), (140_000, 30_000, "after_last")]


def test_rows_in_order_ties_by_window(tmp_path) -> None:
    """Gaps of two overlapping windows that open at the same moment: the rows come by scope,
    device, stream and start, and equal starts by window (the earlier event first)."""
    b = golden_builder()
    b.annotation("w", 0, 100_000)  # after ProfilerStep#1 in the file: the higher eid
    trace = b.load(tmp_path)
    result = gaps(trace, windows=window_bounds(trace, "^(ProfilerStep#1|w)$"))
    device = result.gaps.filter(pl.col("scope") == "device")
    step, w = "ProfilerStep#1", "w"
    assert device.select("start_ns", "window_name", "cause").rows() == [
        (0, step, "before_first"), (0, w, "before_first"), (30_000, step, "launch_bound"),
        (30_000, w, "launch_bound"), (50_000, step, "cpu_work"), (50_000, w, "cpu_work"),
        (95_000, step, "sync_stall"), (95_000, w, "after_last"), (108_000, step, "profiler_overhead"),
        (145_000, step, "short"), (150_000, step, "other"), (170_000, step, "after_last"),
    ]
    assert result.gaps["scope"].to_list() == ["device"] * 12 + ["stream"] * (result.gaps.height - 12)
    streams = result.gaps.filter(pl.col("scope") == "stream")
    assert streams.select("stream", "start_ns", "window_name").rows()[:4] == [
        (7, 0, step), (7, 0, w), (7, 30_000, step), (7, 30_000, w)]
    assert streams.equals(streams.sort("stream", "start_ns", "window_eid"))


def test_totals_in_one_order_equal_totals_by_cause() -> None:
    """Causes with equal totals in one group come by name, whatever order the gaps are in."""
    from tracekit.analysis.gaps import _totals

    rows = [("stream", 0, "ProfilerStep#1", 0, 7, cause, 5_000) for cause in ("other", "cpu_work", "short", "launch_bound")]
    rows += [("stream", 0, "ProfilerStep#1", 0, 7, "sync_stall", 9_000), ("device", 0, "ProfilerStep#1", 0, None, "other", 1)]
    cols = ["scope", "window_eid", "window_name", "device", "stream", "cause", "gap_ns"]
    gaps_ = pl.DataFrame(rows, schema={c: GAP_SCHEMA[c] for c in cols}, orient="row")
    expected = [("device", None, "other", 1), ("stream", 7, "sync_stall", 9_000), ("stream", 7, "cpu_work", 5_000),
                ("stream", 7, "launch_bound", 5_000), ("stream", 7, "other", 5_000), ("stream", 7, "short", 5_000)]
    for seed in range(8):
        totals = _totals(gaps_.sample(fraction=1.0, shuffle=True, seed=seed))
        assert totals.select("scope", "stream", "cause", "total_ns").rows() == expected


def test_evidence_and_blame(golden: Trace) -> None:
    g = gaps(golden).gaps.filter(pl.col("scope") == "device")
    by_start = {r["start_ns"]: r for r in g.to_dicts()}
    launch = by_start[30_000]
    assert (launch["late_ns"], launch["launch_path_ns"], launch["sync_ns"]) == (14_000, 14_000, 0)
    blame = (launch["blame_op"], launch["annotation"], launch["module"])
    assert blame == ("aten::add", "attn", "nn.Module: Linear_0")
    assert (launch["next_name"], launch["launch_name"], launch["next_op"]) == ("K2", "cudaLaunchKernel",
                                                                               "aten::add")
    cpu = by_start[50_000]
    assert (cpu["late_ns"], cpu["launch_path_ns"]) == (38_000, 6_000)
    assert (cpu["blame_op"], cpu["annotation"], cpu["module"]) == ("aten::sort", "ProfilerStep#1", None)
    sync = by_start[95_000]
    assert (sync["late_ns"], sync["sync_ns"], sync["blame_op"]) == (7_000, 5_000, None)
    assert by_start[108_000]["overhead_ns"] == 9_500
    assert by_start[150_000]["late_ns"] == 0


def test_threshold_moves_gaps_to_short(golden: Trace) -> None:
    result = gaps(golden, min_gap_ns=10_000)
    assert result.by_cause["short"] == 9_500 and result.by_cause["sync_stall"] == 0
    assert result.by_cause["other"] == 10_000  # 10 µs is not below 10 µs
    assert sum(result.by_cause.values()) == result.idle_ns == 88_500


def test_item_is_a_blocking_call(tmp_path) -> None:
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 3_000)
    b.launch_kernel("K1", launch_ns=1_000, launch_dur_ns=1_000, start_ns=2_000, dur_ns=18_000, ext=ext)
    b.op("aten::item", 5_000, 17_000)
    ext = b.op("aten::add", 24_000, 4_000)
    b.launch_kernel("K2", launch_ns=25_000, launch_dur_ns=2_000, start_ns=28_000, dur_ns=2_000, ext=ext)
    gap = gaps(b.load(tmp_path)).gaps.filter(pl.col("scope") == "device").row(0, named=True)
    assert (gap["start_ns"], gap["gap_ns"], gap["cause"], gap["sync_ns"], gap["blame_op"]) == (
        20_000, 8_000, "sync_stall", 17_000, "aten::item")


def test_empty_and_gpu_less_traces() -> None:
    result = gaps(Trace.empty())
    assert result.gaps.is_empty() and result.gaps.schema == pl.Schema(GAP_SCHEMA)
    assert result.idle_ns == 0 and set(result.by_cause) == set(CAUSES)
    assert result.to_dict()["longest"] == []


# -- the identity on random traces ------------------------------------------------------------

events = st.lists(
    st.tuples(st.integers(0, 1), st.integers(7, 9), st.integers(0, 50_000), st.integers(0, 5_000),
              st.integers(0, 60_000), st.booleans()),
    min_size=1, max_size=25)


@settings(max_examples=20, deadline=None)
@given(events, st.integers(0, 3_000))
def test_causes_sum_to_idle(tmp_path_factory, rows, min_gap_ns) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 40_000)
    for device, stream, start, dur, launch, linked in rows:
        if linked:
            ext = b.op("aten::op", max(0, launch - 500), 2_000)
            b.launch_kernel("k", launch_ns=launch, launch_dur_ns=800, start_ns=start, dur_ns=dur, ext=ext,
                            device=device, stream=stream)
        else:
            b.kernel("k", start, dur, device=device, stream=stream)
    b.runtime("cudaDeviceSynchronize", 10_000, 7_000)
    trace = b.load(tmp_path_factory.mktemp("h"))
    for windows in (None, window_bounds(trace, "ProfilerStep")):
        result = gaps(trace, min_gap_ns=min_gap_ns, windows=windows)
        tl = timeline(trace, windows=windows)
        assert sum(result.by_cause.values()) == result.idle_ns == tl.idle_ns
        _check_streams(result, tl)
        assert _each_gap_alone(trace, min_gap_ns=min_gap_ns, windows=windows).gaps.equals(result.gaps)


def _each_gap_alone(trace: Trace, **options):
    """`gaps` with the evidence and blame looked up for every row, none shared between a
    stream's gap and its device's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gaps_module, "_distinct", lambda found: (found, None))
        return gaps(trace, **options)


def test_a_stream_gap_that_is_its_device_gap_is_looked_into_once(tmp_path, monkeypatch) -> None:
    """One stream: each gap is its device's and its stream's, and the evidence is found once
    for the two rows; with a second stream busy in some gaps, only those differ."""
    b = TraceBuilder()
    for i in range(4):
        ext = b.op("aten::op", i * 10_000, 2_000)
        b.launch_kernel("k", launch_ns=i * 10_000 + 500, launch_dur_ns=800, start_ns=i * 10_000 + 3_000,
                        dur_ns=4_000, ext=ext, stream=7)
    one = b.load(tmp_path, "one.json.gz")
    b.kernel("other", 17_500, 1_000, stream=8)  # inside the second gap of stream 7
    two = b.load(tmp_path, "two.json.gz")
    seen = []
    evidence = gaps_module._evidence
    monkeypatch.setattr(gaps_module, "_evidence", lambda found, *a: seen.append(found.height) or evidence(found, *a))
    # two streams: the device's 4 gaps, stream 7's second gap (which stream 8 splits on the
    # device) and stream 8's 2 (from the device's first work to its own, and after it)
    for trace, device_gaps, looked_into in ((one, 3, 3), (two, 4, 4 + 1 + 2)):
        result = gaps(trace, min_gap_ns=0)
        dev = result.gaps.filter(pl.col("scope") == "device")
        assert dev.height == device_gaps and seen[-1] == looked_into
        assert result.gaps.equals(_each_gap_alone(trace, min_gap_ns=0).gaps)
    # the one stream's gaps are its device's, row for row, but for what says which they are
    same = ["start_ns", "end_ns", "cause", "late_ns", "sync_ns", "launch_path_ns", "next_eid", "blame_op"]
    result = gaps(one, min_gap_ns=0)
    assert result.gaps.filter(pl.col("scope") == "stream").select(same).equals(
        result.gaps.filter(pl.col("scope") == "device").select(same))


def test_gaps_that_share_a_hash_are_told_apart(tmp_path, monkeypatch) -> None:
    """The gaps are told apart by one hash of what makes two the same gap, checked: when
    different gaps share it (here every gap: the hash made constant), the result is the same."""
    b = TraceBuilder()
    for i in range(4):
        ext = b.op("aten::op", i * 10_000, 2_000)
        b.launch_kernel("k", launch_ns=i * 10_000 + 500, launch_dur_ns=800, start_ns=i * 10_000 + 3_000,
                        dur_ns=4_000, ext=ext, stream=7)
    b.kernel("other", 17_500, 1_000, stream=8)
    trace = b.load(tmp_path)
    seen = []
    evidence = gaps_module._evidence
    monkeypatch.setattr(gaps_module, "_evidence", lambda found, *a: seen.append(found.height) or evidence(found, *a))
    hashed = gaps(trace, min_gap_ns=0)
    monkeypatch.setattr(gaps_module, "_same_gap_hash", lambda found: pl.Series("h", [0] * found.height, dtype=pl.UInt64))
    collided = gaps(trace, min_gap_ns=0)
    assert collided.gaps.equals(hashed.gaps) and collided.totals.equals(hashed.totals)
    assert seen == [7, 7] and hashed.gaps.height == 9  # 9 gaps, 7 distinct, either way


def _check_streams(result, tl) -> None:
    per = result.gaps.filter(pl.col("scope") == "stream").group_by("window_eid", "device", "stream").agg(
        pl.col("gap_ns").sum())
    check = tl.streams.join(per, on=["window_eid", "device", "stream"], how="left", nulls_equal=True)
    assert (check["gap_ns"].fill_null(0) == check["idle_ns"]).all()


# -- CLI --------------------------------------------------------------------------------------

def test_cli_gaps_json_and_text(tmp_path) -> None:
    path = golden_builder().write(tmp_path / "golden.json")
    runner = CliRunner()
    out = runner.invoke(cli, ["gaps", str(path), "--window", "ProfilerStep", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["idle_ns"] == 138_500 and data["by_cause"]["sync_stall"] == 9_000
    assert data["longest"][0]["cause"] == "cpu_work" and data["longest"][0]["blame_op"] == "aten::sort"
    text = runner.invoke(cli, ["gaps", str(path), "--min-gap-us", "10"])
    assert text.exit_code == 0 and "cpu_work" in text.output and "aten::sort" in text.output
    assert main(["gaps", str(path), "--window", "NoSuchRange"]) == 2


def test_cli_summary_on_golden(tmp_path) -> None:
    path = golden_builder().write(tmp_path / "golden.json")
    out = CliRunner().invoke(cli, ["summary", str(path), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["timeline"]["busy_ns"] == 61_500 and data["timeline"]["span_ns"] == 150_000
    assert data["steps"]["steps"] == 1 and data["gaps"]["by_cause"]["launch_bound"] == 16_000
    assert data["kernels"] and data["ops"]
    text = CliRunner().invoke(cli, ["summary", str(path)])
    assert text.exit_code == 0 and "launch_bound" in text.output and "ProfilerStep#1" in text.output


# -- real traces --------------------------------------------------------------------------------

def _union_by_hand(pairs: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) pairs, in plain Python over sorted intervals."""
    total, cur_start, cur_end = 0, 0, None
    for start, end in sorted(pairs):
        end = max(start, end)
        if cur_end is None or start > cur_end:
            total += 0 if cur_end is None else cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return total + (0 if cur_end is None else cur_end - cur_start)


@pytest.mark.real
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: str(p.relative_to(SHARED_TRACES)))
def test_real_trace(path, monkeypatch) -> None:
    """`tracekit summary --json` runs, and its figures hold: busy = an independent union, the
    breakdown sums to the span, idle causes sum to the idle time (devices and streams)."""
    trace = tracekit.load(path)
    monkeypatch.setattr("tracekit.cli.common.load_trace", lambda path, **_: trace)  # load once (the command's `Loading`)
    out = CliRunner().invoke(cli, ["summary", str(path), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)  # (stderr says the truncated one was recovered)
    tl, bd, g = data["timeline"], data["breakdown"], data["gaps"]
    work = trace.gpu.filter(pl.col("cat").is_in(GPU_WORK_CATS))
    busy = {d["device"]: d["busy_ns"] for d in tl["devices"]}
    for device in work["device"].unique().to_list():
        pairs = work.filter(pl.col("device") == device).select("ts_ns", "end_ns").rows()
        assert busy[device] == _union_by_hand(pairs)
    for d in bd["devices"]:
        assert d["compute_ns"] + d["communication_ns"] + d["memory_ns"] + d["idle_ns"] == d["span_ns"]
    assert bd["span_ns"] == tl["span_ns"]
    assert sum(g["by_cause"].values()) == g["idle_ns"] == tl["idle_ns"]
    per_stream: dict[tuple, int] = {}
    for row in g["totals"]:
        if row["scope"] == "stream":
            key = (row["device"], row["stream"])
            per_stream[key] = per_stream.get(key, 0) + row["total_ns"]
    assert per_stream == {(s["device"], s["stream"]): s["idle_ns"] for s in tl["streams"] if s["idle_ns"]}
    cpu_steps = trace.ops.filter(pl.col("name").str.contains(r"^ProfilerStep#\d+$"))
    assert data["steps"]["steps"] == steps(trace).height == cpu_steps.height  # no GPU twin, last kept


def test_item_waiting_for_the_stream_is_a_sync_stall_a_later_blocking_launch_is_not(tmp_path):
    """`.item()` (aten::_local_scalar_dense) was already blocked when the GPU went idle: its
    copy's gap is a sync stall. A blocking copy called only long after the GPU went idle
    launched the next work and stalled nothing before it: that gap is the CPU's."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 200_000)
    ext = b.op("aten::mm", 1_000, 5_000)
    b.launch_kernel("K1", launch_ns=2_000, launch_dur_ns=3_000, start_ns=6_000, dur_ns=44_000, ext=ext)
    ext = b.op("aten::_local_scalar_dense", 10_000, 45_000)  # blocked from +10,000 until its copy is done
    b.launch_copy("DtoH (Device -> Pageable)", ext=ext, launch_ns=12_000, launch_dur_ns=42_500, start_ns=52_000,
                  dur_ns=2_000, nbytes=4)
    ext = b.op("aten::add", 56_000, 2_000)
    b.launch_kernel("K2", launch_ns=56_500, launch_dur_ns=1_000, start_ns=60_000, dur_ns=10_000, ext=ext)
    b.op("aten::sort", 60_500, 39_500)  # CPU work until +100,000, then a blocking copy
    ext = b.op("aten::copy_", 100_500, 20_000)
    b.launch_copy("HtoD (Pageable -> Device)", ext=ext, launch_ns=101_000, launch_dur_ns=19_000, start_ns=104_000,
                  dur_ns=10_000, nbytes=1 << 20, api="cudaMemcpy")
    dev = gaps(b.load(tmp_path)).gaps.filter(pl.col("scope") == "device").sort("start_ns")
    assert dev.select("start_ns", "gap_ns", "cause", "sync_ns", "launch_path_ns").rows() == [
        (50_000, 2_000, "sync_stall", 45_000, 2_000),  # the whole _local_scalar_dense
        # it still held the CPU when this gap opened; launch path: its last 1,000 and aten::add's 1,500
        (54_000, 6_000, "sync_stall", 45_000, 1_000 + 1_500),
        # cudaMemcpy began at +101,000, 31 us into the gap: aten::sort ran before it. Counting
        # the copy call itself (19,000 >= half of the 34,000 late) made this a sync stall.
        (70_000, 34_000, "cpu_work", 0, 104_000 - 100_500),
    ]


def test_an_async_copy_to_pageable_memory_blocks_like_a_sync(tmp_path):
    """cudaMemcpyAsync to pageable host memory returns only once its copy is done: the gap
    after it is the sync's (without that, the CPU's 5.5 us lateness would make it launch-bound)."""
    def device_gaps(kind: str) -> pl.DataFrame:
        b = TraceBuilder()
        ext = b.op("aten::mm", 1_000, 5_000)
        b.launch_kernel("K1", launch_ns=2_000, launch_dur_ns=3_000, start_ns=6_000, dur_ns=44_000, ext=ext)
        ext = b.op("aten::to", 10_000, 46_000)
        b.launch_copy(kind, ext=ext, launch_ns=12_000, launch_dur_ns=42_500, start_ns=50_000,
                      dur_ns=2_000, nbytes=1 << 20)  # cudaMemcpyAsync, CPU [12,000, 54,500]
        ext = b.op("aten::add", 56_000, 2_000)
        b.launch_kernel("K2", launch_ns=56_500, launch_dur_ns=1_000, start_ns=60_000, dur_ns=10_000, ext=ext)
        folder = tmp_path / kind.split()[-1].rstrip(")")
        folder.mkdir()
        return gaps(b.load(folder)).gaps.filter(pl.col("scope") == "device")

    assert device_gaps("DtoH (Device -> Pageable)").select("start_ns", "gap_ns", "late_ns", "cause", "sync_ns").rows() == [
        (52_000, 8_000, 5_500, "sync_stall", 42_500)]
    # the same times with pinned memory: not a blocking call, the CPU was late
    row = device_gaps("DtoH (Device -> Pinned)").row(0, named=True)
    assert (row["cause"], row["sync_ns"]) == ("launch_bound", 0)
