"""The final piece of a trace's text (`scan.Final`): the last events, the end of the array and
the keys after it, where truncated or malformed input is recovered with the same messages
whatever the chunk size."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tracekit import format as fmt
from tracekit.errors import TraceFormatError
from tracekit.loader.events import PieceError, error_offset, flatten_deep
from tracekit.loader.scan import _OURS, _RAW_LIST, _TOP, Final, decode_top
from tracekit.loader.skip import Skipped, around_bad

@dataclass
class Recovery:
    """Where broken input was cut; the note's text needs the number of events kept in all."""

    kind: str  # truncated | malformed
    bad_at: int  # offset where the JSON broke
    kept_end: int | None  # offset just after the last complete event (None: no event at all)
    total: int  # length of the decompressed text

    def message(self, events: int) -> str:
        if self.kept_end is None:
            return "the event array is empty and unterminated"
        rest = self.total - self.kept_end
        return (
            f"the event array is {self.kind} at byte {self.bad_at:,}: recovered "
            f"{fmt.counted(events, 'complete event')} (the first {fmt.counted(self.kept_end, 'byte')}); "
            + fmt.agree("{rest:,} [bytes|byte] after the last complete event [were|was] ignored", rest).format(rest=rest)
        )


@dataclass
class FinalResult:
    tail: dict[str, Any] = field(default_factory=dict)  # top-level keys after the array
    recovery: Recovery | None = None
    skipped: Skipped = field(default_factory=Skipped)  # events not valid JSON, skipped
    not_closed: bool = False  # the array is complete but the object around it is not
    deep: int = 0  # containers nested too deep to decode, emptied


def read_final(final: Final, prev_end: int | None, path: str,
               decode: Callable[[bytes], Any]) -> tuple[FinalResult, list[Any]]:
    """Decode the final piece with `decode(piece)` (which raises `PieceError`).

    `prev_end` is where the events before this piece end (None: there were none). Returns
    the FinalResult and what `decode` returned for each run of events kept, in order. An
    event that is not valid JSON (NaN, a raw control character...) with events after it
    is skipped and counted, and the rest read on. Text nested too deep for the decoder is
    emptied (same length) and read again.
    """
    results: list[Any] = []
    skipped = Skipped()
    deep = 0
    while True:
        try:
            out, result, resume = _read_final(final, prev_end, path, decode)
        except RecursionError:
            text, more = flatten_deep(final.text)
            deep += more
            final = Final(text, final.start, final.mode, final.total)
            out, result, resume = _read_final(final, prev_end, path, decode)
        if result is not None:
            results.append(result)
        if resume is None:
            out.deep += deep
            out.skipped = skipped
            return out, results
        at, kept_end, final = resume
        skipped.add(at)
        prev_end = kept_end if kept_end is not None else prev_end


Resume = tuple[int, int | None, Final]  # where a bad event starts, where the events before it end, the rest


def _read_final(final: Final, prev_end: int | None, path: str,
                decode: Callable[[bytes], Any]) -> tuple[FinalResult, Any, Resume | None]:
    body = b"[" + final.text
    if final.mode == "object":
        try:
            top = _TOP.decode(b'{' + _OURS + b':' + body)
        except msgspec.DecodeError:
            pass
        else:
            events = bytes(top.pop(_OURS.decode()[1:-1]))  # a second "traceEvents" stays in the tail
            tail = decode_top(top)
            try:
                return FinalResult(tail=tail), decode(events), None
            except PieceError as exc:  # valid JSON around bytes msgspec will not take (bad UTF-8)
                out, result, resume = _recover(events, exc.message, final, prev_end, path, decode)
                out.tail = tail
                return out, result, resume
    try:
        result = decode(body)
    except PieceError as exc:
        return _recover(body, exc.message, final, prev_end, path, decode)
    return FinalResult(not_closed=final.mode != "array"), result, None


def _recover(body: bytes, error: str, final: Final, prev_end: int | None, path: str,
             decode: Callable[[bytes], Any]) -> tuple[FinalResult, Any, Resume | None]:
    """Keep every complete event before the point where the JSON breaks; a bad event with
    events after it is skipped (the third value says where to read on)."""
    base = final.start - 1  # body[0] is the "[" put before final.text
    bad_at = error_offset(error, len(body))
    # the text ended early, or broke at its very end (a number cut after its "." or "e",
    # which the decoder calls malformed): truncated, not malformed
    kind = "truncated" if "truncated" in error or bad_at >= len(body) else "malformed"
    # not past the array's end ("trailing characters": a "},{" further on is in the keys after it)
    split = around_bad(body, bad_at, 1) if kind == "malformed" and "trailing characters" not in error else None
    if split is not None:
        before, bad_start, after = split
        result = None
        if before > 1:
            try:
                result = decode(body[:before] + b"]")
            except PieceError:  # the break is not where it seemed: recover as before
                split = None
        if split is not None:
            rest = Final(body[after:], base + after, final.mode, final.total)
            return FinalResult(), result, (base + bad_start, base + before if before > 1 else None, rest)
    cut = bad_at
    for _ in range(64):
        cut = body.rfind(b"}", 0, cut)
        if cut < 1:
            break
        candidate = body[: cut + 1] + b"]"
        try:
            _RAW_LIST.decode(candidate)
        except msgspec.DecodeError:
            continue
        return FinalResult(recovery=Recovery(kind, base + bad_at, base + cut + 1, final.total)), decode(candidate), None
    if prev_end is not None:  # nothing complete in this piece: keep what came before it
        return FinalResult(recovery=Recovery(kind, base + bad_at, prev_end, final.total)), None, None
    if body.strip() in (b"[", b"[]"):
        return FinalResult(recovery=Recovery(kind, base + bad_at, None, final.total)), None, None
    raise TraceFormatError(
        f"not valid JSON and no complete event could be recovered ({error}, at byte {base + bad_at})",
        path=path,
    )
