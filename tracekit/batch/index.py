"""The batch's `index.html`: one sortable, filterable row per trace, linked to its report,
and trend charts over capture time, one line per group of comparable traces. Values are
formatted here; the template only lays out.

Charts are server-side SVG (`TrendChart`: coordinates computed here, drawn by the
template). They appear when at least two traces carry a capture time (the capture
metadata's `created`, Kineto's `baseTimeNanoseconds`, or calendar-time timestamps) and a value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit import __version__
from tracekit import format as fmt
from tracekit.analysis.gaps import CAUSE_LABELS
from tracekit.batch.schema import IDLE_CAUSES
from tracekit.render.html import render_page
from tracekit.report.tables import frame_table

W, H, LEFT, RIGHT, TOP, BOTTOM = 1000.0, 220.0, 70.0, 20.0, 12.0, 28.0
NOT_PYTORCH = "not a PyTorch trace"
CLIP = 40
# Line colours of the trend charts' groups (colour-blind-safe Okabe-Ito, then repeated).
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000")  # characters of a kernel name or error shown in the table (in full: summary.parquet, errors table)

SUMMARY_COLUMNS = [
    ("path", "trace", "text", "path under the folder, glob or URL given; links to the trace's report"),
    ("origin", "origin", "label", ("PyTorch when the trace has Kineto's markers (cpu_op or kernel events, "
                                   "schemaVersion, deviceProperties); the GPU and step figures assume them")),
    ("captured", "captured (UTC)", "label"),
    ("devices", "devices", "label"),
    ("model", "model", "text"),
    ("steps", "steps", "count"),
    ("step_median_ns", "median step", "ns", "median ProfilerStep CPU duration"),
    ("gpu_utilisation", "GPU util.", "pct", "busy / span, summed over devices"),
    ("idle_ns", "GPU idle", "ns"),
    ("top_idle_cause", "main idle cause", "label"),
    ("top_kernel", "top kernel", "text"),
    ("top_kernel_share", "its share", "pct"),
    ("attention_backend", "attention", "label"),
    ("findings_high", "high findings", "count"),
    ("critical_path_verdict", "critical path", "label"),
    ("load_warnings", "load warnings", "count"),
    ("error", "error", "text"),
]
RANK_COLUMNS = [
    ("name", "job", "text"),
    ("rank", "rank", "count"),
    ("step_median_ns", "median step", "ns"),
    ("gpu_utilisation", "GPU util.", "pct"),
    ("compute_ns", "compute", "ns"),
    ("communication_ns", "exposed comm.", "ns"),
    ("overlap_share", "comm. overlapped", "pct"),
    ("work_per_step_ns", "work / step", "ns"),
    ("lag_ns", "work lag vs median", "ns"),
    ("wait_ns", "waits for last arrival", "ns", "sum over collectives of (last rank's arrival - this rank's)"),
    ("times_last", "times last", "count"),
    ("lost_to_rank_ns", "job time lost to it", "ns", "sum of (last - median arrival) where it arrived last"),
    ("straggler", "late rank", "bool"),
]


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    title: str


@dataclass(frozen=True)
class Series:
    """One line: the traces of one group of comparable traces (`trend_group`), in time order."""

    label: str
    colour: str
    points: list[Point]
    polyline: str  # "x,y x,y ..."; drawn when the group has two points or more


@dataclass(frozen=True)
class TrendChart:
    id: str
    title: str
    width: float
    height: float
    left: float
    bottom: float  # y of the x axis
    series: list[Series]
    y_ticks: list[tuple[float, str]]  # (y, label)
    x_ticks: list[tuple[float, str, str]]  # (x, label, text-anchor)


def render_index(result: Any) -> str:
    """The page for a `BatchResult`."""
    return render_page("batch_index.html.j2", **index_context(result))


def index_context(result: Any) -> dict[str, Any]:
    s = result.summary
    shown = s.with_columns(
        captured=pl.col("captured_at").dt.strftime("%Y-%m-%d %H:%M"),
        origin=origin_label(),
        top_idle_cause=top_idle_cause(s).replace(CAUSE_LABELS),
        top_kernel=clip(pl.col("top_kernel"), CLIP),
        error=clip(pl.col("error"), CLIP),
    ).sort(pl.col("error").is_not_null(), "path", "source")
    table = frame_table("traces", f"Traces ({s.height})", shown, SUMMARY_COLUMNS, limit=None)
    errors = s.filter(pl.col("error").is_not_null())  # unclipped
    return {
        "title": f"tracekit batch: {fmt.counted(s.height, 'trace')}",
        "facts": [
            ("traces", fmt.count(s.height)),
            ("analysed by this run", fmt.count(result.analysed)),
            ("from the cache", fmt.count(result.cached)),
            ("failed", fmt.count(result.failed)),
            ("not PyTorch traces", fmt.count(int(s["pytorch"].not_().sum()))),
        ],
        "traces": table,
        "links": shown["report"].to_list(),
        "errors": frame_table(
            "errors",
            f"Traces that could not be analysed ({errors.height})",
            errors,
            [("path", "trace", "text"), ("source", "source", "text"), ("error", "error", "text")],
            limit=None,
        )
        if errors.height
        else None,
        "ranks": frame_table("ranks", "Ranks side by side", result.ranks, RANK_COLUMNS, limit=None)
        if result.ranks.height
        else None,
        "charts": trend_charts(s),
        "notes": list(result.notes),
        "generator": f"tracekit {__version__}",
    }


def clip(text: pl.Expr, width: int) -> pl.Expr:
    return pl.when(text.str.len_chars() > width).then(text.str.slice(0, width - 1) + "…").otherwise(text)


def origin_label() -> pl.Expr:
    """`PyTorch`, or the badge `not a PyTorch trace` (null for rows that could not be read)."""
    return (
        pl.when(pl.col("pytorch")).then(pl.lit("PyTorch"))
        .when(pl.col("pytorch").not_()).then(pl.lit(NOT_PYTORCH))
        .otherwise(pl.lit(None, pl.String))
    )


def top_idle_cause(summary: pl.DataFrame) -> pl.Expr:
    """The idle cause with the most time (null when the trace has no idle time)."""
    cols = [f"idle_{c}_ns" for c in IDLE_CAUSES]
    best = pl.max_horizontal(cols)
    expr = pl.lit(None, pl.String)
    for cause, col in reversed(list(zip(IDLE_CAUSES, cols, strict=True))):
        expr = pl.when((pl.col(col) == best) & (best > 0)).then(pl.lit(cause)).otherwise(expr)
    return expr


def trend_group(summary: pl.DataFrame) -> pl.Series:
    """`GPU · workload` per row: a trend line joins only traces of one GPU model running one
    workload, never unrelated models or GPUs. The workload is the capture's model, else the
    folder holding the file and the file's name with its digits as `#` (`nightly/llama-#-#-#`:
    a series of captures; `traces/a#_alexnet_cuda_sync` and `traces/a#_dlrm_#streams_rank#`
    in one folder stay apart)."""
    name = pl.col("source").str.extract(r"([^/\\]+)$").str.replace(r"(\.pt\.trace)?(\.json)?(\.gz|\.tmp)?$", "")
    folder = pl.col("source").str.extract(r"([^/\\]+)[/\\][^/\\]*$")
    series = pl.concat_str([folder.fill_null(""), name.str.replace_all(r"\d+", "#")], separator="/")
    workload = pl.coalesce(pl.col("model"), series.str.strip_chars("/"), pl.lit("(no name)"))
    gpu = pl.col("devices").fill_null("no GPU listed")
    return summary.select(gpu + pl.lit(" · ") + workload)[:, 0]


def trend_charts(summary: pl.DataFrame) -> list[TrendChart]:
    specs: list[tuple[str, str, str, Callable[[Any], str], bool]] = [
        ("trend-util", "GPU utilisation over capture time", "gpu_utilisation", fmt.pct, True),
        ("trend-step", "Median step time over capture time", "step_median_ns", fmt.ns, False),
        ("trend-idle", "GPU idle time over capture time", "idle_ns", fmt.ns, False),
    ]
    charts = []
    for id_, title, col, formatter, unit_range in specs:
        rows = summary.filter(pl.col("captured_at").is_not_null() & pl.col(col).is_not_null()).sort(
            "captured_at"
        )
        if rows.height >= 2:
            rows = rows.with_columns(group=trend_group(rows))
            data = [
                (r["captured_at"], float(r[col]), r["path"], r["group"])
                for r in rows.select("captured_at", col, "path", "group").iter_rows(named=True)
            ]
            charts.append(trend_chart(id_, title, data, formatter, top=1.0 if unit_range else None))
    return charts


def trend_chart(
    id_: str,
    title: str,
    data: list[tuple[dt.datetime, float, str, str]],
    formatter: Callable[[Any], str],
    *,
    top: float | None = None,
) -> TrendChart:
    """Points (time, value, name, group), in time order -> one line per group on shared axes,
    axis ticks and hover titles."""
    t0, t1 = data[0][0].timestamp(), data[-1][0].timestamp()
    y_max = top if top is not None else max(v for _, v, _, _ in data) * 1.05 or 1.0
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (plot_w * (t - t0) / (t1 - t0) if t1 > t0 else plot_w / 2)

    def y(v: float) -> float:
        return TOP + plot_h * (1 - min(v, y_max) / y_max)

    groups: dict[str, list[Point]] = {}
    for t, v, name, group in data:
        title = f"{name} ({group}): {formatter(v)} at {t:%Y-%m-%d %H:%M} UTC"
        groups.setdefault(group, []).append(Point(x(t.timestamp()), y(v), title))
    series = [
        Series(label, PALETTE[i % len(PALETTE)], pts,
               " ".join(f"{p.x:.1f},{p.y:.1f}" for p in pts) if len(pts) > 1 else "")
        for i, (label, pts) in enumerate(sorted(groups.items()))
    ]
    y_ticks = [(y(y_max * i / 4), formatter(y_max * i / 4)) for i in range(5)]
    span = t1 - t0
    stamp = "%Y-%m-%d" if span > 3 * 86400 else "%m-%d %H:%M"
    anchors = ("start", "middle", "middle", "middle", "end")
    x_ticks = (
        [
            (
                x(t0 + span * i / 4),
                dt.datetime.fromtimestamp(t0 + span * i / 4, dt.UTC).strftime(stamp),
                anchors[i],
            )
            for i in range(5)
        ]
        if span > 0
        else [(x(t0), data[0][0].strftime(stamp), "middle")]
    )
    return TrendChart(
        id=id_,
        title=title,
        width=W,
        height=H,
        left=LEFT,
        bottom=H - BOTTOM,
        series=series,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
    )
