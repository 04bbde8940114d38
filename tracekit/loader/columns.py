"""Columns from decoded events: exact integer nanoseconds, normalised categories, typed args.

Everything here works column-wise: one Python pass builds plain lists of the fields every
event has; timestamps are parsed from their JSON text by Polars string expressions (exact,
whatever the magnitude); the `args` objects are decoded in one msgspec call per frame
into small typed structs.
"""

from __future__ import annotations

from typing import Any

import msgspec
import polars as pl

from tracekit.loader.decode import Event

SEP = "\x1e"  # never appears raw inside JSON text: a safe separator for joined raw values
MAX_US = 9_223_372_036_854_775  # largest microsecond value whose nanoseconds fit in Int64

# Spellings seen across Kineto versions and vendors -> one vocabulary (modern Kineto names).
CATEGORY_MAP: dict[str, str] = {
    "Kernel": "kernel",
    "kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "gpu_memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "gpu_memset": "gpu_memset",
    "Runtime": "cuda_runtime",
    "cuda_runtime": "cuda_runtime",
    "hip_runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "cuda_driver": "cuda_driver",
    "hip_driver": "cuda_driver",
    "Operator": "cpu_op",
    "cpu_op": "cpu_op",
    "User annotation": "user_annotation",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "GPU user annotation": "gpu_user_annotation",
    "Python": "python_function",
    "python_function": "python_function",
    "cuda_sync": "cuda_sync",
    "Overhead": "overhead",
    "overhead": "overhead",
    "Trace": "trace",
    "cpu_instant_event": "cpu_instant_event",
    "async": "ac2g",
    "async_cpu_to_gpu": "ac2g",
    "ac2g": "ac2g",
    "fwdbwd": "fwdbwd",
    "fwd_bwd": "fwdbwd",
}

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")


def base_frame(events: list[Event]) -> pl.DataFrame:
    """One row per event with the fields every event has; times still as JSON text."""
    n = len(events)
    frame = pl.DataFrame(
        {
            "eid": pl.int_range(0, n, eager=True, dtype=pl.Int64),
            "ph": [e.ph for e in events],
            "cat_raw": [e.cat for e in events],
            "name": [e.name for e in events],
            "pid": _scalar_text([e.pid for e in events], n),
            "tid": _scalar_text([e.tid for e in events], n),
            "ts_text": _joined_text([e.ts for e in events], n),
            "dur_text": _joined_text([e.dur for e in events], n),
        },
        schema_overrides={"ph": pl.String, "cat_raw": pl.String, "name": pl.String},
    )
    return frame.with_columns(
        cat=pl.col("cat_raw").replace(CATEGORY_MAP),
        ts_ns=us_text_to_ns(pl.col("ts_text")),
        dur_ns=us_text_to_ns(pl.col("dur_text")),
    )


def _joined_text(raws: list[msgspec.Raw], n: int) -> pl.Series:
    """Raw JSON values -> a String column (empty raw -> null), without a Python str per row."""
    if n == 0:
        return pl.Series([], dtype=pl.String)
    blob = SEP.encode().join(raws).decode("utf-8", errors="replace")
    s = pl.Series([blob]).str.split(SEP).explode()
    return s.replace("", None)


def _scalar_text(raws: list[msgspec.Raw], n: int) -> pl.Series:
    """Raw JSON scalars (ints or strings) -> text; strings lose their quotes, null -> null."""
    s = _joined_text(raws, n)
    quoted = s.str.starts_with('"') & s.str.ends_with('"') & (s.str.len_bytes() >= 2)
    out = pl.select(pl.when(quoted).then(s.str.slice(1, s.str.len_bytes() - 2)).otherwise(s)).to_series()
    return out.replace("null", None).alias(s.name)


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
        pl.when(whole.is_not_null() & (whole.abs() < MAX_US)).then(whole * 1000)
        .when(digits.is_not_null() & in_range).then(decimal)
        .otherwise(fallback)
    )


def normalise_category(cat: str) -> str:
    return CATEGORY_MAP.get(cat, cat)


def decode_args(raws: list[msgspec.Raw], struct: type) -> list[Any]:
    """Decode a batch of raw `args` objects into `struct`s in one call (lenient per item on error)."""
    default = struct()
    if not raws:
        return []
    blob = b"[" + b",".join(r if len(r) else b"{}" for r in raws) + b"]"
    try:
        return msgspec.json.decode(blob, type=list[struct])
    except msgspec.DecodeError:
        out = []
        dec = msgspec.json.Decoder(struct)
        for r in raws:
            try:
                out.append(dec.decode(r) if len(r) else default)
            except msgspec.DecodeError:
                out.append(default)
        return out


def args_text(raws: list[msgspec.Raw]) -> pl.Series:
    """The raw `args` JSON of each event as text (null when the event had none)."""
    return _joined_text(raws, len(raws))


def typed(values: list[Any], dtype: pl.DataType) -> pl.Series:
    """A typed column from loosely typed JSON values; what cannot be converted becomes null."""
    try:
        return pl.Series(values, dtype=dtype, strict=False)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        clean = [v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else None for v in values]
        try:
            return pl.Series(clean, dtype=dtype, strict=False)
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
            return pl.Series([None] * len(values), dtype=dtype)


def first_of(dtype: pl.DataType, *columns: list[Any]) -> pl.Series:
    """Row-wise first non-null across alternative spellings of one field, typed."""
    series = [typed(c, dtype) for c in columns]
    if len(series) == 1:
        return series[0]
    return pl.select(pl.coalesce(series)).to_series()


def dims(values: list[Any], n: int = 3) -> list[pl.Series]:
    """`grid`/`block` lists -> n Int64 columns (null where absent or malformed)."""
    cols: list[list[Any]] = [[] for _ in range(n)]
    pad = [None] * n
    for v in values:
        row = v if type(v) is list and len(v) == n else (v[:n] + pad)[:n] if type(v) is list else pad
        for i in range(n):
            cols[i].append(row[i])
    return [typed(c, pl.Int64) for c in cols]
