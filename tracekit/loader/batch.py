"""Decoded events -> a batch: per frame, the columns of its rows (the reference decoder).

Events are sorted into the frames they feed (by `ph`, and by category for complete
events) with one pass over two lists; each group then takes only the fields its frame
reads, and only its rows' `args` are decoded into typed structs (one msgspec call per
group). A group's columns are Python lists (`decoded.Columns`), made Series by the thread
that turns the batch into frames (`frame`), so the decoding thread never waits for Polars.

Integer columns come as `<name>_i` when every value is an integer (the common case,
cheapest to convert), else as text. Nulls are markers (`args.INT_NULL`, NaN,
`args.STR_NULL`, `events.NO_ARGS`) that `tracekit.loader.columns` turns back into nulls.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

from tracekit.loader import args as A
from tracekit.loader import decoded as W
from tracekit.loader.categories import X_KIND
from tracekit.loader.events import (
    Counts,
    Event,
    PieceError,
    add_count,
    decode_piece,
    gc_paused,
    number_text,
    scalar_text,
)

if TYPE_CHECKING:
    import polars as pl

SHAPE_FIELDS = ("input_dims", "input_dims_old", "input_types", "input_strides", "concrete_inputs")

INSTANT_PHASES = ("i", "I", "n", "R", "T", "p")
FLOW_PHASES = ("s", "t", "f")
PAIR_PHASES = ("B", "E", "b", "e", "S", "F")
GROUP_BY_PH: dict[str, str] = {
    "X": "x", "C": "counters", "M": "meta",
    **{ph: "flows" for ph in FLOW_PHASES}, **{ph: "instants" for ph in INSTANT_PHASES},
    **{ph: "pairs" for ph in PAIR_PHASES},
}  # any other phase: "other" (noted, not analysed)


# the fields each group's frame reads (ph is taken from the ph list where it varies)
FIELDS: dict[str, tuple[str, ...]] = {
    "gpu": ("name", "pid", "tid", "ts", "dur"),
    "runtime": ("name", "pid", "tid", "ts", "dur"),
    "ops": ("name", "pid", "tid", "ts", "dur"),
    "flows": ("name", "pid", "tid", "ts", "id", "bp"),
    "instants": ("name", "pid", "tid", "ts", "s"),
    "counters": ("name", "pid", "tid", "ts"),
    "meta": ("name", "pid", "tid"),
    "pairs": ("name", "pid", "tid", "ts", "dur", "id"),
    "other": ("ts",),
}
WITH_PH = frozenset({"flows", "instants", "pairs", "other"})
WITH_ARGS_TEXT = frozenset({"gpu", "runtime", "ops", "instants", "counters", "meta", "pairs"})
TYPED = frozenset(A.FAMILIES)  # gpu, runtime, ops, instants (memory samples), pairs
# complete events, whose frame is known from their category: their `args` keeps only the
# members that did not become a column (`args.remainders`); the other groups keep it whole
# (a B/E pair's or an instant's frame, and so its columns, is known only later)
REST_ARGS = frozenset({"gpu", "runtime", "ops"})

_GET = {f: attrgetter(f) for f in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "s", "args")}
_GET_SHAPE = {f: attrgetter(f) for f in SHAPE_FIELDS}

Batch = dict[str, Any]


def build_batch(events: list[Event], bad_types: int = 0, dropped: int = 0, counts: Counts | None = None) -> Batch:
    """The columns of a run of events, grouped by the frame they feed (local eids 0..n-1).

    `counts` (code -> [count, first local eid]) gathers what the notes need beyond the
    column values: fields of the wrong JSON type, numbers too large for their column."""
    counts = {} if counts is None else counts
    phs = list(map(_GET["ph"], events))
    cats = list(map(_GET["cat"], events))
    dicts: dict[str, Any] = {}
    codes = {"ph": _codes(phs, dicts, "ph"), "cat": _codes(cats, dicts, "cat")}
    groups: dict[str, W.Columns] = {}
    for key, eids in _group(phs, cats).items():
        rows = [events[eids[0]]] if len(eids) == 1 else itemgetter(*eids)(events)
        groups[key] = W.Columns(_columns(key, eids, rows, codes, dicts, counts), len(eids))
    return {"n": len(events), "bad_types": bad_types, "dropped": dropped, "dicts": dicts, "groups": groups,
            "counts": counts}


def _codes(values: list[str], dicts: dict[str, Any], name: str) -> list[int]:
    """Dictionary-encode strings: dicts[name] gets the distinct values, the result their codes."""
    index = {v: i for i, v in enumerate(dict.fromkeys(values))}
    dicts[name] = list(index)
    return list(map(index.__getitem__, values))


def _group(phs: list[str], cats: list[str]) -> dict[str, list[int]]:
    by_ph: dict[str, list[int]] = defaultdict(list)
    for i, key in enumerate(map(GROUP_BY_PH.get, phs, repeat("other"))):
        by_ph[key].append(i)
    out = {k: v for k, v in by_ph.items() if k != "x"}
    if "x" in by_ph:
        by_kind: dict[str, list[int]] = defaultdict(list)
        xs = by_ph["x"]
        for i, kind in zip(xs, map(X_KIND.get, itemgetter(*xs)(cats) if len(xs) > 1 else [cats[xs[0]]],
                                    repeat("ops"))):
            by_kind[kind].append(i)
        out.update(by_kind)
    return out


def _pick(values: list[Any], eids: list[int]) -> list[Any]:
    if len(eids) <= 1:
        return [values[i] for i in eids]
    return list(itemgetter(*eids)(values))


Column = tuple[str, str, tuple[list[Any]]]  # (name, kind, (values,))


def _columns(key: str, eids: list[int], rows: Any, codes: dict[str, list[int]],
             dicts: dict[str, Any], counts: Counts | None = None) -> list[Column]:
    """A group's columns. String fields are dictionary-encoded (`<name>_c` codes into
    dicts[name] or dicts[key][name]): categories and names repeat a lot."""
    cols: list[Column] = [("eid", W.INT64, (eids,)), ("cat_c", W.INT64, (_pick(codes["cat"], eids),))]
    if key in WITH_PH:
        cols.append(("ph_c", W.INT64, (_pick(codes["ph"], eids),)))
    group_dicts: dict[str, list[str]] = {}
    for f in FIELDS[key]:
        values = list(map(_GET[f], rows))
        if f in ("name", "bp", "s"):
            cols.append((f + "_c", W.INT64, (_codes(values, group_dicts, f),)))
        else:  # pid, tid, ts, dur, id: decoded untyped
            cols.append(_scalars(f, values, eids, counts))
    dicts[key] = group_dicts
    if key in WITH_ARGS_TEXT:
        raws = list(map(_GET["args"], rows))
        at = len(cols)
        if key in TYPED:
            array_text = b"[" + b",".join(raws) + b"]"
            fields = A.present(key, array_text)
            structs, lost = A.typed_args(fields, array_text) if fields else ([], [])
            if lost and counts is not None:
                add_count(counts, "arg_out_of_range", len(lost), eids[lost[0]])
            unread: dict[str, list[int]] = {}  # a family key -> the rows whose value was not read (null)
            for f in fields:
                values = list(map(attrgetter(f), structs))
                if key in REST_ARGS:
                    unread[A.ALL_KEYS[f]] = A.unread_rows(A.KIND[f], values)
                kind = A.KIND[f]
                if kind in _KINDS:  # int, float, str
                    cols.append((f, _KINDS[kind], (values,)))
                else:  # grid, block: (x, y, z)
                    for i, axis in enumerate("xyz"):
                        cols.append((f"{f}_{axis}", W.INT64, (list(map(itemgetter(i), values)),)))
            if key in ("ops", "pairs") and any(m in array_text for m in A.SHAPE_MARKERS):
                shapes = A.shapes(array_text)
                for f in SHAPE_FIELDS:
                    cols.append((f, W.UTF8, _raw_text(list(map(_GET_SHAPE[f], shapes)))))
            if key in REST_ARGS:
                drop = frozenset(A.FAMILIES[key].values()) | (A.SHAPE_KEYS if key == "ops" else frozenset())
                raws = A.remainders(raws, array_text, drop, unread)
        cols.insert(at, ("args", W.UTF8, _raw_text(raws)))
    return cols


def _scalars(name: str, values: list[Any], eids: list[int] | None = None, counts: Counts | None = None) -> Column:
    """Untyped scalars: an Int64 column `<name>_i` when all are integers, else their text.

    (`true` where a number belongs must not pass for 1: bools take the text path.) A pid or
    tid that is a list, an object or a boolean is kept as its JSON text and counted.
    """
    try:
        array("q", values)  # every value an integer that fits 64 bits
        ints = True
    except (TypeError, OverflowError):
        ints = False
    if ints and bool not in set(map(type, values)):
        return (name + "_i", W.INT64, (values,))
    if name in ("ts", "dur"):
        texts = [number_text(v) or "" for v in values]  # "": not a number, read as null
    else:
        texts = [A.STR_NULL if v is None else scalar_text(v) for v in values]
        if name in ("pid", "tid") and counts is not None and eids is not None:
            wrong = [i for i, v in enumerate(values) if isinstance(v, (bool, list, dict))]
            if wrong:
                add_count(counts, "bad_field_type", len(wrong), eids[wrong[0]])
    return (name, W.UTF8, (texts,))


def _raw_text(raws: list[Any]) -> tuple[list[str]]:
    """Raw JSON values (bytes-like) as a text column; bytes that are not UTF-8 are replaced."""
    return (list(map(str, raws, repeat("utf-8"), repeat("replace"))),)


_KINDS = {"int": W.INT64, "float": W.FLOAT64, "str": W.UTF8}


def frame(group: W.Columns) -> pl.DataFrame:
    """A group of `build_batch` as a frame: each list becomes one Series (Int64, Float64 or
    String; a str that UTF-8 cannot hold, a lone surrogate, has it replaced by '?')."""
    import polars as pl

    dtypes = {W.INT64: pl.Int64, W.FLOAT64: pl.Float64, W.UTF8: pl.String}
    return pl.DataFrame([_series(name, dtypes[kind], values) for name, kind, (values,) in group.columns])


def _series(name: str, dtype: Any, values: list[Any]) -> pl.Series:
    import polars as pl

    try:
        return pl.Series(name, values, dtype=dtype)
    except UnicodeEncodeError:
        return pl.Series(name, [v.encode("utf-8", "replace").decode() for v in values], dtype=dtype)


def piece_batch(piece: bytes | memoryview, bare: bool = False) -> Batch:
    """Decode a piece (`[` + complete events + `]`; with `bare`, the events alone) into a
    batch; raises `PieceError`.

    The native scanner takes the piece when it is built and the piece is in the common
    shape; otherwise (and for every broken piece) the Python path below decodes it."""
    from tracekit.loader.native import native_batch

    batch = native_batch(piece, bare)
    if batch is not None:
        return batch
    if bare:
        piece = bracketed(piece)
    with gc_paused():
        events, bad_types, dropped, counts = decode_piece(piece)
        return build_batch(events, bad_types, dropped, counts)


def bracketed(events: bytes | memoryview) -> bytes:
    """Events separated by commas -> the piece `[` + events + `]` (a copy)."""
    return b"".join((b"[", events, b"]"))


def encode_error(exc: PieceError) -> Batch:
    return {"error": exc.message, "at": exc.at, "size": exc.size}


def empty_batch() -> Batch:
    return build_batch([])
