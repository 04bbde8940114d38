"""The analysis cache: a stored Analysis reads back equal to a fresh one, and is only reused
for the same trace content, options and code."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import polars as pl
import pytest
from conftest import real_trace
from hypothesis import given, settings
from hypothesis import strategies as st
from report_fixtures import decode_trace

import tracekit
from tracekit.cache import Cache, entries
from tracekit.cache import analyses as analysis_cache
from tracekit.pipeline import Analysis, AnalysisOptions, analyse
from tracekit.cli.main import main
from tracekit.model import DERIVED_FROM_TRACE
from tracekit.render.html import render_html
from tracekit.render.json import render_json
from tracekit.render.markdown import render_markdown
from tracekit.report.build import build_report


def same(a, b, where="analysis"):
    """Equal values of equal types all the way down; frames equal with equal schemas."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, pl.DataFrame):
        assert a.schema == b.schema, where
        assert a.equals(b), where
    elif isinstance(a, pl.Series):
        assert (a.name, a.dtype) == (b.name, b.dtype), where
        assert a.equals(b), where
    elif isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or a == b, f"{where}: {a} != {b}"
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            if not f.metadata.get(DERIVED_FROM_TRACE):  # (the trace a result keeps: the callers' to compare)
                same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
        for name in getattr(a, "DERIVED", ()):  # made on first reading
            same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def reports(trace, analysis):
    model = build_report(trace, analysis=analysis)
    return render_html(model), render_markdown(model), render_json(model)


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    return decode_trace(3).load(tmp_path_factory.mktemp("t"))


def entry_dirs(cache: Path) -> list[Path]:
    base = cache / analysis_cache.SUBDIR
    return sorted(p for p in base.iterdir() if not p.name.startswith(".")) if base.is_dir() else []


def test_round_trip_equals_a_fresh_analysis(decoded, tmp_path):
    fresh = analyse(decoded)
    stored = Cache(tmp_path).analyse(decoded)  # a miss: analyses and stores
    [entry] = entry_dirs(tmp_path)
    assert (entry / "analysis.json").is_file() and list(entry.glob("f*.arrow"))
    hit = Cache(tmp_path).analyse(decoded)
    assert hit.trace is decoded
    same(dataclasses.replace(fresh, trace=None), dataclasses.replace(hit, trace=None))
    same(dataclasses.replace(stored, trace=None), dataclasses.replace(hit, trace=None))
    assert reports(decoded, hit) == reports(decoded, fresh)


def test_a_hit_runs_no_analysis(decoded, tmp_path, monkeypatch):
    Cache(tmp_path).analyse(decoded)
    calls = []
    monkeypatch.setattr("tracekit.pipeline.run_steps", lambda *a, **k: calls.append(1))
    seen = []
    hit = Cache(tmp_path).analyse(decoded, progress=lambda *a: seen.append(a))
    assert isinstance(hit, Analysis) and calls == []
    assert seen == [("cache", 1, 1)]


def test_key_follows_content_order_options_and_code(decoded, monkeypatch):
    opts = AnalysisOptions()
    key = analysis_cache.entry_key(decoded, opts)
    assert key == analysis_cache.entry_key(decoded, AnalysisOptions())  # stable
    ops = decoded.ops
    one_row = decoded.replace(ops=ops.with_columns(dur_ns=pl.when(pl.int_range(pl.len()) == 3)
                                                   .then(pl.col("dur_ns") + 1).otherwise(pl.col("dur_ns"))))
    swapped = decoded.replace(ops=pl.concat([ops[1:2], ops[0:1], ops[2:]]))
    renamed = decoded.replace(meta=dataclasses.replace(decoded.meta, path="elsewhere.json"))
    keys = {
        "one value": analysis_cache.entry_key(one_row, opts),
        "two rows swapped": analysis_cache.entry_key(swapped, opts),
        "path": analysis_cache.entry_key(renamed, opts),
        "options": analysis_cache.entry_key(decoded, AnalysisOptions(min_gap_ns=opts.min_gap_ns + 1)),
        "findings config": analysis_cache.entry_key(decoded, AnalysisOptions(findings_config={"x": 1})),
    }
    assert all(k is not None for k in keys.values())
    assert len({key, *keys.values()}) == len(keys) + 1, keys
    monkeypatch.setattr(analysis_cache, "code_version", lambda: "another tracekit")
    assert analysis_cache.entry_key(decoded, opts) != key
    # options that are not JSON: no key, so no caching (and no error)
    assert analysis_cache.entry_key(decoded, AnalysisOptions(findings_config={"x": object()})) is None


def read_tree(tree: Path) -> dict:
    return json.loads(entries.read_index(tree))


