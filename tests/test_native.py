"""The native scanner (`tracekit/native/_scan.c`) against the Python path, which is the reference.

- hand-computed values for one piece (exact ns from decimal text, escapes, hex integers,
  grid/block triples, shapes, absent args);
- pieces outside the common shape are handed back (None), so the Python path counts them;
- real traces load to identical frames with and without the scanner, and the scanner
  really takes their pieces;
- property: any trace Hypothesis builds loads to the same frames either way.
"""

from __future__ import annotations

import os

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from conftest import all_real_traces
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from tracekit.loader import loads, native
from tracekit.loader.batch import piece_batch
from tracekit.loader.columns import chunk_parts
from tracekit.loader.events import PieceError

built = pytest.mark.skipif(native._scan is None, reason="the native scanner is not built (needs a C compiler at install)")


def test_scanner_is_built_where_a_compiler_is():
    """`pip install -e .` compiles the scanner when a C compiler is there; a silent failure
    would make every load take the slow path."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: tracekit runs on its Python path")
    assert native._scan is not None, "a C compiler is installed but tracekit/native/_scan was not built"


def load_both(text: bytes, monkeypatch, chunk_bytes: int = 1 << 20):
    monkeypatch.setenv("TRACEKIT_NATIVE", "0")
    py = loads(text, workers=0, chunk_bytes=chunk_bytes)
    monkeypatch.setenv("TRACEKIT_NATIVE", "1")
    nat = loads(text, workers=0, chunk_bytes=chunk_bytes)
    return py, nat


def assert_same_frames(a, b) -> None:
    for name, frame in a.frames().items():
        other = getattr(b, name)
        assert frame.schema == other.schema, name
        assert frame.equals(other), f"{name} differs:\n{frame}\n{other}"


GOLDEN = rb"""[
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": 1712195495519689.047, "dur": 2.0005,
  "args": {"External id": 11, "Input Dims": [[8, 16], [16, 32]], "Input type": ["float", "float"], "Sequence number": 3}},
 {"ph": "X", "cat": "kernel", "name": "gemm \"q\" \u00e9\ud83d\ude00", "pid": 0, "tid": 7, "ts": -0.0005, "dur": 1,
  "args": {"device": 0, "stream": "0x1f", "correlation": 5, "grid": [8, 4, 1], "block": [128, 1, 1],
           "est. achieved occupancy %": 50, "nested": {"stream": [1, {"x": "}"}]}}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": "thread 8", "ts": 1.5, "dur": 0.25},
 {"ph": "f", "cat": "ac2g", "name": "", "pid": 7, "tid": 8, "ts": 3, "id": "0x10", "bp": "e"}
]"""


@built
def test_golden_piece_hand_computed():
    batch = native.native_batch(GOLDEN)
    assert batch is not None
    assert batch["n"] == 4
    assert batch["dicts"]["cat"] == ["cpu_op", "kernel", "cuda_runtime", "ac2g"]
    frames = chunk_parts(batch).frames
    ops = frames["ops"].row(0, named=True)
    assert (ops["ts_ns"], ops["dur_ns"], ops["end_ns"]) == (1712195495519689047, 2001, 1712195495519691048)
    assert (ops["external_id"], ops["sequence_nr"]) == (11, 3)
    assert ops["input_dims"] == "[[8,16],[16,32]]"
    gpu = frames["gpu"].row(0, named=True)
    assert gpu["name"] == 'gemm "q" \u00e9\U0001f600'
    assert gpu["ts_ns"] == -1  # -0.0005 us: the fourth decimal rounds half away from zero
    assert gpu["stream"] == 7  # "0x1f" reads as null (as in the Python path): the tid gives the stream
    assert (gpu["correlation"], gpu["grid_x"], gpu["grid_y"], gpu["grid_z"], gpu["block_x"]) == (5, 8, 4, 1, 128)
    assert gpu["est_occupancy_pct"] == 50.0
    # args keeps what did not become a column: the unreadable stream, the nested object as written
    assert gpu["args"] == '{"stream":"0x1f","nested":{"stream": [1, {"x": "}"}]}}'
    assert ops["args"] is None  # every key became a column
    runtime = frames["runtime"].row(0, named=True)
    assert (runtime["tid"], runtime["ts_ns"], runtime["dur_ns"], runtime["args"]) == ("thread 8", 1500, 250, None)
    flow = frames["flows"].row(0, named=True)
    assert (flow["flow_id"], flow["binding_point"], flow["ts_ns"]) == (16, "e", 3000)


REST = rb"""[
 {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1,
  "args": {"queued": 0, "device": 0, "External id": 4, "stream": null, "context": 1, "Input Dims": [[2]]}},
 {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 2, "dur": 1,
  "args": {"device": 3, "Ev Idx": 5, "Input Dims": [[2, 3]], "External id": 6}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 3, "dur": 1,
  "args": {"correlation": 9, "External id": 6, "cbid": 211}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "pid": 1, "tid": 1, "ts": 4, "dur": 1, "args": {}},
 {"ph": "B", "cat": "cpu_op", "name": "pair", "pid": 1, "tid": 2, "ts": 5, "args": {"External id": 8, "x": 1}},
 {"ph": "E", "pid": 1, "tid": 2, "ts": 6}
]"""


@built
def test_args_keep_only_what_did_not_become_a_column(monkeypatch):
    """Complete events' `args`: the members that became this frame's columns are dropped; a
    typed key whose value was not read (null), a key of another frame's family and a shape
    key on a GPU row stay, as written, in their order. B/E pairs keep their whole `args`."""
    assert native.native_batch(REST) is not None
    py, nat = load_both(REST, monkeypatch)
    assert_same_frames(py, nat)
    assert nat.gpu["args"].to_list() == ['{"queued":0,"stream":null,"context":1,"Input Dims":[[2]]}']
    assert nat.gpu["external_id"].to_list() == [4]
    ops = nat.ops.sort("ts_ns")
    assert ops["args"].to_list() == ['{"device":3,"Ev Idx":5}', '{"External id": 8, "x": 1}']
    assert ops["input_dims"].to_list() == ["[[2,3]]", None]
    assert nat.runtime["args"].to_list() == [None, None]
    assert nat.runtime["cbid"].to_list() == [211, None]


def test_args_key_given_twice_keeps_its_last_value_in_its_first_place(monkeypatch):
    piece = (b'[{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1,'
             b' "args": {"queued": 1, "stream": 2, "context": 1, "queued": 3, "stream": 4}}]')
    if native._scan is not None:
        assert native.native_batch(piece) is None  # the Python path decides
    monkeypatch.setenv("TRACEKIT_NATIVE", "0")
    gpu = loads(piece, workers=0).gpu
    assert (gpu["args"].item(), gpu["stream"].item()) == ('{"queued":3,"context":1}', 4)


@built
def test_golden_piece_matches_python_path(monkeypatch):
    py, nat = load_both(GOLDEN, monkeypatch)
    assert_same_frames(py, nat)


# keys next to the common ones (read from their bytes): longer names sharing a prefix, after
# the real key so that a wrong match would overwrite it; space before the colon, compact and
# spread-out writing, and a last key near the piece's end
NEAR_KEYS = rb"""[
 {"ph" :"X", "phase": "B", "cat":"cpu_op", "cats": "no", "name": "a", "named": "b", "pid": 7, "pidx": 1,
  "tid": 8, "tids": 2, "ts": 10, "tsx": 3, "dur": 5, "durs": 4, "args": {"External id": 1}, "argsx": {"a": 1},
  "ids": 5, "s": "t", "sx": "u", "bpx": "v"},
 {"ph":"i","cat":"c","name":"n","pid":1,"tid":1,"ts":20,"s":"g"},
 {"ph": "f", "cat": "ac2g", "name": "", "pid": 7, "tid": 8, "ts": 30, "id": 16, "bp": "e"},{"s":"p","ts":1}
]"""


@built
def test_numbers_of_every_length(monkeypatch):
    """Integers of 1 to 19 digits (read up to seven at a time, or in runs of eight), each
    followed by another terminator, and times with and without fractions, the last near the
    piece's end."""
    ends = [",", "}", " ,", "\n,"]
    events = []
    for n in range(1, 20):
        value = int("1234567890123456789"[:n])
        end = ends[n % len(ends)]
        args = f'{{"External id": {value}{end}' + ('' if end.strip().endswith("}") else ' "Sequence number": -' + str(value) + '}')
        events.append(f'{{"ph": "X", "cat": "cpu_op", "name": "op", "pid": {n}, "tid": 1, "ts": {value % 10**15}.{n:03d}, '
                      f'"dur": {n}, "args": {args}}}')
    events.append('{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 0, "tid": 1, "ts": 7, "dur": 1}')
    text = ("[" + ",".join(events) + "]").encode()
    assert native.native_batch(text) is not None
    py, nat = load_both(text, monkeypatch)
    assert_same_frames(py, nat)
    ops = nat.ops.sort(pl.col("pid").cast(pl.String).cast(pl.Int64))
    assert ops["external_id"].to_list() == [None] + [int("1234567890123456789"[:n]) for n in range(1, 20)]
    assert ops.filter(pl.col("pid") == "12")["ts_ns"].item() == (123456789012 % 10**15) * 1000 + 12


