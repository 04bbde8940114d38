"""The A/B benchmark runs both sides, alternates them and cleans up its worktrees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_graph import cross_stream

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_ab_compares_a_revision_with_the_working_tree(tmp_path):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, check=False).returncode:
        pytest.skip("not a git checkout")
    trace = cross_stream().write(tmp_path / "t.json.gz")
    before = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True, check=True)
    out = tmp_path / "ab.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ab.py"), "HEAD", "--job", "analyse",
                          "--rounds", "3", "--trace", str(trace), "--out", str(out)],
                         capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    assert (result["base_rev"], result["new_rev"], result["job"], result["rounds"]) == ("HEAD", "worktree", "analyse", 3)
    order = [line.split()[2] for line in run.stderr.splitlines() if line.startswith("round ")]
    assert order == ["base", "new", "new", "base", "base", "new"]  # the order alternates each round
    for side in ("base", "new"):
        assert len(result[side]["runs"]) == 3
        assert 0 < result[side]["seconds"]["min"] <= result[side]["seconds"]["median"] <= result[side]["seconds"]["max"]
        assert result[side]["peak_mb"]["min"] > 20  # a Python process with Polars loaded
        assert 0 < result[side]["cpu_seconds"]["min"] <= result[side]["cpu_seconds"]["max"]
        assert [len(r) for r in result[side]["runs"]] == [3, 3, 3]  # seconds, peak, CPU of each run
    assert result["seconds_ratio"] == pytest.approx(result["new"]["seconds"]["median"] / result["base"]["seconds"]["median"])
    assert "new/base" in run.stdout and run.stdout.startswith("seconds") and "cpu_seconds" in run.stdout
    after = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True, check=True)
    assert after.stdout == before.stdout  # the base's worktree is gone


@pytest.mark.slow
def test_run_measures_every_way_and_both_caches(tmp_path):
    trace = cross_stream().write(tmp_path / "t.json.gz")
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--trace", str(trace), "--no-large",
                          "--repeat", "1", "--out", str(out)], capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stderr
    [summary] = json.loads(out.read_text())["traces"]
    ways = summary["ways"]
    for way in ("tracekit", "tracekit-cli", "tracekit-serial", "tracekit-python", "msgspec", "json",
                "tracekit-cached", "reanalysis"):
        assert ways[way]["seconds"] > 0, way
        if way.startswith("tracekit") or way == "reanalysis":
            assert ways[way]["events"] == summary["events"] > 0, way
    assert ways["reanalysis"]["first_seconds"] > 0
    for way in ("report", "report-cached"):
        assert ways[way]["code"] == 0 and ways[way]["seconds_with_startup"] > 0, way
        assert ways[way]["runs"] == 1 and ways[way]["median_seconds_with_startup"] == ways[way]["seconds_with_startup"]
        assert ways[way]["cpu_seconds"] > 0.1, way  # a process that started Python and imported Polars
    assert ways["report-cached"]["first_seconds_with_startup"] > 0
    assert "re-analysis: load + analyse from the caches" in run.stdout
    assert "report, cache on: first run" in run.stdout


@pytest.mark.slow
def test_phases_follows_every_step_of_a_report(tmp_path):
    trace = cross_stream().write(tmp_path / "t.json.gz")
    out = tmp_path / "phases.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "phases.py"), str(trace), "--interval", "1",
                          "--out", str(out)], capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stderr
    figures = json.loads(out.read_text())
    steps = {s["step"]: s for s in figures["steps"]}
    assert {"critical_path", "gaps", "attribution", "timeline", "launches"} <= set(steps)
    assert all(s["start_s"] <= s["end_s"] for s in figures["steps"])
    highest = max(x["rss_mib"] for x in (figures["load"], figures["after"], *steps.values()) if x["rss_mib"])
    assert figures["peak"]["rss_mib"] >= highest > 20  # a Python process with Polars loaded
    if sys.platform.startswith("linux"):
        assert 0 < figures["peak"]["active_mib"] < figures["peak"]["rss_mib"]
    assert "peak:" in run.stdout and "(report)" in run.stdout
    assert not list(tmp_path.glob("*.html"))  # the report itself goes to a folder of its own, then away


def test_phases_prints_the_run_in_slices(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from phases import MIB, print_buckets
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    # (seconds, RSS, active bytes, CPU seconds so far)
    samples = [(0.1, 100 * MIB, 50 * MIB, 1.0), (0.4, 300 * MIB, 80 * MIB, 1.6), (0.6, 200 * MIB, 90 * MIB, 1.7),
               (1.2, 120 * MIB, 60 * MIB, 2.5)]
    events = [(0.05, "start", "a"), (0.45, "end", "a"), (0.3, "start", "b"), (1.1, "end", "b"), (1.15, "start", "c")]
    print_buckets(samples, events, 0.5)
    lines = capsys.readouterr().out.splitlines()
    # (no sample in [1.0, 1.5) but the one at 1.2; a step counts in each slice it ran in; the
    # cores busy: 0.6 CPU seconds over the 0.3 s between the first slice's samples, none where
    # a slice has one sample)
    assert lines[1:] == ["   0.00       300          80   2.00  a, b", "   0.50       200          90      -  b",
                         "   1.00       120          60      -  b, c"]
