"""Write a trace back with the critical path and the findings in it, for Perfetto.

The original events are copied byte for byte (the file is re-read with msgspec and every
event kept as raw JSON; top-level keys too), then appended:

- flow arrows (`s` -> `f`, `"bp": "e"`, category `tracekit_critical_path`) for every
  step of the critical path from one lane to another: launch call -> kernel, GPU work ->
  the sync call that waited for it, work on one stream -> the work that waited for it on
  another. Each end sits on the original event's own pid/tid.
- the critical path itself as slices on process "tracekit", thread "critical path"
  (runs of one class on one lane merged), category `tracekit_critical_path`;
- one instant per finding evidence on thread "findings" (the finding's title and advice
  in `args`), category `tracekit_findings`; a finding without evidence gets one instant
  at the window's start;
- `M` events naming the process and its threads.

Times are written as exact decimal microseconds in the file's own time base. The output
is gzip-compressed when its name ends in `.gz`, and written to a temporary file in the
same folder, then renamed over the target (atomic). A truncated input is written back
well-formed with the events that could be recovered. With `redact`, every string (the
original events' and top-level keys' too) goes through `report.redact.value`; only the
events it changes are re-encoded.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from tracekit.analysis.critical_path import CriticalPath
from tracekit.atomic import write_output
from tracekit.findings.model import FindingsResult
from tracekit.loader.events import flatten_deep
from tracekit.loader.skip import drop_bad_events
from tracekit.loader.source import read_source
from tracekit.report.redact import value

try:  # ISA-L gzip: several times faster than zlib at a similar ratio (a project dependency)
    from isal.igzip import compress as _gzip
except ImportError:  # pragma: no cover
    def _gzip(data: bytes, compresslevel: int = 3, *, mtime: int | None = None) -> bytes:
        return gzip.compress(data, compresslevel=6, mtime=mtime)

PATH_CAT = "tracekit_critical_path"
FINDINGS_CAT = "tracekit_findings"
PID = "tracekit"
PATH_TID = "critical path"
FINDINGS_TID = "findings"
FLOW_ID_BASE = 1 << 52  # far above any correlation id, so no clash with the trace's own flows
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ENC = msgspec.json.Encoder()


def us(ns: int) -> msgspec.Raw:
    """Nanoseconds as exact decimal microseconds (JSON number text)."""
    sign, a = ("-", -ns) if ns < 0 else ("", ns)
    whole, frac = divmod(a, 1000)
    return msgspec.Raw(f"{sign}{whole}.{frac:03d}".encode() if frac else f"{sign}{whole}".encode())


def read_events(path: str | os.PathLike[str]) -> tuple[dict[str, msgspec.Raw] | None, list[msgspec.Raw]]:
    """(top-level keys other than traceEvents, or None for the bare-array form; raw events).
    Values nested too deep for the decoder are emptied, as the loader empties them."""
    data = read_source(path).data.lstrip(b"\xef\xbb\xbf \t\r\n")
    try:
        return _read_events(data)
    except RecursionError:
        return _read_events(flatten_deep(data)[0])


def _read_events(data: bytes) -> tuple[dict[str, msgspec.Raw] | None, list[msgspec.Raw]]:
    if data.startswith(b"["):
        return None, _raw_array(data)
    try:
        top = _TOP.decode(data)
    except msgspec.DecodeError:  # a truncated object: keep the events that are complete
        start = data.find(b"[", data.find(b'"traceEvents"'))
        return {}, _raw_array(data[start:]) if start >= 0 else []
    events = top.pop("traceEvents", msgspec.Raw(b"[]"))
    return top, _raw_array(bytes(events))


def _raw_array(body: bytes) -> list[msgspec.Raw]:
    try:
        return _RAWS.decode(body)
    except msgspec.DecodeError:
        # events that are not valid JSON (NaN...) are left out, as the loader skips them
        events = body.rstrip(b" \t\r\n}").rstrip(b" \t\r\n]")  # the array's (and object's) end
        start, end = body.find(b"{"), events.rfind(b"}")
        if 0 <= start < end:
            kept, bad = drop_bad_events(body[start : end + 1])
            if bad:
                try:
                    return _RAWS.decode(b"[" + kept + b"]")
                except msgspec.DecodeError:
                    pass
        cut = len(body)
        for _ in range(64):
            cut = body.rfind(b"}", 0, cut)
            if cut < 0:
                break
            try:
                return _RAWS.decode(body[: cut + 1] + b"]")
            except msgspec.DecodeError:
                continue
        return []


def write_annotated(source: str | os.PathLike[str], output: str | os.PathLike[str], cp: CriticalPath,
                    result: FindingsResult, *, redact: bool = False) -> dict[str, int]:
    """Write `source` plus the critical path and findings to `output`; returns counts."""
    top, events = read_events(source)
    extra = annotation_events(events, cp, result)
    if redact:
        top = None if top is None else {k: _redacted(v, k) for k, v in top.items()}
        events = [_redacted(e) for e in events]
        extra = value("", extra)
    body = events + [msgspec.Raw(_ENC.encode(e)) for e in extra]
    doc: Any = body if top is None else {**top, "traceEvents": body}
    data = _ENC.encode(doc)
    out = Path(output)
    if out.name.endswith(".gz"):
        data = _gzip(data, compresslevel=3, mtime=0)
    write_output(out, data, inputs=[source])
    kinds = [e["ph"] for e in extra]
    return {"events": len(events), "flows": kinds.count("s"), "path_slices": kinds.count("X"),
            "instants": kinds.count("i")}


def _redacted(raw: msgspec.Raw, key: str = "") -> msgspec.Raw:
    """`raw` as it was when `redact.value` leaves it unchanged, else re-encoded."""
    data = msgspec.json.decode(raw)
    new = value(key, data)
    return raw if new == data else msgspec.Raw(_ENC.encode(new))


def annotation_events(events: list[msgspec.Raw], cp: CriticalPath, result: FindingsResult) -> list[dict[str, Any]]:
    """The events to append (see the module docstring)."""
    meta = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "tracekit"}},
        {"ph": "M", "name": "process_sort_index", "pid": PID, "tid": 0, "args": {"sort_index": -1}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": PATH_TID, "args": {"name": PATH_TID}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": FINDINGS_TID, "args": {"name": FINDINGS_TID}},
    ]
    return meta + _flows(events, cp) + _path_slices(cp) + _instants(result)


def _where(events: list[msgspec.Raw], eid: int | None, lane: str | None) -> tuple[Any, Any] | None:
    """(pid, tid) of an event as written in the file; from the lane when the eid does not fit."""
    if eid is not None and 0 <= eid < len(events):
        ev = msgspec.json.decode(events[eid])
        if isinstance(ev, dict) and "pid" in ev and "tid" in ev:
            return ev["pid"], ev["tid"]
    if lane:
        _, pid, tid = lane.split(":", 2)
        return (int(pid) if pid.lstrip("-").isdigit() else pid), (int(tid) if tid.lstrip("-").isdigit() else tid)
    return None


def _flows(events: list[msgspec.Raw], cp: CriticalPath) -> list[dict[str, Any]]:
    steps = cp.segments.filter(pl.col("edge").is_in(["launch", "sync", "cross_stream"]) & pl.col("src_eid").is_not_null())
    out: list[dict[str, Any]] = []
    for i, r in enumerate(steps.iter_rows(named=True)):
        src, dst = _where(events, r["src_eid"], None), _where(events, r["eid"], r["lane"])
        if src is None or dst is None:
            continue
        # the start sits inside the source event, the end inside the destination event
        s_ts = r["start_ns"] if r["edge"] == "launch" else r["start_ns"] - 1
        f_ts = r["end_ns"] - 1 if r["edge"] == "sync" else r["end_ns"]
        common = {"cat": PATH_CAT, "name": f"critical path: {r['edge']}", "id": FLOW_ID_BASE + i}
        out.append({**common, "ph": "s", "pid": src[0], "tid": src[1], "ts": us(s_ts)})
        out.append({**common, "ph": "f", "bp": "e", "pid": dst[0], "tid": dst[1], "ts": us(f_ts)})
    return out


def _path_slices(cp: CriticalPath) -> list[dict[str, Any]]:
    seg = cp.segments.filter(pl.col("dur_ns") > 0)
    if seg.is_empty():
        return []
    key = pl.struct(pl.col("cls"), pl.col("lane").fill_null(""))
    runs = seg.with_columns(_run=(key != key.shift(1)).fill_null(True).cum_sum())
    runs = runs.group_by("_run", maintain_order=True).agg(
        pl.col("start_ns").min(), pl.col("end_ns").max(), pl.col("cls").first(), pl.col("lane").first(),
        pl.col("context").drop_nulls().mode().first().alias("context"), pl.len().alias("segments"))
    return [{"ph": "X", "cat": PATH_CAT, "name": r["cls"], "pid": PID, "tid": PATH_TID, "ts": us(r["start_ns"]),
             "dur": us(r["end_ns"] - r["start_ns"]),
             "args": {"lane": r["lane"], "context": r["context"], "segments": r["segments"]}}
            for r in runs.iter_rows(named=True)]


def _instants(result: FindingsResult) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in result.findings:
        args = {"rule": f.rule, "severity": f.severity, "title": f.title, "time_lost_ns": f.time_lost_ns,
                "share": round(f.share, 6), "advice": f.advice}
        points = [(e.ts_ns, {**args, "event": e.name, "lane": e.lane, "note": e.note}) for e in f.evidence]
        for ts, a in points or [(result.window_start_ns, args)]:
            out.append({"ph": "i", "s": "t", "cat": FINDINGS_CAT, "name": f"[{f.severity}] {f.rule}", "pid": PID,
                        "tid": FINDINGS_TID, "ts": us(ts), "args": a})
    return out
