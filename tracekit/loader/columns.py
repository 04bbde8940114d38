"""A batch's column lists -> typed Polars frames ("parts" of one chunk, one per frame).

Lists become Series in one call each; `ts`/`dur` become integer nanoseconds exactly (an
integer list is multiplied, number text is parsed digit by digit); categories are
normalised; each group gets one `select` onto its frame's schema (the `project_*`
functions are shared with the B/E pairs, which are projected after pairing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.loader import args as A
from tracekit.loader.decoded import Columns
from tracekit.loader.batch import WITH_ARGS_TEXT, Batch
from tracekit.loader.batch import frame as listed_frame
from tracekit.loader.categories import CATEGORY_MAP, GPU_CATS, KINETO_CATS, RUNTIME_CATS, normalise_category
from tracekit.loader.events import NO_ARGS
from tracekit.loader.native import frame as scanned_frame
from tracekit.loader.native import scanned
from tracekit.model import (
    ENGINE,
    FLOWS_SCHEMA,
    GPU_SCHEMA,
    I64_MAX,
    INSTANTS_SCHEMA,
    MEMORY_SCHEMA,
    OPS_SCHEMA,
    RUNTIME_SCHEMA,
)

MAX_US = 9_223_372_036_854_775  # largest microsecond value whose nanoseconds fit in Int64
I64, F64, STR = pl.Int64, pl.Float64, pl.String
_NO_ARGS = NO_ARGS.decode()
IGNORED_PHASES = ("P", "O", "N", "D", "c", "(", ")")
STAT_CODES = ("missing_ts", "missing_duration", "negative_duration", "zero_duration", "bad_flow_id",
              "unknown_phase", "ignored_phase", "time_overflow", "bad_args_type")

__all__ = ["CATEGORY_MAP", "Parts", "chunk_parts", "normalise_category", "us_text_to_ns"]


def us_text_to_ns(text: pl.Expr) -> pl.Expr:
    """Microseconds written as JSON numbers -> integer nanoseconds, exactly.

    `1712195495519689.047` becomes `1712195495519689047`: the digits are read as text, so
    no float rounding happens at any magnitude. Digits below the nanosecond round half
    away from zero. Exponent forms (`1.5e3`) go through Float64. Text that is not a
    number, and values whose nanoseconds do not fit in Int64, become null.
    """
    t = text.str.strip_chars().str.strip_chars('"')
    whole = t.cast(pl.Int64, strict=False)
    pos = t.str.find(".", literal=True)
    frac_len = t.str.len_bytes() - pos - 1
    head = pl.when(frac_len <= 3).then(t).otherwise(t.str.slice(0, pos + 4))
    digits = head.str.replace(".", "", literal=True).cast(pl.Int64, strict=False)
    scale = pl.when(frac_len >= 3).then(1).when(frac_len == 2).then(10).when(frac_len == 1).then(100).otherwise(1000)
    sign = pl.when(t.str.starts_with("-")).then(-1).otherwise(1)
    bump = pl.when((frac_len > 3) & (t.str.slice(pos + 4, 1) >= "5")).then(sign).otherwise(0)
    decimal = digits * scale + bump
    as_float = t.cast(pl.Float64, strict=False)
    fallback = pl.when(as_float.is_finite() & (as_float.abs() < MAX_US)).then((as_float * 1000).round(0)).cast(pl.Int64)
    in_range = as_float.abs() < MAX_US
    return (
        pl.when(whole.is_not_null() & whole.is_between(-MAX_US, MAX_US, closed="none")).then(whole * 1000)  # not abs(): -2**63 wraps
        .when(digits.is_not_null() & in_range).then(decimal)
        .otherwise(fallback)
    )


# -- a group's Arrow columns -> a clean frame ---------------------------------------------------


def group_frame(key: str, group: Columns, dicts: dict[str, Any]) -> tuple[pl.LazyFrame, list[str]]:
    """One group's columns (lists from `batch`, or the native scanner's buffers) -> the
    plan for its clean columns: ts_ns, dur_ns, pid... (lazy: it runs with the rest of the
    chunk's plans), and the names of those columns (known here: asking the plan for its
    schema costs a planning pass a call, on the loading's busiest thread)."""
    frame = scanned_frame(group) if scanned(group) else listed_frame(group)  # the scanner's: taken over as they are
    del group
    have = set(frame.columns)
    cats = [CATEGORY_MAP.get(c, c) for c in dicts["cat"]]  # normalised once per distinct value
    # the flows' text is decoded as codes (`model.FLOWS_SCHEMA`); the other frames' cat, ph,
    # pid and tid become codes in their projection (`_project`), after the GPU rows' device
    # and stream are read from the pid and tid text
    text = FLOWS_SCHEMA["cat"] if key == "flows" else STR
    fixes: list[pl.Expr] = [_decode("cat_c", cats, text).alias("cat")]
    if "ph_c" in have:
        fixes.append(_decode("ph_c", dicts["ph"], text).alias("ph"))
    for f, values in dicts.get(key, {}).items():
        if f in ("bp", "s"):  # absent: null
            values = [v or None for v in values]
        fixes.append(_decode(f + "_c", values, text).alias(f))
    for f in ("pid", "tid", "id"):
        if f + "_i" in have:
            fixes.append(pl.col(f + "_i").cast(STR).cast(text if f != "id" else STR).alias(f))
            if key in _NUMBERS_KEPT.get(f, ()):  # the number itself, so it is not parsed back from text
                fixes.append(pl.col(f + "_i").alias(f + "_num"))
        elif f in have:
            fixes.append(_null_if(pl.col(f), A.STR_NULL).alias(f))
    for f, out in (("ts", "ts_ns"), ("dur", "dur_ns")):
        if f + "_n" in have:  # nanoseconds already (the native scanner)
            fixes.append(_null_if(pl.col(f + "_n"), A.INT_NULL).alias(out))
        elif f + "_i" in have:
            us = pl.col(f + "_i")
            fixes.append(pl.when(us.is_between(-MAX_US, MAX_US, closed="none")).then(us * 1000).alias(out))  # abs(-2**63) wraps
        elif f in have:
            fixes.append(_text_to_ns(frame[f]).alias(out))
    if "args" in have:
        fixes.append(_null_if(pl.col("args"), _NO_ARGS).alias("args"))
    for f in A.FAMILIES.get(key, ()):
        kind = A.KIND[f]
        if kind == "list":
            fixes += [_null_if(pl.col(c), A.INT_NULL).alias(c) for c in (f"{f}_x", f"{f}_y", f"{f}_z") if c in have]
        if f not in have:  # the key occurs nowhere in this chunk's group: the projection fills nulls
            continue
        if kind == "int":
            fixes.append(_null_if(pl.col(f), A.INT_NULL).alias(f))
        elif kind == "float":
            fixes.append(pl.col(f).fill_nan(None).alias(f))
        elif kind == "str":
            fixes.append(_null_if(pl.col(f), A.STR_NULL).alias(f))
    if "input_dims" in have:
        dims = pl.when(pl.col("input_dims") != "").then(pl.col("input_dims")).otherwise(pl.col("input_dims_old"))
        fixes.append(dims.alias("input_dims"))
    drop = [c for c in frame.columns if c.endswith(("_i", "_c")) or c in ("ts", "dur", "ts_n", "dur_n")]
    added = [name for e in fixes if (name := e.meta.output_name()) not in have]
    names = [c for c in [*frame.columns, *dict.fromkeys(added)] if c not in drop]
    return frame.lazy().with_columns(fixes).drop(drop), names


# integer pid/tid/id kept as numbers too where a frame reads them as numbers (GPU device
# and stream from pid/tid, flow ids): `<f>_num`, which the projections drop
_NUMBERS_KEPT = {"pid": ("gpu",), "tid": ("gpu",), "id": ("flows",)}


def _decode(codes: str, values: list[str], dtype: pl.DataType = STR) -> pl.Expr:
    """Dictionary codes -> the strings (gathered from the small dictionary, of `dtype`:
    text, or a Categorical's codes)."""
    return pl.lit(pl.Series(values, dtype=dtype)).gather(pl.col(codes))


_PLAIN_3DP = r"[^0-9.\-]|\.[0-9]{4}"  # anything but [-]digits[.up to 3 digits]


def _text_to_ns(text: pl.Series) -> pl.Expr:
    """Number text -> ns. Text like `1712195495519689.047` (at most 3 decimals: Kineto's
    form) goes through an exact Decimal cast; a column holding anything else (more
    decimals, exponents, quotes, spaces) through `us_text_to_ns`."""
    if text.str.contains(_PLAIN_3DP).any():
        return us_text_to_ns(pl.col(text.name))
    us = pl.col(text.name).cast(pl.Decimal(38, 3), strict=False)
    return pl.when(us.abs() < MAX_US).then((us * 1000).cast(pl.Int64, strict=False))


def _null_if(col: pl.Expr, marker: Any) -> pl.Expr:
    return pl.when(col == marker).then(None).otherwise(col)


# -- projections onto the frames' schemas ------------------------------------------------------


def _project(exprs: dict[str, pl.Expr], schema: dict[str, pl.DataType], have: list[str]) -> list[pl.Expr]:
    return [exprs[name].cast(dtype).alias(name) if name in exprs
            else (pl.col(name) if name in have else pl.lit(None)).cast(dtype).alias(name)
            for name, dtype in schema.items()]


def _text(col: str, pattern: str, have: list[str]) -> pl.Expr:
    if col not in have:
        return pl.lit(None, STR)
    return pl.when(pl.col(col) == "").then(None).otherwise(pl.col(col).str.replace_all(pattern, ""))


def _c(name: str, have: list[str], dtype: pl.DataType = I64) -> pl.Expr:
    """A column that a chunk may lack (an args key that never occurs in it)."""
    return pl.col(name) if name in have else pl.lit(None, dtype)


def _ext(have: list[str]) -> pl.Expr:
    return pl.coalesce(_c("external_id", have), _c("external_id_old", have))


def _end() -> pl.Expr:
    return pl.col("ts_ns") + pl.col("dur_ns")


def project_ops(lf: pl.LazyFrame, have: list[str] | None = None) -> pl.LazyFrame:
    have = lf.collect_schema().names() if have is None else have
    return lf.select(_project({
        "ph": pl.col("ph") if "ph" in have else pl.lit("X"),
        "end_ns": _end(),
        "external_id": _ext(have),
        "input_dims": _text("input_dims", r"\s+", have),
        "input_types": _text("input_types", r"\s*\n\s*", have),
        "input_strides": _text("input_strides", r"\s+", have),
        "concrete_inputs": _text("concrete_inputs", r"\s*\n\s*", have),
    }, OPS_SCHEMA, have))


def project_runtime(lf: pl.LazyFrame, have: list[str] | None = None) -> pl.LazyFrame:
    have = lf.collect_schema().names() if have is None else have
    return lf.select(_project({"end_ns": _end(), "external_id": _ext(have)}, RUNTIME_SCHEMA, have))


def _number_in(col: str, have: list[str]) -> pl.Expr:
    """The integer of a pid/tid: the number itself when it was written as one."""
    return pl.col(col + "_num") if col + "_num" in have else _int_in(pl.col(col))


def _int_in(text: pl.Expr) -> pl.Expr:
    """The integer in a pid/tid such as '7' or 'stream 7' (null when there is none)."""
    return text.str.extract(r"(-?\d+)\s*$", 1).cast(pl.Int64, strict=False)


def project_gpu(lf: pl.LazyFrame, have: list[str] | None = None) -> pl.LazyFrame:
    have = lf.collect_schema().names() if have is None else have
    exprs: dict[str, pl.Expr] = {
        "device": pl.coalesce(_c("device", have), _number_in("pid", have)),
        "stream": pl.coalesce(_c("stream", have), _number_in("tid", have)),
        "end_ns": _end(),
        "external_id": _ext(have),
        "registers_per_thread": _c("registers", have),
        "est_occupancy_pct": _c("occupancy", have, F64),
        "bytes": _c("nbytes", have),
        "bandwidth_gbps": _c("bandwidth", have, F64),
    }

    return lf.select(_project(exprs, GPU_SCHEMA, have))


PROJECT = {"ops": project_ops, "runtime": project_runtime, "gpu": project_gpu}


def slices_by_frame(lf: pl.LazyFrame) -> dict[str, pl.LazyFrame]:
    """Paired slices (any category) -> their ops, runtime and gpu rows."""
    gpu = pl.col("cat").is_in(GPU_CATS)
    runtime = pl.col("cat").is_in(RUNTIME_CATS)
    return {
        "ops": project_ops(lf.filter(~gpu & ~runtime)),
        "runtime": project_runtime(lf.filter(runtime)),
        "gpu": project_gpu(lf.filter(gpu)),
    }


def _flow_ids(have: list[str]) -> pl.Expr:
    """A flow group's ids: the integers as they came, else parsed from the text."""
    return pl.col("id_num") if "id_num" in have else _flow_id(pl.col("id"))


def _flow_id(id_text: pl.Expr) -> pl.Expr:
    """Flow ids: integers, or strings holding a decimal or 0x-hex integer."""
    s = id_text.str.strip_chars().str.to_lowercase()
    dec = s.str.to_integer(base=10, strict=False)
    hx = s.str.slice(2).str.to_integer(base=16, strict=False)
    return pl.when(s.str.starts_with("0x")).then(hx).otherwise(dec)


# -- one chunk -> parts -------------------------------------------------------------------------


@dataclass
class Parts:
    """One chunk's rows of each frame, plus what the notes need."""

    n: int
    frames: dict[str, pl.DataFrame]
    stats: dict[str, tuple[int, int | None]]  # code -> (count, first local eid)
    kineto: bool
    bad_types: int
    dropped: int


ORDER_SCHEMA = {"eid": I64, "thread": pl.UInt64, "ts_ns": I64}


def thread_key() -> pl.Expr:
    """(pid, tid) as one 64-bit hash, `thread`: a row of the order check takes 24 bytes
    instead of 48 (two 16-byte string views), and threads group on one integer (a collision
    of two threads' hashes, at about 2^-64 per pair, would only merge their order checks)."""
    return pl.struct("pid", "tid").hash(seed=0).alias("thread")


EMPTY_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "ops": OPS_SCHEMA, "runtime": RUNTIME_SCHEMA, "gpu": GPU_SCHEMA, "flows": FLOWS_SCHEMA,
    "instants": INSTANTS_SCHEMA, "memory": MEMORY_SCHEMA, "order": ORDER_SCHEMA,
}


