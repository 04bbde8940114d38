"""The timeline picture's model: lanes of pixel runs, aggregated so any trace size fits.

Each lane (a GPU stream, a CPU thread, a device's idle time) is cut into pixel columns;
a column takes the class that covers most of it (CPU lanes: a blocking sync wins, then
launch calls covering a quarter of the pixel, then other CPU work). Neighbouring columns
of one class merge into one rectangle, so a 200k-event trace draws a few thousand.
"""

from __future__ import annotations

import math

import polars as pl

from tracekit import format as fmt
from tracekit import native
from tracekit.native import kernels
from tracekit.report.model import Band, Lane, Rect, Tick, Timeline

LANE_H = 18.0
LANE_GAP = 6.0
LABEL_W = 150.0
TOP = 22.0

GPU_CLASSES = {
    "gemm": "GEMM", "attention": "attention", "softmax": "softmax", "elementwise": "elementwise",
    "reduction": "reduction", "normalization": "normalization", "communication": "communication",
    "memcpy": "memcpy", "memset": "memset", "copy": "copy", "triton": "Triton", "conv": "convolution",
    "embedding": "embedding", "other": "other",
}
CPU_CLASSES = {"sync": "blocking sync", "launch": "launch calls", "cpu": "CPU ops"}
RUNS_SCHEMA = {"lane": pl.Int64, "x0": pl.Int64, "x1": pl.Int64, "cls": pl.String, "covered_ns": pl.Float64,
               "n": pl.Int64, "level": pl.Int64}


def pixel_runs(iv: pl.DataFrame, t0: int, t1: int, width: int) -> pl.DataFrame:
    """Intervals (lane, start_ns, end_ns, cls, prio) -> runs (lane, x0, x1, cls, covered_ns, n, level).

    `level` (1..4) is how much of the run's pixels is covered, in quarters: drawn as opacity.
    """
    schema = RUNS_SCHEMA
    if iv.is_empty() or t1 <= t0:
        return pl.DataFrame(schema=schema)
    return _runs(iv, t0, t1, width)


