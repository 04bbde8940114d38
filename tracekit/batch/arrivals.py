"""Arrival skew: which rank a synchronous job waits for at each collective, and what it cost.

A collective ends at the same instant on every rank, but each rank enters it when its
GPU reaches the kernel; the earlier ranks spin inside the kernel until the last arrives.
So exposed communication on a rank is mostly waiting for *another* rank. The rule
(docs/batch.md, "Arrival skew"):

1. Per rank, the communication kernels (`taxonomy.is_communication`) in time order, per
   stream (streams ordered by their first collective). The k-th collective of the j-th
   stream is the same collective on every rank, as long as its name family (`AllReduce`,
   `SendRecv`, ...) agrees; matching stops at the first disagreement.
2. Clocks: offset of a rank = median over the matched collectives of
   (its end - the reference rank's end), the reference being the lowest rank. Ends agree
   to a few µs on a synchronous job, so the median discards a rare outlier; `end_spread_ns`
   is what is left after alignment.
3. Arrival = the aligned kernel start. `launched_late` says why a rank was late: its kernel
   started within LAUNCH_SLACK_NS of the end of its launch call (the GPU waited for the
   host), otherwise it queued behind GPU work.
4. Per collective: last arrival, skew = last - first, the late rank = the last to arrive,
   lost_ns = last - median arrival (the lower middle rank's wait: what the typical rank
   waited for the late one). Each rank waits last - its arrival.
5. Per rank: wait_ns (its total wait), late_ns (sum of its arrival - median, when > 0),
   times_last, lost_to_rank_ns (the lost_ns of the collectives it arrived last at).
   The job's time lost = sum of lost_ns; a rank is a straggler when the time lost to it
   is at least STRAGGLER_MIN_SHARE of the job's.
6. For the late rank of the largest-skew collective, what ran in its skew window [first
   arrival, its arrival]: CPU ops and annotations, runtime calls and GPU kernels, by time
   overlapped (top WINDOW_TOP), and the part of the window before the rank's first event
   (the rank had not yet entered the profiled step).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.analysis.taxonomy import category_in, is_communication
from tracekit.model import Trace

LAUNCH_SLACK_NS = 10_000
STRAGGLER_MIN_SHARE = 0.05
WINDOW_TOP = 5
LATEST_SHOWN = 3  # ranks listed per collective, the latest first
FAMILY = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)


@dataclass(frozen=True)
class RankEvents:
    """What the arrival rule needs of one rank: collectives and the activity around them."""

    rank: int
    collectives: pl.DataFrame  # stream_index, k, name, family, start_ns, end_ns, launch_start_ns, launch_end_ns
    activity: pl.DataFrame  # kind ("op"/"kernel"), name, start_ns, end_ns (absolute ns)


def rank_events(trace: Trace, rank: int) -> RankEvents:
    """The collectives of one trace in absolute ns, each with its launch call."""
    base = trace.meta.base_time_ns or 0
    kernels = trace.gpu.filter(category_in("kernel"))
    comm = kernels.filter(is_communication(kernels["name"]))
    launches = trace.runtime.filter(pl.col("correlation").is_not_null()).select(
        "correlation", launch_start_ns=pl.col("ts_ns") + base, launch_end_ns=pl.col("end_ns") + base
    ).unique("correlation", keep="first")
    comm = (
        comm.select("name", "stream", "correlation", start_ns=pl.col("ts_ns") + base, end_ns=pl.col("end_ns") + base)
        .join(launches, on="correlation", how="left")
        .sort("start_ns", "end_ns")
    )
    order = comm.group_by("stream").agg(first=pl.col("start_ns").min()).sort("first", "stream")
    index = order.with_columns(stream_index=pl.int_range(pl.len())).select("stream", "stream_index")
    comm = (
        comm.join(index, on="stream")
        .with_columns(k=pl.int_range(pl.len()).over("stream_index"), family=family(pl.col("name")))
        .select("stream_index", "k", "name", "family", "start_ns", "end_ns", "launch_start_ns", "launch_end_ns")
    )
    ops = trace.ops.filter(category_in("cpu_op", "user_annotation")).select(
        kind=pl.lit("op"), name="name", start_ns=pl.col("ts_ns") + base, end_ns=pl.col("end_ns") + base
    )
    busy = kernels.filter(~is_communication(kernels["name"])).select(
        kind=pl.lit("kernel"), name="name", start_ns=pl.col("ts_ns") + base, end_ns=pl.col("end_ns") + base
    )
    calls = trace.runtime.select(
        kind=pl.lit("runtime"), name="name", start_ns=pl.col("ts_ns") + base, end_ns=pl.col("end_ns") + base
    )
    return RankEvents(rank, comm, pl.concat([ops, calls, busy]))


def family(name: pl.Expr) -> pl.Expr:
    """`ncclDevKernel_AllReduce_Sum_f32_RING_LL` -> `AllReduce`; other names as written."""
    return name.str.extract(FAMILY.pattern, 1).fill_null(name)


@dataclass(frozen=True)
class Skew:
    """The arrival figures of one job (empty frames when no collective matched)."""

    collectives: pl.DataFrame  # one row per matched collective
    ranks: pl.DataFrame  # one row per rank
    lost_ns: int  # the job's time lost to late arrivals
    window: list[dict[str, Any]]  # the late rank's activity in the largest skew
    note: str | None = None


def arrival_skew(events: list[RankEvents]) -> Skew:
    """Steps 1-6 of the module's rule over the ranks of one job."""
    if len(events) < 2 or any(e.collectives.is_empty() for e in events):
        return Skew(pl.DataFrame(), pl.DataFrame(), 0, [], "no collectives on every rank: arrivals not measured")
    matched, note = _match(events)
    if matched.is_empty():
        return Skew(pl.DataFrame(), pl.DataFrame(), 0, [], note)
    ref = min(e.rank for e in events)
    ends = matched.filter(pl.col("rank") == ref).select("stream_index", "k", ref_end="end_ns")
    offsets = (
        matched.join(ends, on=["stream_index", "k"])
        .group_by("rank")
        .agg(clock_offset_ns=(pl.col("end_ns") - pl.col("ref_end")).median().round().cast(pl.Int64))
    )
    a = matched.join(offsets, on="rank").with_columns(
        arrival_ns=pl.col("start_ns") - pl.col("clock_offset_ns"),
        aligned_end_ns=pl.col("end_ns") - pl.col("clock_offset_ns"),
        launched_late=(pl.col("start_ns") - pl.col("launch_end_ns")) <= LAUNCH_SLACK_NS,
    )
    key = ["stream_index", "k"]
    a = a.with_columns(
        last_ns=pl.col("arrival_ns").max().over(key),
        first_ns=pl.col("arrival_ns").min().over(key),
        median_ns=pl.col("arrival_ns").sort().get((pl.len() - 1) // 2).over(key),
    ).with_columns(wait_ns=pl.col("last_ns") - pl.col("arrival_ns"), is_last=pl.col("arrival_ns") == pl.col("last_ns"))
    # the late rank of a collective: the last to arrive (the lowest rank on a tie)
    late = a.filter("is_last").group_by(key).agg(late_rank=pl.col("rank").min())
    per = (
        a.group_by(key)
        .agg(
            family=pl.col("family").first(),
            name=pl.col("name").sort_by("rank").first(),
            first_arrival_ns=pl.col("first_ns").first(),
            median_arrival_ns=pl.col("median_ns").first(),
            last_arrival_ns=pl.col("last_ns").first(),
            end_spread_ns=pl.col("aligned_end_ns").max() - pl.col("aligned_end_ns").min(),
            latest=pl.col("rank").sort_by("arrival_ns", "rank", descending=[True, False]).head(LATEST_SHOWN),
        )
        .join(late, on=key)
        .with_columns(
            skew_ns=pl.col("last_arrival_ns") - pl.col("first_arrival_ns"),
            lost_ns=pl.col("last_arrival_ns") - pl.col("median_arrival_ns"),
        )
        .with_columns(latest_ranks=pl.col("latest").cast(pl.List(pl.String)).list.join(","))
        .drop("latest")
        .sort(key)
    )
    per = per.join(
        a.select(*key, late_rank="rank", late_launched_late="launched_late"), on=[*key, "late_rank"], how="left"
    ).sort(key)
    lost_to = per.group_by(rank="late_rank").agg(
        times_last=pl.len().cast(pl.Int64), lost_to_rank_ns=pl.col("lost_ns").sum()
    )
    total = int(per["lost_ns"].sum())
    ranks = (
        a.group_by("rank")
        .agg(
            pl.col("clock_offset_ns").first(),
            collectives=pl.len().cast(pl.Int64),
            arrival_wait_ns=pl.col("wait_ns").sum(),
            late_ns=(pl.col("arrival_ns") - pl.col("median_ns")).clip(lower_bound=0).sum(),
        )
        .join(lost_to, on="rank", how="left")
        .with_columns(pl.col("times_last", "lost_to_rank_ns").fill_null(0))
        .with_columns(late=(pl.col("lost_to_rank_ns") > 0) & (pl.col("lost_to_rank_ns") >= STRAGGLER_MIN_SHARE * total))
        .sort("rank")
    )
    return Skew(per, ranks, total, _window(events, a, per), note)


def _match(events: list[RankEvents]) -> tuple[pl.DataFrame, str | None]:
    """The collectives present on every rank with one name family, up to the first mismatch."""
    frames = [e.collectives.with_columns(rank=pl.lit(e.rank, pl.Int64)) for e in events]
    every = pl.concat(frames)
    shared = every.group_by("stream_index", "k").agg(
        n=pl.col("rank").n_unique(), families=pl.col("family").n_unique()
    )
    ok = shared.filter(pl.col("n") == len(events))
    bad = ok.filter(pl.col("families") > 1)
    note = None
    if bad.height:  # cut each stream at its first disagreement
        cut = bad.group_by("stream_index").agg(cut=pl.col("k").min())
        ok = ok.join(cut, on="stream_index", how="left").filter(pl.col("cut").is_null() | (pl.col("k") < pl.col("cut")))
        note = "collectives stop matching by name across ranks: later ones are not compared"
    counts = every.group_by("rank").len()["len"]
    if counts.n_unique() > 1 and note is None:
        note = f"ranks have {counts.min()} to {counts.max()} collectives: the first common ones are compared"
    return every.join(ok.select("stream_index", "k"), on=["stream_index", "k"]), note


def _window(events: list[RankEvents], a: pl.DataFrame, per: pl.DataFrame) -> list[dict[str, Any]]:
    """What the late rank of the largest-skew collective ran between the first arrival and its own."""
    top = per.sort("skew_ns", descending=True).row(0, named=True)
    if top["skew_ns"] <= 0:
        return []
    rank = top["late_rank"]
    offset = a.filter(pl.col("rank") == rank)["clock_offset_ns"][0]
    lo, hi = top["first_arrival_ns"] + offset, top["last_arrival_ns"] + offset  # in the rank's own clock
    activity = next(e.activity for e in events if e.rank == rank)
    inside = activity.with_columns(
        overlap_ns=pl.min_horizontal(pl.col("end_ns"), pl.lit(hi)) - pl.max_horizontal(pl.col("start_ns"), pl.lit(lo))
    ).filter(pl.col("overlap_ns") > 0)
    grouped = inside.group_by("kind", "name").agg(pl.col("overlap_ns").sum(), count=pl.len().cast(pl.Int64))
    first = activity["start_ns"].min()
    if first is not None and first > lo:
        before = pl.DataFrame({"kind": ["before trace"], "name": ["(before the rank's first event)"],
                               "overlap_ns": [min(first, hi) - lo], "count": [1]})
        grouped = pl.concat([grouped, before], how="vertical_relaxed")
    rows = grouped.sort(["overlap_ns", "kind", "name"], descending=[True, False, False]).head(WINDOW_TOP)
    return [{"rank": rank, "collective": top["k"], "stream_index": top["stream_index"], **r} for r in rows.to_dicts()]


def window_text(window: list[dict[str, Any]]) -> str | None:
    """`rank 7: aten::to 3.1 ms (op), ...`: the late rank's activity in one line."""
    from tracekit import format as fmt

    if not window:
        return None
    parts = [f"{w['name']} {fmt.ns(w['overlap_ns'])} ({w['kind']})" for w in window]
    return f"rank {window[0]['rank']}: " + ", ".join(parts)


__all__ = ["RankEvents", "Skew", "rank_events", "arrival_skew", "window_text", "family"]
