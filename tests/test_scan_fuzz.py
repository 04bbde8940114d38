"""Structure-aware fuzz of the loader: the native scanner (`_scan.c`) against the Python path.

Events are built field by field: each field the loader reads (the event's own keys and every
typed `args` key) takes each JSON type -- null, booleans, integers (the Int64 and UInt64
edges, 400 digits), floats (-0.0, 1e308, 5e-324), strings (lone-surrogate escapes, control
characters raw and escaped, 70,000 characters), nested lists, objects. The text is written
by hand so that each value stays exactly as drawn; some traces then lose or gain a byte.
The property: the trace loads to the same `Trace` with and without the scanner, or both
ways refuse it with the same `TraceError` message. Nothing else may be raised.

- `test_each_field_takes_each_json_type`: the whole field x type matrix, one piece an event
  (`chunk_bytes=1`), so each value reaches the scanner alone;
- `test_found_cases`: the minimised cases the fuzz found, kept under tests/fixtures/scan_fuzz/;
- `test_fuzz_scanner_against_python_path`: Hypothesis, in rounds of TRACEKIT_FUZZ_EXAMPLES
  examples (default 30) from a fixed seed (TRACEKIT_FUZZ_SEED), repeated with the next seed
  until TRACEKIT_FUZZ_SECONDS have passed (default 0: one round). `make sanitize` runs it
  longer, under AddressSanitizer and UBSan (tests/sanitize/run.sh).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import tracekit
from tracekit.errors import TraceError
from tracekit.loader import args as A
from tracekit.loader import native

FOUND = Path(__file__).parent / "fixtures" / "scan_fuzz"
EXAMPLES = int(os.environ.get("TRACEKIT_FUZZ_EXAMPLES", "30"))
SECONDS = float(os.environ.get("TRACEKIT_FUZZ_SECONDS", "0"))
SEED = int(os.environ.get("TRACEKIT_FUZZ_SEED", "20260301"))

built = pytest.mark.skipif(native._scan is None, reason="the native scanner is not built (needs a C compiler)")

TOP_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "s", "bp", "args")
ARG_FIELDS = tuple(A.ALL_KEYS.values())

# -- JSON values, as text ------------------------------------------------------------------

LONG = "x" * 70_000
VALUES: dict[str, tuple[str, ...]] = {
    "null": ("null",),
    "bool": ("true", "false"),
    "int": ("0", "-0", "7", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
            "-9223372036854775809", "18446744073709551615", "18446744073709551616", "1" + "0" * 399,
            "-" + "9" * 400, "9223372036854775", "-9223372036854776"),
    "float": ("-0.0", "0.0", "1e308", "-1e308", "1.7976931348623157e308", "5e-324", "1e400", "1E+2", "2.5e-3",
              "1.5", "0.0005", "-0.0005", "9223372036854775.807", "1712195495519689.0475", "0.00000000001"),
    "string": ('""', '"\\ud800"', '"\\udc00x"', '"a\\ud83d"', '"\\ud83d\\ude00"', '"a\\u0000b"', '"\\u001f\\n\\t"',
               '"\x01"', '"\t"', '"\\/\\"\\\\"', '"0x1f"', '"12"', '"-7"', '"1e3"', '"X"', '"kernel"', '"e"',
               '"\\u00e9\u00e9"', json.dumps(LONG), '"\\x"', '"\\u12"'),
    "list": ("[]", "[1,2,3]", "[[1],[2,3]]", "[[[[[]]]]]", "[null,true,1.5,\"a\"]", "[" * 64 + "]" * 64,
             "[9223372036854775808,0,0]", "[1,2]", "[-1,-2,-3]", "[1.0,2,3]"),
    "object": ("{}", '{"a":1}', '{"stream":{"x":"}"}}', '{"":[{}]}', '{"a":1,"a":2}', '{"k":' * 30 + "1" + "}" * 30),
}
ALL_VALUES = tuple(v for values in VALUES.values() for v in values)

leaf = st.one_of(st.sampled_from(ALL_VALUES), st.integers(-(2**70), 2**70).map(str),
                 st.floats(allow_nan=False, allow_infinity=False).map(repr),
                 st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters(),
                         max_size=12).map(json.dumps),  # lone surrogates come out escaped
                 st.text(st.characters(exclude_categories=("Cs",)), max_size=12).map(
                     lambda s: json.dumps(s, ensure_ascii=False)))
value = st.recursive(leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
    st.lists(st.tuples(st.sampled_from(("a", "stream", *ARG_FIELDS[:6])).map(json.dumps), inner),
             max_size=3).map(lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}")), max_leaves=6)

# a sound event of each kind the loader groups; the fuzz replaces some of its fields
BASES = (
    {"ph": '"X"', "cat": '"kernel"', "name": '"gemm"', "pid": "0", "tid": "7", "ts": "10.5", "dur": "2",
     "args": {"device": "0", "stream": "7", "correlation": "5", "grid": "[8,4,1]", "block": "[128,1,1]"}},
    {"ph": '"X"', "cat": '"cpu_op"', "name": '"aten::mm"', "pid": "1", "tid": "1", "ts": "9", "dur": "4",
     "args": {"External id": "3", "Input Dims": "[[8,16],[16,32]]", "Sequence number": "2"}},
    {"ph": '"X"', "cat": '"cuda_runtime"', "name": '"cudaLaunchKernel"', "pid": "1", "tid": "1", "ts": "9.5",
     "dur": "0.25", "args": {"correlation": "5", "cbid": "211"}},
    {"ph": '"f"', "cat": '"ac2g"', "name": '""', "pid": "1", "tid": "1", "ts": "9.5", "id": "5", "bp": '"e"'},
    {"ph": '"i"', "cat": '"cpu_instant_event"', "name": '"[memory]"', "pid": "1", "tid": "1", "ts": "11", "s": '"t"',
     "args": {"Addr": "1", "Bytes": "512", "Total Allocated": "512", "Device Id": "0", "Device Type": "1"}},
    {"ph": '"B"', "cat": '"user_annotation"', "name": '"range"', "pid": "1", "tid": "2", "ts": "8", "args": {}},
    {"ph": '"E"', "pid": "1", "tid": "2", "ts": "12"},
    {"ph": '"M"', "name": '"process_name"', "pid": "1", "args": {"name": '"python"'}},
    {"ph": '"C"', "name": '"mem"', "pid": "1", "ts": "13", "args": {"bytes": "9"}},
)


def event_text(event: dict) -> str:
    def member(k: str, v) -> str:
        return f"{json.dumps(k)}: {v if isinstance(v, str) else event_text(v)}"

    return "{" + ", ".join(member(k, v) for k, v in event.items()) + "}"


def with_value(base: dict, field: str, text: str) -> dict:
    """`base` with `field` (an event key, or an args key) written as `text`."""
    args = base.get("args", {})
    event = {**base, "args": dict(args) if isinstance(args, dict) else {}}  # (args written as another type: replaced)
    if field in TOP_FIELDS:
        event[field] = text
    else:
        event["args"][field] = text
    return event


def trace_text(events: list[dict], *, wrapped: bool = True) -> bytes:
    body = ",\n".join(event_text(e) for e in events)
    return (('{"traceEvents": [\n' + body + "\n]}") if wrapped else "[" + body + "]").encode("utf-8", "surrogatepass")


# -- the property --------------------------------------------------------------------------


def load_one_way(data: bytes, on: bool, chunk_bytes: int) -> tracekit.Trace | str:
    """The Trace, or the refusal's message; anything but TraceError fails the test."""
    before = os.environ.get("TRACEKIT_NATIVE")
    os.environ["TRACEKIT_NATIVE"] = "1" if on else "0"
    try:
        return tracekit.loads(data, workers=0, chunk_bytes=chunk_bytes)
    except TraceError as exc:
        return f"TraceError: {exc}"
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"{'native' if on else 'python'} path raised {type(exc).__name__}: {exc}")
    finally:
        if before is None:
            os.environ.pop("TRACEKIT_NATIVE", None)
        else:
            os.environ["TRACEKIT_NATIVE"] = before


