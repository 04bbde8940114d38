"""One cache, in one package: the library's `load` and `analyse` take none and write nothing;
the CLI and the batch go through a `Cache` and write under its one folder."""

from __future__ import annotations

import inspect
import json
import re

import pytest
from report_fixtures import decode_trace

import tracekit
from tracekit.pipeline import analyse
from tracekit.batch import run_batch
from tracekit.cache import Cache
from tracekit.cache.entries import ANALYSES
from tracekit.cli.main import main
from tracekit.loader import load_ranks
from tracekit.render.html import render_html
from tracekit.report.build import build_report

KEY = re.compile(r"^[0-9a-f]{32}$")
RESULT = re.compile(r"^[0-9a-f]{64}\.json$")


def written(folder) -> list[str]:
    """Every file under `folder`, relative to it (none when it does not exist)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    """The default cache folder, in a temporary XDG_CACHE_HOME."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "tracekit"


@pytest.mark.parametrize("function", [tracekit.load, load_ranks, analyse])
def test_the_library_functions_take_no_cache(function):
    assert not {"cache", "cache_dir"} & set(inspect.signature(function).parameters)


def test_the_library_writes_nothing_in_the_cache_folder(tmp_path, xdg):
    path = decode_trace(1).write(tmp_path / "t.json.gz")
    trace = tracekit.load(path)
    a = analyse(trace)
    render_html(build_report(trace, analysis=a))
    load_ranks([decode_trace(1).write(tmp_path / "rank-0.json.gz")], lean=True)
    assert Cache().folder == xdg
    assert not (tmp_path / "xdg").exists()


def test_a_cache_loads_and_analyses_through_its_folder(tmp_path, monkeypatch):
    path = decode_trace(1).write(tmp_path / "t.json.gz")
    cache = Cache(tmp_path / "c")
    first = cache.load(path)
    analysed = cache.analyse(first)
    entries = sorted(p.name for p in cache.folder.iterdir())
    assert [n for n in entries if KEY.match(n)] and ANALYSES in entries

    def refuse(*args, **kwargs):
        raise AssertionError("read again, not from the cache")

    monkeypatch.setattr("tracekit.loader.load_file", refuse)
    monkeypatch.setattr("tracekit.pipeline.run_steps", refuse)
    steps: list[tuple] = []
    again = cache.load(path, lean=True)
    assert again.flows.height == 0 and again.ops.height == first.ops.height  # lean, from the whole entry
    hit = cache.analyse(cache.load(path), progress=lambda *a: steps.append(a))
    assert steps == [("cache", 1, 1)] and hit.options == analysed.options
    assert cache.templates == cache.folder / "templates"
    cache.clear()
    assert not cache.folder.exists()


def test_batch_results_are_a_cache_s(tmp_path):
    results = Cache(tmp_path / "c").results()
    digest = "ab" * 32
    assert results.get(digest, "v1") is None
    results.put(digest, {"summary": {"x": 1}, "fingerprint": "v1", "report_html": "<p>", "cacheable": True})
    assert results.get(digest, "v1") == {"summary": {"x": 1}, "fingerprint": "v1"}
    assert results.get(digest, "v2") is None  # made by another tracekit
    assert results.hashes() == {digest}
    assert written(tmp_path / "c") == [f"{digest}.json"]


def test_report_and_batch_write_their_entries_under_the_one_folder(tmp_path, xdg):
    path = decode_trace(2).write(tmp_path / "t.json.gz")
    assert main(["report", str(path), "--no-cache", "-o", str(tmp_path / "a.md")]) == 0
    assert written(xdg) == []  # --no-cache: nothing
    assert main(["report", str(path), "--cache", "-o", str(tmp_path / "b.md")]) == 0
    after_report = written(xdg)
    assert {f.split("/")[0] for f in after_report} - {ANALYSES} and any(f.startswith(ANALYSES + "/") for f in after_report)
    assert all(KEY.match(f.split("/")[1 if f.startswith(ANALYSES + "/") else 0]) for f in after_report)

    out = tmp_path / "out"
    assert main(["batch", str(path), "-o", str(out), "--jobs", "1", "--cache-dir", str(xdg)]) == 0
    added = sorted(set(written(xdg)) - set(after_report))
    assert len(added) == 1 and RESULT.match(added[0])
    assert json.loads((xdg / added[0]).read_text())["summary"]
    assert not (out / ".cache").exists()  # the batch's results are in the folder it was given only
    again = run_batch([path], out_dir=tmp_path / "out2", jobs=1, cache=Cache(xdg))
    assert (again.analysed, again.cached) == (0, 1)  # served from the one folder


def test_batch_keeps_its_results_beside_its_outputs_by_default(tmp_path, xdg):
    path = decode_trace(1).write(tmp_path / "t.json.gz")
    out = tmp_path / "out"
    assert main(["batch", str(path), "-o", str(out), "--jobs", "1"]) == 0
    assert Cache.beside(out).folder == out / ".cache"
    assert [RESULT.match(f) is not None for f in written(out / ".cache")] == [True]
    assert written(xdg) == []
