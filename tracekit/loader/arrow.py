"""A minimal Arrow IPC stream writer (no Polars, no pyarrow): columns -> bytes `pl.read_ipc_stream` reads.

The helper process cannot use Polars (its thread pool does not survive a fork), and
handing Python lists to the parent would make the parent hold the GIL to build Series
while it should be decoding. So batches are written as Arrow IPC: the parent reads them
in Rust, without the GIL.

Only what the loader needs: non-null Int64, Float64 and LargeUtf8 columns (nulls are
encoded by the caller: a sentinel integer, NaN, or a sentinel string, and turned back into
nulls in Polars). The stream is one schema message, one record batch, and the end marker.
The flatbuffers are laid out front to back: every offset points forward (to an object
written after it), and each vtable sits just before its table.
"""

from __future__ import annotations

import struct
from array import array
from functools import lru_cache
from itertools import accumulate
from typing import NamedTuple

INT64, FLOAT64, UTF8 = "i64", "f64", "utf8"
_TYPE_INT, _TYPE_FLOAT, _TYPE_LARGE_UTF8 = 2, 3, 20  # arrow Type union
_SCHEMA, _RECORD_BATCH = 1, 3  # arrow MessageHeader union
_V5 = 4  # MetadataVersion
_CONTINUATION = b"\xff\xff\xff\xff"


class _Flat:
    """Front-to-back flatbuffer writing: a table is written with holes for its offsets,
    patched once the objects they point at are written after it."""

    def __init__(self) -> None:
        self.buf = bytearray(4)  # the root offset, filled by root()

    def pad(self, align: int, extra: int = 0) -> None:
        while (len(self.buf) + extra) % align:
            self.buf.append(0)

    def table(self, fields: list[tuple[int, str, object]]) -> tuple[int, dict[int, int]]:
        """fields: (id, fmt, value) with fmt a struct code ('B' 'h' 'i' 'q' '?') or 'off'.

        Returns the table's position and {field id: position} of its 'off' fields, which
        point() fills.
        """
        inline = sorted(fields, key=lambda f: -struct.calcsize(f[1] if f[1] != "off" else "I"))
        layout, size = [], 4  # after the soffset to the vtable
        for fid, fmt, value in inline:
            width = struct.calcsize(fmt if fmt != "off" else "I")
            size += (-size) % width
            layout.append((fid, fmt, value, size))
            size += width
        size += (-size) % 4
        nfields = max((f[0] for f in fields), default=-1) + 1
        vtable = [4 + 2 * nfields, size] + [0] * nfields
        for fid, _, _, at in layout:
            vtable[2 + fid] = at
        self.pad(2)
        vt_pos = len(self.buf)
        self.buf += struct.pack(f"<{len(vtable)}H", *vtable)
        self.pad(8, 0)
        start = len(self.buf)
        self.buf += bytes(size)
        struct.pack_into("<i", self.buf, start, start - vt_pos)
        holes = {}
        for fid, fmt, value, at in layout:
            if fmt == "off":
                holes[fid] = start + at
            else:
                struct.pack_into("<" + fmt, self.buf, start + at, value)
        return start, holes

    def patch(self, hole: int, target: int) -> None:
        """Make the offset at `hole` point at the object written at `target` (after it)."""
        struct.pack_into("<I", self.buf, hole, target - hole)

    def string(self, text: str) -> int:
        data = text.encode()
        self.pad(4)
        start = len(self.buf)
        self.buf += struct.pack("<I", len(data)) + data + b"\0"
        return start

    def table_vector(self, count: int) -> tuple[int, list[int]]:
        """A vector of `count` table offsets: its position and the holes to patch."""
        self.pad(4)
        start = len(self.buf)
        self.buf += struct.pack("<I", count)
        holes = [len(self.buf) + 4 * i for i in range(count)]
        self.buf += bytes(4 * count)
        return start, holes

    def struct_vector(self, items: list[tuple[int, int]]) -> int:
        """A vector of structs of two int64 (FieldNode, Buffer); returns its position."""
        self.pad(8, 4)
        start = len(self.buf)
        self.buf += struct.pack("<I", len(items))
        for a, b in items:
            self.buf += struct.pack("<qq", a, b)
        return start

    def root(self) -> bytes:
        return bytes(self.buf)