def empty_part(key: str) -> pl.DataFrame:
    """A frame with no rows and the columns a chunk's part for `key` has."""
    if key in EMPTY_SCHEMAS:
        return pl.DataFrame(schema=EMPTY_SCHEMAS[key])
    from tracekit.loader.batch import _columns

    dicts: dict[str, Any] = {"cat": [], "ph": []}
    columns = Columns(_columns(key, [], [], {"cat": [], "ph": []}, dicts), 0)
    frame = group_frame(key, columns, dicts)[0].collect(engine=ENGINE)
    # an empty group has no rows to show which way its integers came: give them their final types
    return frame.with_columns([pl.col(c).cast(t) for c, t in (("pid", STR), ("tid", STR), ("id", STR),
                                                               ("ts_ns", I64), ("dur_ns", I64)) if c in frame.columns])


def chunk_parts(batch: Batch) -> Parts:
    """One batch -> its parts: every group's plans (rows, order keys, note counts) run in
    one `collect_all`, so each group's columns are read once and not copied step by step."""
    plans: dict[str, pl.LazyFrame] = {}
    stat_frames: list[pl.LazyFrame] = []
    order: list[pl.LazyFrame] = []
    groups = batch["groups"]
    for key in list(groups):
        lf, have = group_frame(key, groups.pop(key), batch["dicts"])  # each group's buffers go once read
        conditions = _stat_conditions(key, have)
        if conditions:
            stat_frames.append(lf.select(_stat_exprs(conditions)))
        if key != "meta":
            lf = lf.filter(pl.col("ts_ns").is_not_null())
        if key in PROJECT:
            dur = pl.col("dur_ns").fill_null(0).clip(lower_bound=0)
            # an end past Int64 would wrap: the duration is cut to end there (counted: time_overflow)
            lf = lf.with_columns(dur_ns=pl.when(pl.col("ts_ns") > 0)
                                 .then(pl.min_horizontal(dur, pl.lit(I64_MAX) - pl.col("ts_ns"))).otherwise(dur))
            order.append(lf.select("eid", thread_key(), "ts_ns"))
            plans[key] = PROJECT[key](lf, have)
        elif key == "flows":
            plans[key] = lf.with_columns(flow_id=_flow_ids(have), binding_point=pl.col("bp")).select(
                _project({}, FLOWS_SCHEMA, [*have, "flow_id", "binding_point"]))
        elif key == "instants":
            memory = pl.col("name") == "[memory]"
            plans["instants"] = lf.filter(~memory).select(_project({"scope": pl.col("s")}, INSTANTS_SCHEMA, have))
            plans["memory"] = lf.filter(memory).select(
                _project({"bytes": _c("mem_bytes", have)}, MEMORY_SCHEMA, have))
        elif key != "other":  # pairs, counters, meta: finished once every chunk is in
            plans[key] = lf
    if order:
        plans["order"] = pl.concat(order).sort("eid")  # file order: the chunks' parts then need no sort
    names = list(plans)
    results = pl.collect_all([*plans.values(), *stat_frames], engine=ENGINE)
    frames = dict(zip(names, results[: len(names)]))
    stats: dict[str, tuple[int, int | None]] = {code: (0, None) for code in STAT_CODES}
    for code, (n, first) in batch.get("counts", {}).items():  # found while decoding
        stats[code] = (n, first if first >= 0 else None)
    for row in (r.row(0, named=True) for r in results[len(names):]):
        for code in STAT_CODES:
            n = row.get(f"{code}_n") or 0
            if n:
                count, first = stats[code]
                low = row[f"{code}_first"]
                stats[code] = (count + n, low if first is None else min(first, low))
    kineto = any(c in KINETO_CATS or CATEGORY_MAP.get(c) in KINETO_CATS for c in batch["dicts"]["cat"])
    return Parts(batch["n"], frames, stats, kineto, batch["bad_types"], batch["dropped"])