def same(a, b) -> bool:
    if isinstance(a, pl.DataFrame):
        return isinstance(b, pl.DataFrame) and a.schema == b.schema and a.equals(b, null_equal=True)
    return a == b


def assert_same_both_ways(data: bytes, chunk_bytes: int = 512) -> None:
    py = load_one_way(data, False, chunk_bytes)
    nat = load_one_way(data, True, chunk_bytes)
    if isinstance(py, str) or isinstance(nat, str):
        assert py == nat, "one path refused the trace, or they refused it differently"
        return
    for name, frame in py.frames().items():
        assert same(frame, getattr(nat, name)), f"{name} differs:\n{frame}\n{getattr(nat, name)}"
    for f in dataclasses.fields(py.meta):
        assert same(getattr(py.meta, f.name), getattr(nat.meta, f.name)), f"meta.{f.name} differs"


# -- the field x type matrix ---------------------------------------------------------------


FLOAT_KEYS = tuple(A.ALL_KEYS[f] for f in A.ALL_KEYS if A.KIND[f] == "float")
KNOWN: dict[str, str] = {}  # strict xfails: remove an entry when its fix lands


def _field_params() -> list:
    return [pytest.param(f, id=f, marks=[pytest.mark.xfail(strict=True, reason=KNOWN[f])] if f in KNOWN else [])
            for f in TOP_FIELDS + ARG_FIELDS]


