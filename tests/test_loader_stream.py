"""The streaming loader gives the same Trace whatever the chunking, helper or cache."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import polars as pl
import pytest
from builders import TraceBuilder
from conftest import real_trace
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit
from tracekit.sizes import usable_cpus
from tracekit.cache import Cache
from tracekit.cache import traces as tkcache
from tracekit.cache.entries import default_folder
from tracekit.loader import load_file, loads
from tracekit.loader.constants import constant_columns
from tracekit.model import Trace

ONE_SHOT = 1 << 40  # a chunk size no test trace reaches: the whole array is one piece


def assert_same(a: Trace, b: Trace) -> None:
    for name, frame in a.frames().items():
        other = getattr(b, name)
        assert frame.schema == other.schema, name
        assert frame.equals(other), f"{name} differs:\n{frame}\n{other}"
    for name in a.meta.__dataclass_fields__:
        x, y = getattr(a.meta, name), getattr(b.meta, name)
        if isinstance(x, pl.DataFrame):
            assert x.equals(y), f"meta.{name}"
        else:
            assert x == y, f"meta.{name}: {x!r} != {y!r}"


def busy_trace() -> TraceBuilder:
    """Every event family, ids that link across the file, shapes, awkward text in args."""
    b = TraceBuilder(base_time_ns=1_700_000_000_000_000_000)
    for step in range(6):
        t0 = step * 1_000_000
        b.annotation(f"ProfilerStep#{step}", t0, 900_000, gpu=True)
        ext = b.op("aten::mm", t0 + 1_000, 50_001, args={
            "Input Dims": [[8, 16], [16, 32], []], "Input type": ["float", "float", "Scalar"],
            "Concrete Inputs": ["", "", "1"], "Input Strides": [[16, 1], [32, 1], []],
            "nested": [{"a": 1}, {"b": "}, {"}, {"c": [{"d": "},{"}]}],  # separators inside args
        })
        b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", ext=ext, launch_ns=t0 + 2_000,
                        launch_dur_ns=4_999, start_ns=t0 + 10_500, dur_ns=30_123, grid=(8, 4, 1))
        b.launch_copy("HtoD (Pageable -> Device)", launch_ns=t0 + 60_000, launch_dur_ns=3_000,
                      start_ns=t0 + 70_000, dur_ns=2_000, nbytes=4096)
        b.sync("Stream Sync", t0 + 80_000, 1_000)
        b.memory(t0 + 90_000, 4096, 1 << 20, 1 << 21)
        b.raw({"ph": "B", "name": f"outer{step}", "pid": 1, "tid": 1, "ts": t0 / 1000})
        b.raw({"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": t0 / 1000 + 3, "s": "t"})
        b.raw({"ph": "C", "name": "mem", "pid": 1, "ts": t0 / 1000 + 4, "args": {"heap": step, "gpu": 2.5}})
        b.raw({"ph": "b", "cat": "net", "id": f"0x{step:x}", "name": "req", "pid": 1, "tid": 4, "ts": t0 / 1000 + 1})
    for step in range(6):  # the ends come long after their begins: pairs straddle chunks
        t0 = step * 1_000_000
        b.raw({"ph": "e", "cat": "net", "id": f"0x{step:x}", "name": "req", "pid": 1, "tid": 5, "ts": t0 / 1000 + 7})
        b.raw({"ph": "E", "pid": 1, "tid": 1, "ts": t0 / 1000 + 500, "name": "a name with \"quotes\" and },{"})
    b.raw({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "renamed"}})
    return b


def load_text(tmp_path, text: str | bytes, name: str = "t.json", **kw) -> Trace:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return load_file(p, **kw)


@pytest.mark.parametrize("chunk_bytes", [1, 97, 1_000, 20_000])
def test_chunked_equals_one_shot(tmp_path, chunk_bytes):
    text = busy_trace().text()
    one = load_text(tmp_path, text, chunk_bytes=ONE_SHOT, workers=0)
    assert one.ops.filter(pl.col("ph") == "B").height == 6 and one.ops.filter(pl.col("ph") == "b").height == 6
    assert one.ops["input_dims"].drop_nulls().unique().to_list() == ["[[8,16],[16,32],[]]"]
    assert_same(one, load_text(tmp_path, text, chunk_bytes=chunk_bytes, workers=0))


@pytest.mark.parametrize("chunk_bytes", [1, 500, 5_000])
@pytest.mark.parametrize("native", ["1", "0"])  # a decoding thread (native scanner); the main thread alone (Python path)
def test_decoding_thread_equals_one_shot(tmp_path, chunk_bytes, native, monkeypatch):
    monkeypatch.setenv("TRACEKIT_NATIVE", native)
    text = busy_trace().text()
    one = load_text(tmp_path, text, chunk_bytes=ONE_SHOT, workers=0)
    assert_same(one, load_text(tmp_path, text, chunk_bytes=chunk_bytes, workers=1))
    gz = gzip.compress(text.encode())
    assert_same(one.replace(meta=tracekit.TraceMeta()), load_text(tmp_path, gz, "t.json.gz", chunk_bytes=chunk_bytes,
                                                                  workers=1).replace(meta=tracekit.TraceMeta()))


def test_decoding_thread_only_beside_the_scanner(monkeypatch):
    from tracekit.loader import native
    from tracekit.loader.workers import GZIP_RATIO, DECODING_THREAD_BYTES, DecodingThread, decoding_thread

    assert decoding_thread(0, 10**12, False) is None
    if native.available() and usable_cpus() >= 2:  # alone below DECODING_THREAD_BYTES, with a thread from there on
        assert decoding_thread(None, DECODING_THREAD_BYTES - 1, False) is None
        assert decoding_thread(None, DECODING_THREAD_BYTES // GZIP_RATIO - 1, True) is None
        for size, compressed in ((DECODING_THREAD_BYTES, False), (DECODING_THREAD_BYTES // GZIP_RATIO + 1, True)):
            helper = decoding_thread(None, size, compressed)
            try:
                assert isinstance(helper, DecodingThread)
            finally:
                helper.close()
    if native.available():
        helper = decoding_thread(1, 1, False)
        try:
            assert isinstance(helper, DecodingThread)
        finally:
            helper.close()
    monkeypatch.setenv("TRACEKIT_NATIVE", "0")  # the Python path holds the GIL: never a thread, whatever is asked
    assert decoding_thread(1, 1, False) is None
    assert decoding_thread(None, 10**12, False) is None


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_decoding_thread_that_fails_has_its_chunks_redone(tmp_path, fail_at, monkeypatch):
    """The thread dies on its `fail_at`-th chunk (e.g. out of memory): that chunk and every
    later one are decoded by the main thread, and nothing is lost or read twice."""
    from tracekit.loader import native, workers

    if not native.available():
        pytest.skip("the native scanner is not built")
    b = TraceBuilder()
    for i in range(400):  # plain events: every cut is right, every chunk is shared out
        b.op(f"op{i}", i * 100, 50)
    text = b.text()
    one = load_text(tmp_path, text, workers=0)  # one chunk: 4 MB
    real, calls = workers.piece_batch, []

    def failing(piece, bare=False):
        calls.append(len(piece))
        if len(calls) == fail_at:
            raise MemoryError
        return real(piece, bare)

    monkeypatch.setattr(workers, "piece_batch", failing)
    assert_same(one, load_text(tmp_path, text, chunk_bytes=1_000, workers=1))
    assert len(calls) == fail_at  # the thread stopped at its failure


def test_compact_separators_and_bare_array(tmp_path):
    events = busy_trace().document()["traceEvents"]
    text = json.dumps(events, separators=(",", ":"), default=lambda o: o.ns / 1000)
    one = load_text(tmp_path, text, chunk_bytes=ONE_SHOT)
    assert one.meta.format == "kineto-array" and one.gpu.height > 0
    assert_same(one, load_text(tmp_path, text, chunk_bytes=50))


@pytest.mark.parametrize("cut", [0.3, 0.555, 0.9, 0.999])
@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("native", ["1", "0"])
def test_truncated_input_recovers_the_same_at_any_chunking(tmp_path, cut, workers, native, monkeypatch):
    monkeypatch.setenv("TRACEKIT_NATIVE", native)
    full = busy_trace().text().encode()
    text = full[: int(len(full) * cut)]
    one = load_text(tmp_path, text, chunk_bytes=ONE_SHOT, workers=0)
    assert one.meta.recovered and "truncated" in one.warnings["code"].to_list()
    for chunk_bytes in (1, 300, 4_000):
        assert_same(one, load_text(tmp_path, text, chunk_bytes=chunk_bytes, workers=workers))


def test_malformed_middle_and_wrong_types_in_a_middle_chunk(tmp_path):
    b = TraceBuilder()
    for i in range(200):
        b.op(f"op{i}", i * 100, 50)
    doc = b.document()
    doc["traceEvents"][90] = {"ph": 5, "cat": ["x"], "name": None, "pid": 1.0, "tid": True, "ts": "20", "dur": "2"}
    doc["traceEvents"][91] = "not an event"
    text = json.dumps(doc, indent=1, default=lambda o: o.ns / 1000)
    one = load_text(tmp_path, text, chunk_bytes=ONE_SHOT)
    codes = dict(zip(one.warnings["code"], one.warnings["count"]))
    assert codes["bad_field_type"] == 1 and codes["not_an_event"] == 1
    for chunk_bytes in (1, 700):
        assert_same(one, load_text(tmp_path, text, chunk_bytes=chunk_bytes))
    broken = text.replace('"op150"', '"op150" @', 1)  # invalid JSON in the middle: that event is skipped
    one = load_text(tmp_path, broken, chunk_bytes=ONE_SHOT)
    assert not one.meta.recovered and one.ops.height == 197  # op0..op199 less the two replaced and op150
    assert "op150" not in one.ops["name"].to_list() and "op199" in one.ops["name"].to_list()
    msg = one.warnings.filter(pl.col("code") == "invalid_json")["message"].item()
    assert msg.startswith("1 event was not valid JSON") and f"starts at byte {broken.rindex('{', 0, broken.index(' @')):,})" in msg
    for chunk_bytes in (1, 700, 5_000):
        assert_same(one, load_text(tmp_path, broken, chunk_bytes=chunk_bytes))


def test_tail_keys_after_the_event_array(tmp_path):
    doc = busy_trace().document()
    events = doc.pop("traceEvents")
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "x}, {y",
                       "extraList": [{"a": 1}, {"b": 2}], "baseTimeNanoseconds": 5}, indent=1,
                      default=lambda o: o.ns / 1000)
    one = load_text(tmp_path, text, chunk_bytes=ONE_SHOT)
    assert one.meta.base_time_ns == 5 and one.meta.trace_name == "x}, {y"
    assert one.meta.extra == {"extraList": [{"a": 1}, {"b": 2}]}
    for chunk_bytes in (1, 2_000):
        assert_same(one, load_text(tmp_path, text, chunk_bytes=chunk_bytes))


def test_loads_takes_gzip_bytes(tmp_path):
    text = busy_trace().text().encode()
    one = loads(text)
    assert_same(one.replace(meta=tracekit.TraceMeta()), loads(gzip.compress(text)).replace(meta=tracekit.TraceMeta()))


# -- the cache ---------------------------------------------------------------------------------


def test_cache_gives_the_same_trace_and_is_reused(tmp_path, monkeypatch):
    path = busy_trace().write(tmp_path / "t.json.gz")
    cache_dir = tmp_path / "cache"
    plain = tracekit.load(path)
    first = Cache(cache_dir).load(path)
    assert len(list(cache_dir.iterdir())) == 1
    assert_same(plain, first)

    def no_parse(*args, **kwargs):
        raise AssertionError("the cache was not used")

    monkeypatch.setattr("tracekit.loader.load_file", no_parse)
    second = Cache(cache_dir).load(path)
    assert_same(plain, second)
    relative = os.path.relpath(path)
    assert Cache(cache_dir).load(relative).meta.path == relative


def test_cached_frames_come_back_in_one_chunk_as_a_fresh_load_gives_them(tmp_path, monkeypatch):
    path = busy_trace().write(tmp_path / "t.json.gz")
    plain = tracekit.load(path)
    write = pl.DataFrame.write_parquet
    # small row groups, as a large trace's frames get: each reads back as a chunk of its own
    monkeypatch.setattr(pl.DataFrame, "write_parquet", lambda self, file, **kw: write(self, file, row_group_size=3, **kw))
    Cache(tmp_path / "cache").load(path)
    monkeypatch.undo()
    assert pl.read_parquet(next((tmp_path / "cache").glob("*/ops.parquet"))).n_chunks() > 1
    cached = Cache(tmp_path / "cache").load(path)
    assert_same(plain, cached)
    for name, frame in cached.frames().items():
        assert frame.n_chunks() <= 1, name
        assert plain.frames()[name].n_chunks() <= 1, name


def test_columns_of_one_value_become_constant_columns():
    enum = pl.Enum(["a", "b"])
    frame = pl.DataFrame({"text": [None, None, None], "n": [None, None, None], "e": [None, None, None],
                          "l": [None, None, None], "some": ["x", None, "y"], "same": ["cpu_op"] * 3,
                          "k": [7, 7, 7], "f": [1.5, 1.5, 1.5], "b": [True, True, True], "mixed": [1, 1, 2],
                          "tail_null": ["x", "x", None], "codes": ["ac2g"] * 3, "codes_vary": ["s", "f", "s"]},
                         schema={"text": pl.String, "n": pl.Int64, "e": enum, "l": pl.List(pl.Int64), "some": pl.String,
                                 "same": pl.String, "k": pl.Int64, "f": pl.Float64, "b": pl.Boolean, "mixed": pl.Int64,
                                 "tail_null": pl.String, "codes": pl.Categorical(), "codes_vary": pl.Categorical()})
    out = constant_columns(frame)
    assert out.schema == frame.schema and out.equals(frame)
    assert out["some"].to_list() == ["x", None, "y"] and out["tail_null"].to_list() == ["x", "x", None]
    # at any length the constant ones hold one value; the varying ones (and floats, never
    # folded) keep a value a row, and a filter of the frame copies nothing for the former
    varying = ["some", "f", "mixed", "tail_null", "codes_vary"]
    constant = [c for c in frame.columns if c not in varying]
    long = pl.concat([frame] * 1000)
    folded = constant_columns(long)
    rows = pl.Series([True, False, True] * 1000)
    for f in (folded, folded.filter(rows)):
        assert f.select(constant).estimated_size() < 64
        assert f.select("mixed").estimated_size() >= 8 * f.height and f.select("f").estimated_size() >= 8 * f.height
    assert folded.filter(rows).equals(long.filter(rows))
    assert long.select(constant).estimated_size() > 8 * long.height
    empty = frame.clear()
    assert constant_columns(empty).equals(empty)
    one = frame.head(1)
    assert constant_columns(one).equals(one)


@st.composite
def _frames(draw):
    n = draw(st.integers(0, 30))
    texts = st.one_of(st.none(), st.sampled_from(["", "a", "cpu_op", "a long name past twelve bytes"]))
    ints = st.one_of(st.none(), st.sampled_from([-(2**63), -1, 0, 1, 2**63 - 1]))
    floats = st.one_of(st.none(), st.sampled_from([0.0, -0.0, float("nan"), 1.5]))
    columns = {"key": pl.Series(range(n), dtype=pl.Int64)}
    for i in range(draw(st.integers(1, 5))):
        kind, dtype = draw(st.sampled_from([(texts, pl.String), (texts, pl.Categorical()), (ints, pl.Int64),
                                            (floats, pl.Float64),
                                            (st.one_of(st.none(), st.booleans()), pl.Boolean)]))
        values = draw(st.lists(kind, min_size=n, max_size=n) | st.builds(lambda v: [v] * n, kind))
        columns[f"c{i}"] = pl.Series(values, dtype=dtype)
    return pl.DataFrame(columns)


@settings(max_examples=150, deadline=None)
@given(_frames(), st.integers(0, 2**32))
def test_property_constant_columns_read_as_the_frame_did(frame, seed):
    """Whatever the columns, the frame reads the same, and filters, gathers, sorts, joins and
    concatenations of it give what they gave on the frame as it was."""
    out = constant_columns(frame)
    assert out.schema == frame.schema and out.equals(frame)
    mask = pl.Series([(seed >> (i % 32)) & 1 == 1 for i in range(frame.height)], dtype=pl.Boolean)
    order = pl.Series([(i * 7 + seed) % max(frame.height, 1) for i in range(frame.height)], dtype=pl.Int64)
    other = pl.DataFrame({"key": pl.Series(range(0, 40, 3), dtype=pl.Int64)})
    for f in (lambda d: d.filter(mask), lambda d: d.gather(order), lambda d: d.sort("key", descending=True),
              lambda d: d.join(other, on="key", how="left", maintain_order="left"),
              lambda d: d.join(other, on="key", how="inner", maintain_order="left"),
              lambda d: pl.concat([d, d]), lambda d: d.select(pl.all().reverse())):
        assert f(out).equals(f(frame))


def test_a_load_and_the_cache_give_one_value_columns_as_constants(tmp_path):
    path = busy_trace().write(tmp_path / "t.json.gz")
    for trace in (tracekit.load(path), Cache(tmp_path / "c").load(path),
                  Cache(tmp_path / "c").load(path)):
        ops, runtime, flows = trace.ops, trace.runtime, trace.flows
        # one value (the runtime's pid, the flows' category) or none (sequence_nr): held once;
        # the columns that vary keep a value a row (sizes first: reading a column as a
        # Series gives it its rows)
        assert ops.select("sequence_nr", "fwd_tid").estimated_size() < 64
        assert runtime.select("cat", "pid").estimated_size() < 64 and flows.select("cat", "name").estimated_size() < 64
        assert ops.select("ts_ns").estimated_size() >= 8 * ops.height
        assert runtime["pid"].n_unique() == 1 and flows["cat"].n_unique() == 1
        assert ops["sequence_nr"].null_count() == ops.height and ops["name"].n_unique() > 1


def test_cache_invalidated_when_the_file_changes(tmp_path):
    cache_dir = tmp_path / "cache"
    path = tmp_path / "t.json"
    b = busy_trace()
    b.write(path)
    before = Cache(cache_dir).load(path)
    b.op("one more", 5_000_000, 10)
    b.write(path)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    after = Cache(cache_dir).load(path)
    assert after.ops.height == before.ops.height + 1
    assert_same(tracekit.load(path), after)
    assert len(list(cache_dir.iterdir())) == 2


def test_cache_invalidated_by_a_new_loader_version(tmp_path, monkeypatch):
    path = busy_trace().write(tmp_path / "t.json")
    key = tkcache.entry_key(path, max_bytes=tracekit.loader.DEFAULT_MAX_BYTES)
    monkeypatch.setattr(tkcache, "code_version", lambda: "another")
    assert tkcache.entry_key(path, max_bytes=tracekit.loader.DEFAULT_MAX_BYTES) != key


@pytest.mark.parametrize("name", ["_scan.c", "columns.py", "model.py", "format.py", "traces.py"])
def test_loader_version_covers_its_sources(monkeypatch, name):
    """A change to any source the loader's output depends on (the scanner's C included)
    changes the version in every cache key."""
    from pathlib import Path

    if not any(p.name == name for p in Path(tkcache.__file__).resolve().parents[1].rglob(name)):
        pytest.skip(f"{name} is not shipped here")
    before = tkcache.code_version.__wrapped__()
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: real(self) + (b"\n" if self.name == name else b""))
    assert tkcache.code_version.__wrapped__() != before


@pytest.mark.parametrize("damage", ["meta", "frame", "schema", "empty"])
def test_corrupt_cache_entry_is_ignored_and_rewritten(tmp_path, damage):
    path = busy_trace().write(tmp_path / "t.json")
    cache_dir = tmp_path / "cache"
    plain = Cache(cache_dir).load(path)
    (entry,) = cache_dir.iterdir()
    if damage == "meta":
        (entry / "meta.json").write_text("{not json")
    elif damage == "frame":
        (entry / "gpu.parquet").write_bytes(b"PAR1 garbage")
    elif damage == "schema":
        pl.DataFrame({"x": [1]}).write_parquet(entry / "ops.parquet")
    else:
        for f in entry.iterdir():
            f.unlink()
    assert tkcache.read(cache_dir, entry.name, path=str(path)) is None
    again = Cache(cache_dir).load(path)
    assert_same(plain, again)
    assert tkcache.read(cache_dir, entry.name, path=str(path)) is not None  # rewritten


def test_cache_dir_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_folder() == Cache().folder == tmp_path / "tracekit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert Cache().folder == Path.home() / ".cache" / "tracekit"
    assert Cache(tmp_path / "x").folder == tmp_path / "x"


def test_unreadable_cache_dir_still_loads(tmp_path):
    path = busy_trace().write(tmp_path / "t.json")
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    t = Cache(blocker / "cache").load(path)
    assert t.ops.height > 0


# -- real traces ---------------------------------------------------------------------------------

REAL = ["h100_qwen15_05b_hf_inference.json.gz", "chrome_browser_lthi_generic.json.gz",
        "resnet50_2021_array_form.json.gz", "truncated_trailing_comma.json", "mi250_toy_train_rocm62.json.gz"]


@pytest.mark.real
@pytest.mark.parametrize("name", REAL)
def test_real_trace_streamed_equals_one_shot(name):
    path = real_trace(name)
    one = load_file(path, chunk_bytes=ONE_SHOT, workers=0)
    assert_same(one, load_file(path, chunk_bytes=256 * 1024, workers=1))


@pytest.mark.real
def test_real_trace_cache_round_trip(tmp_path):
    path = real_trace("h100_qwen15_05b_hf_inference.json.gz")
    plain = tracekit.load(path)
    Cache(tmp_path).load(path)
    t0 = time.perf_counter()
    cached = Cache(tmp_path).load(path)
    assert time.perf_counter() - t0 < 5
    assert_same(plain, cached)


def test_cli_cache_option(tmp_path, monkeypatch):
    import click
    from click.testing import CliRunner

    from tracekit.cli.common import cache_opt, load_trace

    @click.command()
    @click.argument("path")
    @cache_opt
    def show(path):
        click.echo(load_trace(path).ops.height)

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = busy_trace().write(tmp_path / "t.json")
    cache = tmp_path / "xdg" / "tracekit"
    runner = CliRunner()
    assert runner.invoke(show, [str(path)]).exit_code == 0
    assert not cache.exists()  # small file: not cached unless asked
    assert runner.invoke(show, [str(path), "--no-cache"]).exit_code == 0
    assert not cache.exists()
    result = runner.invoke(show, [str(path), "--cache"])
    assert result.exit_code == 0 and int(result.output) > 0
    assert len(list(cache.iterdir())) == 1


def test_first_chunks_ramp_up_to_the_chunk_size():
    """The first chunk is a quarter of the chunk size and the second a half (so the work
    after the first chunk starts early); later chunks take the full size. Each chunk ends
    with the last whole event that fits."""
    from tracekit.loader.scan import Reader

    event = b'{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1, "dur": 1}'
    assert len(event) == 81
    text = b'{"traceEvents": [' + b", ".join([event] * 200) + b"]}"
    reader = Reader(iter([text]), chunk_bytes=4096)
    reader.read_head()
    chunks = []
    while (chunk := reader.next_chunk()) is not None:
        chunks.append(chunk)
    # n events take 81 n + 2 (n - 1) bytes: 12 fit in 1024, 24 in 2048, 49 in 4096
    assert [len(c.body) for c in chunks[:4]] == [12 * 81 + 11 * 2, 24 * 81 + 23 * 2, 49 * 81 + 48 * 2,
                                                 49 * 81 + 48 * 2]
    assert [c.start for c in chunks[:3]] == [17, 17 + 12 * 83, 17 + 36 * 83]
    assert all(bytes(c.body).endswith(b'"dur": 1}') for c in chunks)


def _order_trace(pair: bool) -> str:
    x = [  # (pid, tid, ts) in file order; eids 0..8
        (1, 1, 10), (1, 1, 5), (1, 1, 20), (1, 2, 100), (1, 2, 50), (1, 1, 15), (1, 1, -3)]
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": p, "tid": t, "ts": ts, "dur": 1}
              for i, (p, t, ts) in enumerate(x)]
    events += [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 1,
                "args": {"device": 0, "stream": 7}} for _ in range(2)]  # equal times: not out of order
    if pair:  # eids 9, 10: a B/E slice on thread (1, 1) that starts before the thread's last slice
        events += [{"ph": "B", "cat": "cpu_op", "name": "pair", "pid": 1, "tid": 1, "ts": -10},
                   {"ph": "E", "pid": 1, "tid": 1, "ts": -9}]
    return json.dumps({"traceEvents": events})


@pytest.mark.parametrize("pair", [False, True])
@pytest.mark.parametrize("chunk_bytes", [1, 150, ONE_SHOT])
def test_out_of_order_and_negative_times_across_chunks(tmp_path, chunk_bytes, pair):
    """Slices that go back in time on their thread, in file order, are counted the same
    whether they sit inside a chunk or at a chunk's start (checked against the thread's
    last slice in the chunks before), and with B/E pairs (checked on all slices at once).
    Hand-counted: eids 1 (5 < 10), 4 (50 < 100), 5 (15 < 20), 6 (-3 < 15), and with the
    pair 9 (-10 < -3); negative: eid 6, and 9."""
    t = load_text(tmp_path, _order_trace(pair), chunk_bytes=chunk_bytes, workers=0)
    notes = {r["code"]: (r["count"], r["first_eid"]) for r in t.warnings.iter_rows(named=True)}
    assert notes["out_of_order"] == ((5, 1) if pair else (4, 1))
    assert notes["negative_ts"] == ((2, 6) if pair else (1, 6))


@st.composite
def _ordered_events(draw):
    """Complete slices (CPU ops and kernels) on a few threads at any times, negative ones
    too, and B/E pairs between them whose slices never overlap on their own thread (so
    that each B pairs with the E right after it)."""
    events: list[dict] = []
    pair_end: dict[tuple[int, int], int] = {}  # thread -> end of its last B/E pair
    for _ in range(draw(st.integers(1, 40))):
        pid, tid = draw(st.sampled_from([(1, 1), (1, 2), (2, 1)]))
        ts = draw(st.integers(-50, 200))
        if draw(st.integers(0, 4)) == 0:
            start = max(ts, pair_end.get((pid, tid), -100) + 1)
            events += [{"ph": "B", "cat": "cpu_op", "name": "b", "pid": pid, "tid": tid, "ts": start},
                       {"ph": "E", "pid": pid, "tid": tid, "ts": start + 1}]
            pair_end[(pid, tid)] = start + 1
        else:
            cat = draw(st.sampled_from(["cpu_op", "kernel"]))
            events.append({"ph": "X", "cat": cat, "name": "x", "pid": pid, "tid": tid, "ts": ts, "dur": 1})
    return events


def _order_reference(events: list[dict]) -> dict[str, tuple[int, int]]:
    """Each slice (X, or the B that opens a pair) against the slice before it on its thread,
    in file order; and the negative times."""
    last: dict[tuple[int, int], int] = {}
    back: list[int] = []
    negative: list[int] = []
    for eid, e in enumerate(events):
        if e["ph"] not in ("X", "B"):
            continue
        thread = (e["pid"], e["tid"])
        if thread in last and e["ts"] < last[thread]:
            back.append(eid)
        if e["ts"] < 0:
            negative.append(eid)
        last[thread] = e["ts"]
    return {code: (len(eids), min(eids)) for code, eids in (("out_of_order", back), ("negative_ts", negative)) if eids}


@settings(max_examples=60, deadline=None)
@given(events=_ordered_events(), chunk_bytes=st.sampled_from([1, 120, 400, ONE_SHOT]))
def test_property_order_notes_match_a_plain_walk_at_any_chunking(events, chunk_bytes):
    trace = loads(json.dumps({"traceEvents": events}).encode(), chunk_bytes=chunk_bytes)
    notes = {r["code"]: (r["count"], r["first_eid"]) for r in trace.warnings.iter_rows(named=True)
             if r["code"] in ("out_of_order", "negative_ts")}
    assert notes == _order_reference(events)


@pytest.mark.parametrize("lone", [1, 2])
def test_warnings_read_in_the_number_of_their_count(lone):
    """A count of one takes the singular: "1 'B' event (B/E) had ...", never "1 'B' events"."""
    events = [{"ph": "B", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 10 * i} for i in range(lone)]
    events += [{"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 2, "ts": t, "dur": 1} for t in (5, 3, 1)]
    trace = loads(json.dumps({"traceEvents": events}).encode())
    notes = {r["code"]: r["message"] for r in trace.warnings.iter_rows(named=True)}
    b = "1 'B' event (B/E) had" if lone == 1 else "2 'B' events (B/E) had"
    assert notes["unclosed_begin"] == f"{b} no matching end; closed at the last end of any event on " + (
        "its thread" if lone == 1 else "their thread")
    assert notes["out_of_order"] == ("2 events appear earlier in time than the event before them on their thread; "
                                     "frames are sorted by time")  # ts 3 after 5, 1 after 3


def test_recovery_message_in_the_number_of_its_counts():
    text = json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 1,
                                        "dur": 1}]})
    end = text.index("]")
    cut = text[:end] + ","  # one complete event, then the comma before the next, and the file ends
    trace = loads(cut.encode())
    [message] = [r["message"] for r in trace.warnings.iter_rows(named=True) if r["code"] == "truncated"]
    assert message == (f"the event array is truncated at byte {end + 1}: recovered 1 complete event (the first "
                       f"{end} bytes); 1 byte after the last complete event was ignored")


@pytest.mark.parametrize("tail", ['"ts": 2.', '"ts": 2e', '"ts": -', '"ts": 2', '"na'])
def test_a_file_cut_inside_a_value_is_truncated_not_malformed(tail):
    event = {"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    whole = json.dumps({"traceEvents": [event]})
    cut = whole[: whole.index("]")] + ', {"ph": "X", ' + tail  # the second event cut inside a value
    trace = loads(cut.encode())
    [message] = [r["message"] for r in trace.warnings.iter_rows(named=True) if r["code"] == "truncated"]
    assert message.startswith(f"the event array is truncated at byte {len(cut)}: recovered 1 complete event")


def _frames_and_notes(trace: Trace, ignore: tuple[str, ...]) -> dict:
    """What a load gives, less where it came from (a file's path, or `<bytes>`)."""
    meta = {name: getattr(trace.meta, name) for name in trace.meta.__dataclass_fields__ if name not in ignore}
    return {"frames": trace.frames(), "meta": meta}


def _same_loads(a: Trace, b: Trace, ignore: tuple[str, ...] = ("path",)) -> None:
    x, y = _frames_and_notes(a, ignore), _frames_and_notes(b, ignore)
    for name, frame in x["frames"].items():
        assert frame.equals(y["frames"][name]), name
    for name, value in x["meta"].items():
        other = y["meta"][name]
        assert value.equals(other) if isinstance(value, pl.DataFrame) else value == other, name


def _far_head() -> bytes:
    """A head of 300 KB before the event array (the key is looked for past the first read)."""
    doc = busy_trace().document()
    events = doc.pop("traceEvents")
    return json.dumps({"deviceProperties": [{"name": "x" * 1000, "id": i} for i in range(300)],
                       "traceEvents": events}, default=lambda o: o.ns / 1000).encode()


def _plain() -> bytes:
    return busy_trace().text().encode()


@pytest.mark.parametrize("text", [
    _plain,
    lambda: b"\xef\xbb\xbf" + _plain(),  # a byte-order mark
    _far_head,
    lambda: _plain()[: len(_plain()) * 2 // 3],  # truncated: the final piece is recovered
    lambda: _plain().replace(b'"aten::mm"', b'"aten::mm" @', 2),  # malformed in the middle
    lambda: _plain().replace(b'"traceEvents"', b'"trace\\u0045vents"', 1),  # a key the scan misses: read whole
], ids=["plain", "bom", "far-head", "truncated", "malformed", "whole-document"])
@pytest.mark.parametrize("chunk_bytes", [1, 3_000, ONE_SHOT])
def test_a_file_read_into_its_chunks_loads_as_its_bytes_do(tmp_path, text, chunk_bytes, monkeypatch):
    """A plain file is read straight into the chunks' buffers (`Stream.read_into`, no
    pieces, no reading thread); the same text handed over as pieces in memory (`loads`)
    gives the same trace, notes and recovery included, at any chunking."""
    from tracekit.loader import source

    data = text()
    path = tmp_path / "t.json"
    path.write_bytes(data)

    def no_pieces(self):  # the file is not read as pieces (a generator, as `Stream.__iter__`)
        raise AssertionError("a plain file was read as pieces")
        yield  # pragma: no cover

    monkeypatch.setattr(source.Stream, "__iter__", no_pieces)
    _same_loads(load_file(path, chunk_bytes=chunk_bytes, workers=0), loads(data, chunk_bytes=chunk_bytes, workers=0))


def test_a_file_read_into_its_chunks_fails_as_its_bytes_do(tmp_path):
    """The same refusal, with the same words, either way."""
    data = b'{"traceEvents": 5, "x": [' + _plain() + b"]}"
    path = tmp_path / "t.json"
    path.write_bytes(data)
    with pytest.raises(tracekit.TraceError) as direct:
        load_file(path, workers=0)
    with pytest.raises(tracekit.TraceError) as pieces:
        loads(data, workers=0)
    assert str(direct.value) == f"{path}: 'traceEvents' is not an array"
    assert str(pieces.value) == "<bytes>: 'traceEvents' is not an array"


def test_a_gzip_file_is_still_read_as_pieces(tmp_path, monkeypatch):
    """Compressed text cannot be read into a buffer directly: it is inflated in pieces."""
    from tracekit.loader import source

    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(_plain()))
    stream = source.Stream(path)
    try:
        assert not stream.direct
    finally:
        stream.close()
    _same_loads(load_file(path, workers=0), loads(_plain(), workers=0), ignore=("path", "size_bytes"))