@built
def test_keys_near_the_common_ones_match_python_path(monkeypatch):
    assert native.native_batch(NEAR_KEYS) is not None  # the scanner takes it
    py, nat = load_both(NEAR_KEYS, monkeypatch)
    assert_same_frames(py, nat)
    ops = nat.ops.row(0, named=True)
    assert (ops["name"], ops["pid"], ops["tid"], ops["ts_ns"], ops["dur_ns"], ops["external_id"]) == (
        "a", "7", "8", 10_000, 5_000, 1)


@built
@pytest.mark.parametrize("event", [
    b'{"ph": "X", "pid": true, "ts": 1}',  # a boolean pid: counted as a wrong type
    b'{"ph": "X", "ts": "12"}',  # a time written as text
    b'{"ph": "X", "ts": 1e3}',  # an exponent
    b'{"ph": "X", "ts": 1, "args": null}',  # args that is not an object
    b'{"ph": "X", "ts": 1, "args": {"stream": 1.5}}',  # a fraction in an integer column
    b'{"ph": "X", "ts": 1, "args": {"grid": [1, 2]}}',  # a short grid
    b'{"ph": "X", "ts": 1, "args": {"correlation": 9223372036854775808}}',  # beyond Int64
    b'{"ph": "X", "name": "\\ud800", "ts": 1}',  # a lone surrogate (not JSON msgspec takes)
    b'{"p\\u0068": "X", "ts": 1}',  # a key written with escapes
    b'{"ph": "X", "ts": 1,}',  # not JSON
    b'{"ph": "X", "ts": 1, "pid": 012}',  # a leading zero: not JSON
    b'{"ph": "X", "ts": 1, "args": {"External id": 0123}}',
    b'[1, 2]',  # not an object
])
def test_uncommon_pieces_go_to_the_python_path(event):
    piece = b"[" + event + b"]"
    assert native.native_batch(piece) is None
    if event.endswith(b",}") or b"ud800" in event or b" 01" in event:
        with pytest.raises(PieceError):  # and the Python path judges it
            piece_batch(piece)
    else:
        batch = piece_batch(piece)
        assert batch["n"] + batch["dropped"] == 1


