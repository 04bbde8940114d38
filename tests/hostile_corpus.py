"""A corpus of hostile and broken trace inputs, generated on the fly (nothing is checked in).

`hostile_cases()` returns `(name, writer, expectation)` triples: `writer(tmp_path) -> path`
creates the input under `tmp_path` (a file, a directory, a link, a FIFO...) and returns the
path to hand to `tracekit`; `expectation` says how tracekit must end:

- `error` (a): exit code 2 and one line on stderr that says what is wrong (`says`) and,
  with `where`, where (`byte N` / `event N`); the library raises `TraceError`.
- `partial` (b): exit code 0; the events that were sound are kept (`names`, `events`,
  `min_events`); with `warns`, the problems are counted in `trace.warnings` (`codes`;
  `says`: words their messages must use) and `tracekit info` prints them.
- Always: nothing from the file reaches the terminal as a raw control character.
- `either`: (a) or (b), both acceptable; never a traceback, a hang or a blow-up.

Randomness (truncation offsets, garbage bytes) comes from a fixed seed, so the corpus is
the same on every run. Offsets that must land *inside* a string, a number or nested args
are found by searching a generated Kineto trace for those contexts.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from builders import TraceBuilder

SEED = 20240611
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
_NUM = re.compile(r'"@num:(-?\d+(?:\.\d+)?)"')


@dataclass(frozen=True)
class Expect:
    outcome: str  # "error" (a) | "partial" (b) | "either"
    says: tuple[str, ...] = ()  # (a) fragments of the stderr line; (b) of the warnings (case-insensitive)
    where: bool = False  # (a) the line names a position: "byte N" or "event N"
    codes: tuple[str, ...] = ()  # (b) warning codes that must be counted and shown by `info`
    warns: bool = False  # (b) at least one problem counted (codes may be left to the loader)
    names: tuple[str, ...] = ()  # (b) event names that must survive the load
    events: int | None = None  # (b) exact `meta.event_count` after recovery
    min_events: int | None = None  # (b) at least this many events kept
    max_bytes: int | None = None  # `max_bytes` for the in-process load (gzip bomb)
    in_process: bool = True  # False: never open it in the test process (FIFO, endless input)
    needs_denied_read: bool = False  # the case needs a read that fails with EACCES


def error(*says: str, where: bool = False, in_process: bool = True, max_bytes: int | None = None,
          needs_denied_read: bool = False) -> Expect:
    return Expect("error", says=says, where=where, in_process=in_process, max_bytes=max_bytes,
                  needs_denied_read=needs_denied_read)


def partial(*codes: str, warns: bool | None = None, says: tuple[str, ...] = (), names: tuple[str, ...] = (),
            events: int | None = None, min_events: int | None = None) -> Expect:
    return Expect("partial", codes=codes, warns=bool(codes or says) if warns is None else warns, says=says,
                  names=names, events=events, min_events=min_events)


Writer = Callable[[Path], Path]
Case = tuple[str, Writer, Expect]


# -- building blocks ----------------------------------------------------------------------


def _us(o: Any) -> str:
    return "@num:" + o.text()


def event_text(event: dict[str, Any]) -> str:
    """One event as compact JSON, TraceBuilder times written as exact decimal µs."""
    return _NUM.sub(lambda m: m.group(1), json.dumps(event, default=_us, ensure_ascii=False))


def kineto_events(steps: int = 12) -> list[dict[str, Any]]:
    """A small but realistic Kineto trace: steps of ops with shapes, launches, kernels, flows."""
    b = TraceBuilder()
    for i in range(steps):
        step = i * 100_000
        b.annotation(f"ProfilerStep#{i}", step, 90_000)
        ext = b.op("aten::linear", step + 1_000, 40_000, args={
            "Input Dims": [[8, 128, 1024], [[4096, 1024], []], []],
            "Input type": ["c10::BFloat16", "c10::BFloat16", ""],
            "Concrete Inputs": ["", "", ""]})
        b.launch_kernel(GEMM, ext=ext, launch_ns=step + 2_000, launch_dur_ns=4_321,
                        start_ns=step + 10_000, dur_ns=25_500)
        b.memory(step + 3_000, 4096, 1 << 20, 2 << 20)
    return b.document()["traceEvents"]


class Doc:
    """A trace written one event per line, remembering where each event's text lies."""

    def __init__(self, events: list[dict[str, Any]] | None = None, *, bare: bool = False) -> None:
        self.events = kineto_events() if events is None else events
        texts = [event_text(e) for e in self.events]
        head = "[\n" if bare else '{"schemaVersion": 1, "traceEvents": [\n'
        self.spans: list[tuple[int, int]] = []  # byte offsets [start, end) of each event's text
        parts, at = [head.encode()], len(head.encode())
        for i, text in enumerate(texts):
            raw = text.encode()
            self.spans.append((at, at + len(raw)))
            sep = b",\n" if i < len(texts) - 1 else b"\n"
            parts += [raw, sep]
            at += len(raw) + len(sep)
        parts.append(b"]" if bare else b"]}")
        self.data = b"".join(parts)

    def complete_before(self, cut: int) -> int:
        """How many events are wholly inside `data[:cut]`."""
        return sum(1 for _, end in self.spans if end <= cut)

    def offset_in(self, rng: random.Random, key: str, *, skip: int = 3) -> int:
        """A random offset strictly inside the value of `key` in a randomly chosen event."""
        candidates = []
        for i, (start, end) in enumerate(self.spans[skip:], start=skip):
            text = self.data[start:end]
            k = text.find(f'"{key}": '.encode())
            if k >= 0:
                v0 = start + k + len(key) + 4
                v1 = start + _value_end(text, k + len(key) + 4)
                if v1 - v0 >= 3:
                    candidates.append((v0, v1))
        v0, v1 = rng.choice(candidates)
        return rng.randint(v0 + 1, v1 - 1)


