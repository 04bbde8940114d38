"""GPU timeline, interval helpers and the temporal breakdown: golden traces with hand-computed
answers (exact ns), properties over random interval sets, and every real trace."""

from __future__ import annotations

import polars as pl
import pytest
from builders import TraceBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analysis import intervals
from tracekit.analysis.breakdown import BREAKDOWN_SCHEMA, breakdown
from tracekit.analysis.timeline import DEVICE_SCHEMA, STREAM_SCHEMA, timeline
from tracekit.analysis.windows import window_bounds
from tracekit.model import GPU_SCHEMA, GPU_WORK_CATS, TEXT, Trace


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory) -> Trace:
    """Device 0: K1 [10,30) µs s7, K3 [20,40) s8, K2 [50,60) s7, memcpy [55,70) s8, plus a
    cuda_sync and a GPU annotation that must not count; device 1: one kernel [5,6) µs."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 45_000, gpu=True)
    b.annotation("ProfilerStep#2", 45_000, 55_000, gpu=True)
    b.kernel("K1", 10_000, 20_000, stream=7)
    b.kernel("K3", 20_000, 20_000, stream=8)
    b.kernel("K2", 50_000, 10_000, stream=7)
    b.gpu("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 55_000, 15_000, corr=None, stream=8)
    b.sync("Context Sync", 60_000, 30_000, stream=7)
    b.kernel("K4", 5_000, 1_000, device=1, stream=3)
    b.raw({"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0,
           "ts": 0, "dur": 100})
    return b.load(tmp_path_factory.mktemp("tl"))


def test_device_busy_span_idle(two_streams: Trace) -> None:
    tl = timeline(two_streams)
    rows = {r["device"]: r for r in tl.devices.to_dicts()}
    assert rows[0]["start_ns"] == 10_000 and rows[0]["end_ns"] == 70_000
    assert (rows[0]["span_ns"], rows[0]["busy_ns"], rows[0]["idle_ns"]) == (60_000, 50_000, 10_000)
    assert rows[0]["utilisation"] == pytest.approx(50 / 60)
    assert rows[0]["activities"] == 4 and rows[0]["streams"] == 2
    assert (rows[1]["span_ns"], rows[1]["busy_ns"], rows[1]["idle_ns"]) == (1_000, 1_000, 0)
    assert (tl.span_ns, tl.busy_ns, tl.idle_ns) == (61_000, 51_000, 10_000)
    assert tl.devices.schema == pl.Schema(DEVICE_SCHEMA)
    merged = tl.busy.filter(pl.col("device") == 0).select("start_ns", "end_ns").rows()
    assert merged == [(10_000, 40_000), (50_000, 70_000)]


def test_stream_busy_in_device_window(two_streams: Trace) -> None:
    rows = timeline(two_streams).streams.filter(pl.col("device") == 0).select(
        "stream", "span_ns", "busy_ns", "idle_ns", "activities").rows()
    assert rows == [(7, 60_000, 30_000, 30_000, 2), (8, 60_000, 35_000, 25_000, 2)]


def test_windows_clip_work_and_count_empty_devices(two_streams: Trace) -> None:
    tl = timeline(two_streams, windows=window_bounds(two_streams, "ProfilerStep"))
    rows = tl.devices.select("window_name", "device", "span_ns", "busy_ns", "idle_ns", "activities").rows()
    assert rows == [
        ("ProfilerStep#1", 0, 45_000, 30_000, 15_000, 2),
        ("ProfilerStep#2", 0, 55_000, 20_000, 35_000, 2),
        ("ProfilerStep#1", 1, 45_000, 1_000, 44_000, 1),
        ("ProfilerStep#2", 1, 55_000, 0, 55_000, 0),
    ]
    assert tl.span_ns == 200_000 and tl.busy_ns == 51_000


def test_breakdown_priority_and_overlap(tmp_path) -> None:
    b = TraceBuilder()
    b.kernel("gemm_C1", 0, 10_000, stream=7)
    b.kernel("elementwise_C2", 8_000, 4_000, stream=11)
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 5_000, 15_000, stream=9)
    b.gpu("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 15_000, 15_000, corr=None, stream=10)
    b.gpu("gpu_memset", "Memset (Device)", 40_000, 2_000, corr=None, stream=10)
    b.kernel("hipLaunchKernel_fused_rmsnorm", 45_000, 5_000, stream=7)  # compute, not communication
    bd = breakdown(b.load(tmp_path))
    assert (bd.span_ns, bd.compute_ns, bd.communication_ns, bd.memory_ns, bd.idle_ns) == (
        50_000, 17_000, 8_000, 12_000, 13_000)
    assert bd.communication_total_ns == 15_000 and bd.overlap_ns == 7_000
    assert bd.overlap_share == pytest.approx(7 / 15)
    assert bd.devices.schema == pl.Schema(BREAKDOWN_SCHEMA)


def test_breakdown_without_communication_has_no_share(two_streams: Trace) -> None:
    bd = breakdown(two_streams)
    assert bd.overlap_share is None and bd.communication_ns == 0
    assert bd.compute_ns + bd.memory_ns + bd.idle_ns == bd.span_ns == 61_000
    assert bd.to_dict()["shares"]["idle"] == pytest.approx(10 / 61)


def test_empty_trace_gives_typed_empty_frames() -> None:
    tl = timeline(Trace.empty())
    assert tl.devices.is_empty() and tl.devices.schema == pl.Schema(DEVICE_SCHEMA)
    assert tl.streams.schema == pl.Schema(STREAM_SCHEMA)
    assert (tl.span_ns, tl.busy_ns, tl.utilisation) == (0, 0, None)
    bd = breakdown(Trace.empty())
    assert bd.devices.is_empty() and bd.span_ns == 0 and bd.overlap_share is None
    assert timeline(Trace.empty(), windows=window_bounds(Trace.empty(), "ProfilerStep")).devices.is_empty()


# -- interval helpers -----------------------------------------------------------------------

def test_union_gaps_and_positions() -> None:
    f = pl.DataFrame({"d": [0, 0, 0, 1, 1], "ts_ns": [0, 5, 20, 3, 3], "end_ns": [10, 8, 30, 4, 9]})
    assert intervals.union(f, by=["d"]).rows() == [(0, 0, 10), (0, 20, 30), (1, 3, 9)]
    assert intervals.union_ns(f, by=["d"]).rows() == [(0, 20), (1, 6)]
    assert intervals.total_union_ns(f) == 20  # [0, 10) and [20, 30) once devices merge
    bounds = pl.DataFrame({"d": [0, 1, 2], "window_start_ns": [-5, 0, 0], "window_end_ns": [40, 5, 10]})
    got = intervals.gaps(f, bounds, by=["d"]).select("d", "start_ns", "end_ns", "position").rows()
    assert got == [(0, -5, 0, "before_first"), (0, 10, 20, "between"), (0, 30, 40, "after_last"),
                   (1, 0, 3, "before_first"), (2, 0, 10, "empty")]


def _c_then_reference():
    """Runs the loop's body twice: with the C passes, then with their Polars references alone."""
    for c_passes in ("1", "0"):
        with pytest.MonkeyPatch.context() as m:
            m.setenv("TRACEKIT_NATIVE", c_passes)
            yield