@built
@pytest.mark.parametrize("field", _field_params())
def test_each_field_takes_each_json_type(field):
    events = [with_value(base, field, v) for base in BASES[:3] for v in ALL_VALUES]
    assert_same_both_ways(trace_text(events), chunk_bytes=1)


def found_cases() -> list[Path]:
    return sorted(FOUND.glob("*.json")) if FOUND.is_dir() else []


@built
@pytest.mark.parametrize("path", found_cases(), ids=lambda p: p.stem)
def test_found_cases(path: Path):
    data = path.read_bytes()
    for chunk_bytes in (1, 512, 1 << 20):
        assert_same_both_ways(data, chunk_bytes)


def test_int64_min_microseconds_is_no_time_not_zero():
    """`ts` or `dur` of -2**63 us is -9.2e21 ns, beyond Int64: no usable time, as the scanner
    says (found by the fuzz). Int64 `abs(-2**63)` wraps to itself, so the Python path took it
    for in range and wrote -2**63 * 1000 mod 2**64 = 0 ns."""
    data = (FOUND / "int64_min_microseconds.json").read_bytes()
    for on in (False, True):
        trace = load_one_way(data, on, chunk_bytes=1)
        assert trace.ops.height == 0  # the op's ts is unusable: dropped and counted
        assert trace.gpu.select("ts_ns", "dur_ns").rows() == [(1000, 0)]  # the kernel's dur: treated as 0
        codes = dict(zip(trace.warnings["code"], trace.warnings["count"]))
        assert (codes.get("missing_ts"), codes.get("missing_duration")) == (1, 1)


def test_lone_surrogate_escape_is_invalid_json_in_any_string():
    """A `\\ud800`, `\\udc00` or high surrogate without its low half makes the event invalid JSON
    wherever the string is (msgspec refuses it even in a value no frame reads): three of the
    four events are skipped, only correlation 7 is kept. The scanner had checked escapes only
    in the strings it decoded, and kept the events whose `id`, `bp` or unread args held one
    (found by the fuzz)."""
    data = (FOUND / "lone_surrogate_escape.json").read_bytes()
    for on in (False, True):
        for chunk_bytes in (1, 512):
            trace = load_one_way(data, on, chunk_bytes)
            assert trace.runtime["correlation"].to_list() == [7] and trace.gpu.height == 0
            assert dict(zip(trace.warnings["code"], trace.warnings["count"]))["invalid_json"] == 3


def test_counter_integer_beyond_float_is_skipped():
    """A counter value of 400 digits does not fit Float64: that series value is skipped and
    the event's other values kept (found by the fuzz: `float()` raised OverflowError, a crash
    either way, not a TraceError)."""
    data = (FOUND / "counter_beyond_float.json").read_bytes()
    for on in (False, True):
        trace = load_one_way(data, on, chunk_bytes=1 << 20)
        assert trace.counters.select("name", "series", "value", "ts_ns").rows() == [("mem", "small", 2.0, 13000)]


# -- Hypothesis, in rounds -----------------------------------------------------------------


@st.composite
def fuzz_traces(draw) -> tuple[bytes, int]:
    events = []
    for _ in range(draw(st.integers(1, 8))):
        event = draw(st.sampled_from(BASES))
        if "ts" in event:  # distinct times (equal ones: see KNOWN)
            event = with_value(event, "ts", str(len(events) * 100 + 1))
        for _ in range(draw(st.integers(0, 3))):
            field = draw(st.sampled_from(TOP_FIELDS + ARG_FIELDS))
            text = draw(value)
            if field in FLOAT_KEYS and len(text) > 300:  # a known failure (KNOWN)
                continue
            event = with_value(event, field, text)
        if draw(st.integers(0, 9)) == 0:  # a field left out
            event = {k: v for k, v in event.items() if k != draw(st.sampled_from(TOP_FIELDS))}
        events.append(event)
    data = trace_text(events, wrapped=draw(st.booleans()))
    if draw(st.integers(0, 4)) == 0:  # a byte lost, changed or added
        i = draw(st.integers(0, len(data)))
        data = data[:i] + draw(st.sampled_from([b"", b"\x00", b"\xff", b"}", b"]", b'"', b",", b"\\"])) + data[
            i + draw(st.integers(0, 1)):]
    return data, draw(st.sampled_from([1, 64, 512, 1 << 20]))


def _check(case: tuple[bytes, int]) -> None:
    data, chunk_bytes = case
    assert_same_both_ways(data, chunk_bytes)


def run_round(k: int) -> None:
    test = settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])(given(fuzz_traces())(_check))
    seed(SEED + k)(test)()


@built
def test_fuzz_scanner_against_python_path():
    start, k = time.monotonic(), 0
    while True:
        run_round(k)
        k += 1
        if time.monotonic() - start >= SECONDS:
            break
    print(f"fuzz: {k} rounds of {EXAMPLES} examples from seed {SEED} in {time.monotonic() - start:.0f} s")