@lru_cache(maxsize=1)
def big_doc() -> Doc:
    """About 10 MB: problems placed past the first few MB land in a later chunk of a streaming reader."""
    events = kineto_events(steps=7_500)
    events[-1] = {**events[-1], "name": "the_last_event"}
    return Doc(events)


def _splice(doc: Doc, k: int, replacement: bytes) -> bytes:
    """`doc` with the text of event `k` replaced."""
    s0, s1 = doc.spans[k]
    return doc.data[:s0] + replacement + doc.data[s1:]


def _every_third_bad(doc: Doc) -> bytes:
    """`doc` with a NaN in events 1, 4, 7... (all but the last): each is skipped, the rest kept."""
    parts, at = [], 0
    for i in range(1, len(doc.events) - 1, 3):
        s0, s1 = doc.spans[i]
        parts += [doc.data[at:s0], doc.data[s0:s1].replace(b'"ph": ', b'"ph": NaN, "q": ', 1)]
        at = s1
    return b"".join([*parts, doc.data[at:]])


def _value_end(text: bytes, i: int) -> int:
    """End offset of the JSON value starting at text[i] (strings, numbers, arrays, objects)."""
    if text[i : i + 1] == b'"':
        j = i + 1
        while text[j : j + 1] != b'"':
            j += 2 if text[j : j + 1] == b"\\" else 1
        return j + 1
    if text[i : i + 1] in (b"[", b"{"):
        depth, j = 0, i
        while True:
            c = text[j : j + 1]
            depth += c in (b"[", b"{")
            depth -= c in (b"]", b"}")
            j += 1
            if depth == 0:
                return j
    j = i
    while text[j : j + 1] not in (b",", b"}", b"]"):
        j += 1
    return j


def good(name: str, ts: int = 1, **extra: Any) -> dict[str, Any]:
    """A sound cpu_op event, used around bad ones to check that nothing sound is lost."""
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1, **extra}


def sandwich(*bad: dict[str, Any] | str) -> bytes:
    """`good_before, bad..., good_after` as an object-form trace; str items are raw JSON text."""
    items = [json.dumps(good("good_before")), *(b if isinstance(b, str) else json.dumps(b) for b in bad),
             json.dumps(good("good_after", ts=50))]
    return ('{"traceEvents": [\n' + ",\n".join(items) + "\n]}").encode()


SANDWICH = ("good_before", "good_after")


def file_writer(name: str, data: bytes | Callable[[], bytes]) -> Writer:
    def write(tmp_path: Path) -> Path:
        p = tmp_path / name
        p.write_bytes(data() if callable(data) else data)
        return p

    return write


# -- wrong types per field ----------------------------------------------------------------