def test_clip_and_cover() -> None:
    f = pl.DataFrame({"ts_ns": [0, 5, 20, 24], "end_ns": [10, 8, 30, 24]})
    assert intervals.clip_to_window(f, 4, 25).rows() == [(4, 10), (5, 8), (20, 25), (24, 24)]
    w = pl.DataFrame({"window_eid": [1, 2], "window_start_ns": [0, 6], "window_end_ns": [6, 100]})
    assert sorted(intervals.clip_to_windows(f, w).select("window_eid", "ts_ns", "end_ns").rows()) == [
        (1, 0, 6), (1, 5, 6), (2, 6, 8), (2, 6, 10), (2, 20, 30), (2, 24, 24)]
    # query 4 lies in the run [20, 30) (the zero-length interval at 24 inside it adds nothing);
    # 5 has no end (left out); 6 meets only an interval with no end: zero-length at 40 (a row, 0)
    q = pl.DataFrame({"qid": [1, 2, 3, 4, 5], "q_start_ns": [0, 12, 7, 24, 0], "q_end_ns": [25, 15, 7, 26, None]})
    f = f.vstack(pl.DataFrame({"ts_ns": [40], "end_ns": [None]}, schema=f.schema))  # no end: zero-length at 40
    q = q.vstack(pl.DataFrame({"qid": [6], "q_start_ns": [39], "q_end_ns": [41]}))
    for _ in _c_then_reference():
        assert intervals.covered_ns(q, f).sort("qid").rows() == [(1, 15), (4, 2), (6, 0)]
        assert intervals.covered_ns(q, f, whole=True).sort("qid").rows() == [(1, 20), (4, 10), (6, 0)]


