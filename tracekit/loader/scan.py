"""Walking a trace's text: the head, the event array in chunks, and the final piece (read by
`final.py`).

The event array is cut into *chunks* of whole events without parsing it first: a cut is
placed at a separator between two events (`}` `,` `{` with optional whitespace; Kineto
writes `},\\n  {`). The decode of the chunk is the check: `[` + chunk + `]` is valid JSON
only if the cut fell between two top-level events (a cut inside a string or a nested
object leaves something unclosed), so a chunk that decodes was cut right, and so was the
start of the next one. A chunk that fails at its end was cut in the wrong place: it is
cut again at an earlier separator, or made longer. A chunk that fails in its middle is
broken input: everything from there to the end of the file becomes the *final piece*.

The final piece is the text after the last chunk: the last events, the end of the array
and, in the object form, the keys after `traceEvents`. Recovery of truncated or malformed
input happens there, with the same messages whatever the chunk size.

Plain Python and msgspec only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tracekit.errors import TraceFormatError
from tracekit.loader.events import decode_any, decode_flat
from tracekit.loader.skip import Skipped

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_SEPARATOR = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_KEY = b'"traceEvents"'
_OURS = b'"tracekit events"'  # the array being read, under a key no later "traceEvents" key overwrites
_WS = b" \t\r\n"
_NON_SPACE = re.compile(rb"[^ \t\r\n]")
_WINDOW = 1 << 16
FINAL_BYTES = 64 * 1024  # at the end, text shorter than this is left whole for the final piece
RAMP_CHUNKS = 2  # the first chunks are smaller (see Reader._target)
# One event (from its "{" to the "}" before the next one's ","), whitespace and strings
# included, is refused past this: no real event comes near it, and without a limit a
# string or a run of whitespace of any length would be held, searched and decoded whole.
# The text after the last event (the end of the array, the keys after it) counts as one.
MAX_EVENT_BYTES = 64 * 1024 * 1024


@dataclass
class Chunk:
    index: int
    start: int  # offset of the chunk's first byte in the decompressed text
    span: memoryview  # the original bytes up to the next chunk's start (to re-cut it)
    cut: int  # length of the chunk's events in span

    @property
    def body(self) -> memoryview:
        """The chunk's events, separated by commas (no copy)."""
        return self.span[: self.cut]


@dataclass
class Final:
    """What is left after the last chunk, and how to read it."""

    text: bytes
    start: int  # offset of text[0]
    mode: str  # array | object (keys may follow the array) | object-broken
    total: int  # length of the whole decompressed text


@dataclass
class Head:
    form: str  # object | array
    top: dict[str, Any] = field(default_factory=dict)  # top-level keys before the array
    final: Final | None = None  # set when the whole file had to be read at once


