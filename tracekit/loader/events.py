"""Event-array text -> typed `Event` structs, with leniency for broken items.

Plain Python and msgspec only (no Polars): this module also runs in the loader's worker
process. `pid`, `tid`, `ts`, `dur` and `id` decode untyped with `float_hook=str`: integers come out
as Python ints and any number with a fraction or an exponent as its exact JSON text, so
times are parsed later, column-wise and exactly. `args` stays raw JSON text
(`msgspec.Raw`) until its typed keys are decoded for the rows that need them.

A *piece* is a JSON array holding a run of complete events: `[` + chunk text + `]`.
`decode_piece` decodes one; when an item is not an event object or has fields of the
wrong type, the piece is decoded item by item and the problems are counted.
"""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager
from typing import Any

import msgspec

# `args` of an event that has none: a valid JSON object (so a batch of args decodes in one
# call) that no real trace writes; the args text column maps it back to null.
NO_ARGS = b'{"\\u001e":0}'
NO_ARGS_RAW = msgspec.Raw(NO_ARGS)


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    bp: str = ""
    s: str = ""
    args: msgspec.Raw = NO_ARGS_RAW


EVENTS = msgspec.json.Decoder(list[Event], float_hook=str)
_EVENT = msgspec.json.Decoder(Event, float_hook=str)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_ANY = msgspec.json.Decoder()
_ANY_EXACT = msgspec.json.Decoder(float_hook=str)


