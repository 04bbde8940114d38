"""The GPU side of the dependency graph (`graph`): each stream's activities and their order,
the launch edges, the blocking calls and what each waited for (`sync_waits`) with their
`sync` edges, and the `cross_stream` edges of event waits."""

from __future__ import annotations

import polars as pl

from tracekit.analysis.graph_columns import (
    BOOL,
    CLASS,
    DEFAULT_MIN_BLOCKING_NS,
    DEFAULT_SYNC_TOLERANCE_NS,
    EDGE_SCHEMA,
    EVENT_RECORD_CALL,
    I64,
    KIND,
    STR,
    SYNC_SCHEMA,
    lane_of,
)
from tracekit.analysis.syncs import STREAM_WAIT_CALL, sync_kind, sync_records
from tracekit.model import ENGINE, TEXT, Trace


def stream_edges(work: pl.DataFrame) -> pl.DataFrame:
    lane = pl.format("gpu:{}:{}", "device", "stream")
    rows = work.lazy()
    own = rows.select(src="s_node", dst="e_node", kind=pl.lit("gpu", KIND), weight_ns=pl.col("end_ns") - pl.col("ts_ns"),
                      start_ns="ts_ns", end_ns="end_ns", cls="cls", eid="eid", name="name", lane=lane,
                      inferred=pl.lit(False), src_eid="eid")
    same = (pl.col("device") == pl.col("device").shift(-1)) & (pl.col("stream") == pl.col("stream").shift(-1))
    nxt = rows.with_columns(_dst=pl.col("s_node").shift(-1), _t=pl.col("ts_ns").shift(-1),
                            _eid=pl.col("eid").shift(-1), _name=pl.col("name").shift(-1)).filter(same)
    order = nxt.select(src="e_node", dst="_dst", kind=pl.lit("stream", KIND), weight_ns=pl.lit(0, I64), start_ns="end_ns",
                       end_ns="_t", cls=pl.lit("idle", CLASS), eid="_eid", name="_name", lane=lane, inferred=pl.lit(False),
                       src_eid="eid")
    return pl.concat([own, order]).collect(engine=ENGINE)


def launch_edges(work: pl.DataFrame, points: pl.DataFrame) -> pl.LazyFrame:
    starts = points.lazy().filter("opening").select(launch_eid="eid", src="node", _t="t")
    rows = work.lazy().join(starts, on="launch_eid", how="inner")
    return rows.select("src", dst="s_node", kind=pl.lit("launch", KIND), weight_ns=pl.lit(0, I64), start_ns="_t",
                       end_ns="ts_ns", cls=pl.lit("launch_overhead", CLASS), eid="eid", name="name",
                       lane=pl.format("gpu:{}:{}", "device", "stream"), inferred=pl.lit(False), src_eid="launch_eid")


def sync_edges(syncs: pl.DataFrame, work: pl.DataFrame, points: pl.DataFrame, lanes: pl.Series,
                slices: pl.DataFrame) -> pl.LazyFrame:
    ends = points.lazy().filter(~pl.col("opening")).select("eid", "_thread", dst="node", end_ns="t")
    rows = syncs.lazy().filter(pl.col("gpu_eid").is_not_null()).join(ends, on="eid", maintain_order="left").join(
        work.lazy().select(gpu_eid="eid", src="e_node", start_ns="end_ns"), on="gpu_eid", maintain_order="left").join(
        slices.lazy().select("eid", "name"), on="eid", how="left", maintain_order="left")  # in the calls' order
    return rows.select("src", "dst", kind=pl.lit("sync", KIND), weight_ns="tail_ns", start_ns="start_ns", end_ns="end_ns",
                       cls=pl.lit("sync_wait", CLASS), eid="eid", name="name", lane=lane_of(lanes),
                       inferred="inferred", src_eid="gpu_eid")