class Reader:
    """Pulls decompressed pieces and hands out chunks of whole events.

    With `read_into` (a plain file: `source.Stream.read_into`) the text is read straight
    into the buffer a chunk is cut from, sized for it: no pieces, no reading thread, and no
    join of the pieces into a chunk (which copies every byte once more, on the main thread,
    which would also wait for the reading thread's pieces)."""

    def __init__(self, pieces: Iterator[bytes], *, chunk_bytes: int, path: str = "",
                 read_into: Callable[[memoryview], int] | None = None) -> None:
        self._pieces = pieces
        self._read_into = read_into
        self.chunk_bytes = max(1, chunk_bytes)
        self.path = path
        self._buf = b""
        self._more: list[bytes] = []
        self._more_len = 0
        self.pos = 0  # offset of _buf[0]
        self.eof = False
        self.index = 0
        self._limit: int | None = None  # re-cut: the cut must fall before this
        self._min_cut = 0  # grow: the cut must fall after this
        self.deep = 0  # containers in the head nested too deep to decode, emptied
        self.skipped = Skipped()  # events that were not valid JSON, skipped by the caller

    # -- buffer ---------------------------------------------------------------------------

    def _pending(self) -> int:
        return len(self._buf) + self._more_len

    def _fill(self, n: int) -> None:
        if self._read_into is not None:
            self._fill_direct(n)
            return
        while self._pending() < n and not self.eof:
            try:
                piece = next(self._pieces)
            except StopIteration:
                self.eof = True
                break
            if piece:
                self._more.append(bytes(piece))
                self._more_len += len(piece)

    def _fill_direct(self, n: int) -> None:
        """`_fill` by reading into a new buffer that holds what is pending and then the text
        up to `n` bytes (to the end of the file, if it comes first). A buffer asked to grow
        by a little at a time (the head's search for its key, the rest of the file) grows by at
        least its own size (up to 256 MB a time), so the text is copied a few times at most."""
        have = len(self._buf)
        if have >= n or self.eof:
            return
        buf = bytearray(max(n, min(2 * have, have + (256 << 20))))
        buf[:have] = self._buf
        view = memoryview(buf)
        try:
            while have < n:
                into = view[have:]
                got = self._read_into(into)  # type: ignore[misc]
                into.release()
                if not got:
                    self.eof = True
                    break
                have += got
        finally:
            view.release()
        if have < len(buf):
            del buf[have:]
        self._buf = buf  # type: ignore[assignment]  (bytes-like: the scans and decodes take either)

    def _join(self) -> bytes:
        if self._more:
            self._buf = b"".join([self._buf, *self._more])
            self._more, self._more_len = [], 0
        return self._buf

    def _consume(self, n: int) -> None:
        self._buf = self._join()[n:]
        self.pos += n

    def _skip_space(self) -> None:
        """Drop the whitespace at the front of the text as it is read: a run of it of any
        length costs a piece of memory, and time linear in its length."""
        while True:
            self._fill(1 << 16)
            buf = self._join()
            found = _NON_SPACE.search(buf)
            skip = found.start() if found is not None else len(buf)
            if skip:
                self._consume(skip)
            if found is not None or self.eof:
                return

    def read_rest(self) -> bytes:
        """Everything not handed out yet, to the end of the stream."""
        while not self.eof:
            self._fill(self._pending() + (64 << 20))
        return self._join()

    def unread(self, data: bytes, start: int, index: int) -> None:
        """Put text back in front (a speculative chunk turned out wrong); cut again from `start`."""
        self._buf = data + self._join()
        self.pos = start
        self.index = index
        self._limit, self._min_cut = None, 0

    # -- head -----------------------------------------------------------------------------

    def read_head(self) -> Head:
        self._fill(1 << 16)
        buf = self._join()
        if buf.startswith(b"\xef\xbb\xbf"):
            self._buf = buf = buf[3:]
        wide = _wide_encoding(buf)
        if wide:
            raise TraceFormatError(f"the file is {wide} text (e.g. written by PowerShell's `>`); re-save it as UTF-8",
                                   path=self.path)
        self._skip_space()
        buf = self._join()
        if not buf:
            raise TraceFormatError("file is empty (no JSON)", path=self.path)
        first = buf[:1]
        if first == b"[":
            self._consume(1)
            return Head("array")
        if first != b"{":  # refused before the rest is read (a file of zeros, say)
            raise TraceFormatError(
                f"not a trace: expected a JSON object or array at byte {self.pos}, found {first!r}", path=self.path
            )
        found = self._find_events_key(0)
        if found is not None:
            return found
        return self._whole_document()

    def _find_events_key(self, start: int) -> Head | None:
        """Find the top-level `"traceEvents": [`; the head before it must decode as an object."""
        searched = start
        for _ in range(64):
            buf = self._join()
            key = buf.find(_KEY, searched)
            while key < 0 and not self.eof:  # grow by the buffer's size: each byte copied and searched a few times
                searched = max(searched, len(buf) - len(_KEY))
                self._fill(self._pending() + max(4 << 20, self._pending()))
                buf = self._join()
                key = buf.find(_KEY, searched)
            if key < 0:
                return None
            colon = _skip_ws(buf, key + len(_KEY))
            while colon + 1 >= len(buf) and not self.eof:  # the value may start in a later piece
                self._fill(self._pending() + (1 << 20))
                buf = self._join()
                colon = _skip_ws(buf, key + len(_KEY))
            bracket = _skip_ws(buf, colon + 1) if buf[colon : colon + 1] == b":" else -1
            head = buf[start:key].rstrip(_WS).rstrip(b",") + b"}"
            try:
                top, deep = decode_flat(_TOP, head)
            except msgspec.DecodeError:
                searched = key + 1  # the key was inside some value: look further
                continue
            self.deep += deep
            if bracket < 0 or buf[bracket : bracket + 1] != b"[":
                return None  # the real key, but not followed by an array
            self._consume(bracket + 1)
            return Head("object", decode_top(top))
        return None

    def _whole_document(self) -> Head:
        """The slow path for what the scan cannot place: read everything, decode at once."""
        data = self.read_rest()
        start = self.pos + _first_non_space(data)
        first = data[start - self.pos : start - self.pos + 1]
        total = self.pos + len(data)
        if first != b"{":
            raise TraceFormatError(
                f"not a trace: expected a JSON object or array at byte {start}, found {first!r}", path=self.path
            )
        try:
            top, deep = decode_flat(_TOP, data)
        except msgspec.DecodeError:
            return self._broken_object(data, total)
        self.deep += deep
        raw_events = top.pop("traceEvents", None)
        if raw_events is None:
            raise TraceFormatError("JSON object has no 'traceEvents' array", path=self.path)
        body = bytes(raw_events)
        if not body.startswith(b"["):
            raise TraceFormatError("'traceEvents' is not an array", path=self.path)
        offset = self.pos + data.find(body) + 1
        return Head("object", decode_top(top), Final(body[1:], offset, "array", total))

    def _broken_object(self, data: bytes, total: int) -> Head:
        key = data.find(_KEY)
        if key < 0:
            raise TraceFormatError("not valid JSON and no 'traceEvents' key found", path=self.path)
        arr = data.find(b"[", key)
        if arr < 0:
            raise TraceFormatError("'traceEvents' is not followed by an array", path=self.path)
        head = data[:key].rstrip().rstrip(b",") + b"}"
        try:
            raw_top, deep = decode_flat(_TOP, head)
            top = decode_top(raw_top)
            self.deep += deep
        except msgspec.DecodeError:
            top = {}
        return Head("object", top, Final(data[arr + 1 :], self.pos + arr + 1, "object-broken", total))

    # -- chunks ---------------------------------------------------------------------------

    def next_chunk(self) -> Chunk | None:
        """The next run of whole events, or None when what is left is the final piece."""
        self._skip_space()
        need = max(self._target(), self._min_cut + 1)
        floor = 0  # no separator starts before this (the buffer was searched up to it)
        while True:
            self._fill(need + 1)
            buf = self._join()
            if self.eof and len(buf) <= need:
                # the end is in view: leave a small final piece (read alone, at the end) and
                # hand out the rest as one more chunk
                if len(buf) <= FINAL_BYTES or self._limit is not None or self._min_cut:
                    return None
                need = len(buf)
            hi = min(len(buf), need if self._limit is None else self._limit)
            found = _last_separator(buf, hi, max(self._min_cut, floor))
            if found is None and self._limit is None:
                found = _next_separator(buf, max(hi, self._min_cut, floor))
            if found is not None:
                cut, nxt = found
                self._limit, self._min_cut = None, 0
                view = memoryview(buf)
                chunk = Chunk(self.index, self.pos, view[:nxt], cut + 1)
                self.index += 1
                self._consume(nxt)
                return chunk
            if self._limit is not None:  # no earlier separator: look after the failed cut instead
                self._min_cut, self._limit = self._limit + 1, None
                need = max(need, self._min_cut + 1)
                continue
            if self.eof:
                return None
            if len(buf) > MAX_EVENT_BYTES:
                raise TraceFormatError(
                    f"the event at byte {self.pos:,} runs past {MAX_EVENT_BYTES >> 20} MB without its end (an "
                    f"over-long string or run of whitespace); events over {MAX_EVENT_BYTES >> 20} MB are refused",
                    path=self.path)
            # one event longer than the buffer: read on, doubling it (each byte is joined and
            # searched a few times, not once per chunk_bytes); a separator starts at the last "}" or later
            last = buf.rfind(b"}", floor, len(buf))
            floor = last if last >= 0 else len(buf)
            need = min(len(buf) + max(self.chunk_bytes, len(buf)), MAX_EVENT_BYTES + 1)

    def _target(self) -> int:
        """This chunk's size: a quarter, then half of `chunk_bytes` for the first two, so
        that the work downstream of the first chunk starts sooner; then `chunk_bytes`."""
        return max(1, self.chunk_bytes >> max(0, RAMP_CHUNKS - self.index))

    def recut(self, chunk: Chunk, tries: int) -> None:
        """A chunk failed at its end: cut it earlier (first tries), else make it longer."""
        self.unread(bytes(chunk.span), chunk.start, chunk.index)
        if tries <= 2:
            self._limit = chunk.cut - 1  # before the failed cut's "}"
        else:
            self._min_cut = chunk.cut

    def final(self, mode: str) -> Final:
        data = self.read_rest()
        return Final(data, self.pos, mode, self.pos + len(data))


