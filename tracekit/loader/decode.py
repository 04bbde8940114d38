"""JSON text -> a list of typed `Event` structs, with recovery for broken files.

The fast path decodes the whole event array in one msgspec call into `gc=False` structs
whose `args`, `ts` and `dur` stay raw JSON text (parsed later, column-wise and exactly).
When that fails, the slower paths find out what can be kept:

- a truncated or unterminated array keeps every complete event before the break;
- an event with fields of the wrong type is decoded leniently or dropped, and counted.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tracekit.errors import TraceFormatError

EMPTY_RAW = msgspec.Raw(b"")


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: msgspec.Raw = EMPTY_RAW
    tid: msgspec.Raw = EMPTY_RAW
    ts: msgspec.Raw = EMPTY_RAW
    dur: msgspec.Raw = EMPTY_RAW
    id: Any = None
    id2: Any = None
    bp: str = ""
    s: str = ""
    args: msgspec.Raw = EMPTY_RAW


_EVENTS = msgspec.json.Decoder(list[Event])
_EVENT = msgspec.json.Decoder(Event)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()


@dataclass
class Decoded:
    events: list[Event]
    top: dict[str, Any]  # top-level keys other than traceEvents (decoded)
    form: str  # object | array
    notes: list[tuple[str, int, str]] = field(default_factory=list)  # (code, count, message)
    recovered: bool = False


def decode_trace(data: bytes, path: str = "") -> Decoded:
    """Decode a whole trace file's text."""
    data = _strip_bom(data)
    start = _first_non_space(data)
    if start < 0:
        raise TraceFormatError("file is empty (no JSON)", path=path)
    first = data[start : start + 1]
    if first == b"[":
        events, notes, recovered = decode_event_array(data[start:], path=path, base_offset=start)
        return Decoded(events, {}, "array", notes, recovered)
    if first != b"{":
        raise TraceFormatError(
            f"not a trace: expected a JSON object or array at byte {start}, found {first!r}", path=path
        )
    try:
        top = _TOP.decode(data)
    except msgspec.DecodeError:
        return _decode_broken_object(data, path)
    raw_events = top.pop("traceEvents", None)
    meta = _decode_top(top)
    if raw_events is None:
        if "systemTraceEvents" in top or not top:
            raise TraceFormatError("JSON object has no 'traceEvents' array", path=path)
        raise TraceFormatError("JSON object has no 'traceEvents' array", path=path)
    body = bytes(raw_events)
    if not body.startswith(b"["):
        raise TraceFormatError("'traceEvents' is not an array", path=path)
    events, notes, recovered = decode_event_array(body, path=path, base_offset=0)
    return Decoded(events, meta, "object", notes, recovered)


