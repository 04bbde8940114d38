"""Per-step samples -> medians and spread per side -> deltas with a significance flag.

Every figure of a diff is a distribution over samples: one sample per counted step (or per
annotation instance), so traces with different step counts compare. Per side and figure:
`n` samples, the median, the quartiles (linear interpolation), min, max and the sum.

Noise rule (stated in the report too): the *spread interval* of a side is its interquartile
range [q1, q3] when it has at least `IQR_MIN_SAMPLES` samples, else its full range [min, max]
(with few samples the quartiles say little). A delta (after median − before median) is
significant when the two spread intervals do not overlap: the after interval lies wholly
above (or below) the before one. Its *noise* is the part of the two intervals that faces the
other side — for a rise, (before's top − before's median) + (after's median − after's
bottom) — so `significant` ⇔ |delta| > noise. A delta is

- not significant (`False`) when it is zero or the intervals overlap;
- significant (`True`) when they do not;
- unknown (null) when it is non-zero and a side has fewer than 2 samples (no spread to
  judge by: e.g. traces without profiler steps, compared over their whole GPU span).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

I64, F64 = pl.Int64, pl.Float64
IQR_MIN_SAMPLES = 5
STATS = ("median", "q1", "q3", "min", "max", "sum")


def zero_filled(long: pl.DataFrame, windows: Sequence[int], keys: Sequence[str], values: Sequence[str]) -> pl.DataFrame:
    """One sample per (key, window) for every key seen and every window: values summed, 0 when absent."""
    keys, values = list(keys), list(values)
    win = pl.DataFrame({"window_eid": list(windows)}, schema={"window_eid": I64})
    per = long.group_by([*keys, "window_eid"]).agg(pl.col(v).sum() for v in values)
    grid = long.select(keys).unique().join(win, how="cross")
    out = grid.join(per, on=[*keys, "window_eid"], how="left", nulls_equal=True)
    return out.with_columns(pl.col(v).fill_null(0) for v in values)


def summarise(samples: pl.DataFrame, keys: Sequence[str], values: Sequence[str]) -> pl.DataFrame:
    """Per key: `n` and `{value}_{stat}` for every stat in STATS (nulls are not samples)."""
    aggs: list[pl.Expr] = [pl.len().cast(I64).alias("n")]
    for v in values:
        c = pl.col(v).cast(F64)
        aggs += [c.median().alias(f"{v}_median"), c.quantile(0.25, "linear").alias(f"{v}_q1"),
                 c.quantile(0.75, "linear").alias(f"{v}_q3"), c.min().alias(f"{v}_min"),
                 c.max().alias(f"{v}_max"), c.sum().alias(f"{v}_sum")]
    if not keys:
        return samples.select(aggs)
    return samples.group_by(list(keys)).agg(aggs)


def compare(before: pl.DataFrame, after: pl.DataFrame, keys: Sequence[str], values: Sequence[str], *,
            n_before: int = 0, n_after: int = 0, spread_columns: bool = False) -> pl.DataFrame:
    """Full join of two `summarise` results on `keys` with, per value `v`:

    `v_before`, `v_after` (medians; 0 for a key absent on a side), `v_delta`, `v_delta_pct`
    (delta / before; null when before is 0), `v_noise` and `v_significant` (the noise rule
    of the module docstring),
    `v_before_sum`, `v_after_sum`; with `spread_columns` also each side's q1, q3, min, max.
    `n_before`/`n_after`: the sample count of a side for keys absent there (the number of
    counted steps for zero-filled figures; 0 where samples are instances).
    """
    keys = list(keys)
    b = before.rename({c: f"b:{c}" for c in before.columns if c not in keys})
    a = after.rename({c: f"a:{c}" for c in after.columns if c not in keys})
    if keys:
        j = b.join(a, on=keys, how="full", coalesce=True, nulls_equal=True)
    else:
        j = pl.concat([b, a], how="horizontal")
    nb, na = pl.col("b:n").fill_null(n_before), pl.col("a:n").fill_null(n_after)
    out: list[pl.Expr] = [nb.alias("n_before"), na.alias("n_after")]
    for v in values:
        out += _value_columns(v, nb, na, spread_columns)
    return j.select(*keys, *out)


def _value_columns(v: str, nb: pl.Expr, na: pl.Expr, spread_columns: bool) -> list[pl.Expr]:
    med_b = pl.col(f"b:{v}_median").fill_null(0.0)
    med_a = pl.col(f"a:{v}_median").fill_null(0.0)
    delta = med_a - med_b
    (lo_b, hi_b), (lo_a, hi_a) = _interval("b", v, nb), _interval("a", v, na)
    rise = (hi_b - med_b) + (med_a - lo_a)
    fall = (med_b - lo_b) + (hi_a - med_a)
    noise = pl.when(delta >= 0).then(rise).otherwise(fall).fill_null(0.0).clip(lower_bound=0.0)
    significant = (pl.when(delta == 0).then(pl.lit(False))
                   .when((nb < 2) | (na < 2)).then(pl.lit(None, pl.Boolean))
                   .otherwise(delta.abs() > noise))
    cols = [med_b.alias(f"{v}_before"), med_a.alias(f"{v}_after"), delta.alias(f"{v}_delta"),
            pl.when(med_b != 0).then(delta / med_b).alias(f"{v}_delta_pct"), noise.alias(f"{v}_noise"),
            significant.alias(f"{v}_significant"),
            pl.col(f"b:{v}_sum").fill_null(0.0).alias(f"{v}_before_sum"),
            pl.col(f"a:{v}_sum").fill_null(0.0).alias(f"{v}_after_sum")]
    if spread_columns:
        for side, name in (("b", "before"), ("a", "after")):
            cols += [pl.col(f"{side}:{v}_{s}").alias(f"{v}_{name}_{s}") for s in ("q1", "q3", "min", "max")]
    return cols


def _interval(side: str, v: str, n: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """A side's spread interval (lo, hi); a key absent on the side is the point 0."""
    iqr = n >= IQR_MIN_SAMPLES
    lo = pl.when(iqr).then(pl.col(f"{side}:{v}_q1")).otherwise(pl.col(f"{side}:{v}_min")).fill_null(0.0)
    hi = pl.when(iqr).then(pl.col(f"{side}:{v}_q3")).otherwise(pl.col(f"{side}:{v}_max")).fill_null(0.0)
    return lo, hi