@built
def test_scanner_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("TRACEKIT_NATIVE", "0")
    assert native.native_batch(GOLDEN) is None


@built
@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: p.name)
def test_real_traces_same_with_and_without_scanner(path: Path, monkeypatch):
    taken = []
    original = native.native_batch

    def counting(piece, bare=False):
        out = original(piece, bare)
        if os.environ.get("TRACEKIT_NATIVE") != "0":  # the pieces of the native run alone
            taken.append(out is not None)
        return out

    monkeypatch.setattr(native, "native_batch", counting)
    text = path.read_bytes()
    py, nat = load_both(text, monkeypatch, chunk_bytes=256 * 1024)
    assert_same_frames(py, nat)
    if path.stat().st_size > 10_000 and "chrome" not in path.name:
        assert sum(taken) >= len(taken) // 2, f"the scanner took {sum(taken)} of {len(taken)} pieces"


# -- property: same frames either way -----------------------------------------------------

DB = DirectoryBasedExampleDatabase(str(Path(__file__).parent / ".hypothesis-db"))

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(0, 10**16),
    st.integers(0, 6).flatmap(lambda places: st.decimals(allow_nan=False, allow_infinity=False, places=places,
                                                          min_value=-(10**17), max_value=10**17)),
    st.floats(allow_nan=False, allow_infinity=False),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, names, st.sampled_from(["0x0", "0x1F", "12", "stream 7"]))
