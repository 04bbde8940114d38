"""Chunk parts -> the typed frames of a `Trace`, and the notes that need every chunk.

Parts arrive per chunk with local event ids; here they are put in file order (eids
offset by the events of the chunks before), B/E and async begin/end pairs are paired
(after concatenation, so pairs that straddle chunks pair), and every frame is sorted by
time. Notes keep the order and wording they always had.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.loader.chrome import pair_spans
from tracekit.loader.columns import EMPTY_SCHEMAS, Parts, empty_part, slices_by_frame, thread_key
from tracekit.loader.constants import constant_columns
from tracekit.loader.events import decode_any
from tracekit.model import COUNTERS_SCHEMA, ENGINE, SCHEMAS

Note = tuple[str, str, int, str, int | None]  # level, code, count, message, first eid
INFO_CODES = frozenset({"zero_duration", "out_of_order", "ignored_phase", "duplicate_correlation",
                        "duplicate_correlation_gpu", "duplicate_flow_id"})

PAIRINGS = (
    ("B", "E", ["pid", "tid"], "B/E"),
    ("b", "e", ["pid", "cat", "_id"], "async b/e"),
    ("S", "F", ["pid", "cat", "_id", "name"], "async S/F"),
)
STAT_MESSAGES = {
    "missing_ts": "{n:,} [events|event] had no usable 'ts' and [were|was] dropped",
    "missing_duration": "{n:,} complete [events|event] had no usable 'dur'; treated as 0",
    "negative_duration": "{n:,} complete [events|event] had a negative 'dur'; treated as 0",
    "zero_duration": "{n:,} complete [events have|event has] zero duration",
    "bad_flow_id": "{n:,} flow [events|event] had no usable 'id'",
    "unknown_phase": "{n:,} [events|event] had an unknown or missing 'ph'; ignored",
    "ignored_phase": "{n:,} sample/object/context [events|event] (ph P, O, N, D, c, parentheses) [are|is] not analysed",
    "time_overflow": "{n:,} complete [events end|event ends] past the largest time Int64 nanoseconds can hold; "
                     "[their duration was|its duration was] cut to end there",
    "invalid_utf8": "{n:,} byte [sequences were|sequence was] not valid UTF-8; replaced by U+FFFD",
    "arg_out_of_range": "{n:,} [events|event] had args numbers too large for a 64-bit column (correlation, External id, "
                        "grid...); read as null",
    "deep_nesting": "{n:,} JSON [values were|value was] nested more than 200 levels deep; [their|its] contents were dropped",
}


class Notes:
    def __init__(self) -> None:
        self.rows: list[Note] = []

    def add(self, code: str, count: int, message: str, first: int | None = None) -> None:
        """`message`: `{n:,}` for the count, `[many|one]` for words in its number (`fmt.agree`)."""
        if count:
            level = "info" if code in INFO_CODES else "warning"
            self.rows.append((level, code, count, fmt.agree(message, count).format(n=count), first))

    def rows_of(self, code: str, rows: pl.DataFrame, message: str) -> None:
        if rows.height:
            self.add(code, rows.height, message, int(rows["eid"].min()))


class Frames:
    """Concatenates the chunks' parts in file order and finishes each frame."""

    def __init__(self, parts: Sequence[Parts]) -> None:
        self.parts = list(parts)
        self.offsets: list[int] = []
        total = 0
        for p in self.parts:
            self.offsets.append(total)
            total += p.n
        self.events = total

    def take(self, name: str) -> pl.LazyFrame:
        """`cat`, and the parts' frames of that name are let go (the plan holds them until run)."""
        out = self.cat(name)
        for p in self.parts:
            p.frames.pop(name, None)
        return out

    def in_file_order(self, name: str) -> bool:
        """The parts' rows of that name, concatenated, are in eid order (chunks follow each
        other in the file, so each part in order is enough)."""
        return all(p.frames[name]["eid"].is_sorted() for p in self.parts if name in p.frames)

    def cat(self, name: str) -> pl.LazyFrame:
        pieces = [p.frames[name].lazy().with_columns(eid=pl.col("eid") + off)
                  for p, off in zip(self.parts, self.offsets) if name in p.frames and p.frames[name].height]
        if not pieces:
            return empty_part(name).lazy()
        # the unprojected groups (pairs, counters, meta) may differ in optional columns
        return pl.concat(pieces, how="vertical" if name in EMPTY_SCHEMAS else "diagonal_relaxed")

    def stat(self, code: str) -> tuple[int, int | None]:
        count, first = 0, None
        for p, off in zip(self.parts, self.offsets):
            n, f = p.stats.get(code, (0, None))
            count += n
            if f is not None and (first is None or f + off < first):
                first = f + off
        return count, first

    def note_stat(self, notes: Notes, code: str, extra: int = 0) -> None:
        count, first = self.stat(code)
        notes.add(code, count + extra, STAT_MESSAGES[code], first)

    @property
    def kineto(self) -> bool:
        return any(p.kineto for p in self.parts)

    @property
    def lenient(self) -> tuple[int, int]:
        return sum(p.bad_types for p in self.parts), sum(p.dropped for p in self.parts)


