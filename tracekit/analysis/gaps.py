"""Idle gaps on every device and every stream, each with a cause and a culprit.

A gap is a hole in the union of GPU work (kernels, memcpys, memsets) inside a window
(`timeline`: by default the device span; or each annotation window given). Device gaps
are holes in the union of all the device's streams; stream gaps are holes in one stream,
measured in the device's window. Gaps partition the idle time exactly: for every device
(or stream) and window, Σ gap_ns = span_ns - busy_ns.

Evidence per gap [g0, g1): the *next activity* (the work starting at g1; of several, the
one whose launch call returned first) and its launch call (end L1) on thread T;
`late_ns` = min(L1, g1) - g0 clipped to [0, gap]: how long the gap waited for the CPU
to finish enqueueing the next work.

Cause, first rule that applies (CAUSES):
1. `short`: gap_ns < min_gap_ns (default 1000 ns = 1 µs, below which gaps are launch
   latency and scheduling noise). Kept so that the causes still sum to the idle time.
2. `before_first` / `after_last`: the gap runs from the window start to the first
   activity, or from the last activity to the window end (a window with no activity at
   all is one `before_first` gap). Only non-zero when a window is given.
3. `profiler_overhead`: profiler `overhead` rows (Activity Buffer Request, Buffer Flush…)
   cover at least half the gap.
4. `sync_stall`: blocking calls (`syncs.blocking_intervals`: sync calls, `.item()`, and async
   copies to pageable memory) on T overlap the late part
   [g0, min(L1, g1)) and last, in whole (`sync_ns`), at least half of late_ns: the CPU
   waited for the GPU to drain, so nothing was queued; had it not blocked it would have
   been ahead by about `sync_ns`. A short sync followed by a long CPU stretch is not a
   sync stall (rule 5 names the stretch). When the next work's own call began after the
   gap opened (L0 > g0), only [g0, min(L0, g1)) counts: that call (a synchronous copy, say)
   stalled nothing before it. When it was already running at g0 (`.item()` waiting for
   the stream to drain before its copy), the whole late part counts.
5. `launch_bound` / `cpu_work`: late_ns ≥ half the gap (the CPU was late). `cpu_work`
   when less than half of [g0, min(L1, g1)) on T was spent in the launch path (top-level
   cpu_ops that launch GPU work, and launch calls themselves): the CPU ran ops or Python
   that launched nothing; `launch_bound` otherwise: it was busy issuing work too slowly.
6. `cross_stream_wait` (stream gaps): another stream of the device was busy during the
   gap (the queued work waited for it, e.g. behind a cudaStreamWaitEvent or for SMs).
7. `launch_bound` / `cpu_work` as in 5 when late_ns > 0.
8. `other`: the work was queued and nothing in the trace explains the wait (launch
   latency, a wait on another device or on a host event), or the next activity has no
   launch call in the trace (launched before the capture began), so rules 4, 5 and 7
   cannot be judged.
When the trace's host and GPU clocks disagree (a `clock_offset` load warning), rules 3, 4,
5 and 7, which compare host times with GPU times, are not applied: such gaps are `other`.

Blame (not looked up for `short` gaps): `blame_op` is the innermost `cpu_op` running on T
when the gap opened (g0), `annotation` the innermost `user_annotation`, `module` the
innermost `nn.Module: …` python_function or `## … ##` range there; `next_op` the op that
launched the next work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.analysis import intervals
from tracekit.analysis.defaults import DEFAULT_MIN_GAP_NS
from tracekit.analysis.links import gpu_links, op_tree
from tracekit.analysis.nesting import OpTree, frame_of, with_parents
from tracekit.analysis.order import longest_gaps
from tracekit.analysis.syncs import blocking_intervals
from tracekit.analysis.timeline import WINDOW_KEYS, device_bounds, windowed, work_rows
from tracekit.analysis.windows import STEP_NAME, annotations
from tracekit.model import ENGINE, GROUPING_ENGINE, TEXT, Trace, clocks_disagree, constant_columns

I64, F64, STR = pl.Int64, pl.Float64, pl.String
CAUSES = ("launch_bound", "cpu_work", "sync_stall", "cross_stream_wait", "profiler_overhead",
          "before_first", "after_last", "other", "short")
CAUSE_LABELS = {  # the causes in words, for titles, tables and charts
    "launch_bound": "launch-bound (CPU late)", "sync_stall": "sync stall", "cpu_work": "CPU work",
    "cross_stream_wait": "cross-stream wait", "profiler_overhead": "profiler overhead",
    "before_first": "before first", "after_last": "after last", "other": "other", "short": "short gaps",
}
# the gaps that tables, findings and the JSON list: a device's, not the short ones
LISTED = (pl.col("scope") == "device") & (pl.col("cause") != "short")
MODULE = r"^nn\.Module: |^## .* ##$"

# the text columns are codes (`model.TEXT`): four bytes a row where text took a 16-byte view
# (a trace's gaps are many; their names and causes repeat a few hundred values)
GAP_SCHEMA: dict[str, pl.DataType] = {
    "scope": TEXT, "window_eid": I64, "window_name": TEXT, "device": I64, "stream": I64,
    "start_ns": I64, "end_ns": I64, "gap_ns": I64, "offset_ns": I64, "position": TEXT, "cause": TEXT,
    "late_ns": I64, "overhead_ns": I64, "sync_ns": I64, "launch_path_ns": I64, "other_busy_ns": I64,
    "next_eid": I64, "next_name": TEXT, "launch_eid": I64, "launch_name": TEXT, "launch_pid": TEXT,
    "launch_tid": TEXT, "next_op": TEXT, "blame_op_eid": I64, "blame_op": TEXT, "annotation": TEXT,
    "module": TEXT,
}
TOTALS_SCHEMA: dict[str, pl.DataType] = {
    "scope": STR, "window_eid": I64, "window_name": STR, "device": I64, "stream": I64,
    "cause": STR, "gaps": I64, "total_ns": I64,
}
GROUP = ["scope", "window_eid", "device", "stream"]
ORDER = ["scope", "device", "stream", "start_ns", "window_eid"]  # the order of `Gaps.gaps`


@dataclass(frozen=True)
class Gaps:
    """Result of `gaps`. Frames are typed even when empty."""

    gaps: pl.DataFrame  # GAP_SCHEMA: every gap, device and stream scope, short ones included; in ORDER
    totals: pl.DataFrame  # TOTALS_SCHEMA: per scope, window, device, stream and cause; the largest first, ties by cause
    min_gap_ns: int
    idle_ns: int  # device scope: Σ gap_ns over devices and windows
    by_cause: dict[str, int]  # device scope: ns per cause, every cause present (0 when none)

    def to_dict(self, *, limit: int = 20) -> dict[str, Any]:
        """JSON-ready: idle per cause, the totals and the longest device gaps."""
        top = self.gaps.filter(LISTED)
        return {
            "min_gap_ns": self.min_gap_ns, "idle_ns": self.idle_ns, "by_cause": self.by_cause,
            "totals": self.totals.to_dicts(),
            "longest": longest_gaps(top, head=limit).to_dicts(),
        }


def gaps(trace: Trace, *, min_gap_ns: int = DEFAULT_MIN_GAP_NS, windows: pl.DataFrame | None = None,
         links: pl.DataFrame | None = None, ops: pl.DataFrame | OpTree | None = None,
         blocking: pl.Series | None = None) -> Gaps:
    """Every idle gap with its cause and blame; `windows` from `windows.window_bounds`; `links`
    (`links.gpu_links`), `ops` (`links.op_tree`), `blocking` (`syncs.blocking_copies`) computed
    when not given."""
    work = work_rows(trace)
    bounds = device_bounds(work, windows)
    rows = windowed(work, bounds)
    found = _find(rows, bounds, work)
    ops = op_tree(trace) if ops is None and links is None else ops
    links = gpu_links(trace, ops=ops) if links is None else links
    # each step adds its columns beside the gaps' (row `gid`): the gaps' own columns are
    # never copied (a join per step would copy every column)
    found = found.hstack(_next_activity(found, links))
    # a stream's gap that is also its device's (the same hole, the same next work: every gap
    # of a device with one stream) has the same evidence and blame: they are found once per
    # distinct gap (`_distinct`), then given to each row
    distinct, at = _distinct(found)
    # what only the distinct gaps' lookups read goes from the gaps' own columns (`distinct`
    # has its own copy, unless every gap is distinct)
    found = found.drop(_LOOKUPS_ONLY)
    # the blame and the evidence are found per distinct gap, and the distinct gaps go before
    # the answers are given to every gap
    nested = frame_of(op_tree(trace) if ops is None else ops)  # (the blame's and the launch path's)
    blamed = _blame(distinct, trace, min_gap_ns, nested)
    evidence = _evidence(distinct, trace, links, nested, blocking)
    other_busy = _other_busy(found, work)
    del distinct, nested, ops
    found = found.hstack(_shared(evidence, at)).with_columns(other_busy_ns=other_busy)
    del evidence, other_busy
    found = found.with_columns(cause=_cause(min_gap_ns, clocks_agree=not clocks_disagree(trace))).hstack(
        _shared(blamed, at))
    del blamed, at
    # a column of one value (no windows, no modules: nulls; one device) held as that value
    # (`loader.constants`), for the rest of the report
    out = constant_columns(found.select(list(GAP_SCHEMA)).cast(GAP_SCHEMA))
    del found  # (the steps' own columns, before the totals' group-by)
    totals = _totals(out)
    dev = totals.filter(pl.col("scope") == "device")
    by_cause = {c: 0 for c in CAUSES} | dict(dev.group_by("cause").agg(pl.col("total_ns").sum()).rows())
    return Gaps(gaps=out, totals=totals, min_gap_ns=min_gap_ns, idle_ns=int(dev["total_ns"].sum() or 0),
                by_cause={c: int(by_cause[c]) for c in CAUSES})


def _find(rows: pl.DataFrame, bounds: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """Device and stream gaps with a `gid`; stream bounds = device bounds × the device's streams.
    (One plan: the device and the stream gaps are found side by side.)"""
    names = bounds.select(*WINDOW_KEYS, "window_name", "window_start_ns")
    dev = intervals.gaps_plan(rows, bounds, by=WINDOW_KEYS).with_columns(
        scope=pl.lit("device"), stream=pl.lit(None, I64))
    streams = work.select("device", "stream").unique()
    sbounds = bounds.join(streams, on="device", how="inner")
    keys = [*WINDOW_KEYS, "stream"]
    sbounds = sbounds.select(*keys, "window_start_ns", "window_end_ns")
    per = intervals.gaps_plan(rows, sbounds, by=keys).with_columns(scope=pl.lit("stream"))
    both = pl.concat([dev.select(per.collect_schema().names()), per])
    return both.join(names.lazy(), on=WINDOW_KEYS, how="left", nulls_equal=True, maintain_order="left").sort(
        ORDER, nulls_last=False, maintain_order=True).with_row_index("gid").with_columns(
        pl.col("gid").cast(I64), offset_ns=pl.col("start_ns") - pl.col("window_start_ns")).collect(engine=ENGINE)


def _per_gap(found: pl.DataFrame, gids: pl.Series, values: pl.Series) -> pl.Series:
    """`values` at the rows `gids` of a column as long as `found` (gid = row), null elsewhere."""
    return pl.repeat(None, found.height, dtype=values.dtype, eager=True).scatter(gids, values).rename(values.name)


def _rows_per_gap(found: pl.DataFrame, part: pl.DataFrame) -> pl.DataFrame:
    """`part`'s columns but `gid` (one row per gid at most), one row per gap in `found`'s
    order: nulls for gaps it has no row for."""
    at = _per_gap(found, part["gid"], pl.int_range(part.height, dtype=pl.get_index_type(), eager=True))
    return part.drop("gid").gather(at)


def _next_activity(found: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """The work starting at each gap's end (of several: the launch call that returned
    first): its columns, one row per gap."""
    # the pick runs on the numbers; the chosen work's names are gathered once, for the gaps
    # alone (sorting and deduplicating the candidates' text would copy it all)
    # one plan: the candidate pairs are filtered and cut to the pick's columns as the join
    # makes them, not materialised whole first (a pair or more per gap)
    keys = links.lazy().select(pl.col("device").fill_null(-1), pl.col("stream").fill_null(-1).alias("_stream"),
                               pl.col("ts_ns").alias("end_ns"), "launch_end_ns", pl.col("eid").alias("next_eid"),
                               pl.int_range(pl.len(), dtype=I64).alias("_row"))
    inner = found.lazy().filter(pl.col("position") != "after_last").select("gid", "device", "stream", "end_ns")
    pairs = inner.join(keys, on=["device", "end_ns"], how="inner").filter(
        pl.col("stream").is_null() | (pl.col("stream") == pl.col("_stream")))
    best = pairs.select("gid", "launch_end_ns", "next_eid", "_row").sort(
        "launch_end_ns", "next_eid", nulls_last=True).unique("gid", keep="first").collect(engine=ENGINE)
    at = _per_gap(found, best["gid"], best["_row"].cast(pl.get_index_type()))
    # the names as codes (`GAP_SCHEMA`'s), before the gather: gathered as text they were a
    # copy of each name per gap (kernel names are long)
    return links.select(
        pl.col("eid").alias("next_eid"), pl.col("name").cast(TEXT).alias("next_name"), "launch_eid",
        pl.col("launch_name").cast(TEXT), "launch_ts_ns", "launch_end_ns", "launch_pid", "launch_tid",
        pl.col("op_name").cast(TEXT).alias("next_op"),
    ).gather(at)


SAME_GAP = ["device", "start_ns", "end_ns", "next_eid", "launch_eid"]  # the gap and its next work
# the columns `_evidence` and `_blame` read (all of them follow from SAME_GAP)
_LOOKED_AT = ["gid", "start_ns", "end_ns", "gap_ns", "launch_eid", "launch_ts_ns", "launch_end_ns", "launch_pid",
              "launch_tid"]
_LOOKUPS_ONLY = ["window_start_ns", "launch_ts_ns", "launch_end_ns"]  # read by them (or before), not in GAP_SCHEMA


def _distinct(found: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series | None]:
    """The gaps with distinct `SAME_GAP` values (the first of each: a device's, where its
    stream has the same gap), renumbered (`gid` = row), with the columns the evidence and
    blame read, and each gap's row among them (None: every gap is distinct, and `found`
    itself is returned)."""
    rows = pl.int_range(found.height, dtype=I64, eager=True)
    first = _first_same(found, rows)
    kept = first == rows
    if kept.all():
        return found, None
    distinct = found.select(_LOOKED_AT).filter(kept).with_columns(gid=pl.int_range(pl.len(), dtype=I64))
    # a gap's row among the distinct ones: how many firsts come before its own first
    return distinct, (kept.cast(I64).cum_sum() - 1).gather(first)


def _first_same(found: pl.DataFrame, rows: pl.Series) -> pl.Series:
    """Each gap's first row with the same `SAME_GAP` values. Grouped on one hash of the five
    (half the memory of a group-by on the five columns), then checked: where two different
    gaps share a hash, grouped on the five columns instead."""
    hashed = pl.DataFrame({"_h": _same_gap_hash(found), "_row": rows})
    first = hashed.select(pl.col("_row").first().over("_h")).to_series()
    del hashed
    same = found.select(pl.all_horizontal([pl.col(c).eq_missing(pl.col(c).gather(first)) for c in SAME_GAP]).all())
    if same.item():
        return first
    return found.select(SAME_GAP).with_columns(_row=rows).select(pl.col("_row").first().over(SAME_GAP)).to_series()


def _same_gap_hash(found: pl.DataFrame) -> pl.Series:
    return found.select(pl.struct(SAME_GAP).hash()).to_series()


def _shared(columns: pl.DataFrame, at: pl.Series | None) -> pl.DataFrame:
    """Columns found per distinct gap, one row per gap (`_distinct`)."""
    return columns if at is None else columns.gather(at)


def _other_busy(found: pl.DataFrame, work: pl.DataFrame) -> pl.Series:
    """other_busy_ns: the time other streams of the device were busy in a stream gap (0 for
    a device's gaps)."""
    whole = found.filter(pl.col("scope") == "stream").select(
        pl.col("gid").alias("qid"), pl.col("start_ns").alias("q_start_ns"), pl.col("end_ns").alias("q_end_ns"), "device")
    part = intervals.covered_ns(whole, work, on=["device"])
    return _per_gap(found, part["qid"], part["covered_ns"]).fill_null(0).rename("other_busy_ns")


def _evidence(found: pl.DataFrame, trace: Trace, links: pl.DataFrame, nested: pl.DataFrame,
              blocking: pl.Series | None) -> pl.DataFrame:
    """late_ns, overhead_ns, sync_ns, launch_path_ns: one row per gap."""
    late_end = pl.min_horizontal("launch_end_ns", "end_ns").clip(lower_bound=pl.col("start_ns"))
    late_end = pl.when(pl.col("launch_end_ns").is_not_null()).then(late_end)
    found = found.with_columns(late_ns=late_end - pl.col("start_ns"), _late_end=late_end)
    whole = found.select(pl.col("gid").alias("qid"), pl.col("start_ns").alias("q_start_ns"),
                         pl.col("end_ns").alias("q_end_ns"))
    late = found.filter(pl.col("launch_eid").is_not_null()).select(
        pl.col("gid").alias("qid"), pl.col("start_ns").alias("q_start_ns"),
        pl.col("_late_end").alias("q_end_ns"), pl.col("launch_pid").alias("pid"),
        pl.col("launch_tid").alias("tid"), _launch_ts=pl.col("launch_ts_ns"))
    # a next work's own call that began after the gap opened stalled nothing before it: the
    # part of the gap before that call is what a blocking call can explain
    after_open = pl.col("_launch_ts") > pl.col("q_start_ns")
    before_launch = late.with_columns(
        q_end_ns=pl.when(after_open).then(pl.min_horizontal("q_end_ns", "_launch_ts")).otherwise("q_end_ns"))
    parts = {
        "overhead_ns": intervals.covered_ns(whole, trace.ops.filter(pl.col("cat") == "overhead")),
        "sync_ns": intervals.covered_ns(before_launch, blocking_intervals(trace, blocking=blocking), on=["pid", "tid"], whole=True),
        "launch_path_ns": intervals.covered_ns(late, _launch_path(trace, links, nested), on=["pid", "tid"]),
    }
    covered = (_per_gap(found, part["qid"], part["covered_ns"].rename(col)).fill_null(0) for col, part in parts.items())
    return pl.DataFrame([found["late_ns"], *covered])


def _launch_path(trace: Trace, links: pl.DataFrame, nested: pl.DataFrame) -> pl.DataFrame:
    """Launch calls that enqueued work, and the top-level cpu_ops on their thread around them."""
    # a call that launched several activities comes once per activity: its interval is
    # counted once all the same (the readers take the union), and no unique over the calls
    # (a copy of them beside the blame's lookups) is needed
    calls = links.lazy().filter(pl.col("launch_eid").is_not_null()).select(
        pl.col("launch_pid").alias("pid"), pl.col("launch_tid").alias("tid"),
        pl.col("launch_ts_ns").alias("ts_ns"), pl.col("launch_end_ns").alias("end_ns"),
    ).collect(engine=ENGINE)
    top = _top_ops(trace, nested).filter(pl.col("depth") == 0).select("eid", "pid", "tid", "ts_ns", "end_ns")
    used = intervals.touched(top, calls.select("pid", "tid", t="ts_ns"), on=["pid", "tid"])
    return pl.concat([calls, used.select(calls.columns)])


def _top_ops(trace: Trace, ops: pl.DataFrame) -> pl.DataFrame:
    """The cpu_ops other than `ProfilerStep#N`, nested: the op tree (`ops`, `links.cpu_ops`)
    when no op is a step (or unnamed, which the name filter would drop), else nested afresh."""
    if not ops["name"].str.contains(STEP_NAME).fill_null(True).any():
        return ops
    return with_parents(trace.ops.filter((pl.col("cat") == "cpu_op") & ~pl.col("name").str.contains(STEP_NAME)))


def _short(min_gap_ns: int) -> pl.Expr:
    """The first cause's rule: a gap under `min_gap_ns` is `short` (and gets no blame)."""
    return pl.col("gap_ns") < min_gap_ns


def _cause(min_gap_ns: int, *, clocks_agree: bool = True) -> pl.Expr:
    """The first rule of the module's list that applies; without `clocks_agree` (the host's and
    the GPU's clocks disagree) the rules that compare host times with GPU times are skipped."""
    gap, late = pl.col("gap_ns"), pl.col("late_ns").fill_null(0)
    cpu = pl.when(2 * pl.col("launch_path_ns") < late).then(pl.lit("cpu_work"))
    cpu = cpu.otherwise(pl.lit("launch_bound"))
    first = (
        pl.when(_short(min_gap_ns)).then(pl.lit("short"))
        .when(pl.col("position").is_in(["before_first", "empty"])).then(pl.lit("before_first"))
        .when(pl.col("position") == "after_last").then(pl.lit("after_last"))
    )
    if not clocks_agree:
        return (first.when((pl.col("scope") == "stream") & (pl.col("other_busy_ns") > 0))
                .then(pl.lit("cross_stream_wait")).otherwise(pl.lit("other")))
    return (
        first
        .when(2 * pl.col("overhead_ns") >= gap).then(pl.lit("profiler_overhead"))
        .when((pl.col("sync_ns") > 0) & (2 * pl.col("sync_ns") >= late))
        .then(pl.lit("sync_stall"))
        .when(2 * late >= gap).then(cpu)
        .when((pl.col("scope") == "stream") & (pl.col("other_busy_ns") > 0)).then(pl.lit("cross_stream_wait"))
        .when(late > 0).then(cpu)
        .otherwise(pl.lit("other"))
    )


def _blame(found: pl.DataFrame, trace: Trace, min_gap_ns: int, nested: pl.DataFrame) -> pl.DataFrame:
    """blame_op(_eid), annotation(_eid), module(_eid): innermost slices on the launching
    thread at g0 (not looked up for `_short` gaps: the causes need not be known), one row
    per gap."""
    points = found.filter(pl.col("launch_pid").is_not_null() & ~_short(min_gap_ns)).select(
        "gid", pid="launch_pid", tid="launch_tid", t="start_ns")
    cols = ["eid", "name", "pid", "tid", "ts_ns", "end_ns", "dur_ns"]
    ops = trace.ops.select(*cols, "cat")  # (a filter of every column of the ops copied them all)
    kinds = {
        "blame_op": nested,  # (the op tree, which a filter here copied again)
        "annotation": annotations(trace),
        "module": ops.filter(pl.col("cat").is_in(["python_function", "user_annotation"])
                             & pl.col("name").str.contains(MODULE)),
    }
    columns = [_rows_per_gap(found, _innermost(points, slices.select(cols))).rename({"name": col, "eid": f"{col}_eid"})
               for col, slices in kinds.items()]
    return pl.concat(columns, how="horizontal")


def _innermost(points: pl.DataFrame, slices: pl.DataFrame) -> pl.DataFrame:
    """(gid, eid, name) of the innermost slice on the point's thread running at `t` (the name
    as codes, `GAP_SCHEMA`'s: each gap gathers it)."""
    best = intervals.innermost(points, slices, on=["pid", "tid"])
    return best.select("gid", "eid", "name").cast({"gid": I64, "eid": I64, "name": TEXT})


def _totals(out: pl.DataFrame) -> pl.DataFrame:
    keys = [*GROUP, "window_name", "cause"]
    # (summed as they are read, by the streaming engine, `model.GROUPING_ENGINE`: an eager
    # group-by first gathers every row's keys)
    sums = out.lazy().group_by(keys).agg(gaps=pl.len(), total_ns=pl.col("gap_ns").sum()).collect(
        engine=GROUPING_ENGINE)
    # equal totals by cause: the same table every run (they came in any order)
    order = ["scope", "device", "stream", "window_eid", "total_ns", "cause"]
    return sums.select(list(TOTALS_SCHEMA)).cast(TOTALS_SCHEMA).sort(
        order, descending=[False, False, False, False, True, False], nulls_last=False)