arg_keys = st.sampled_from(["External id", "correlation", "stream", "device", "grid", "block", "Input Dims",
                            "Input type", "Concrete Inputs", "est. achieved occupancy %", "flops", "cuda_sync_kind",
                            "Bytes", "Addr", "Sequence number", "other", "bytes"])
arg_values = st.one_of(scalars, st.lists(st.integers(-5, 2**64), max_size=4),
                       st.lists(st.lists(st.integers(0, 9), max_size=3), max_size=3),
                       st.dictionaries(names, scalars, max_size=2))


@st.composite
def events(draw) -> dict:
    event: dict = {}
    event["ph"] = draw(st.sampled_from(["X", "X", "X", "i", "s", "f", "C", "M", "B", "E", "b", "e", "Q"]))
    if draw(st.booleans()):
        event["cat"] = draw(st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "Memcpy", "ac2g", "gpu_memset",
                                             "user_annotation", "", "weird"]))
    event["name"] = draw(st.one_of(names, st.sampled_from(["aten::mm", "[memory]", "cudaLaunchKernel"])))
    for key in ("pid", "tid", "id", "ts", "dur", "s", "bp"):
        if draw(st.integers(0, 3)):
            event[key] = draw(st.one_of(st.integers(0, 10**6), scalars) if key in ("pid", "tid", "id")
                              else numbers if key in ("ts", "dur") else st.sampled_from(["g", "p", "t", "e", ""]))
    if draw(st.integers(0, 2)):
        event["args"] = draw(st.dictionaries(arg_keys, arg_values, max_size=5))
    return event


def to_json(value, ascii_only: bool) -> str:
    """JSON text, decimals written as such (json.dumps cannot)."""
    from decimal import Decimal

    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=ascii_only)}: {to_json(v, ascii_only)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(to_json(v, ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


def property_settings(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, database=DB,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def same_both_ways(events_text: str) -> None:
    """The trace holding these events loads to the same frames and warnings either way."""
    if native._scan is None:
        pytest.skip("the native scanner is not built")
    text = ('{"traceEvents": [\n' + events_text + "\n]}").encode()
    mp = pytest.MonkeyPatch()
    try:
        py, nat = load_both(text, mp, chunk_bytes=512)
    finally:
        mp.undo()
    assert_same_frames(py, nat)
    assert py.warnings.equals(nat.warnings)


@property_settings(150)
@seed(20261130)
@given(st.lists(events(), min_size=1, max_size=25), st.booleans())
def test_property_same_frames_with_and_without_scanner(evs, ascii_only):
    same_both_ways(",\n".join(to_json(e, ascii_only) for e in evs))


@st.composite
def common_events(draw) -> dict:
    """Events in the shape the scanner takes: it must take every one of them."""
    from decimal import Decimal

    times = st.one_of(st.integers(-(10**15), 9 * 10**15),  # (at the very edge of Int64 ns, Python decides)
                      st.builds(lambda i, f, p: Decimal(f"{i}.{str(f).zfill(p)[:p]}"),
                                st.integers(-(10**15), 9 * 10**15), st.integers(0, 10**7), st.integers(1, 7)))
    event: dict = {"ph": draw(st.sampled_from(["X", "X", "i", "s", "f", "C", "M", "B", "E", "Q"]))}
    for key in ("cat", "name", "s", "bp"):
        if draw(st.booleans()):
            event[key] = draw(st.one_of(names, st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "[memory]"])))
    for key in ("pid", "tid", "id"):
        if draw(st.booleans()):
            event[key] = draw(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), names, st.integers(2**63, 2**70)))
    for key in ("ts", "dur"):
        if draw(st.integers(0, 3)):
            event[key] = draw(times)
    if draw(st.booleans()):
        args: dict = {}
        for key, value in (("External id", st.integers(-(2**63) + 1, 2**63 - 1)), ("stream", st.sampled_from(["0x0", 7])),
                           ("grid", st.tuples(st.integers(0, 2**31), st.integers(0, 9), st.integers(0, 9)).map(list)),
                           ("est. achieved occupancy %", st.one_of(st.integers(0, 100), st.floats(0, 100))),
                           ("cuda_sync_kind", names), ("Input Dims", st.lists(st.lists(st.integers(0, 99), max_size=3))),
                           ("Concrete Inputs", st.lists(names, max_size=2)), ("Bytes", st.integers(-(2**40), 2**40)),
                           ("anything", st.recursive(scalars, lambda c: st.lists(c, max_size=2), max_leaves=4))):
            if draw(st.integers(0, 2)) == 0:
                args[key] = draw(st.one_of(st.none(), value))
        event["args"] = args
    return event