def build_frames(frames: Frames, notes: Notes) -> dict[str, pl.DataFrame]:
    """The eight frames (counters included) in schema order, sorted by time; adds notes.

    Frames are finished one at a time and each one's chunk parts are let go as soon as it
    is built, so the peak is the parts plus one sorted frame, not twice everything.
    """
    for code in ("missing_ts", "missing_duration", "negative_duration", "zero_duration"):
        frames.note_stat(notes, code)
    paired = _pairs(frames.take("pairs").collect(engine=ENGINE), notes, frames)
    extra: dict[str, list[pl.LazyFrame]] = {"ops": [], "runtime": [], "gpu": [], "order": []}
    if paired is not None:
        for name, lf in slices_by_frame(paired.lazy()).items():
            extra[name].append(lf)
        extra["order"].append(paired.lazy().select("eid", thread_key(), "ts_ns"))
    frames.note_stat(notes, "bad_flow_id")
    frames.note_stat(notes, "unknown_phase")
    frames.note_stat(notes, "ignored_phase")
    order = frames.take("order")  # in file order already: each chunk's part is, and the chunks follow each other
    if extra["order"]:
        order = pl.concat([order, *extra["order"]], how="vertical").sort("eid")
    order = order.collect(engine=ENGINE)
    _order_notes(order, notes)
    del order
    done: dict[str, pl.DataFrame] = {}
    for name in ("ops", "runtime", "gpu", "flows", "instants", "memory"):
        ordered = not extra.get(name) and frames.in_file_order(name)
        lf = pl.concat([frames.take(name), *extra.get(name, [])], how="vertical")
        done[name] = constant_columns(_sorted(lf, name, in_file_order=ordered).collect(engine=ENGINE))
    done["counters"] = counters_frame(frames.take("counters").collect(engine=ENGINE))
    return {name: done[name] for name in SCHEMAS if name != "warnings"}


def _sorted(lf: pl.LazyFrame, name: str, *, in_file_order: bool = False) -> pl.LazyFrame:
    """In time order, ties in file (eid) order. Rows already in file order take a stable sort
    on time alone: the same order, and about half the cost on nearly sorted traces."""
    schema = SCHEMAS[name]
    lf = lf.select([pl.col(c).cast(t) for c, t in schema.items()])
    if in_file_order:
        return lf.sort("ts_ns", nulls_last=True, maintain_order=True)
    return lf.sort(["ts_ns", "eid"], nulls_last=True)


def _pairs(rows: pl.DataFrame, notes: Notes, frames: Frames) -> pl.DataFrame | None:
    """B/E, b/e and S/F rows -> slices (begin rows with a duration); notes unmatched ones.

    A `B` that no `E` closes is closed at the end of its thread (`_thread_ends`), as Chrome's
    viewer and Perfetto show it, so that it and what nests under it stay; an async begin
    with no end is dropped; an end with nothing open is dropped."""
    if rows.is_empty():
        return None
    rows = rows.rename({"id": "_id"})
    out = []
    for begin, end, keys, label in PAIRINGS:
        if not rows["ph"].is_in([begin, end]).any():
            continue
        pairs, open_, lone_e = pair_spans(rows, begin, end, keys)
        if begin == "B" and open_.height:
            closed = open_.join(_thread_ends(rows, frames), on=["pid", "tid"], how="left", nulls_equal=True)
            closed = closed.with_columns(dur_ns=pl.max_horizontal(pl.col("_thread_end") - pl.col("ts_ns"), 0))
            notes.add("unclosed_begin", open_.height, f"{{n:,}} '{begin}' [events|event] ({label}) had no matching end; "
                      "closed at the last end of any event on [their|its] thread", int(open_["eid"].min()))
            pairs = pl.concat([pairs, closed.drop("_thread_end")], how="vertical_relaxed")
        else:
            notes.add(f"unmatched_{begin}", open_.height, f"{{n:,}} '{begin}' [events|event] ({label}) had no matching end; dropped")
        notes.add(f"unmatched_{end}", lone_e, f"{{n:,}} '{end}' [events|event] ({label}) had no matching begin; dropped")
        out.append(pairs.drop("_id"))
    return pl.concat(out, how="vertical_relaxed") if out else None


def _thread_ends(pairs: pl.DataFrame, frames: Frames) -> pl.DataFrame:
    """pid, tid, `_thread_end`: the latest end of any event on each thread (slices and calls
    at ts + dur, instants, memory samples and B/E/b/e/S/F events at their time). Read only
    when a `B` is left open: the chunks' parts are still there."""
    text = [pl.col("pid").cast(pl.String), pl.col("tid").cast(pl.String)]
    ends = [frames.cat(name).select(*text, t=pl.col("end_ns")) for name in ("ops", "runtime")]
    ends += [frames.cat(name).select(*text, t=pl.col("ts_ns")) for name in ("instants", "memory")]
    ends.append(pairs.lazy().select(*text, t=pl.col("ts_ns")))
    return pl.concat(ends).group_by("pid", "tid").agg(_thread_end=pl.col("t").max()).collect(engine=ENGINE)