def sync_waits(trace: Trace, slices: pl.DataFrame, work: pl.DataFrame, *,
               tolerance_ns: int = DEFAULT_SYNC_TOLERANCE_NS,
               min_blocking_ns: int = DEFAULT_MIN_BLOCKING_NS) -> pl.DataFrame:
    """Blocking calls and the GPU work each waited for (SYNC_SCHEMA; see the module docstring).

    Named sync calls that waited for nothing get a row with a null `gpu_eid` and the whole
    call as `tail_ns` (pure sync overhead).
    """
    calls = slices.lazy().filter((pl.col("role") == "runtime") & (pl.col("end_ns") > pl.col("ts_ns"))).with_columns(
        kind=sync_kind(pl.col("name").cast(STR))).collect(engine=ENGINE)
    if calls.is_empty() or work.is_empty():
        named = calls.filter(pl.col("kind").is_not_null())
        return named.select("eid", gpu_eid=pl.lit(None, I64), tail_ns=pl.col("end_ns") - pl.col("ts_ns"),
                            inferred=pl.lit(False), source=pl.lit("name")).cast(SYNC_SCHEMA).sort("eid")
    rec = sync_records(trace.gpu).rename({"device": "r_device", "stream": "r_stream", "record": "r_kind"})
    calls_ = calls.lazy().join(rec, on="correlation", how="left", maintain_order="left")
    right = work.lazy().select(_t="end_ns", gpu_eid="eid", device="device", stream="stream", w_end="end_ns",
                               w_launch="launch_ts_ns").sort("_t")
    left = calls_.with_columns(_t=pl.col("end_ns")).sort("_t")
    own = calls_.join(work.lazy().select("launch_eid", gpu_eid="eid", w_end="end_ns"), left_on="eid",
                      right_on="launch_eid")
    own = own.filter(pl.col("w_end") <= pl.col("end_ns")).sort(["w_end", "gpu_eid"], descending=[True, False]).unique(
        "eid", keep="first")
    stream_rec = left.filter(pl.col("r_kind") == "Stream Sync").join_asof(
        right, on="_t", by_left=["r_device", "r_stream"], by_right=["device", "stream"], strategy="backward",
        check_sortedness=False)
    dev_rec = left.filter(pl.col("r_kind").is_not_null() & (pl.col("r_kind") != "Stream Sync")).join_asof(
        right.drop("stream"), on="_t", by_left="r_device", by_right="device", strategy="backward",
        check_sortedness=False)
    anywhere = left.filter(pl.col("r_kind").is_null()).join_asof(
        right.drop("device", "stream"), on="_t", strategy="backward", check_sortedness=False)
    waited = (pl.col("w_end") >= pl.col("ts_ns")) & (pl.col("w_launch").is_null() | (pl.col("w_launch") < pl.col("ts_ns")))
    dur = pl.col("end_ns") - pl.col("ts_ns")
    timed = ((dur >= min_blocking_ns) & (pl.col("end_ns") - pl.col("w_end") <= tolerance_ns)
             & (2 * (pl.col("w_end") - pl.col("ts_ns")) >= dur))
    cols = ["eid", "gpu_eid", "w_end", "end_ns", "inferred", "source"]
    picks = [
        own.filter(pl.col("w_end").is_between(pl.col("ts_ns"), pl.col("end_ns"))).with_columns(inferred=pl.lit(False), source=pl.lit("own_work")),
        pl.concat([stream_rec, dev_rec], how="diagonal_relaxed").filter(waited).with_columns(
            inferred=pl.lit(False), source=pl.lit("record")),
        anywhere.filter(waited & pl.col("kind").is_not_null()).with_columns(inferred=pl.lit(True), source=pl.lit("name")),
        anywhere.filter(waited & pl.col("kind").is_null() & timed).with_columns(
            inferred=pl.lit(True), source=pl.lit("timing")),
    ]
    found = pl.concat([p.select(cols) for p in picks], how="vertical_relaxed").unique("eid", keep="first",
                                                                                     maintain_order=True)
    found = found.select("eid", "gpu_eid", tail_ns=pl.col("end_ns") - pl.col("w_end"), inferred="inferred",
                         source="source")
    idle = calls.lazy().filter(pl.col("kind").is_not_null()).join(found, on="eid", how="anti").select(
        "eid", gpu_eid=pl.lit(None, I64), tail_ns=dur, inferred=pl.lit(False), source=pl.lit("name"))
    # in call order
    return pl.concat([found.cast(SYNC_SCHEMA), idle.cast(SYNC_SCHEMA)]).sort("eid").collect(engine=ENGINE)