@property_settings(120)
@seed(20261201)
@given(st.lists(common_events(), min_size=1, max_size=25), st.booleans())
def test_property_scanner_takes_common_shapes(evs, ascii_only):
    if native._scan is None:
        pytest.skip("the native scanner is not built")
    events_text = ",\n".join(to_json(e, ascii_only) for e in evs)
    assert native.native_batch(("[" + events_text + "]").encode()) is not None
    same_both_ways(events_text)


# -- the scanner's buffers handed to Polars (Arrow PyCapsule interface, no copy) ----------------


def _listed_frame(group) -> pl.DataFrame:
    """The same group with its buffers read back as Python lists (Arrow's layout: int64
    and float64 values; int64 offsets into UTF-8 data), made a frame as the Python
    decoder's batches are (`batch.frame`)."""
    from array import array

    from tracekit.loader.decoded import FLOAT64, INT64, Columns
    from tracekit.loader.batch import frame

    columns = []
    for name, kind, bufs in group.columns:
        if kind in (INT64, FLOAT64):
            values = array("q" if kind == INT64 else "d", bytes(bufs[0])).tolist()
        else:
            offsets, data = array("q", bytes(bufs[0])), bytes(bufs[1])
            values = [data[a:b].decode() for a, b in zip(offsets, offsets[1:])]
        assert len(values) == group.length, name
        columns.append((name, kind, (values,)))
    return frame(Columns(columns, group.length))


@built
def test_scanned_groups_become_the_frames_their_buffers_hold():
    """Every group of the golden piece: the frame made from the scanner's buffers (no copy)
    is the frame of the same buffers read back value by value (names, types, values, order)."""
    batch = native.native_batch(GOLDEN)
    assert set(batch["groups"]) == {"ops", "gpu", "runtime", "flows"}
    for key, group in batch["groups"].items():
        assert native.scanned(group)
        frame = native.frame(group)
        assert frame.height == group.length
        assert frame.equals(_listed_frame(group)), key
    ops = native.frame(batch["groups"]["ops"]).row(0, named=True)
    assert (ops["eid"], ops["ts_n"], ops["dur_n"]) == (0, 1712195495519689047, 2001)
    assert ops["input_dims"] == "[[8, 16], [16, 32]]"  # as written (the projection takes the spaces out)


@built
def test_scanner_buffers_read_as_bytes():
    """A column buffer is read-only bytes (buffer protocol, len): int64 values little-endian."""
    group = native.native_batch(GOLDEN)["groups"]["ops"]
    name, kind, (values,) = group.columns[0]
    assert (name, kind, len(values)) == ("eid", "i64", 8)
    assert bytes(values) == (0).to_bytes(8, "little")
    view = memoryview(values)
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1


@built
def test_frames_outlive_the_batch_and_its_thread():
    """The Series share the scanner's memory: it stays valid after the batch is gone, and
    frames let go on other threads (as Polars' own threads do) free it without the GIL."""
    import gc
    from concurrent.futures import ThreadPoolExecutor

    events = [{"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7, "ts": i, "dur": 1,
               "args": {"note": "x" * (i % 40)}} for i in range(2000)]
    frames = []
    for _ in range(20):
        batch = native.native_batch(json.dumps(events).encode())
        frames.append(native.frame(batch["groups"]["gpu"]))
        del batch
    gc.collect()
    for frame in frames:
        assert frame["eid"].to_list() == list(range(2000))
        assert frame["args"].str.len_bytes().to_list() == [len(json.dumps({"note": "x" * (i % 40)}, separators=(",", ":")))
                                                           for i in range(2000)]
    with ThreadPoolExecutor(4) as pool:  # each frame let go (and its memory freed) on a worker thread
        sums = list(pool.map(lambda f: int(f.select(pl.col("ts_n").sum()).item()), frames))
    assert sums == [sum(i * 1000 for i in range(2000))] * 20
    frames.clear()
    gc.collect()