def _message(header_type: int, write_header, body_length: int) -> bytes:
    fb = _Flat()
    start, holes = fb.table([(0, "h", _V5), (1, "B", header_type), (2, "off", None), (3, "q", body_length)])
    struct.pack_into("<I", fb.buf, 0, start)  # the root offset
    fb.patch(holes[2], write_header(fb))
    meta = bytes(fb.buf)
    meta += bytes((-(len(meta) + 8)) % 8)  # the body that follows starts 8-aligned
    return _CONTINUATION + struct.pack("<i", len(meta)) + meta


def _schema(columns: list[tuple[str, str]]):
    def write(fb: _Flat) -> int:
        start, holes = fb.table([(0, "h", 0), (1, "off", None)])  # little endian; fields
        vec, field_holes = fb.table_vector(len(columns))
        fb.patch(holes[1], vec)
        for (name, kind), hole in zip(columns, field_holes):
            type_id = {INT64: _TYPE_INT, FLOAT64: _TYPE_FLOAT, UTF8: _TYPE_LARGE_UTF8}[kind]
            field, f = fb.table([(0, "off", None), (1, "?", True), (2, "B", type_id), (3, "off", None),
                                 (5, "off", None)])
            fb.patch(hole, field)
            fb.patch(f[0], fb.string(name))
            if kind == INT64:
                type_table, _ = fb.table([(0, "i", 64), (1, "?", True)])
            elif kind == FLOAT64:
                type_table, _ = fb.table([(0, "h", 2)])
            else:
                type_table, _ = fb.table([])
            fb.patch(f[3], type_table)
            fb.patch(f[5], fb.table_vector(0)[0])
        return start
    return write


def _record_batch(length: int, nodes: list[tuple[int, int]], buffers: list[tuple[int, int]]):
    def write(fb: _Flat) -> int:
        start, holes = fb.table([(0, "q", length), (1, "off", None), (2, "off", None)])
        fb.patch(holes[1], fb.struct_vector(nodes))
        fb.patch(holes[2], fb.struct_vector(buffers))
        return start
    return write


@lru_cache(maxsize=1024)
def _schema_message(columns: tuple[tuple[str, str], ...]) -> bytes:
    """The schema message: the same for every batch of a group, so written once."""
    return _message(_SCHEMA, _schema(list(columns)), 0)


class Columns(NamedTuple):
    """A group's columns not yet written as IPC (`ipc_bytes` writes them)."""

    columns: list[tuple[str, str, tuple[bytes, ...]]]
    length: int


def ipc_bytes(group: bytes | Columns) -> bytes:
    """A group as an IPC stream, written now if it came as columns."""
    return ipc_stream(group.columns, group.length) if isinstance(group, Columns) else group


def ipc_stream(columns: list[tuple[str, str, tuple[bytes, ...]]], length: int) -> bytes:
    """Columns (name, kind, buffers) -> an Arrow IPC stream of one record batch.

    buffers: (values,) for INT64 / FLOAT64 (8 bytes a value); (offsets, data) for UTF8,
    offsets being length + 1 int64 values. The stream is assembled in one join.
    """
    nodes, spans, body = [], [], []
    size = 0
    for _, _, bufs in columns:
        nodes.append((length, 0))
        spans.append((size, 0))  # no validity bitmap: no nulls
        for data in bufs:
            spans.append((size, len(data)))
            pad = (-len(data)) % 8
            body.append(data)
            if pad:
                body.append(bytes(pad))
            size += len(data) + pad
    head = _schema_message(tuple((name, kind) for name, kind, _ in columns))
    batch = _message(_RECORD_BATCH, _record_batch(length, nodes, spans), size)
    return b"".join([head, batch, *body, _CONTINUATION, b"\0\0\0\0"])


# -- building the buffers from Python values -------------------------------------------------


def int64(values: list[int]) -> tuple[bytes]:
    return (array("q", values).tobytes(),)


def float64(values: list[float]) -> tuple[bytes]:
    return (array("d", values).tobytes(),)


def utf8_strings(values: list[str]) -> tuple[bytes, bytes]:
    """str values -> (int64 offsets, UTF-8 data)."""
    text = "".join(values)
    if text.isascii():
        data = text.encode()
        lengths = map(len, values)
    else:
        encoded = [v.encode("utf-8", "replace") for v in values]
        data = b"".join(encoded)
        lengths = map(len, encoded)
    return array("q", accumulate(lengths, initial=0)).tobytes(), data


def utf8_raw(values: list) -> tuple[bytes, bytes]:
    """bytes-like values (msgspec.Raw) -> (int64 offsets, data), copied as they are."""
    return array("q", accumulate(map(len, values), initial=0)).tobytes(), b"".join(values)