def write_tree(tree: Path, doc: dict | str) -> None:
    """An index with a good checksum: the checks after it are what is tested."""
    tree.write_bytes(entries.index_bytes((doc if isinstance(doc, str) else json.dumps(doc)).encode()))


def test_an_entry_of_other_code_is_not_used(decoded, tmp_path, monkeypatch):
    Cache(tmp_path).analyse(decoded)
    [entry] = entry_dirs(tmp_path)
    doc = read_tree(entry / "analysis.json")
    doc["version"] = "0" * 16
    write_tree(entry / "analysis.json", doc)
    assert analysis_cache.read(tmp_path, entry.name, decoded) is None


@pytest.mark.parametrize("damage", ["tree", "frame gone", "frame truncated", "foreign class", "extra field"])
def test_damaged_entry_is_ignored_and_rewritten(decoded, tmp_path, damage):
    fresh = Cache(tmp_path).analyse(decoded)
    [entry] = entry_dirs(tmp_path)
    tree = entry / "analysis.json"
    frame = min(entry.glob("f*.arrow"))
    if damage == "tree":
        write_tree(tree, "{not json")
    elif damage == "frame gone":
        frame.unlink()
    elif damage == "frame truncated":
        frame.write_bytes(frame.read_bytes()[:40])
    elif damage == "foreign class":  # a tree naming a class outside tracekit is refused, never imported
        write_tree(tree, json.dumps(read_tree(tree)).replace('"tracekit.analysis.gaps:Gaps"', '"subprocess:Popen"', 1))
    else:
        doc = read_tree(tree)
        doc["tree"]["fields"].append(["surprise", 1])
        write_tree(tree, doc)
    assert analysis_cache.read(tmp_path, entry.name, decoded) is None
    again = Cache(tmp_path).analyse(decoded)  # analyses again and stores a good entry
    same(dataclasses.replace(fresh, trace=None), dataclasses.replace(again, trace=None))
    hit = analysis_cache.read(tmp_path, entry.name, decoded)
    assert hit is not None
    same(dataclasses.replace(fresh, trace=None), dataclasses.replace(hit, trace=None))


def test_not_stored_notes_graph_or_unknown_values(decoded, tmp_path):
    a = analyse(decoded)
    key = analysis_cache.entry_key(decoded, a.options)
    assert not analysis_cache.write(tmp_path, key, dataclasses.replace(a, notes=["findings analysis failed: X"]))
    kept = dataclasses.replace(a, options=AnalysisOptions(keep_graph=True))
    assert not analysis_cache.write(tmp_path, key, kept)
    assert not analysis_cache.write(tmp_path, key, dataclasses.replace(a, attention=object()))
    assert not (tmp_path / analysis_cache.SUBDIR).exists()  # nothing written, not even a temporary folder
    assert analysis_cache.write(tmp_path, key, a)
    assert [p.name for p in (tmp_path / analysis_cache.SUBDIR).iterdir()] == [key]


def test_unwritable_cache_folder_still_analyses(decoded, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = Cache(blocker).analyse(decoded)
    same(dataclasses.replace(analyse(decoded), trace=None), dataclasses.replace(result, trace=None))


@dataclasses.dataclass(frozen=True)
class Local:  # a dataclass outside the tracekit package
    x: int


def test_only_tracekit_classes_are_stored():
    with pytest.raises(analysis_cache.Unstorable):
        analysis_cache._encode(Local(1), [], {})


leaf = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1), st.text(max_size=8),
    st.floats(allow_nan=True, allow_infinity=True),
)
frames = st.lists(st.tuples(st.integers(-5, 5), st.one_of(st.none(), st.text(max_size=3))), max_size=6).map(
    lambda rows: pl.DataFrame(rows, schema={"a": pl.Int64, "b": pl.String}, orient="row"))