# For every field, values of the wrong JSON type: numbers, lists, objects, null, booleans
# (and strings where a number is due). Types that are right for a field (numbers for
# ts/dur/pid/tid/id, strings for ph/cat/name/pid/tid, objects for args) are not listed.
WRONG: dict[str, list[Any]] = {
    "ph": [5, ["X"], {"X": 1}, None, True],
    "cat": [5, ["kernel"], {"kernel": 1}, None, False],
    "name": [5, ["k"], {"k": 1}, None, True],
    "pid": [["1"], {"pid": 1}, None, True],
    "tid": [[7], {"tid": 7}, None, False],
    "ts": ["soon", [1], {"us": 1}, None, True],
    "dur": ["long", [1], {"us": 1}, None, False],
    "args": [5, [1, 2], "args", None, True],
    "id": [[5], {"id": 5}, None, True, 1.5],
}
# A null in these fields reads as "absent", which is allowed: no warning is owed for it.
NULL_IS_ABSENT = frozenset({"cat", "name", "pid", "tid", "args"})


def wrong_type_event(field: str, value: Any, i: int = 0) -> dict[str, Any]:
    """A kernel event (or a flow start for `id`) whose `field` holds `value`."""
    if field == "id":
        return {"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 10 + i, "id": value}
    ev: dict[str, Any] = {"ph": "X", "cat": "kernel", "name": f"bad_{field}_{i}", "pid": 0, "tid": 7,
                          "ts": 10 + i, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 9}}
    ev[field] = value
    return ev


def _wrong_type_case(field: str) -> Case:
    bad = [wrong_type_event(field, v, i) for i, v in enumerate(WRONG[field])]
    codes = {"ph": ("unknown_phase",), "ts": ("missing_ts",), "dur": ("missing_duration",),
             "id": ("bad_flow_id",)}.get(field, ())
    return (f"wrong_type_{field}", file_writer(f"wrong_type_{field}.json", sandwich(*bad)),
            partial(*codes, warns=True, names=SANDWICH))


# -- special files ------------------------------------------------------------------------


def _directory(tmp_path: Path) -> Path:
    p = tmp_path / "a_directory.json"
    p.mkdir(exist_ok=True)
    return p


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "does_not_exist.json"


def _unreadable_file(tmp_path: Path) -> Path:
    p = tmp_path / "unreadable.json"
    p.write_bytes(json.dumps({"traceEvents": [good("a")]}).encode())
    p.chmod(0)
    return p


def _unreadable_dir(tmp_path: Path) -> Path:
    d = tmp_path / "locked_dir"
    d.mkdir(exist_ok=True)
    p = d / "trace.json"
    p.write_bytes(json.dumps({"traceEvents": [good("a")]}).encode())
    d.chmod(0)
    return p


def _symlink_loop(tmp_path: Path) -> Path:
    a, b = tmp_path / "loop_a.json", tmp_path / "loop_b.json"
    for src, dst in ((a, b), (b, a)):
        if not src.is_symlink():
            src.symlink_to(dst)
    return a


def _fifo(tmp_path: Path) -> Path:
    p = tmp_path / "fifo.json"
    if not p.exists():
        os.mkfifo(p)
    return p


def _dev_zero(tmp_path: Path) -> Path:
    p = tmp_path / "endless.json"
    if not p.is_symlink():
        p.symlink_to("/dev/zero")
    return p