def _order_notes(slices: pl.DataFrame, notes: Notes) -> None:
    back = slices.with_columns(_back=(pl.col("ts_ns").diff().over("thread") < 0)).filter(pl.col("_back"))
    notes.rows_of("out_of_order", back, "{n:,} [events appear|event appears] earlier in time than the event before [them|it] on [their|its] thread; frames are sorted by time")
    notes.rows_of("negative_ts", slices.filter(pl.col("ts_ns") < 0), "{n:,} [events have|event has] a negative timestamp (kept as is)")


_FLOAT_MAX = sys.float_info.max


def counters_frame(rows: pl.DataFrame) -> pl.DataFrame:
    """`C` events -> one row per numeric series value."""
    eids, series, values = [], [], []
    for eid, text in zip(rows["eid"].to_list(), rows["args"].to_list()) if rows.height else ():
        obj = decode_any(text) if text is not None else None
        for key, value in (obj.items() if isinstance(obj, dict) else ()):
            if isinstance(value, int) and abs(value) > _FLOAT_MAX:
                continue  # an integer beyond Float64 (400 digits) is no series value: float() would raise
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                eids.append(eid)
                series.append(str(key))
                values.append(float(value))
    samples = pl.DataFrame({"eid": eids, "series": series, "value": values},
                           schema={"eid": pl.Int64, "series": pl.String, "value": pl.Float64})
    if not rows.height:
        return pl.DataFrame(schema=COUNTERS_SCHEMA)
    joined = samples.join(rows, on="eid", how="left")
    return joined.select([pl.col(c).cast(t) for c, t in COUNTERS_SCHEMA.items()]).sort(
        ["ts_ns", "eid"], nulls_last=True, maintain_order=True)


def skew_note(notes: Notes, runtime: pl.DataFrame, gpu: pl.DataFrame) -> None:
    if runtime.is_empty() or gpu.is_empty():
        return
    first = pl.col("correlation").is_not_null() & pl.col("correlation").is_first_distinct()  # the first call of an id
    launches = runtime.lazy().filter(first).select("correlation", launch_ts=pl.col("ts_ns"))
    early = (
        gpu.lazy().filter(pl.col("cat").is_in(["kernel", "gpu_memcpy", "gpu_memset"])).select("eid", "ts_ns", "correlation")
        .join(launches, on="correlation", how="inner")
        .filter(pl.col("ts_ns") < pl.col("launch_ts"))
        .collect(engine=ENGINE)
    )
    notes.rows_of("gpu_before_launch", early, "{n:,} GPU [activities start|activity starts] before the host call that launched [them|it] (clock skew between host and device)")


def duplicate_notes(notes: Notes, runtime: pl.DataFrame, gpu: pl.DataFrame, flows: pl.DataFrame) -> None:
    """Ids that must be unique but repeat: kernel<->launch and flow links become ambiguous.

    Kernels of one CUDA graph launch share its correlation legitimately: those are not counted."""
    # only the columns the checks read are copied (whole frames would add their size to the load's peak)
    calls = runtime.select("eid", "pid", "correlation", "name").filter(pl.col("correlation").is_not_null())
    notes.rows_of("duplicate_correlation", calls.filter(pl.struct("pid", "correlation").is_duplicated()),
                  "{n:,} runtime [calls share their|call shares its] correlation id with another call; links to [their|its] GPU work "
                  "[are|is] ambiguous")
    graphs = calls.filter(pl.col("name").str.contains("Graph"))["correlation"]
    kernels = gpu.select("eid", "cat", "device", "correlation").filter(
        (pl.col("cat") == "kernel") & pl.col("correlation").is_not_null()
        & ~pl.col("correlation").is_in(graphs.implode()))
    notes.rows_of("duplicate_correlation_gpu", kernels.filter(pl.struct("device", "correlation").is_duplicated()),
                  "{n:,} [kernels|kernel] (not from a CUDA graph) [share their|shares its] correlation id with another kernel; "
                  "links to [their launches are|its launch is] ambiguous")
    starts = flows.select("eid", "ph", "cat", "flow_id").filter((pl.col("ph") == "s") & pl.col("flow_id").is_not_null())
    notes.rows_of("duplicate_flow_id", starts.filter(pl.struct("cat", "flow_id").is_duplicated()),
                  "{n:,} flow [starts share their|start shares its] id with another flow start of the same category; "
                  "[their|its] links are ambiguous")


def vendor(runtime: pl.DataFrame, gpu: pl.DataFrame) -> str | None:
    if runtime["name"].str.starts_with("hip").any():
        return "amd"
    if not gpu.is_empty() or not runtime.is_empty():
        return "nvidia"
    return None


__all__ = ["Any", "Frames", "Notes", "build_frames", "duplicate_notes", "skew_note", "vendor"]
