"""Events that are not valid JSON (NaN, Infinity, a raw control character, a lone
`\\ud800` escape, a trailing comma), found and left out so that the events around them
are kept (`invalid_json`). The chunks' reader checks a failed chunk's events one by one
(`drop_bad_events`); the final piece reads on after the bad event (`around_bad`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec

from tracekit.loader.events import fix_utf8

SEPARATOR = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")  # between two events (as `scan` cuts)
_NON_SPACE = re.compile(rb"[^ \t\r\n]")
_RAW = msgspec.json.Decoder(msgspec.Raw)
MERGE = 8  # a piece cut at a "},{" inside a string is joined to up to this many next ones


def around_bad(body: bytes | memoryview, at: int, lo: int) -> tuple[int, int, int] | None:
    """Events separated by commas from `lo`, not valid JSON at `at`: (where the events
    before the bad one end, where the bad one starts, where the event after it starts), or
    None when no event follows (the text may be cut short: not a bad event but the end)."""
    nxt = SEPARATOR.search(body, at)
    if nxt is None:
        return None
    prev = _last_separator(body, at, lo)
    if prev is not None:
        return prev[0] + 1, prev[1], nxt.end() - 1
    first = _NON_SPACE.search(body, lo)
    return lo, first.start() if first is not None else lo, nxt.end() - 1


def drop_bad_events(body: bytes | memoryview) -> tuple[bytes, list[int]]:
    """Events separated by commas, some not valid JSON (the decoder's test: NaN, a raw
    control character...): the valid ones joined by commas, and the offsets of the others.
    Each event is checked on its own; a piece cut at a "},{" inside a string is valid once
    joined to the next pieces, and is kept so. Where a piece is a whole value followed by
    more (the end of the array: `}], "key": ...`), nothing is dropped: ([], no offsets)."""
    seps = list(SEPARATOR.finditer(body))
    starts = [0] + [m.end() - 1 for m in seps]
    ends = [m.start() + 1 for m in seps] + [len(body)]
    keep: list[bytes | memoryview] = []
    bad: list[int] = []
    i = 0
    while i < len(starts):
        for j in range(i, min(i + MERGE, len(starts))):
            if _valid(body[starts[i] : ends[j]]):
                keep.append(body[starts[i] : ends[j]])
                i = j + 1
                break
        else:
            if "trailing characters" in _error(body[starts[i] : ends[i]]):
                return b"", []
            bad.append(starts[i])
            i += 1
    return b",".join(keep), bad


def _valid(text: bytes | memoryview) -> bool:
    """Whether the batch decoders take `text` (bytes that are not UTF-8 and nesting too
    deep they repair; see `events.decode_piece`)."""
    return not _error(text)


def _error(text: bytes | memoryview) -> str:
    """Why the batch decoders refuse `text` ("": they take it)."""
    try:
        _RAW.decode(text)
        return ""
    except RecursionError:
        return ""
    except msgspec.DecodeError as exc:
        fixed, replaced = fix_utf8(bytes(text))
        if not replaced:
            return str(exc)
    try:
        _RAW.decode(fixed)
        return ""
    except msgspec.DecodeError as exc:
        return str(exc)


@dataclass
class Skipped:
    """Events skipped because they were not valid JSON (NaN, a raw control character...)."""

    count: int = 0
    first_at: int | None = None  # offset of the first error

    def add(self, at: int, count: int = 1) -> None:
        self.count += count
        self.first_at = at if self.first_at is None else min(self.first_at, at)


def _last_separator(body: bytes | memoryview, hi: int, lo: int) -> tuple[int, int] | None:
    """The last separator whose "}" lies in [lo, hi): (index of "}", index of "{")."""
    last = None
    for m in SEPARATOR.finditer(body, lo):
        if m.start() >= hi:
            break
        last = m
    return (last.start(), last.end() - 1) if last is not None else None
