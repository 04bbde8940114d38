"""GPU timeline: busy, idle and utilisation per device and per stream, in one or more windows.

Busy set: kernels, memcpys and memsets (`model.GPU_WORK_CATS`). `cuda_sync` records,
`gpu_user_annotation` ranges and profiler `overhead` rows are never busy time.

Window (other tools disagree on it, so it is stated with every figure):
- default: per device, from the first start to the last end of that device's GPU work
  (the device span). Streams of a device are measured in the device's window.
- with `windows` (from `windows.window_bounds`, e.g. every `ProfilerStep#N`): each
  annotation's CPU range `[start, end)`, for every device that has GPU work in the trace;
  work is clipped to the window.

Per device (and window): `busy_ns` = length of the union of the work intervals (overlap
between streams counted once); `span_ns` = window length; `idle_ns` = span - busy;
`utilisation` = busy / span (null for a zero-length window). Per stream the same with the
stream's own union, in the device's window. The headline sums devices (and windows):
`utilisation` = Σ busy / Σ span.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.analysis.intervals import union_ns_plan, union_plan
from tracekit.model import ENGINE, GPU_WORK_CATS, TEXT, Trace

I64, F64, STR = pl.Int64, pl.Float64, pl.String
WINDOW_KEYS = ["window_eid", "device"]

WORK_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "cat": TEXT, "name": STR, "device": I64, "stream": I64, "ts_ns": I64, "end_ns": I64,
}
BOUNDS_SCHEMA: dict[str, pl.DataType] = {
    "window_eid": I64, "window_name": STR, "device": I64, "window_start_ns": I64, "window_end_ns": I64,
}
DEVICE_SCHEMA: dict[str, pl.DataType] = {
    "window_eid": I64, "window_name": STR, "device": I64, "start_ns": I64, "end_ns": I64,
    "span_ns": I64, "busy_ns": I64, "idle_ns": I64, "utilisation": F64, "activities": I64, "streams": I64,
}
STREAM_SCHEMA: dict[str, pl.DataType] = {
    "window_eid": I64, "window_name": STR, "device": I64, "stream": I64, "span_ns": I64,
    "busy_ns": I64, "idle_ns": I64, "utilisation": F64, "activities": I64,
}
BUSY_SCHEMA: dict[str, pl.DataType] = {"window_eid": I64, "device": I64, "start_ns": I64, "end_ns": I64}


def work_rows(trace: Trace) -> pl.DataFrame:
    """The GPU work rows (WORK_SCHEMA); an end before the start is read as the start."""
    work = trace.gpu.lazy().filter(pl.col("cat").is_in(GPU_WORK_CATS) & pl.col("ts_ns").is_not_null())
    return work.select(
        "eid", "cat", "name", pl.col("device").fill_null(-1), pl.col("stream").fill_null(-1), "ts_ns",
        pl.max_horizontal("ts_ns", "end_ns").alias("end_ns"),
    ).cast(WORK_SCHEMA).collect(engine=ENGINE)


def device_bounds(work: pl.DataFrame, windows: pl.DataFrame | None = None) -> pl.DataFrame:
    """One window per device (BOUNDS_SCHEMA): its span, or each of `windows` per device."""
    if windows is None:
        spans = work.lazy().group_by("device").agg(window_start_ns=pl.col("ts_ns").min(),
                                                   window_end_ns=pl.col("end_ns").max())
        out = spans.with_columns(window_eid=pl.lit(None, I64), window_name=pl.lit(None, STR))
    else:
        devices = work.lazy().select("device").unique()
        out = windows.lazy().select("window_eid", "window_name", "window_start_ns", "window_end_ns").join(
            devices, how="cross")
    return out.select(list(BOUNDS_SCHEMA)).cast(BOUNDS_SCHEMA).sort("device", "window_start_ns").collect(engine=ENGINE)


FEW_WINDOWS = 32  # windows per device up to which `windowed` pairs rows by a plain join (an
# inequality join costs several times more on a few windows)


def windowed(work: pl.DataFrame, bounds: pl.DataFrame) -> pl.DataFrame:
    """Work rows paired with the windows of their device, clipped to them.

    A zero-length row counts in a window when it lies inside it (boundaries included).
    """
    if work.is_empty() or bounds.is_empty():
        return pl.DataFrame(schema={**WORK_SCHEMA, **BOUNDS_SCHEMA})
    per_device = bounds.group_by("device").len()["len"].max()
    if per_device <= FEW_WINDOWS:  # each row against each window of its device: a plain join
        pairs = work.lazy().join(bounds.lazy(), on="device", how="inner", maintain_order="left").filter(
            (pl.col("ts_ns") <= pl.col("window_end_ns")) & (pl.col("end_ns") >= pl.col("window_start_ns")))
    else:
        right = bounds.rename({"device": "_device"})
        pairs = work.join_where(right, pl.col("ts_ns") <= pl.col("window_end_ns"),
                                pl.col("end_ns") >= pl.col("window_start_ns")).lazy()
        pairs = pairs.filter(pl.col("device") == pl.col("_device")).drop("_device")
    overlaps = (pl.col("ts_ns") < pl.col("window_end_ns")) & (pl.col("end_ns") > pl.col("window_start_ns"))
    inside = overlaps | (pl.col("ts_ns") == pl.col("end_ns"))
    return pairs.filter(inside).with_columns(
        pl.max_horizontal("ts_ns", "window_start_ns").alias("ts_ns"),
        pl.min_horizontal("end_ns", "window_end_ns").alias("end_ns"),
    ).collect(engine=ENGINE)


@dataclass(frozen=True)
class Timeline:
    """Result of `timeline`. Frames are typed even when empty."""

    devices: pl.DataFrame  # DEVICE_SCHEMA: one row per (window, device)
    streams: pl.DataFrame  # STREAM_SCHEMA: one row per (window, device, stream)
    busy: pl.DataFrame  # BUSY_SCHEMA: the merged busy intervals per (window, device)
    window: str  # "device span" or the window name/pattern given
    span_ns: int  # Σ over devices (and windows) of span_ns
    busy_ns: int
    idle_ns: int
    utilisation: float | None  # busy_ns / span_ns

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window, "span_ns": self.span_ns, "busy_ns": self.busy_ns,
            "idle_ns": self.idle_ns, "utilisation": self.utilisation,
            "devices": self.devices.to_dicts(), "streams": self.streams.to_dicts(),
        }


def timeline(trace: Trace, *, windows: pl.DataFrame | None = None,
             window_label: str | None = None) -> Timeline:
    """Busy/idle per device and stream; `windows` as returned by `windows.window_bounds`."""
    work = work_rows(trace)
    bounds = device_bounds(work, windows)
    rows = windowed(work, bounds)
    busy = union_plan(rows.lazy(), WINDOW_KEYS).select(list(BUSY_SCHEMA)).cast(BUSY_SCHEMA).collect(engine=ENGINE)
    devices = _devices(rows, busy, bounds)
    streams = _streams(rows, bounds)
    span, busy_ns = int(devices["span_ns"].sum() or 0), int(devices["busy_ns"].sum() or 0)
    label = window_label if window_label is not None else ("device span" if windows is None else "windows")
    return Timeline(devices=devices, streams=streams, busy=busy, window=label, span_ns=span,
                    busy_ns=busy_ns, idle_ns=span - busy_ns, utilisation=busy_ns / span if span else None)


def _with_idle(frame: pl.LazyFrame) -> pl.LazyFrame:
    return frame.with_columns(
        busy_ns=pl.col("busy_ns").fill_null(0), activities=pl.col("activities").fill_null(0),
        span_ns=pl.col("window_end_ns") - pl.col("window_start_ns"),
    ).with_columns(
        idle_ns=pl.col("span_ns") - pl.col("busy_ns"),
        utilisation=pl.when(pl.col("span_ns") > 0).then(pl.col("busy_ns") / pl.col("span_ns")),
    )


def _devices(rows: pl.DataFrame, busy: pl.DataFrame, bounds: pl.DataFrame) -> pl.DataFrame:
    per = busy.lazy().group_by(WINDOW_KEYS).agg(busy_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    counts = rows.lazy().group_by(WINDOW_KEYS).agg(activities=pl.len(), streams=pl.col("stream").n_unique())
    out = bounds.lazy().join(per, on=WINDOW_KEYS, how="left", nulls_equal=True).join(
        counts, on=WINDOW_KEYS, how="left", nulls_equal=True)
    out = _with_idle(out).with_columns(
        start_ns=pl.col("window_start_ns"), end_ns=pl.col("window_end_ns"),
        streams=pl.col("streams").fill_null(0))
    return out.select(list(DEVICE_SCHEMA)).cast(DEVICE_SCHEMA).sort("device", "start_ns", "window_eid").collect(
        engine=ENGINE)


def _streams(rows: pl.DataFrame, bounds: pl.DataFrame) -> pl.DataFrame:
    keys = [*WINDOW_KEYS, "stream"]
    per = union_ns_plan(rows.lazy(), keys, name="busy_ns")
    counts = rows.lazy().group_by(keys).agg(activities=pl.len())
    out = counts.join(per, on=keys, how="left", nulls_equal=True).join(
        bounds.lazy(), on=WINDOW_KEYS, how="left", nulls_equal=True)
    return _with_idle(out).select(list(STREAM_SCHEMA)).cast(STREAM_SCHEMA).sort(
        "device", "stream", "window_eid").collect(engine=ENGINE)
