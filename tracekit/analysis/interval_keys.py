"""Group keys as one Int64 (a thread's pid and tid, say), for the interval passes
(`intervals`, `slice_lookups`): sorts, windows and as-of joins `by` one integer run
several times faster than by text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from tracekit.model import ENGINE

I64 = pl.Int64
CODE = "_key_code"


def one_key(frames: Sequence[pl.LazyFrame], keys: Sequence[str]) -> tuple[list[pl.LazyFrame], list[str]]:
    """The frames with their `keys` (a thread's pid and tid, say) replaced by one Int64
    column, equal in every frame for equal keys and null where a key is null; a single
    integer key stays as it is. Sorts, windows and as-of joins `by` one integer run several
    times faster than by text, and the coding costs little."""
    keys = list(keys)
    if not keys or (len(keys) == 1 and frames[0].collect_schema()[keys[0]].is_integer()):
        return list(frames), keys
    schema = frames[0].select(keys).collect_schema()
    if _codes(schema):  # text held as codes: the codes side by side, with no table to join (`group_numbers`)
        number = _code_number(schema).alias(CODE)
        return [f.with_columns(number).drop(keys) for f in frames], [CODE]
    # made once (as a plan, each frame's join could run it on its own and number the keys
    # in another order)
    table = pl.concat([f.select(keys).cast(schema) for f in frames]).drop_nulls().unique(
        maintain_order=True).with_row_index(CODE).select(*keys, pl.col(CODE).cast(I64)).collect(engine=ENGINE)
    return [f.join(table.lazy(), on=keys, how="left", maintain_order="left").drop(keys) for f in frames], [CODE]


def _codes(schema: Mapping[str, pl.DataType]) -> bool:
    """Keys whose codes make one number (`_code_number`): one or two text columns held as codes."""
    return 0 < len(schema) <= 2 and all(isinstance(t, (pl.Categorical, pl.Enum)) for t in schema.values())


def _code_number(schema: Mapping[str, pl.DataType]) -> pl.Expr:
    """One Int64 from the codes of the `_codes` keys (32 bits each, side by side): equal where
    the keys are equal in every frame of the same column types (the codes are the type's,
    not the frame's), null where one is null."""
    number = pl.lit(0, I64)
    for name in schema:
        number = number * (1 << 32) + pl.col(name).cast(schema[name]).to_physical().cast(I64)
    return number


def group_numbers(first: pl.DataFrame, second: pl.DataFrame) -> pl.Series:
    """One Int64 per row of `first` then of `second` (frames of the same key columns, no
    nulls), equal where the keys are equal. Up to two text columns held as codes
    (`model.TEXT`: a thread's pid and tid) or one integer column give their numbers as they
    are (the codes side by side in one number); other keys are ranked."""
    schema = first.schema
    if _codes(schema):
        number = _code_number(schema)
    elif len(schema) == 1 and next(iter(schema.values())) in (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8,
                                                             pl.UInt16, pl.UInt32):
        number = pl.col(next(iter(schema))).cast(I64)
    else:
        both = pl.concat([first, second])
        return both.select(pl.struct(list(schema)).rank("dense").cast(I64)).to_series()
    return pl.concat([first.select(number), second.select(number)]).to_series()