def cross_stream_edges(trace: Trace, slices: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """Edges from the work an event recorded to the first work that waited on it (EDGE_SCHEMA)."""
    rt = slices.lazy().filter(pl.col("role") == "runtime")
    waits = rt.filter(pl.col("name").cast(STR).str.contains(STREAM_WAIT_CALL)).collect(engine=ENGINE)
    if waits.is_empty() or work.is_empty() or work["launch_ts_ns"].is_null().all():
        return pl.DataFrame(schema=EDGE_SCHEMA)
    launched = work.lazy().filter(pl.col("launch_ts_ns").is_not_null()).select(
        pid="launch_pid", tid="launch_tid", _t="launch_ts_ns", device="device", stream="stream", s_node="s_node",
        e_node="e_node", t_s="ts_ns", t_e="end_ns", g_eid="eid", g_name="name").sort("_t")
    kind = pl.coalesce("sync_kind", "name")
    recs = trace.gpu.lazy().filter((pl.col("cat") == "cuda_sync") & kind.str.contains("Wait Event")).select(
        "correlation", device="device", w_stream="stream",
        on_stream=pl.col("args").str.json_path_match("$.wait_on_stream").cast(I64, strict=False),
        rec_corr=pl.col("args").str.json_path_match("$.wait_on_cuda_event_record_corr_id").cast(I64, strict=False))
    recs = recs.unique("correlation", keep="first", maintain_order=True)
    calls = waits.lazy().join(recs, on="correlation", how="left", maintain_order="left")
    known = calls.filter(pl.col("on_stream").is_not_null()).join(
        rt.select(rec_corr="correlation", rec_ts="ts_ns").drop_nulls(), on="rec_corr", how="inner")
    src = known.sort("rec_ts").join_asof(
        launched.select("_t", "device", on_stream="stream", src="e_node", s_t="t_e", s_eid="g_eid"), left_on="rec_ts",
        right_on="_t", by=["device", "on_stream"], strategy="backward", check_sortedness=False)
    dst = src.drop("_t").sort("ts_ns").join_asof(
        launched.select("_t", "device", w_stream="stream", dst="s_node", d_t="t_s", d_eid="g_eid", d_name="g_name"),
        left_on="ts_ns", right_on="_t", by=["device", "w_stream"], strategy="forward", check_sortedness=False)
    dst = dst.select("src", "dst", "s_t", "d_t", "s_eid", "d_eid", "d_name", d_device="device", d_stream="w_stream",
                     inferred=pl.lit(False))
    guessed = _guessed_waits(calls.filter(pl.col("on_stream").is_null()), rt, launched)
    both = pl.concat([dst.cast(_GUESS_SCHEMA), guessed]).filter(
        pl.col("src").is_not_null() & pl.col("dst").is_not_null() & (pl.col("s_t") <= pl.col("d_t")))
    return both.select("src", "dst", kind=pl.lit("cross_stream", KIND), weight_ns=pl.lit(0, I64), start_ns="s_t",
                       end_ns="d_t", cls=pl.lit("idle", CLASS), eid="d_eid", name="d_name",
                       lane=pl.format("gpu:{}:{}", "d_device", "d_stream"), inferred="inferred",
                       src_eid="s_eid").cast(EDGE_SCHEMA).collect(engine=ENGINE)


_GUESS_SCHEMA: dict[str, pl.DataType] = {
    "src": I64, "dst": I64, "s_t": I64, "d_t": I64, "s_eid": I64, "d_eid": I64, "d_name": TEXT, "d_device": I64,
    "d_stream": I64, "inferred": BOOL,
}


def _guessed_waits(calls: pl.LazyFrame, rt: pl.LazyFrame, launched: pl.LazyFrame) -> pl.LazyFrame:
    """Waits without a record: the thread's last event record before the wait; the work the
    thread launched before that record (recorded stream) and after the wait (waiting stream)."""
    recs = rt.filter(pl.col("name").cast(STR).str.contains(EVENT_RECORD_CALL)).select("pid", "tid", rec_ts="ts_ns")
    # no record call on the thread before the wait (some traces do not list them): the wait itself
    calls = calls.select("pid", "tid", "ts_ns").sort("ts_ns").join_asof(
        recs.sort("rec_ts"), left_on="ts_ns", right_on="rec_ts", by=["pid", "tid"], strategy="backward",
        check_sortedness=False).with_columns(pl.coalesce("rec_ts", "ts_ns").alias("rec_ts"))
    before = calls.sort("rec_ts").join_asof(
        launched, left_on="rec_ts", right_on="_t", by=["pid", "tid"], strategy="backward", check_sortedness=False)
    after = before.drop("_t").sort("ts_ns").join_asof(
        launched, left_on="ts_ns", right_on="_t", by=["pid", "tid"], strategy="forward", check_sortedness=False,
        suffix="_d")
    ok = (pl.col("device") == pl.col("device_d")) & (pl.col("stream") != pl.col("stream_d"))
    return after.filter(ok).select(src="e_node", dst="s_node_d", s_t="t_e", d_t="t_s_d", s_eid="g_eid", d_eid="g_eid_d",
                                   d_name="g_name_d", d_device="device_d", d_stream="stream_d",
                                   inferred=pl.lit(True)).cast(_GUESS_SCHEMA)