def _polars_runs(iv: pl.DataFrame, t0: int, t1: int, width: int) -> pl.DataFrame:
    """`pixel_runs` in Polars (the reference of the C pass `pixels`, which takes one lane)."""
    schema = RUNS_SCHEMA
    # integer arithmetic in units of 1/width ns, so that every sum, comparison and rounding
    # below is exact: the same trace always draws the same runs (float sums grouped in
    # parallel differ in their last bits from run to run)
    span = t1 - t0  # one pixel, in these units
    start, end = pl.col("start_ns"), pl.col("end_ns")
    s = (start.clip(t0, t1) - t0) * width
    e = (end.clip(t0, t1) - t0) * width
    # the rows inside [t0, t1) first (a zoomed timeline reads a few of a long lane's rows);
    # `cls` is grouped as given (an Enum groups by code) and becomes text once aggregated
    body = iv.filter((end > t0) & (start < t1)).select("lane", "cls", "prio", s=s, e=e).filter(pl.col("e") > pl.col("s"))
    if body.is_empty():
        return pl.DataFrame(schema=schema)
    # an interval inside one pixel (most of them, zoomed out) is that pixel alone; only the
    # others are exploded into one row per pixel they touch
    first, last = pl.col("s") // span, (pl.col("e") - 1) // span
    one = body.filter(first == last).select("lane", "cls", "prio", p=first, ov=pl.col("e") - pl.col("s"))
    many = body.filter(first != last).with_columns(
        p=pl.int_ranges(first, (-(-pl.col("e") // span)).clip(1, width))
    ).explode("p").filter(pl.col("p").is_not_null() & (pl.col("p") < width))
    many = many.select("lane", "cls", "prio", "p", ov=(
        pl.min_horizontal(pl.col("e"), (pl.col("p") + 1) * span) - pl.max_horizontal(pl.col("s"), pl.col("p") * span))
        .clip(lower_bound=0))
    px = pl.concat([one, many.cast(one.schema)])  # s < e <= width * span: every p < width
    per = px.group_by("lane", "p", "cls").agg(ov=pl.col("ov").sum(), prio=pl.col("prio").max(), n=pl.len())
    per = per.with_columns(pl.col("cls").cast(pl.String))  # ties below break on the text
    per = per.with_columns(score=pl.when(pl.col("ov") * 4 >= span).then(pl.col("prio")).otherwise(0))
    best = (per.sort(["lane", "p", "score", "ov", "cls"], descending=[False, False, True, True, False])
            .unique(["lane", "p"], keep="first"))
    total = px.group_by("lane", "p").agg(all_ov=pl.col("ov").sum())
    best = best.join(total, on=["lane", "p"]).with_columns(
        level=((pl.col("all_ov").clip(upper_bound=span) * 4 + span - 1) // span).clip(1, 4).cast(pl.Int64)
    )
    best = best.sort("lane", "p").with_columns(
        new=((pl.col("p") - pl.col("p").shift(1) != 1) | (pl.col("cls") != pl.col("cls").shift(1))
             | (pl.col("level") != pl.col("level").shift(1)) | (pl.col("lane") != pl.col("lane").shift(1))).fill_null(True)
    ).with_columns(run=pl.col("new").cum_sum())
    runs = best.group_by("run").agg(
        lane=pl.col("lane").first(), x0=pl.col("p").min(), x1=pl.col("p").max() + 1, cls=pl.col("cls").first(),
        covered_ns=pl.col("all_ov").sum() / width, n=pl.col("n").sum(), level=pl.col("level").first(),
    )
    return runs.select(list(schema)).sort("lane", "x0").cast(schema)


def _native_runs(iv: pl.DataFrame, t0: int, t1: int, width: int) -> pl.DataFrame | None:
    """`pixel_runs` of a one-lane frame in C; None where it does not apply (several lanes,
    nulls, a window too wide for 64-bit units)."""
    lanes = iv["lane"].unique()
    if lanes.len() != 1 or lanes.null_count() or iv.select(pl.col("cls", "prio").null_count()).row(0) != (0, 0):
        return None
    start, end = pl.col("start_ns"), pl.col("end_ns")
    body = iv.filter(start.is_not_null() & end.is_not_null() & (end > t0) & (start < t1))
    cls = body["cls"]
    if isinstance(cls.dtype, pl.Enum):  # codes renumbered in the order of the names (ties break on it)
        names = cls.dtype.categories
        rank = names.rank("ordinal").cast(pl.Int64) - 1
        codes, names = rank.gather(cls.to_physical()), names.sort()
    else:
        text = cls.cast(pl.String)
        names = text.unique().sort()
        codes = text.cast(pl.Enum(names)).to_physical()
    cols = (body["start_ns"], body["end_ns"], codes, body["prio"])
    out = kernels.pixels(*cols, t0, t1, width, max(names.len(), 1))
    if out is None:
        return None
    runs = out.select(
        lane=pl.lit(lanes[0], pl.Int64), x0="x0", x1="x1", cls=names.gather(out["code"]), covered_ns=pl.col("covered") / width,
        n="n", level="level")
    return runs.cast(RUNS_SCHEMA)


_runs = native.register("pixels", c=_native_runs, reference=_polars_runs)


def ticks(t0: int, t1: int, width: int, label_w: float, origin: int | None = None) -> list[Tick]:
    """Axis ticks at round times measured from `origin` (default: `t0`): a zoomed window
    labels its ticks in the same time as the rest of the report (from the trace's start)."""
    origin = t0 if origin is None else origin
    span = max(t1 - t0, 1)
    raw = span / 8
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=10 * mag)
    out, k = [], math.ceil((t0 - origin) / step)
    while k * step <= t1 - origin:
        at = origin + k * step - t0
        out.append(Tick(x=label_w + at / span * width, label=fmt.ns(k * step)))
        k += 1
    return out


def build_timeline(
    *,
    id: str,
    title: str,
    lanes: list[tuple[str, str, pl.DataFrame]],
    t0: int,
    t1: int,
    width: int = 1100,
    bands: pl.DataFrame | None = None,
    legend: list[tuple[str, str]] | None = None,
    window: str = "",
    note: str = "",
    origin: int | None = None,
) -> Timeline:
    """`lanes`: (label, hover title, intervals with start_ns, end_ns, cls, prio).
    `origin`: the time the axis counts from (default: t0).

    Idle gaps (cls `gap-<cause>`) and the critical path (cls `cp-<class>`) are lanes too.
    """
    # one lane at a time: the pixels of every lane at once were the report's peak at scale
    runs = [pixel_runs(iv.select("start_ns", "end_ns", "cls", "prio", lane=pl.lit(i, pl.Int64)), t0, t1, width)
            for i, (_, _, iv) in enumerate(lanes) if not iv.is_empty()]
    npp = (t1 - t0) / width if t1 > t0 else 1.0
    by_lane: dict[int, list[Rect]] = {}
    for lane, x0, x1, cls, covered, n, level in (row for frame in runs for row in frame.iter_rows()):
        label = GPU_CLASSES.get(cls) or CPU_CLASSES.get(cls) or cls
        # (`n` counts an interval once per pixel it touches, and `covered` sums nested or
        # overlapping intervals: neither is a count of events or a union, so neither is named so)
        tip = f"mostly {label}; {fmt.ns(covered)} of activity summed over these {fmt.ns((x1 - x0) * npp)}"
        css = f"c-{cls}" + ("" if level == 4 else f" o{level}")
        by_lane.setdefault(lane, []).append(Rect(x=LABEL_W + x0, width=float(x1 - x0), css_class=css, title=tip))
    out_lanes = [
        Lane(label=label, title=hover, y=TOP + i * (LANE_H + LANE_GAP), height=LANE_H, rects=by_lane.get(i, []))
        for i, (label, hover, _) in enumerate(lanes)
    ]
    height = TOP + len(lanes) * (LANE_H + LANE_GAP) + 4
    used = {r.css_class.split()[0] for lane in out_lanes for r in lane.rects}
    return Timeline(
        id=id, title=title, width=LABEL_W + width, height=height, label_width=LABEL_W, lanes=out_lanes,
        bands=_bands(bands, t0, t1, width), ticks=ticks(t0, t1, width, LABEL_W, origin),
        legend=[(c, label) for c, label in (legend or []) if c in used], window=window, note=note,
    )


def _bands(bands: pl.DataFrame | None, t0: int, t1: int, width: int) -> list[Band]:
    if bands is None or bands.is_empty() or t1 <= t0:
        return []
    span = t1 - t0
    out = []
    for name, s, e in bands.select("name", "start_ns", "end_ns").iter_rows():
        s, e = max(s, t0), min(e, t1)
        if e > s:
            out.append(Band(x=LABEL_W + (s - t0) / span * width, width=max((e - s) / span * width, 1.0), label=name))
    return out