@contextmanager
def gc_paused():
    """The structs are `gc=False`; pausing the collector keeps big decodes linear."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class PieceError(Exception):
    """A piece is not valid JSON. `at` is the byte offset in the piece where it broke."""

    def __init__(self, message: str, at: int, size: int) -> None:
        super().__init__(message)
        self.message = message
        self.at = at
        self.size = size

    @property
    def at_end(self) -> bool:
        """The break is at the very end: input cut short (or a chunk cut in the wrong place)."""
        return "truncated" in self.message or self.at >= self.size - 2


def decode_piece(piece: bytes) -> tuple[list[Event], int, int, Counts]:
    """Decode `[events...]`; returns (events, items with wrong field types, items dropped, counts).

    Raises `PieceError` when the text is not valid JSON. An item that is valid JSON but not
    an event is dropped and counted. Bytes that are not UTF-8 are replaced by U+FFFD, and
    values nested too deep for the decoder are emptied; both are counted (`counts`).
    """
    counts: Counts = {}
    piece, bad_utf8 = fix_utf8(piece)
    try:
        events, bad_types, dropped = _decode_piece(piece)
    except RecursionError:
        flat, deep = flatten_deep(piece)
        add_count(counts, "deep_nesting", deep)
        events, bad_types, dropped = _decode_piece(flat)
    if bad_utf8:
        first = next((i for i, e in enumerate(events) if _REPLACED in e.name or _REPLACED in e.cat
                      or _REPLACED_UTF8 in bytes(e.args)), -1)
        add_count(counts, "invalid_utf8", bad_utf8, first)
    return events, bad_types, dropped, counts


def _decode_piece(piece: bytes) -> tuple[list[Event], int, int]:
    try:
        return EVENTS.decode(piece), 0, 0
    except msgspec.DecodeError:  # a ValidationError, or an item msgspec rejects
        pass
    try:
        raws = _RAW_LIST.decode(piece)
    except msgspec.DecodeError as exc:
        raise _piece_error(exc, len(piece)) from None
    return decode_leniently(raws)


# -- counts of problems found while decoding (code -> [count, first local event index or -1]) --

Counts = dict[str, list[int]]


def add_count(counts: Counts, code: str, n: int, first: int = -1) -> None:
    if n:
        old = counts.setdefault(code, [0, -1])
        old[0] += n
        if first >= 0 and (old[1] < 0 or first < old[1]):
            old[1] = first


_REPLACED = "\ufffd"
_REPLACED_UTF8 = _REPLACED.encode()


def fix_utf8(text: bytes) -> tuple[bytes, int]:
    """`text` with byte sequences that are not UTF-8 replaced by U+FFFD, and how many were."""
    if text.isascii():
        return text, 0
    raw = bytes(text)
    try:
        raw.decode("utf-8")
        return text, 0
    except UnicodeDecodeError:
        pass
    fixed = raw.decode("utf-8", "replace")
    bad = fixed.count(_REPLACED) - raw.count(_REPLACED_UTF8)
    return fixed.encode("utf-8"), max(1, bad)


MAX_DEPTH = 200  # JSON nested deeper than this is emptied before decoding (msgspec stops near 1,000)
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)|[\[\]{}]', re.DOTALL)


def flatten_deep(text: bytes, limit: int = MAX_DEPTH) -> tuple[bytes, int]:
    """Empty every array/object nested more than `limit` levels deep, in place: its contents
    become spaces (same length, so offsets hold). Returns the text and how many were emptied.
    A container left open at the end is blanked to the end (the text stays truncated)."""
    out = bytearray(text)
    depth, start, emptied = 0, -1, 0
    for m in _TOKEN.finditer(out):
        c = out[m.start()]
        if c == 0x22:  # a string
            continue
        if c in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth == limit + 1:
                start = m.start()
        else:
            if depth == limit + 1:
                out[start + 1 : m.start()] = b" " * (m.start() - start - 1)
                emptied += 1
            depth = max(0, depth - 1)
    if depth > limit:
        out[start + 1 :] = b" " * (len(out) - start - 1)
        emptied += 1
    return bytes(out), emptied


def decode_flat(decoder: Any, text: bytes) -> tuple[Any, int]:
    """`decoder.decode(text)`; text nested too deep for msgspec is flattened first.
    Returns (value, containers emptied)."""
    try:
        return decoder.decode(text), 0
    except RecursionError:
        flat, deep = flatten_deep(text)
        return decoder.decode(flat), deep


def _piece_error(exc: Exception, size: int) -> PieceError:
    message = str(exc)
    return PieceError(message, error_offset(message, size), size)


def error_offset(error: str, default: int) -> int:
    marker = "(byte "
    i = error.rfind(marker)
    if i >= 0:
        digits = error[i + len(marker) :].split(")")[0]
        if digits.isdigit():
            return int(digits)
    return default


def decode_leniently(raws: list[msgspec.Raw]) -> tuple[list[Event], int, int]:
    """Decode events one by one; repair fields of the wrong type, drop what is not an object."""
    events: list[Event] = []
    bad_types = 0
    dropped = 0
    for raw in raws:
        try:
            events.append(_EVENT.decode(raw))
            continue
        except msgspec.DecodeError:
            pass
        try:
            obj = _ANY_EXACT.decode(raw)
        except msgspec.DecodeError:
            dropped += 1
            continue
        if not isinstance(obj, dict):
            dropped += 1
            continue
        events.append(_coerce_event(obj))
        bad_types += 1
    return events, bad_types, dropped


def _coerce_event(obj: dict[str, Any]) -> Event:
    def text(key: str) -> str:
        v = obj.get(key)
        return v if isinstance(v, str) else ("" if v is None else str(v))

    args = obj.get("args")
    return Event(
        ph=text("ph"),
        cat=text("cat"),
        name=text("name"),
        pid=obj.get("pid"),
        tid=obj.get("tid"),
        ts=obj.get("ts"),
        dur=obj.get("dur"),
        id=obj.get("id"),
        bp=text("bp"),
        s=text("s"),
        args=msgspec.Raw(msgspec.json.encode(args)) if isinstance(args, dict) else NO_ARGS_RAW,
    )


def scalar_text(v: Any) -> str | None:
    """A decoded JSON scalar as the text the trace wrote (strings as themselves)."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return msgspec.json.encode(v).decode()


def number_text(v: Any) -> str | None:
    """A decoded `ts`/`dur` as number text (strings kept: they may hold a number)."""
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return None


def decode_any(raw: bytes | str) -> Any:
    """Decode JSON text into Python values; None when it is not valid JSON (or too deep)."""
    try:
        return _ANY.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