def _stat_conditions(key: str, have: list[str]) -> dict[str, pl.Expr]:
    """The note counts a group contributes to, as row conditions."""
    ts, dur, ph = pl.col("ts_ns"), pl.col("dur_ns"), pl.col("ph")
    out: dict[str, pl.Expr] = {}
    if key == "other":  # phases that are not analysed: counted with or without a time
        out["ignored_phase"] = ph.is_in(IGNORED_PHASES)
        out["unknown_phase"] = ~ph.is_in(IGNORED_PHASES)
    if key != "meta":
        out["missing_ts"] = ts.is_null()
    if key in PROJECT:
        out["time_overflow"] = ts.is_not_null() & (dur > 0) & (ts > pl.lit(I64_MAX) - dur.clip(lower_bound=0))
        out["missing_duration"] = ts.is_not_null() & dur.is_null()
        out["negative_duration"] = ts.is_not_null() & (dur < 0)
        out["zero_duration"] = ts.is_not_null() & (dur == 0)
    if key in WITH_ARGS_TEXT:  # `args` that is not an object (null reads as absent)
        out["bad_args_type"] = pl.col("args").is_not_null() & ~pl.col("args").str.starts_with("{")
    if key == "flows":
        out["bad_flow_id"] = ts.is_not_null() & _flow_ids(have).is_null()
    return out


def _stat_exprs(conditions: dict[str, pl.Expr]) -> list[pl.Expr]:
    exprs = []
    for code, cond in conditions.items():
        cond = cond.fill_null(False)
        exprs += [cond.sum().cast(I64).alias(f"{code}_n"), pl.col("eid").filter(cond).min().alias(f"{code}_first")]
    return exprs