def decode_event_array(
    body: bytes, *, path: str = "", base_offset: int = 0
) -> tuple[list[Event], list[tuple[str, int, str]], bool]:
    """Decode `[ {...}, ... ]`; recover what can be recovered."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            return _EVENTS.decode(body), [], False
        except msgspec.ValidationError:
            raws = _RAW_LIST.decode(body)
            events, notes = _decode_leniently(raws)
            return events, notes, False
        except msgspec.DecodeError as exc:
            return _recover_truncated(body, str(exc), path, base_offset)
    finally:
        if was_enabled:
            gc.enable()


def _recover_truncated(
    body: bytes, error: str, path: str, base_offset: int
) -> tuple[list[Event], list[tuple[str, int, str]], bool]:
    """Keep every complete event before the point where the JSON breaks."""
    bad_at = _error_offset(error, len(body))
    cut = bad_at
    for _ in range(64):
        cut = body.rfind(b"}", 0, cut)
        if cut < 0:
            break
        candidate = body[: cut + 1] + b"]"
        try:
            raws = _RAW_LIST.decode(candidate)
        except msgspec.DecodeError:
            continue
        events, notes = _decode_leniently(raws)
        lost = len(body) - (cut + 1)
        kind = "truncated" if "truncated" in error else "malformed"
        msg = (
            f"the event array is {kind} at byte {base_offset + bad_at:,}: recovered "
            f"{len(events):,} complete events (the first {base_offset + cut + 1:,} bytes); "
            f"{lost:,} bytes after the last complete event were ignored"
        )
        return events, [("truncated", 1, msg), *notes], True
    if body.strip() in (b"[", b"[]"):
        return [], [("truncated", 1, "the event array is empty and unterminated")], True
    raise TraceFormatError(
        f"not valid JSON and no complete event could be recovered ({error}, at byte {base_offset + bad_at})",
        path=path,
    )


def _error_offset(error: str, default: int) -> int:
    marker = "(byte "
    i = error.rfind(marker)
    if i >= 0:
        digits = error[i + len(marker) :].split(")")[0]
        if digits.isdigit():
            return int(digits)
    return default


def _decode_leniently(raws: list[msgspec.Raw]) -> tuple[list[Event], list[tuple[str, int, str]]]:
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
            obj = _ANY.decode(raw)
        except msgspec.DecodeError:
            dropped += 1
            continue
        if not isinstance(obj, dict):
            dropped += 1
            continue
        events.append(_coerce_event(obj))
        bad_types += 1
    notes = []
    if bad_types:
        notes.append(("bad_field_type", bad_types, f"{bad_types:,} events had fields of the wrong type; the fields were coerced or ignored"))
    if dropped:
        notes.append(("not_an_event", dropped, f"{dropped:,} array items were not JSON objects and were dropped"))
    return events, notes


def _coerce_event(obj: dict[str, Any]) -> Event:
    def text(key: str) -> str:
        v = obj.get(key)
        return v if isinstance(v, str) else ("" if v is None else str(v))

    def raw_number(key: str) -> msgspec.Raw:
        v = obj.get(key)
        if isinstance(v, bool) or v is None:
            return EMPTY_RAW
        if isinstance(v, (int, float)):
            return msgspec.Raw(msgspec.json.encode(v)) if v == v and abs(v) != float("inf") else EMPTY_RAW
        if isinstance(v, str):
            try:
                float(v)
                return msgspec.Raw(v.strip().encode())
            except ValueError:
                return EMPTY_RAW
        return EMPTY_RAW

    args = obj.get("args")
    return Event(
        ph=text("ph"),
        cat=text("cat"),
        name=text("name"),
        pid=_raw_scalar(obj.get("pid")),
        tid=_raw_scalar(obj.get("tid")),
        ts=raw_number("ts"),
        dur=raw_number("dur"),
        id=_scalar(obj.get("id")),
        id2=None,
        bp=text("bp"),
        s=text("s"),
        args=msgspec.Raw(msgspec.json.encode(args)) if isinstance(args, dict) else EMPTY_RAW,
    )


def _scalar(v: Any) -> Any:
    if v is None or isinstance(v, (int, str)) and not isinstance(v, bool):
        return v
    if isinstance(v, float) and v == v and abs(v) != float("inf") and v == int(v):
        return int(v)
    return str(v)


def _raw_scalar(v: Any) -> msgspec.Raw:
    v = _scalar(v)
    return EMPTY_RAW if v is None else msgspec.Raw(msgspec.json.encode(v))


def raw_text(raw: msgspec.Raw) -> str | None:
    """A raw JSON scalar as text: strings without their quotes, numbers as written."""
    if not len(raw):
        return None
    text = bytes(raw).decode("utf-8", errors="replace")
    if text.startswith('"'):
        try:
            value = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return text.strip('"')
        return value if isinstance(value, str) else text
    return None if text == "null" else text


def _decode_top(top: dict[str, msgspec.Raw]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, raw in top.items():
        try:
            out[key] = _ANY.decode(raw)
        except msgspec.DecodeError:
            out[key] = None
    return out


def _decode_broken_object(data: bytes, path: str) -> Decoded:
    """An object form whose JSON does not parse: usually a crashed run's unterminated file."""
    key = data.find(b'"traceEvents"')
    if key < 0:
        raise TraceFormatError("not valid JSON and no 'traceEvents' key found", path=path)
    arr = data.find(b"[", key)
    if arr < 0:
        raise TraceFormatError("'traceEvents' is not followed by an array", path=path)
    head = data[:key].rstrip().rstrip(b",") + b"}"
    try:
        meta = _decode_top(_TOP.decode(head))
    except msgspec.DecodeError:
        meta = {}
    events, notes, _ = decode_event_array(data[arr:], path=path, base_offset=arr)
    if not any(code == "truncated" for code, _, _ in notes):
        notes.insert(0, ("truncated", 1, "the JSON object is not closed after the event array; keys after it were lost"))
    return Decoded(events, meta, "object", notes, True)


def _strip_bom(data: bytes) -> bytes:
    return data[3:] if data.startswith(b"\xef\xbb\xbf") else data


def _first_non_space(data: bytes) -> int:
    for i in range(min(len(data), 1 << 16)):
        if data[i] not in b" \t\r\n":
            return i
    return -1 if len(data) <= (1 << 16) else len(data.lstrip()) and len(data) - len(data.lstrip())