intervals_st = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10_000), st.integers(0, 3_000)),
                        min_size=0, max_size=40)


def _frame(rows: list[tuple[int, int, int]]) -> pl.DataFrame:
    data = {"d": [r[0] for r in rows], "ts_ns": [r[1] for r in rows], "end_ns": [r[1] + r[2] for r in rows]}
    return pl.DataFrame(data, schema={"d": pl.Int64, "ts_ns": pl.Int64, "end_ns": pl.Int64})


@settings(max_examples=80, deadline=None)
@given(intervals_st)
def test_union_properties(rows) -> None:
    f = _frame(rows)
    merged = intervals.union(f, by=["d"])
    again = intervals.union(merged.rename({"start_ns": "ts_ns"}), by=["d"])
    assert again.rows() == merged.rows()  # idempotent
    busy = intervals.union_ns(f, by=["d"])
    spans = f.group_by("d").agg(span=pl.col("end_ns").max() - pl.col("ts_ns").min())
    check = busy.join(spans, on="d")
    assert (check["union_ns"] <= check["span"]).all()  # busy <= span
    holes = intervals.gaps(f, by=["d"]).group_by("d").agg(pl.col("gap_ns").sum())
    total = check.join(holes, on="d", how="left").with_columns(pl.col("gap_ns").fill_null(0))
    assert (total["union_ns"] + total["gap_ns"] == total["span"]).all()  # busy + gaps = span


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of [start, end) spans by the definition: sort, then extend or open a run."""
    runs: list[list[int]] = []
    for s, e in sorted(spans):
        if runs and s <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], e)
        else:
            runs.append([s, e])
    return [(s, e) for s, e in runs]


queries_st = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12_000), st.integers(-50, 4_000)), max_size=15)


@settings(max_examples=80, deadline=None)
@given(intervals_st, queries_st)
def test_union_cover_and_touch_match_their_definitions(rows, queries) -> None:
    f = _frame(rows)
    runs = {d: _merged([(r[1], r[1] + r[2]) for r in rows if r[0] == d]) for d in range(3)}
    assert intervals.union(f, by=["d"]).rows() == [(d, s, e) for d in range(3) for s, e in runs[d]]
    assert intervals.total_union_ns(f) == sum(e - s for s, e in _merged([(r[1], r[1] + r[2]) for r in rows]))
    q = pl.DataFrame({"qid": list(range(len(queries))), "d": [x[0] for x in queries],
                      "q_start_ns": [x[1] for x in queries], "q_end_ns": [x[1] + x[2] for x in queries]},
                     schema={"qid": pl.Int64, "d": pl.Int64, "q_start_ns": pl.Int64, "q_end_ns": pl.Int64})
    all_runs = _merged([(r[1], r[1] + r[2]) for r in rows])
    for whole in (False, True):
        want = {}
        for i, (d, qs, length) in enumerate(queries):
            qe = qs + length
            hits = [(s, e) for s, e in runs[d] if s < qe and e > qs] if qe > qs else []
            part = sum((e - s) if whole else (min(e, qe) - max(s, qs)) for s, e in hits)
            if hits:
                want[i] = part
        for _ in _c_then_reference():
            got = intervals.covered_ns(q, f, on=["d"], whole=whole)
            assert got.schema == {"qid": pl.Int64, "covered_ns": pl.Int64}
            assert dict(got.rows()) == want
            # the same groups named by two text keys (a thread's pid and tid), coded as one integer inside
            threads = intervals.covered_ns(_as_threads(q), _as_threads(f), on=["pid", "tid"], whole=whole)
            assert dict(threads.rows()) == want
            # and as a trace holds them, as codes (their codes make the one integer, no table)
            coded = intervals.covered_ns(_as_threads(q, TEXT), _as_threads(f, TEXT), on=["pid", "tid"], whole=whole)
            assert dict(coded.rows()) == want
            # no keys: every interval in one group
            flat = {i: sum((e - s) if whole else (min(e, qs + n) - max(s, qs)) for s, e in all_runs
                           if s < qs + n and e > qs) for i, (_, qs, n) in enumerate(queries)
                    if n > 0 and any(s < qs + n and e > qs for s, e in all_runs)}
            assert dict(intervals.covered_ns(q.drop("d"), f.drop("d"), whole=whole).rows()) == flat
    points = q.select("d", t="q_start_ns")
    inside = [i for i, (d, s, length) in enumerate(rows) if any(p[0] == d and s <= p[1] < s + length for p in queries)]
    assert intervals.touched(f, points, on=["d"]).rows() == f[inside].rows()
    assert intervals.touched(_as_threads(f), _as_threads(points), on=["pid", "tid"]).rows() == \
        _as_threads(f)[inside].rows()
    assert intervals.touched(_as_threads(f, TEXT), _as_threads(points, TEXT), on=["pid", "tid"]).rows() == \
        _as_threads(f, TEXT)[inside].rows()


def _as_threads(frame: pl.DataFrame, dtype: pl.DataType = pl.String) -> pl.DataFrame:
    """Group `d` as two text keys: pid (d // 2) and tid (d), in its place (of `dtype`: text, or codes)."""
    return frame.with_columns(pid=(pl.col("d") // 2).cast(pl.String).cast(dtype),
                              tid=("t" + pl.col("d").cast(pl.String)).cast(dtype)).drop("d")


def test_cover_and_touch_leave_out_rows_with_a_null_key() -> None:
    f = pl.DataFrame({"pid": ["1", "1", None], "tid": ["a", None, "a"], "ts_ns": [0, 0, 0], "end_ns": [10, 20, 30]})
    q = pl.DataFrame({"qid": [7, 8, 9], "pid": ["1", "1", None], "tid": ["a", None, "a"], "q_start_ns": [0, 0, 0],
                      "q_end_ns": [40, 40, 40]})
    for _ in _c_then_reference():
        assert intervals.covered_ns(q, f, on=["pid", "tid"]).rows() == [(7, 10)]
        coded = {"pid": TEXT, "tid": TEXT}
        assert intervals.covered_ns(q.cast(coded), f.cast(coded), on=["pid", "tid"]).rows() == [(7, 10)]
    points = q.select("pid", "tid", t=pl.lit(5))
    assert intervals.touched(f, points, on=["pid", "tid"]).rows() == [("1", "a", 0, 10)]
    assert intervals.touched(f.cast(coded), points.cast(coded), on=["pid", "tid"]).cast(
        {"pid": pl.String, "tid": pl.String}).rows() == [("1", "a", 0, 10)]


def test_cover_with_the_extreme_integer_keys() -> None:
    """A single integer key is used as it is: its extremes group like any other value."""
    lo, hi = -(2**63), 2**63 - 1
    f = pl.DataFrame({"device": [lo, hi, lo], "ts_ns": [0, 0, 50], "end_ns": [10, 100, 60]})
    q = pl.DataFrame({"qid": [1, 2, 3], "device": [lo, hi, 0], "q_start_ns": [5, 5, 0], "q_end_ns": [55, 55, 100]})
    for _ in _c_then_reference():
        assert intervals.covered_ns(q, f, on=["device"]).sort("qid").rows() == [(1, 10), (2, 50)]


def _gpu_trace(rows: list[tuple[int, int, int]], names: list[str]) -> Trace:
    cats = [GPU_WORK_CATS[i % 3] for i in range(len(rows))]
    gpu = pl.DataFrame({
        "eid": list(range(len(rows))), "cat": cats, "name": names[: len(rows)],
        "device": [r[0] % 2 for r in rows], "stream": [r[0] for r in rows],
        "ts_ns": [r[1] for r in rows], "dur_ns": [r[2] for r in rows], "end_ns": [r[1] + r[2] for r in rows],
    }, schema={k: GPU_SCHEMA[k] for k in ("eid", "cat", "name", "device", "stream", "ts_ns", "dur_ns",
                                          "end_ns")})
    gpu = gpu.with_columns(*(pl.lit(None, t).alias(c) for c, t in GPU_SCHEMA.items() if c not in gpu.columns))
    return Trace.empty().replace(gpu=gpu.select(list(GPU_SCHEMA)))


@settings(max_examples=30, deadline=None)
@given(intervals_st, st.lists(st.sampled_from(["gemm", "ncclKernel_x", "RCCL_y", "hipFoo"]),
                             min_size=40, max_size=40))
def test_breakdown_sums_to_span(rows, names) -> None:
    trace = _gpu_trace(rows, names)
    bd = breakdown(trace)
    tl = timeline(trace)
    d = bd.devices
    assert (d["compute_ns"] + d["communication_ns"] + d["memory_ns"] + d["idle_ns"] == d["span_ns"]).all()
    assert (d["overlap_ns"] >= 0).all() and (d["communication_ns"] >= 0).all()
    assert bd.span_ns == tl.span_ns and bd.idle_ns == tl.idle_ns
    assert tl.busy_ns <= tl.span_ns

# Real traces: tests/test_gaps.py::test_real_trace checks busy time against an independent union.


_windows_st = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 120), st.integers(0, 60)), min_size=1, max_size=40)
_work_st = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 150), st.integers(0, 30)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(_work_st, _windows_st)
def test_windowed_pairs_the_same_rows_by_plain_and_inequality_join(work_rows, window_rows) -> None:
    """`windowed` pairs rows with few windows per device by a plain join and with many by an
    inequality join: both give the same pairs (zero-length rows and windows, touching ends,
    devices without windows included)."""
    from tracekit.analysis import timeline as tl

    work = pl.DataFrame(
        [(i, "kernel", f"k{i}", d, 7, s, s + n) for i, (d, s, n) in enumerate(work_rows)],
        schema=tl.WORK_SCHEMA, orient="row")
    bounds = pl.DataFrame(
        [(100 + i, f"w{i}", d, s, s + n) for i, (d, s, n) in enumerate(window_rows)],
        schema=tl.BOUNDS_SCHEMA, orient="row")
    keys = ["eid", "window_eid"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tl, "FEW_WINDOWS", 0)
        unequal = tl.windowed(work, bounds).sort(keys)
    plain = tl.windowed(work, bounds).sort(keys)
    assert plain.equals(unequal)
    expected = sorted((w[0], b[0]) for w in work.rows() for b in bounds.rows()
                      if w[3] == b[2] and ((w[5] < b[4] and w[6] > b[3]) or (w[5] == w[6] and b[3] <= w[5] <= b[4])))
    assert plain.select(keys).rows() == expected