def gzip_bomb_bytes(total: int = 3 << 30, member: int = 64 << 20) -> bytes:
    """A small file (about 3 MB) that inflates to `total` bytes: repeated gzip members."""
    one = gzip.compress(b"[" + b" " * (member - 1), compresslevel=9, mtime=0)
    return one * (total // member)


def gzip_members(*parts: bytes | tuple[bytes, int]) -> bytes:
    """Gzip members, one a part; `(block, k)` is `block` repeated k times as k members (a bomb
    of k * len(block) bytes built from one small member)."""
    out = []
    for part in parts:
        block, k = part if isinstance(part, tuple) else (part, 1)
        out.append(gzip.compress(block, compresslevel=9, mtime=0) * k)
    return b"".join(out)


MB = 1 << 20
EVENT = b'{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}'


def bomb_cases() -> list[Case]:
    """Inputs whose cost grows with their bytes, not their events: each must end (exit 2 or
    0) within BOMB_SECONDS and BOMB_RSS (`test_hostile.test_bombs_are_bounded`)."""
    blank = (b" " * MB, 128)
    return [
        ("gzip_whitespace_bomb", file_writer("ws_bomb.json.gz", lambda: gzip_members(
            b'{"traceEvents": [' + EVENT + b",", blank, EVENT + b"]}")), error("TRACEKIT_MAX_RATIO", "100x")),
        ("gzip_zeros_bomb", file_writer("zeros_bomb.json.gz", lambda: gzip_members((bytes(MB), 128))),
         error("json object or array", where=True)),  # refused at its first byte, before the rest is read
        ("gzip_whitespace_head_bomb", file_writer("ws_head_bomb.json.gz", lambda: gzip_members(
            b"{", blank, b'"traceEvents": [' + EVENT + b"]}")), error("TRACEKIT_MAX_RATIO")),
        # plain files: whitespace before the first event is skipped as it is read; an event
        # (string or whitespace included) past MAX_EVENT_BYTES (64 MB) is refused
        ("whitespace_before_events", stream_writer("ws_lead.json", b'{"traceEvents": [', blank, EVENT + b"]}"),
         partial(events=1, names=("a",))),
        ("whitespace_between_events", stream_writer("ws_mid.json", b'{"traceEvents": [' + EVENT + b",", (b" " * MB, 80),
                                                    EVENT + b"]}"), error("64 MB", "whitespace", where=True)),
        ("eighty_megabyte_string", stream_writer("long_string.json", b'[' + EVENT + b', {"ph": "X", "name": "',
                                                 (b"x" * MB, 80), b'", "ts": 1, "dur": 1}]'),
         error("64 MB", "string", where=True)),
        ("zeros", stream_writer("zeros.json", (bytes(MB), 128)), error("json object or array", where=True)),
    ]


def stream_writer(name: str, *parts: bytes | tuple[bytes, int]) -> Writer:
    """A large plain file written a block at a time (`(block, k)`: `block` k times)."""

    def write(tmp_path: Path) -> Path:
        path = tmp_path / name
        with path.open("wb") as fh:
            for part in parts:
                block, k = part if isinstance(part, tuple) else (part, 1)
                for _ in range(k):
                    fh.write(block)
        return path

    return write


# -- the corpus ---------------------------------------------------------------------------


def hostile_cases() -> list[Case]:
    rng = random.Random(SEED)
    doc = Doc()
    n = len(doc.events)
    cases: list[Case] = []

    def add(name: str, writer: Writer, expect: Expect) -> None:
        cases.append((name, writer, expect))

    def cut_case(name: str, cut: int) -> None:
        add(name, file_writer(f"{name}.json.tmp", doc.data[:cut]),
            partial("truncated", events=doc.complete_before(cut)))

    # truncation at seeded offsets inside chosen contexts, and anywhere
    cut_case("truncated_in_string", doc.offset_in(rng, "name"))
    cut_case("truncated_in_number", doc.offset_in(rng, "ts"))
    cut_case("truncated_in_nested_args", doc.offset_in(rng, "Input Dims"))
    cut_case("truncated_in_args_object", doc.offset_in(rng, "args"))
    first_end = doc.spans[0][1]
    for k in range(3):
        cut_case(f"truncated_random_{k}", rng.randint(first_end + 1, len(doc.data) - 3))
    head_cut = rng.randint(doc.spans[0][0] + 1, first_end - 1)
    add("truncated_in_first_event", file_writer("first.json.tmp", doc.data[:head_cut]),
        error("no complete event", where=True))
    gz = gzip.compress(doc.data, mtime=0)
    add("truncated_gzip_stream", file_writer("half.json.gz", gz[: len(gz) // 2]),
        partial("truncated_gzip", min_events=1))

    # unterminated arrays and trailing commas
    body = doc.data[: doc.spans[-1][1]]
    add("unterminated_object_form", file_writer("crashed.json.tmp", body + b",\n"), partial("truncated", events=n))
    bare = Doc(doc.events, bare=True)
    add("unterminated_bare_array", file_writer("bare.json", bare.data[:-2]), partial("truncated", events=n))
    add("trailing_comma_in_array", file_writer("trail.json", body + b",\n]}"), partial("truncated", events=n))
    k = n // 2
    s0, s1 = doc.spans[k]
    bad = doc.data[:s0] + doc.data[s0 : s1 - 1] + b",}" + doc.data[s1:]
    add("trailing_comma_in_event", file_writer("trail_event.json", bad), partial("invalid_json", events=n - 1))

    # the same problems deep inside a large file (past the first chunks of a streaming reader)
    big = big_doc()
    nb = len(big.events)
    late = next(i for i in range(nb * 3 // 5, nb) if big.events[i]["ph"] == "X")

    cut = big.offset_in(rng, "name", skip=nb * 9 // 10)
    add("big_truncated_late", file_writer("big_cut.json.tmp", lambda: big.data[:cut]),
        partial("truncated", events=big.complete_before(cut)))
    add("big_wrong_types_late", file_writer("big_types.json", lambda: _splice(big, late, json.dumps(
        {"ph": 5, "cat": ["kernel"], "name": {"n": 1}, "pid": [0], "tid": True, "ts": "soon", "dur": None,
         "args": 7}).encode())), partial("bad_field_type", events=nb, names=("the_last_event",)))
    add("big_non_utf8_late", file_writer("big_latin1.json", lambda: _splice(big, late, big.data[
        slice(*big.spans[late])].replace(b'"name": "', b'"name": "\xff', 1))),
        partial(says=("utf-8",), min_events=nb - 1, names=("the_last_event",)))
    add("big_nan_late", file_writer("big_nan.json", lambda: _splice(big, late, big.data[
        slice(*big.spans[late])].replace(b'"dur": ', b'"dur": NaN, "x": ', 1))),
        partial("invalid_json", events=nb - 1, names=("the_last_event",)))
    add("big_many_bad_events", file_writer("big_many_bad.json", lambda: _every_third_bad(big)),
        partial("invalid_json", events=nb - len(range(1, nb - 1, 3)), names=("the_last_event",)))

    # a second "traceEvents" key: the first array is read, whatever the file's size
    second = b'], "traceEvents": [' + json.dumps(good("from_the_second_key")).encode() + b"]}"
    add("duplicate_events_key", file_writer("dup_key.json", sandwich().replace(b"\n]}", second)),
        partial("duplicate_events_key", events=2, names=SANDWICH))
    add("big_duplicate_events_key", file_writer("big_dup_key.json", lambda: big.data[:-2] + second),
        partial("duplicate_events_key", events=nb, names=("the_last_event",)))

    # wrong types for every field
    for field in WRONG:
        cases.append(_wrong_type_case(field))

    # top-level fields of the wrong JSON type: ignored and counted, never a Polars error
    def top_case(name: str, **top: Any) -> None:
        add(name, file_writer(f"{name}.json", json.dumps({**top, "traceEvents": [good("good_before"), good(
            "good_after", ts=2)]}).encode()), partial("bad_metadata_type", names=SANDWICH, events=2))

    top_case("device_field_is_a_list", deviceProperties=[{"id": 0, "sharedMemPerMultiprocessor": [1, 2]}])
    top_case("device_field_mixes_int_and_list", deviceProperties=[{"id": 0, "numSms": 108}, {"id": 1, "numSms": [1.5]}])
    top_case("device_id_and_name_wrong", deviceProperties=[{"id": [0], "name": {"a": 1}}, 7])
    top_case("device_properties_not_a_list", deviceProperties={"id": 0})
    top_case("metadata_fields_wrong", distributedInfo=[1], baseTimeNanoseconds="soon", schemaVersion=[1],
             traceName={"x": 1}, metadata=3)

    # non-finite and huge numbers
    add("nan_token", file_writer("nan.json", sandwich('{"ph": "X", "name": "n", "ts": NaN, "dur": 1}')),
        partial("invalid_json", names=SANDWICH, events=2))
    add("infinity_tokens", file_writer("inf.json", sandwich(
        '{"ph": "X", "cat": "kernel", "name": "n", "ts": 5, "dur": Infinity, "args": {"x": -Infinity}}')),
        partial("invalid_json", names=SANDWICH, events=2))
    add("raw_control_character", file_writer("control.json", sandwich(
        '{"ph": "X", "cat": "cpu_op", "name": "a\x01b", "pid": 1, "tid": 1, "ts": 2, "dur": 1}')),
        partial("invalid_json", names=SANDWICH, events=2))
    add("four_hundred_digits", file_writer("digits.json", sandwich(
        '{"ph": "X", "cat": "cpu_op", "name": "d", "pid": 1, "tid": 1, "ts": ' + "9" * 400 + ', "dur": 1, '
        '"args": {"x": ' + "9" * 400 + "}}")), partial("missing_ts", names=SANDWICH))
    add("nan_in_first_event", file_writer("nan_first.json", b'[{"ph": "X", "name": "n", "ts": NaN, "dur": 1}]'),
        error(where=True))
    add("huge_numbers_in_times", file_writer("huge_times.json", sandwich(
        '{"ph": "X", "name": "h1", "pid": 1, "tid": 1, "ts": 1e400, "dur": 1}',
        {"ph": "X", "name": "h2", "pid": 1, "tid": 1, "ts": 3, "dur": 2**80},
        {"ph": "X", "name": "h3", "pid": 2**80, "tid": 1, "ts": 2**80, "dur": 1})),
        partial("missing_ts", "missing_duration", names=SANDWICH))
    add("huge_numbers_in_args", file_writer("huge_args.json", sandwich(
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3, "dur": 1, '
        f'"args": {{"correlation": {2**80}, "External id": 1e400, "grid": [{2**64}, 1, 1]}}}}')),
        partial(warns=True, names=SANDWICH))
    add("end_overflows_int64", file_writer("overflow.json", sandwich(
        {"ph": "X", "cat": "cpu_op", "name": "far", "pid": 1, "tid": 2, "ts": 9_223_372_036_854_000,
         "dur": 9_223_372_036_854})), partial(warns=True, names=SANDWICH))

    # durations, missing fields, pairing, ids, flows
    add("negative_and_zero_durations", file_writer("durs.json", sandwich(
        {"ph": "X", "cat": "kernel", "name": "neg", "pid": 0, "tid": 7, "ts": 10, "dur": -5},
        {"ph": "X", "cat": "kernel", "name": "zero", "pid": 0, "tid": 7, "ts": 10, "dur": 0},
        {"ph": "X", "cat": "cpu_op", "name": "negz", "pid": 1, "tid": 1, "ts": 10, "dur": -0.0})),
        partial("negative_duration", "zero_duration", names=(*SANDWICH, "neg", "zero")))
    add("events_without_ph_or_ts", file_writer("noph.json", sandwich(
        {"name": "no_ph", "pid": 1, "tid": 1, "ts": 5, "dur": 1},
        {"ph": "X", "name": "no_ts", "pid": 1, "tid": 1, "dur": 1},
        {"ph": "B", "name": "b_no_ts", "pid": 1, "tid": 1})),
        partial("unknown_phase", "missing_ts", names=SANDWICH))
    add("begin_end_unmatched", file_writer("be.json", sandwich(
        {"ph": "B", "name": "never_ends", "pid": 1, "tid": 2, "ts": 3},
        {"ph": "E", "pid": 1, "tid": 3, "ts": 4},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 1})),
        partial("unclosed_begin", "unmatched_E", names=(*SANDWICH, "never_ends")))
    add("duplicate_ids", file_writer("dups.json", sandwich(
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 1,
         "args": {"correlation": 5, "External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 4, "dur": 1,
         "args": {"correlation": 5, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 6, "dur": 1,
         "args": {"correlation": 5, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 8, "dur": 1,
         "args": {"correlation": 5, "device": 0, "stream": 7}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 1, "tid": 1, "ts": 2},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 1, "tid": 1, "ts": 4},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 0, "tid": 7, "ts": 6, "bp": "e"})),
        partial(warns=True, names=(*SANDWICH, "k1", "k2")))
    # orphan flow ends are normal in real Kineto traces (DESIGN-NOTES §1): kept, no warning needed
    add("flows_to_nowhere", file_writer("orphans.json", sandwich(
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 99, "pid": 1, "tid": 1, "ts": 2},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 77, "pid": 0, "tid": 7, "ts": 3, "bp": "e"})),
        partial(names=SANDWICH))

    # encodings
    mid = '{"ph": "X", "cat": "cpu_op", "name": "bad_BYTE_name", "pid": 1, "tid": 1, "ts": 2, "dur": 1}'
    add("non_utf8_in_name", file_writer("latin1.json", sandwich(mid).replace(b"_BYTE_", b"\xff\xfe")),
        partial(says=("utf-8",), names=SANDWICH))
    add("non_utf8_in_args", file_writer("latin1_args.json", sandwich(
        '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 2, "dur": 1, '
        '"args": {"Input type": ["_BYTE_"]}}').replace(b"_BYTE_", b"caf\xe9")),
        partial(says=("utf-8",), names=SANDWICH))
    add("utf8_bom", file_writer("bom.json", b"\xef\xbb\xbf" + doc.data), partial(events=n))
    add("utf16_text", file_writer("utf16.json", doc.data.decode().encode("utf-16")), error("utf-16"))
    add("lone_surrogate_escape", file_writer("surrogate.json", sandwich(
        '{"ph": "X", "cat": "cpu_op", "name": "\\ud800", "pid": 1, "tid": 1, "ts": 2, "dur": 1}')),
        partial("invalid_json", names=SANDWICH, events=2))
    add("terminal_escapes_in_strings", file_writer("ansi.json", sandwich(
        {"ph": "X", "cat": "\x1b[2J\x1b]0;owned\x07", "name": "\x1b[31mred", "pid": "\x1b[1A", "tid": 1,
         "ts": 2, "dur": 1})), partial(names=SANDWICH))

    # not a trace at all
    add("empty_file", file_writer("empty.json", b""), error("empty"))
    add("whitespace_only", file_writer("blank.json", b" \n\t\r\n  " * 100), error("empty"))
    add("json_number", file_writer("number.json", b"42"), error("json object or array", where=True))
    add("json_null", file_writer("null.json", b"null"), error("json object or array", where=True))
    add("json_string", file_writer("string.json", b'"traceEvents"'), error("json object or array", where=True))
    add("object_without_events", file_writer("noevents.json", b'{"schemaVersion": 1}'), error("traceEvents"))
    add("trace_events_not_array", file_writer("te.json", b'{"traceEvents": 17}'), error("traceEvents"))
    add("array_of_non_events", file_writer("scalars.json", b'[1, "x", null, [], true]'), partial("not_an_event"))
    garbage = bytes([0x00, 0x9C]) + bytes(rng.randrange(256) for _ in range(65_536))
    add("binary_garbage", file_writer("garbage.json", garbage), error(where=True))

    # gzip
    crc = bytearray(gz)
    crc[-8] ^= 0xFF
    add("gzip_bad_crc", file_writer("crc.json.gz", bytes(crc)), error("gzip"))
    add("gzip_truncated_header", file_writer("header.json.gz", gz[:7]), error("gzip"))
    flipped = bytearray(gz)
    flipped[len(gz) // 2] ^= 0x55
    add("gzip_corrupt_middle", file_writer("flip.json.gz", bytes(flipped)), error("gzip"))
    add("gzip_bomb", file_writer("bomb.json.gz", gzip_bomb_bytes), error("limit", max_bytes=10_000_000))

    # sizes and depths
    depth = 10_000
    add("deep_args", file_writer("deep.json", sandwich(
        '{"ph": "X", "cat": "cpu_op", "name": "deep", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"x": '
        + "[" * depth + "]" * depth + "}}")), partial(warns=True, names=SANDWICH))
    add("deep_metadata", file_writer("deep_meta.json", (
        '{"metadata": {"x": ' + "[" * depth + "]" * depth + '}, "traceEvents": [' + json.dumps(good("a")) + "]}"
    ).encode()), Expect("either", names=("a",)))
    add("deep_unterminated", file_writer("deep_open.json", (
        '{"traceEvents": [' + json.dumps(good("a")) + ', {"args": ' + "[" * depth).encode()),
        partial("truncated", names=("a",)))
    huge = "x" * 1_000_000
    add("one_megabyte_name", file_writer("bigname.json", sandwich(good(huge, ts=3))), partial(names=(*SANDWICH, huge)))

    # not a regular readable file
    add("directory", _directory, error("directory"))
    add("missing_file", _missing, error("no such file"))
    add("unreadable_file", _unreadable_file, error("permission denied", needs_denied_read=True))
    add("unreadable_directory", _unreadable_dir, error("permission denied", needs_denied_read=True))
    add("symlink_loop", _symlink_loop, error("symbolic link"))
    cases.extend(bomb_cases())
    add("fifo", _fifo, error(in_process=False))
    add("symlink_to_dev_zero", _dev_zero, error(in_process=False))
    return cases
