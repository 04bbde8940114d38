"""The `args` keys that become typed columns, and how a batch of `args` objects is decoded.

One struct per kind of row (GPU activity, runtime call, op, instant/memory sample), and
their union for B/E-style pairs, whose kind is known only after pairing. A batch of
`args` objects decodes in one msgspec call, in lax mode (`"12"` reads as 12), into
structs whose fields then become columns.

A value of the wrong type fails the batch; the batch is then decoded item by item, and
an item that still fails is decoded untyped and each field coerced the way a lenient
cast would (`1.5` -> 1 for an integer column, `"big"` -> null). Old Kineto (2021)
spells some keys differently (`external id`, `Input dims`); both are read.

`Shapes` holds the record_shapes keys whose values are kept as JSON text.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Annotated, Any

import msgspec

INT_NULL = -(2**63)  # "absent" in an integer column (a value Int never takes); NaN for floats
STR_NULL = "\x1e"  # "absent" in a string column
Int = Annotated[int, msgspec.Meta(ge=INT_NULL + 1, le=2**63 - 1)]
GPU_KEYS = {
    "device": "device", "stream": "stream", "correlation": "correlation", "external_id": "External id",
    "external_id_old": "external id", "grid": "grid", "block": "block", "registers": "registers per thread",
    "shared_memory": "shared memory", "blocks_per_sm": "blocks per SM", "warps_per_sm": "warps per SM",
    "occupancy": "est. achieved occupancy %", "nbytes": "bytes", "bandwidth": "memory bandwidth (GB/s)",
    "sync_kind": "cuda_sync_kind",
}
RUNTIME_KEYS = {"correlation": "correlation", "external_id": "External id", "external_id_old": "external id",
                "cbid": "cbid"}
OP_KEYS = {"external_id": "External id", "external_id_old": "external id", "sequence_nr": "Sequence number",
           "fwd_tid": "Fwd thread id", "python_id": "Python id", "python_parent_id": "Python parent id",
           "flops": "flops"}
MEMORY_KEYS = {"device_type": "Device Type", "device_id": "Device Id", "addr": "Addr", "mem_bytes": "Bytes",
               "total_allocated": "Total Allocated", "total_reserved": "Total Reserved"}
ALL_KEYS = {**GPU_KEYS, **RUNTIME_KEYS, **OP_KEYS, **MEMORY_KEYS}

FLOAT_FIELDS = frozenset({"blocks_per_sm", "warps_per_sm", "occupancy", "bandwidth", "flops"})
LIST_FIELDS = frozenset({"grid", "block"})  # three integers each (x, y, z)
STR_FIELDS = frozenset({"sync_kind"})
KIND: dict[str, str] = {
    f: "float" if f in FLOAT_FIELDS else "list" if f in LIST_FIELDS else "str" if f in STR_FIELDS else "int"
    for f in ALL_KEYS
}
RAW = msgspec.Raw(b"")
# absent keys take the null markers, so every column is a plain list of one type; an explicit
# null fails validation and goes through the lenient path, which writes the markers too
_TYPES = {"int": Int, "float": float, "str": str, "list": tuple[Int, Int, Int]}
NULLS = {"int": INT_NULL, "float": float("nan"), "str": STR_NULL, "list": (INT_NULL, INT_NULL, INT_NULL)}


FAMILIES: dict[str, dict[str, str]] = {"gpu": GPU_KEYS, "runtime": RUNTIME_KEYS, "ops": OP_KEYS,
                                       "instants": MEMORY_KEYS, "pairs": ALL_KEYS}
_MARKERS = {f: b'"%s"' % k.encode() for f, k in ALL_KEYS.items()}


@lru_cache(maxsize=256)
def _decoders(fields: tuple[str, ...]) -> tuple[Any, Any, Any, type]:
    """Decoders for a struct of just these fields (and its untyped twin, for leniency)."""
    typed = msgspec.defstruct("Args", [(f, _TYPES[KIND[f]], msgspec.field(default=NULLS[KIND[f]], name=ALL_KEYS[f]))
                                       for f in fields], gc=False)
    loose = msgspec.defstruct("LooseArgs", [(f, Any, msgspec.field(default=None, name=ALL_KEYS[f])) for f in fields],
                              gc=False)
    return (msgspec.json.Decoder(list[typed], strict=False), msgspec.json.Decoder(typed, strict=False),
            msgspec.json.Decoder(loose, float_hook=str), typed)  # str: 1e400 is not refused


def present(family: str, array: bytes) -> tuple[str, ...]:
    """The family's keys that occur in the text at all (a key found inside a value costs
    a column of nulls, nothing more)."""
    return tuple(f for f in FAMILIES[family] if _MARKERS[f] in array)


class Shapes(msgspec.Struct, gc=False):
    input_dims: msgspec.Raw = msgspec.field(default=RAW, name="Input Dims")
    input_dims_old: msgspec.Raw = msgspec.field(default=RAW, name="Input dims")
    input_types: msgspec.Raw = msgspec.field(default=RAW, name="Input type")
    input_strides: msgspec.Raw = msgspec.field(default=RAW, name="Input Strides")
    concrete_inputs: msgspec.Raw = msgspec.field(default=RAW, name="Concrete Inputs")


SHAPE_MARKERS = (b'"Input', b'"Concrete Inputs"')  # skip the Shapes pass when absent
SHAPE_KEYS = frozenset(f.encode_name for f in msgspec.structs.fields(Shapes))

_SHAPES_LIST = msgspec.json.Decoder(list[Shapes])
_SHAPES = msgspec.json.Decoder(Shapes)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])


def typed_args(fields: tuple[str, ...], array: bytes) -> tuple[list[Any], list[int]]:
    """A JSON array of `args` objects -> one struct per object holding `fields` (typed), and
    the indexes of the objects that held a number too large for its column (read as null)."""
    many, one, loose, typed = _decoders(fields)
    try:
        return many.decode(array), []
    except msgspec.ValidationError:
        out, lost = [], []
        for i, raw in enumerate(_RAW_LIST.decode(array)):
            item, huge = _typed_item(raw, one, loose, typed)
            out.append(item)
            if huge:
                lost.append(i)
        return out, lost


def _typed_item(raw: msgspec.Raw, one: Any, loose: Any, typed: type) -> tuple[Any, bool]:
    try:
        return one.decode(raw), False
    except msgspec.DecodeError:
        pass
    try:
        item = loose.decode(raw)
    except msgspec.DecodeError:  # not an object: no typed keys
        return typed(), False
    out = {}
    huge = False
    for f in typed.__struct_fields__:
        given = getattr(item, f)
        value = _COERCE[KIND[f]](given)
        huge = huge or _too_big(given)
        out[f] = NULLS[KIND[f]] if value is None else value
    return typed(**out), huge


def _too_big(v: Any) -> bool:
    """A number (or a list holding one) that no Int64/Float64 column can hold."""
    if isinstance(v, list):
        return any(_too_big(x) for x in v[:3])
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return not INT_NULL < v < 2**63
    if isinstance(v, str):  # a number with a fraction or an exponent, as written
        try:
            return math.isinf(float(v))
        except ValueError:
            return False
    return False


def shapes(array: bytes) -> list[Shapes]:
    """A JSON array of `args` objects -> their record_shapes values as raw JSON."""
    try:
        return _SHAPES_LIST.decode(array)
    except msgspec.DecodeError:
        out = []
        for raw in _RAW_LIST.decode(array):
            try:
                out.append(_SHAPES.decode(raw))
            except msgspec.DecodeError:
                out.append(Shapes())
        return out


# -- lenient coercion (the rare path) ------------------------------------------------------


def to_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if INT_NULL < v < 2**63 else None
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and abs(v) < 2**63 else None
    if isinstance(v, str):
        try:
            return to_int(int(v))
        except ValueError:
            try:
                return to_int(float(v))
            except ValueError:
                return None
    return None


def to_float(v: Any) -> float | None:
    """A finite float, else None (an integer beyond Float64, like an infinity, is no value)."""
    if isinstance(v, (bool, int, float)):
        try:
            f = float(v)
        except OverflowError:
            return None
        return f if math.isfinite(f) else None
    if isinstance(v, str):
        try:
            return to_float(float(v))
        except ValueError:
            return None
    return None


def to_str(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return msgspec.json.encode(v).decode()


def to_dims(v: Any) -> tuple[int, int, int] | None:
    """grid/block: a list of up to three integers; shorter lists leave the rest null."""
    if not isinstance(v, list):
        return None
    out = [to_int(x) for x in v[:3]] + [None] * max(0, 3 - len(v))
    return tuple(INT_NULL if x is None else x for x in out)  # type: ignore[return-value]


_COERCE = {"int": to_int, "float": to_float, "str": to_str, "list": to_dims}


# -- what stays in `args` ------------------------------------------------------------------


_OBJECTS = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ENCODE = msgspec.json.Encoder().encode


def unread_rows(kind: str, values: list[Any]) -> list[int]:
    """The rows of a typed column that hold its null marker (key absent, or a value that
    was null or could not be read as the column's type)."""
    null = NULLS[kind]
    if kind == "float":
        return [i for i, v in enumerate(values) if math.isnan(v)]
    if values.count(null) == 0:
        return []
    return [i for i, v in enumerate(values) if v == null]


def remainders(raws: list[Any], array_text: bytes, drop: frozenset[str], unread: dict[str, list[int]]) -> list[Any]:
    """Each row's `args` less the members that became columns: `{"key":value,...}` with the
    values as written, in their order; `NO_ARGS` when nothing is left.

    Dropped: the keys in `drop`, except in the rows where that key's value was not read
    (`unread`: key -> rows), which keep it. `args` that is not an object stays as written.
    A key given twice keeps its last value, in its first place (as a dict has it)."""
    from tracekit.loader.events import NO_ARGS

    try:
        objects: list[Any] = _OBJECTS.decode(array_text)
    except msgspec.DecodeError:  # an item that is not an object
        objects = [_object(raw) for raw in raws]
    keep: dict[int, set[str]] = {}
    for key, rows in unread.items():
        for i in rows:
            keep.setdefault(i, set()).add(key)
    out = []
    for i, obj in enumerate(objects):
        if obj is None:
            out.append(raws[i])
            continue
        kept = keep.get(i)
        if kept is None:
            if obj.keys() <= drop:
                out.append(NO_ARGS)
                continue
            rest = {k: v for k, v in obj.items() if k not in drop}
        else:
            rest = {k: v for k, v in obj.items() if k not in drop or k in kept}
        out.append(_ENCODE(rest) if rest else NO_ARGS)
    return out


def _object(raw: Any) -> dict[str, msgspec.Raw] | None:
    try:
        return _OBJECT.decode(raw)
    except msgspec.DecodeError:
        return None


class NameArgs(msgspec.Struct, gc=False):
    name: Any = None
    labels: Any = None
    sort_index: Any = None