@built
def test_hand_over_refuses_what_is_not_a_scanner_column():
    """`arrow_column` takes the scanner's own columns only: other buffers, unknown kinds and
    buffers of the wrong length are refused (nothing is read out of bounds)."""
    group = native.native_batch(GOLDEN)["groups"]["ops"]
    name, kind, bufs = group.columns[0]
    scan = native._scan
    with pytest.raises(TypeError, match="column buffer"):
        scan.arrow_column((name, kind, (b"\0" * 8,)), 1)
    with pytest.raises(ValueError, match="unknown kind"):
        scan.arrow_column((name, "u8", bufs), 1)
    with pytest.raises(ValueError, match="wrong buffers"):
        scan.arrow_column((name, "utf8", bufs), 1)
    with pytest.raises(ValueError, match="8 bytes for 2 rows"):
        scan.arrow_column((name, kind, bufs), 2)


_GOOD = '{"ph": "X", "cat": "cpu_op", "name": "g%d", "pid": 1, "tid": 1, "ts": %d, "dur": 1}'
_ODD = {
    "ts_int64_min": '{"ph": "X", "cat": "cpu_op", "name": "m", "pid": 1, "tid": 1, "ts": -9223372036854775808, "dur": 1}',
    "ts_400_digits": '{"ph": "X", "cat": "cpu_op", "name": "d", "pid": 1, "tid": 1, "ts": ' + "9" * 400 + ', "dur": 1}',
    "arg_400_digits": '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3, "dur": 1, '
                      '"args": {"correlation": ' + "9" * 400 + ', "x": -' + "9" * 400 + "}}",
    "nan": '{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": NaN, "dur": 1}',
    "infinity_in_args": '{"ph": "X", "cat": "kernel", "name": "i", "pid": 0, "tid": 7, "ts": 3, "dur": 1, '
                        '"args": {"grid": [Infinity, 1, 1]}}',
    "raw_control": '{"ph": "X", "cat": "cpu_op", "name": "a\x01b", "pid": 1, "tid": 1, "ts": 2, "dur": 1}',
    "lone_surrogate": '{"ph": "X", "cat": "cpu_op", "name": "\\ud800", "pid": 1, "tid": 1, "ts": 2, "dur": 1}',
}


@pytest.mark.parametrize("odd", list(_ODD), ids=list(_ODD))
def test_odd_values_same_both_ways(odd):
    """An odd value between sound events (in a chunk of its own and not) loads the same way
    on both paths, and the sound events around it are kept: -2**63 us is out of range (not
    time 0), and an event that is not valid JSON is skipped, not the ones after it."""
    events = [_GOOD % (i, 10 + i) for i in range(40)]
    events.insert(20, _ODD[odd])
    same_both_ways(",\n".join(events))
    trace = loads(('{"traceEvents": [\n' + ",\n".join(events) + "\n]}").encode(), chunk_bytes=512)
    assert {f"g{i}" for i in range(40)} <= set(trace.ops["name"].to_list())
    if odd == "ts_int64_min":
        assert "m" not in trace.ops["name"].to_list()
        assert dict(zip(trace.warnings["code"], trace.warnings["count"]))["missing_ts"] == 1


def test_an_args_object_of_100k_keys_is_read_in_linear_time():
    """Past 64 keys outside the typed ones, an `args` goes to the Python path: the scanner's
    duplicate check is linear per key, so 100,000 keys took 28 s (0.7 s now)."""
    import time

    args = ", ".join(f'"k{i}": {i}' for i in range(100_000))
    text = ('{"traceEvents": [' + _GOOD % (0, 1) + ', {"ph": "X", "cat": "cpu_op", "name": "wide", "pid": 1, '
            '"tid": 1, "ts": 2, "dur": 1, "args": {' + args + "}}, " + _GOOD % (2, 3) + "]}").encode()
    if native._scan is not None:
        assert native.native_batch(b"[" + text[text.index(b'{"ph"'):-2] + b"]") is None  # left to Python
    start = time.monotonic()
    trace = loads(text)
    assert time.monotonic() - start < 5
    assert trace.ops["name"].to_list() == ["g0", "wide", "g2"]