def _last_separator(buf: bytes, hi: int, lo: int) -> tuple[int, int] | None:
    """The last `}` `,` `{` whose `}` lies in [lo, hi): (index of `}`, index of `{`)."""
    end = hi
    while end > lo:
        start = max(lo, end - _WINDOW)
        last = None
        for m in _SEPARATOR.finditer(buf, start, min(len(buf), end + _WINDOW)):
            if m.start() >= end:
                break
            last = m
        if last is not None and last.start() >= lo and last.start() > 0:
            return last.start(), last.end() - 1
        end = start
    return None


def _next_separator(buf: bytes, start: int) -> tuple[int, int] | None:
    m = _SEPARATOR.search(buf, start)
    return (m.start(), m.end() - 1) if m is not None and m.start() > 0 else None


def _skip_ws(buf: bytes, i: int) -> int:
    while i < len(buf) and buf[i] in _WS:
        i += 1
    return i


def _wide_encoding(buf: bytes) -> str | None:
    """"UTF-16"/"UTF-32" when the text starts with their byte-order mark or NUL-interleaved ASCII."""
    if buf.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "UTF-32"
    if buf.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16"
    head = buf[:4]  # no mark: ASCII with a NUL byte before or after each character
    even, odd = head[0::2], head[1::2]
    interleaved = (odd == b"\0\0" and b"\0" not in even) or (even == b"\0\0" and b"\0" not in odd)
    return "UTF-16" if len(head) == 4 and head.isascii() and interleaved else None


def _first_non_space(data: bytes) -> int:
    stripped = data.lstrip(_WS)
    return -1 if not stripped else len(data) - len(stripped)


def decode_top(top: dict[str, msgspec.Raw]) -> dict[str, Any]:
    return {key: decode_any(raw) for key, raw in top.items()}