trees = st.recursive(
    st.one_of(leaf, frames, frames.map(lambda f: f["b"])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.one_of(st.integers(-3, 3), st.text(max_size=3), st.tuples(st.integers(0, 2), st.text(max_size=2))),
                        inner, max_size=4),
        st.builds(AnalysisOptions, min_gap_ns=st.integers(0, 10**9), peak_tflops=st.none() | st.floats(1, 1e3)),
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(trees)
def test_tree_round_trip(value):
    stored: list[pl.DataFrame] = []
    tree = json.loads(json.dumps(analysis_cache._encode(value, stored, {}), allow_nan=True))
    same(value, analysis_cache._decode(tree, stored), "value")


def test_cli_report_second_run_reads_the_analysis_from_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = decode_trace(2).write(tmp_path / "t.json.gz")
    assert main(["report", str(path), "--cache", "-o", str(tmp_path / "a.md")]) == 0
    cache = tmp_path / "xdg" / "tracekit"
    assert len(entry_dirs(cache)) == 1
    monkeypatch.setattr("tracekit.pipeline.run_steps", lambda *a, **k: pytest.fail("analysed again"))
    assert main(["report", str(path), "--cache", "-o", str(tmp_path / "b.md")]) == 0
    assert (tmp_path / "a.md").read_text() == (tmp_path / "b.md").read_text()
    # --no-cache neither reads nor writes an entry
    shutil.rmtree(cache)
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert main(["report", str(path), "--no-cache", "-o", str(tmp_path / "c.md")]) == 0
    assert not cache.exists()
    assert (tmp_path / "c.md").read_text() == (tmp_path / "a.md").read_text()


def test_cli_findings_are_the_reports_read_from_the_cache(tmp_path, monkeypatch, capsys):
    """`tracekit findings` reads the pipeline's findings: after a report, from the cache, the
    same findings as a run of its own; `--set` is part of the entry's key."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = decode_trace(2).write(tmp_path / "t.json.gz")
    assert main(["findings", str(path), "--no-cache", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main(["report", str(path), "--cache", "-o", str(tmp_path / "a.md")]) == 0
    capsys.readouterr()
    with monkeypatch.context() as m:
        m.setattr("tracekit.pipeline.run_steps", lambda *a, **k: pytest.fail("analysed again"))
        assert main(["findings", str(path), "--cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == alone and alone["findings"]
    assert main(["findings", str(path), "--cache", "--json", "--set", "gpu_gaps.enabled=false"]) == 0
    changed = json.loads(capsys.readouterr().out)
    assert "gpu_gaps" in changed["skipped"] and "gpu_gaps" not in alone["skipped"]


@pytest.mark.real
@pytest.mark.parametrize("name", ["v100_ddp_mlp_memory_rank1.json.gz", "h100_qwen15_05b_hf_inference.json.gz",
                                  "a100_dlrm_6streams_rank0.json.gz"])
def test_real_trace_round_trip(name, tmp_path):
    trace = tracekit.load(real_trace(name))
    fresh = Cache(tmp_path).analyse(trace)
    assert len(entry_dirs(tmp_path)) == 1
    Cache(tmp_path).load(real_trace(name))  # fills the trace cache
    reloaded = Cache(tmp_path).load(real_trace(name))  # read from it
    hit = analysis_cache.read(tmp_path, analysis_cache.entry_key(reloaded, fresh.options), reloaded)
    assert hit is not None  # the trace read back from its cache has the same key
    same(dataclasses.replace(fresh, trace=None), dataclasses.replace(hit, trace=None))
    assert reports(trace, hit) == reports(trace, fresh)


def test_ties_are_broken_by_name(decoded):
    """The cache relies on an analysis giving the same result every run: rows that tie on
    the figure they are sorted by come in name order, not in the hash order of a group-by."""
    a = analyse(decoded)
    [hit] = [f for f in a.findings.findings if f.rule == "host_bound_path"]
    # hand-computed: steps 2 and 3 each carry 230 us of host time on the path, step 1 180 us;
    # aten::mm 90 us; aten::add and the flash-attention call 60 us each ('_' sorts before 'a')
    assert [(e.name, e.dur_ns) for e in hit.evidence] == [
        ("ProfilerStep#2", 230_000), ("ProfilerStep#3", 230_000), ("ProfilerStep#1", 180_000),
        ("aten::mm", 90_000), ("aten::_scaled_dot_product_flash_attention", 60_000)]


@pytest.mark.real
@pytest.mark.parametrize("name", ["a100_alexnet_cuda_sync.json.gz", "h100_qwen15_05b_hf_inference.json.gz"])
def test_analysis_is_the_same_every_run(name):
    """These two traces have tied rows in the sync and memory tables (by op)."""
    trace = tracekit.load(real_trace(name))
    first = dataclasses.replace(analyse(trace), trace=None)
    for _ in range(3):
        same(first, dataclasses.replace(analyse(trace), trace=None))


def test_a_frame_is_written_once_however_its_text_is_shared(tmp_path):
    """Text gathered from a large column keeps pointing into that column's buffers: in
    several record batches, each batch would carry every buffer again."""
    import random

    rnd = random.Random(7)
    big = pl.Series("name", [f"{rnd.getrandbits(128):032x}" for _ in range(200_000)])  # 6.4 MB, incompressible
    rows = pl.Series(list(range(200_000)) * 2)  # 400k rows, each name a view into `big`
    frame = pl.DataFrame({"name": big.gather(rows), "n": rows})
    path = tmp_path / "f.arrow"
    analysis_cache.write_frame(frame, path)
    back = pl.read_ipc(path)
    assert back.equals(frame)
    assert all(back[c].n_chunks() == 1 for c in back.columns)
    assert path.stat().st_size < 7_000_000  # the names once: 5.5 MB (in batches of Polars' default size, 9 MB)
