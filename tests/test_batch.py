"""Batch analysis: rows cross-checked against single-trace analyses, error rows, the cache
(rerun, new trace, killed run), sources (globs, fsspec memory://, rank groups), Dask, the
CLI, and the index page in Chromium."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import polars as pl
import pytest
from builders import BATCH_GEMM, TraceBuilder
from click.testing import CliRunner

import tracekit
from tracekit.analysis.breakdown import breakdown
from tracekit.analysis.gaps import gaps
from tracekit.analysis.taxonomy import kernel_table
from tracekit.analysis.timeline import timeline
from tracekit.analysis.windows import windows
from tracekit.batch import SUMMARY_SCHEMA, run_batch
from tracekit.batch.index import SUMMARY_COLUMNS
from tracekit.batch.ranks import stragglers
from tracekit.batch.schema import IDLE_CAUSES, RUN_COLUMNS
from tracekit.batch.sources import Item, expand, safe_name
from tracekit.batch.store import Store
from tracekit.errors import UsageError

BASE_NS = 1_790_000_000_000_000_000  # 2026-09-21, as Kineto's baseTimeNanoseconds
SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def make_trace(i: int) -> TraceBuilder:
    """Three steps; per step a GEMM [t0+10, t0+50+i) µs and an elementwise kernel [t0+70, t0+75) µs.
    Even traces carry capture metadata, odd ones only a base time; trace 3 adds NCCL."""
    cap = {
        "tool": "tracekit capture",
        "kind": "model",
        "model": {"id": f"tiny-{i}"},
        "mode": "generate",
        "shapes": {"batch": 1, "prompt_len": 32},
        "attn_implementation": "sdpa",
        "dtype": "bfloat16",
        "created": f"2026-10-{1 + i:02d}T12:00:00+00:00",
    }
    b = TraceBuilder(
        base_time_ns=BASE_NS + i * 86_400 * 10**9, extra_top={"tracekit_capture": cap} if i % 2 == 0 else None
    )
    for step in range(3):
        t0 = step * 200_000
        b.annotation(f"ProfilerStep#{step + 1}", t0, 150_000 + 10_000 * i)
        ext = b.mm_add_step(t0, 40_000 + 1_000 * i)
        if i == 3:
            b.launch_kernel(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                launch_ns=t0 + 3_000,
                launch_dur_ns=2_000,
                start_ns=t0 + 20_000,
                dur_ns=60_000,
                ext=ext,
                stream=8,
            )
    return b


def write_traces(folder: Path, n: int, start: int = 0) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [make_trace(i).write(folder / f"run-{i:02d}.json.gz") for i in range(start, start + n)]


def write_broken(folder: Path) -> dict[str, Path]:
    """Files that cannot be read: empty, not JSON, a gzip stream cut before any JSON."""
    good = gzip.compress(make_trace(0).text().encode(), mtime=0)
    files = {
        "empty": (folder / "empty.json", b""),
        "garbage": (folder / "garbage.json.gz", b"\x00\x01 not a trace"),
        "truncated": (folder / "truncated.json.gz", good[:20]),
    }
    for path, data in files.values():
        path.write_bytes(data)
    return {k: p for k, (p, _) in files.items()}


def write_partial(folder: Path) -> Path:
    """A gzip stream cut in the middle of the event array: the loader recovers the events before the cut."""
    good = gzip.compress(make_trace(0).text().encode(), mtime=0)
    path = folder / "partial.json.gz"
    path.write_bytes(good[: len(good) // 2])
    return path


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """Six generated traces, a recoverable partial one and three broken files, batched once
    with reports (2 processes)."""
    root = tmp_path_factory.mktemp("archive")
    src = root / "traces"
    good = write_traces(src, 6)
    broken = write_broken(src)
    partial = write_partial(src)
    out = root / "out"
    result = run_batch([str(src)], out_dir=out, jobs=2, reports=True)
    return {"src": src, "out": out, "good": good, "broken": broken, "partial": partial, "result": result}


def _row(result, path: Path) -> dict:
    rows = result.summary.filter(pl.col("source") == str(path)).to_dicts()
    assert len(rows) == 1, f"{path}: {len(rows)} rows"
    return rows[0]


def expected(path: Path) -> dict:
    """The headline figures from single-trace analysis calls (not the batch's code)."""
    t = tracekit.load(path)
    tl, bd, g = timeline(t), breakdown(t), gaps(t)
    w, k = windows(t), kernel_table(t.gpu)
    step = w.stats.filter((pl.col("kind") == "ProfilerStep") & (pl.col("metric") == "cpu_ns"))
    out = {
        "busy_ns": tl.busy_ns,
        "idle_ns": tl.idle_ns,
        "span_ns": tl.span_ns,
        "gpu_utilisation": tl.utilisation,
        "compute_ns": bd.compute_ns,
        "communication_ns": bd.communication_ns,
        "memory_ns": bd.memory_ns,
        "steps": w.steps,
        "step_median_ns": round(step["median_ns"][0]) if step.height else None,
        "kernels": int(k["count"].sum() or 0),
        "top_kernel": k["name"][0] if k.height else None,
        "events": t.meta.event_count,
        **{f"idle_{c}_ns": g.by_cause[c] for c in IDLE_CAUSES},
    }
    try:
        from tracekit.findings import run_findings
    except ImportError:
        return out
    found = run_findings(t).findings
    return out | {
        f"findings_{s}": sum(f.severity == s for f in found) for s in ("high", "medium", "low", "info")
    }


# -- rows ---------------------------------------------------------------------------------


def test_one_row_per_trace_with_the_single_trace_figures(archive):
    result = archive["result"]
    assert result.summary.height == 10 and result.summary.schema == pl.Schema(SUMMARY_SCHEMA)
    for path in archive["good"]:
        row = _row(result, path)
        assert row["error"] is None
        for key, value in expected(path).items():
            assert row[key] == value, (path.name, key)
        assert sum(row[f"idle_{c}_ns"] for c in IDLE_CAUSES) == row["idle_ns"]
        assert row["content_hash"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert row["file_bytes"] == path.stat().st_size


def test_hand_computed_figures(archive):
    r0 = _row(archive["result"], archive["good"][0])
    # kernels per step: [10, 50) and [70, 75) µs; three steps 200 µs apart
    assert (r0["span_ns"], r0["busy_ns"], r0["idle_ns"]) == (465_000, 135_000, 330_000)
    assert (r0["steps"], r0["step_median_ns"], r0["kernels"]) == (3, 150_000, 6)
    assert (
        r0["top_kernel"] == BATCH_GEMM
        and r0["top_kernel_class"] == "gemm"
        and r0["top_kernel_share"] == pytest.approx(40 / 45)
    )
    assert (r0["model"], r0["dtype"], r0["attn_implementation"]) == ("tiny-0", "bfloat16", "sdpa")
    assert r0["workload"] == "model generate batch=1 prompt_len=32"
    assert r0["devices"] == "NVIDIA H100 80GB HBM3" and r0["device_count"] == 1
    assert (str(r0["captured_at"]), r0["captured_at_source"]) == ("2026-10-01 12:00:00+00:00", "capture")
    r1 = _row(archive["result"], archive["good"][1])
    assert r1["model"] is None and r1["captured_at_source"] == "base_time"
    assert r1["captured_at"].timestamp() == (BASE_NS + 86_400 * 10**9) / 1e9
    r3 = _row(archive["result"], archive["good"][3])
    assert r3["communication_total_ns"] == 180_000 and r3["communication_ns"] > 0


def test_broken_files_become_error_rows(archive):
    result = archive["result"]
    assert result.failed == 3
    for path in archive["broken"].values():
        row = _row(result, path)
        with pytest.raises(tracekit.TraceError) as info:
            tracekit.load(path)
        assert row["error"] == " ".join(Exception.__str__(info.value).split())
        assert row["busy_ns"] is None and "\n" not in row["error"]
    partial = _row(result, archive["partial"])
    assert partial["error"] is None and partial["recovered"] and partial["load_warnings"] >= 2
    assert partial["events"] == tracekit.load(archive["partial"]).meta.event_count


def test_long_tables(archive):
    result = archive["result"]
    classes = result.kernel_classes.filter(pl.col("source") == str(archive["good"][0]))
    assert dict(classes.select("kernel_class", "total_ns").rows()) == {"gemm": 120_000, "elementwise": 15_000}
    assert result.kernel_classes["name"].is_in(result.summary["name"].implode()).all()
    if result.summary["findings_high"].is_not_null().any():
        per = result.findings.group_by("name", "severity").len()
        for row in result.summary.filter(pl.col("error").is_null()).iter_rows(named=True):
            n = per.filter((pl.col("name") == row["name"]) & (pl.col("severity") == "high"))["len"].sum()
            assert n == row["findings_high"]


# -- outputs and the cache ----------------------------------------------------------------


def test_outputs_written_atomically_inside_out_dir(archive):
    out, result = archive["out"], archive["result"]
    for name in (
        "summary.parquet",
        "summary.csv",
        "kernel_classes.parquet",
        "findings.parquet",
        "ranks.parquet",
        "index.html",
    ):
        assert (out / name).is_file(), name
    assert pl.read_parquet(out / "summary.parquet").equals(result.summary)
    assert pl.read_csv(out / "summary.csv").height == result.summary.height
    assert not [p for p in out.rglob("*") if p.name.startswith(".tracekit-tmp-")]
    names = result.summary["name"].to_list()
    assert len(set(names)) == len(names) and all(SAFE_NAME.match(n) for n in names)
    reports = result.summary["report"].drop_nulls().to_list()
    if reports:  # written only when this tracekit has the report builder
        assert len(reports) == 7 and all((out / r).is_file() for r in reports)
    for entry in (out / ".cache").glob("*.json"):
        assert json.loads(entry.read_text())["summary"]


def test_rerun_analyses_nothing_and_a_new_trace_only(archive, tmp_path):
    """The same bytes under other names: every row comes from the cache; a new trace is analysed alone."""
    out, src = tmp_path / "out", tmp_path / "src"
    shutil.copytree(archive["out"] / ".cache", out / ".cache")
    src.mkdir()
    for p in [*archive["good"], *archive["broken"].values(), archive["partial"]]:
        shutil.copy(p, src / p.name)
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / ".cache").glob("*.json")}
    again = run_batch(src, out_dir=out, jobs=1)
    assert (again.analysed, again.cached, again.failed) == (0, 10, 3)
    assert {p.name: p.stat().st_mtime_ns for p in (out / ".cache").glob("*.json")} == stamps
    first = archive["result"].summary
    assert again.summary["analysed_at"].sort().equals(first["analysed_at"].sort())
    key = ["content_hash", "busy_ns", "idle_ns", "error"]
    assert again.summary.select(key).sort(key).equals(first.select(key).sort(key))
    write_traces(src, 1, start=6)
    third = run_batch(src, out_dir=out, jobs=1)
    assert (third.analysed, third.cached, third.summary.height) == (1, 10, 11)


def test_killed_run_loses_nothing(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    write_traces(src, 20)
    cmd = [sys.executable, "-m", "tracekit", "batch", str(src), "-o", str(out), "--jobs", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while not list((out / ".cache").glob("*.json")):
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "no result appeared in the cache"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = {p.stem for p in (out / ".cache").glob("*.json")}
    assert 0 < len(done) < 20
    assert all(json.loads((out / ".cache" / f"{h}.json").read_text())["summary"] for h in done)
    result = run_batch(src, out_dir=out, jobs=2)
    assert (result.cached, result.analysed, result.failed) == (len(done), 20 - len(done), 0)
    s = result.summary
    assert s.height == 20 and s["source"].n_unique() == 20 and s["content_hash"].n_unique() == 20
    assert len(list((out / ".cache").glob("*.json"))) == 20


# -- sources ------------------------------------------------------------------------------


def test_globs_files_and_file_urls(archive):
    src = archive["src"]
    items = expand([str(src / "run-0*.json.gz"), f"file://{archive['good'][5]}", str(archive["good"][0])])
    assert [Path(i.source).name for i in items] == [f"run-{i:02d}.json.gz" for i in range(6)]


def test_memory_fsspec_source(archive):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    plain = make_trace(0).text().encode()
    fs.pipe("/tkbatch/a/plain.json", plain)
    fs.pipe("/tkbatch/a/sub/zipped.json.gz", archive["good"][0].read_bytes())
    fs.pipe("/tkbatch/a/notes.txt", b"not a trace")
    try:
        result = run_batch("memory://tkbatch/a", jobs=2)
    finally:
        fs.rm("/tkbatch", recursive=True)
    s = result.summary.sort("source")
    assert s["source"].to_list() == [
        "memory:///tkbatch/a/plain.json",
        "memory:///tkbatch/a/sub/zipped.json.gz",
    ]
    assert s["error"].is_null().all()
    local = _row(archive["result"], archive["good"][0])
    for row in s.iter_rows(named=True):
        assert (row["busy_ns"], row["idle_ns"], row["steps"]) == (
            local["busy_ns"],
            local["idle_ns"],
            local["steps"],
        )
    assert s["content_hash"][0] == hashlib.sha256(plain).hexdigest()


def test_safe_names_and_paths_stay_inside(tmp_path):
    names = {
        safe_name(Item(src, (src,)), "0" * 64)
        for src in [
            "../../etc/passwd",
            "a/b/run 1$.json.gz",
            "c/run 1$.json.gz",
            "..",
            "/x/.hidden.json",
            "ü.json",
        ]
    }
    assert len(names) == 6 and all(SAFE_NAME.match(n) and not n.startswith(".") for n in names)
    store = Store(tmp_path / "out")
    with pytest.raises(UsageError):
        store.path("../escape.html")
    with pytest.raises(UsageError):
        store.write_text("/tmp/abs.html", "x")
    assert store.path("reports/x.html").is_relative_to(tmp_path / "out")


class BrokenExecutor(Executor):
    """Every job fails as if its worker process had died."""

    def submit(self, fn, /, *args, **kwargs):
        fut: Future = Future()
        fut.set_exception(BrokenProcessPool("a worker died"))
        return fut


def test_dead_workers_give_error_rows_that_are_not_cached(archive, tmp_path):
    result = run_batch(archive["good"][:2], out_dir=tmp_path / "out", executor=BrokenExecutor())
    assert result.summary["error"].to_list() == ["worker failed: BrokenProcessPool: a worker died"] * 2
    assert not list((tmp_path / "out" / ".cache").glob("*.json"))


def test_no_traces_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        run_batch(tmp_path, jobs=1)


@pytest.mark.real
@pytest.mark.slow
def test_all_shared_traces(shared_traces, tmp_path):
    files = [f for f in tracekit.loader.trace_files(shared_traces)]
    result = run_batch(shared_traces, out_dir=tmp_path / "out", jobs=2)
    s = result.summary
    assert s.height == len(files) and set(s["source"]) == {str(f) for f in files}
    assert s["error"].is_null().all(), s.filter(pl.col("error").is_not_null()).select("source", "error")
    for name in ("a100_alexnet_cuda_sync.json.gz", "mi250_toy_train_rocm62.json.gz"):
        row = _row(result, shared_traces / name)
        for key, value in expected(shared_traces / name).items():
            assert row[key] == value, (name, key)
    qwen = _row(result, shared_traces / "h100_qwen15_05b_hf_inference.json.gz")
    assert qwen["devices"] == "NVIDIA H100 80GB HBM3" and qwen["captured_at_source"] == "base_time"


def write_job(folder: Path, gemm_ns: list[int]) -> list[Path]:
    """One rank file per entry: two steps of a GEMM [t0+10 µs, +gemm_ns) then an NCCL all-reduce
    [t0+100, t0+150) µs on another stream."""
    folder.mkdir(parents=True)
    paths = []
    for rank, dur in enumerate(gemm_ns):
        b = TraceBuilder(extra_top={"distributedInfo": {"rank": rank, "world_size": len(gemm_ns)}})
        for step in range(2):
            t0 = step * 200_000
            b.annotation(f"ProfilerStep#{step + 1}", t0, 190_000)
            ext = b.op("aten::mm", t0, 5_000)
            b.launch_kernel(
                BATCH_GEMM, launch_ns=t0 + 1_000, launch_dur_ns=2_000, start_ns=t0 + 10_000, dur_ns=dur, ext=ext
            )
            b.launch_kernel(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                launch_ns=t0 + 4_000,
                launch_dur_ns=2_000,
                start_ns=t0 + 100_000,
                dur_ns=50_000,
                ext=ext,
                stream=8,
            )
        paths.append(b.write(folder / f"rank-{rank}.json.gz"))
    return paths


def test_generated_rank_group(tmp_path):
    """Rank 2's GEMM takes 60 µs against 40 µs, 20 µs more work per step, but every rank enters
    each all-reduce at the same instant: nobody waits, so no rank is late."""
    paths = write_job(tmp_path / "job", [40_000, 40_000, 60_000])
    alone = write_traces(tmp_path / "job", 1)[0]  # not a rank file of this job: its own row
    result = run_batch(tmp_path / "job", jobs=1, group_ranks=True)
    s = result.summary.sort("kind")
    assert s["kind"].to_list() == ["ranks", "trace"] and s["source"][1] == str(alone)
    g = s.row(0, named=True)
    assert g["source"] == str(tmp_path / "job" / "rank-*.json.gz") and g["ranks"] == 3
    assert (g["straggler_ranks"], g["straggler_lag_ns"], g["arrival_skew_ns"]) == (None, 0, 0)
    assert g["communication_total_ns"] == 3 * 2 * 50_000 and g["steps"] == 2
    assert g["busy_ns"] == sum(timeline(tracekit.load(p)).busy_ns for p in paths)
    r = result.ranks.sort("rank")
    assert r["work_per_step_ns"].to_list() == [40_000, 40_000, 60_000]
    assert r["lag_ns"].to_list() == [0, 0, 20_000]
    assert r["wait_ns"].to_list() == [0, 0, 0] and r["straggler"].to_list() == [False, False, False]
    assert r["overlap_share"].to_list() == [0.0, 0.0, 0.0]


@pytest.mark.real
@pytest.mark.slow
def test_real_rank_groups(shared_traces, tmp_path):
    job = shared_traces / "dlrm_8rank_v100"
    result = run_batch([job, shared_traces / "sampled_128rank_job"], jobs=2, group_ranks=True)
    s = result.summary.sort("source")
    assert s["kind"].to_list() == ["ranks", "ranks"] and s["ranks"].to_list() == [8, 2]
    assert s["source"][0] == str(job / "worker*.json.gz")
    ranks = result.ranks.filter(pl.col("source") == s["source"][0]).sort("rank")
    assert ranks["rank"].to_list() == list(range(8))
    singles = {r: timeline(tracekit.load(job / f"worker{r}.json.gz")).busy_ns for r in range(8)}
    assert dict(ranks.select("rank", "busy_ns").rows()) == singles
    assert s["busy_ns"][0] == sum(singles.values())
    assert s["straggler_lag_ns"][0] == ranks["lost_to_rank_ns"].sum() == 8_005_000  # tests/test_ranks.py
    slow = ranks.filter(pl.col("straggler"))["rank"].to_list()
    assert (s["straggler_ranks"][0] or "") == ",".join(map(str, slow))


def test_straggler_rule():
    base = {"steps": 10, "memory_ns": 0}
    rows = stragglers(
        [{**base, "rank": r, "compute_ns": c} for r, c in enumerate([1_000_000, 1_010_000, 1_500_000])]
    )
    by = {r["rank"]: r for r in rows}
    assert [r["work_per_step_ns"] for r in rows] == [100_000, 101_000, 150_000]
    assert [r["straggler"] for r in rows] == [False, False, True]
    assert (by[2]["lag_ns"], by[0]["wait_ns"], by[2]["wait_ns"]) == (49_000, 50_000, 0)


# -- scale-out ----------------------------------------------------------------------------


@pytest.mark.slow
def test_dask_cluster_gives_the_same_summary(archive):
    distributed = pytest.importorskip("distributed")
    local = archive["result"].summary.drop(RUN_COLUMNS).sort("source")
    with (
        distributed.LocalCluster(
            processes=True, n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        by_executor = run_batch(archive["src"], executor=client.get_executor())
        address = "dask://" + cluster.scheduler_address.removeprefix("tcp://")
        by_address = run_batch(archive["good"][2], executor=address)
    assert by_executor.analysed == 10
    assert by_executor.summary.drop(RUN_COLUMNS).sort("source").equals(local)
    # (`path` is relative to what was given: the folder there, the file itself here)
    assert by_address.summary.drop(*RUN_COLUMNS, "path").equals(
        local.filter(pl.col("source") == str(archive["good"][2])).drop("path")
    )


# -- CLI and page -------------------------------------------------------------------------


def test_size_limit_gives_error_rows_that_are_not_cached(archive, tmp_path):
    out, traces = tmp_path / "out", [str(p) for p in archive["good"][:2]]
    small = run_batch(traces, out_dir=out, jobs=1, max_bytes=1024)
    assert (small.analysed, small.failed) == (2, 2)
    assert small.summary["error"].str.contains("more than 1,024 bytes").all()
    again = run_batch(traces, out_dir=out, jobs=1)  # the refusal was this run's limit, not the traces'
    assert (again.analysed, again.cached, again.failed) == (2, 0, 0)
    assert run_batch(traces, out_dir=out, jobs=1, max_bytes=1024).cached == 2  # good rows come from the cache


def test_cli(archive, tmp_path):
    from tracekit.cli.main import cli, main

    out = tmp_path / "out"
    res = CliRunner().invoke(
        cli,
        ["batch", str(archive["good"][0]), str(archive["broken"]["empty"]), "-o", str(out), "--jobs", "1"],
    )
    assert res.exit_code == 1, res.output  # a row with an error
    assert res.stdout.startswith("tracekit batch: 2 traces (2 analysed, 0 cached, 1 failed)")
    assert len(res.stdout.splitlines()) == 1 and "\r" not in res.stderr  # no progress bar off a terminal
    assert (out / "summary.parquet").is_file() and (out / "index.html").is_file()
    limited = CliRunner().invoke(cli, ["batch", str(archive["good"][0]), "-o", str(tmp_path / "o2"), "--jobs", "1",
                                       "--max-bytes", "1K"])
    assert limited.exit_code == 1 and "1 failed" in limited.stdout
    good = CliRunner().invoke(cli, ["batch", str(archive["good"][0]), "-o", str(tmp_path / "o3"), "--jobs", "1"])
    assert good.exit_code == 0 and "0 failed" in good.stdout
    assert CliRunner().invoke(cli, ["batch", str(tmp_path), "-o", str(out), "--jobs", "0"]).exit_code == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["batch", str(empty), "-o", str(out)]) == 2


def test_progress_bar(monkeypatch):
    from tracekit.cli.batch import ProgressBar

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    bar = ProgressBar()
    bar(1, 4, {"error": None})
    bar(2, 4, {"error": "file is empty (no JSON)"})
    bar.close()
    text = err.getvalue()
    assert text.startswith("\r[") and "2/4 traces, 1 failed" in text and text.endswith("\n")


@pytest.mark.browser
def test_index_page_in_chromium(archive):
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("install chromium (apt-get install chromium) and playwright")
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("install chromium (apt-get install chromium) and playwright")
    from browser import broken_cells, open_page

    with open_page(archive["out"] / "index.html") as (page, errors, requests):
        assert errors == [] and requests == []
        assert page.locator("#traces tbody tr").count() == 10
        assert broken_cells(page) == []  # figures, dates, devices and causes on one line
        assert page.locator("svg.trend circle").count() >= 6
        header = page.locator("#traces thead th", has_text="GPU util.")
        column = [c[1] for c in SUMMARY_COLUMNS].index("GPU util.") + 1
        cells = f"#traces tbody tr td:nth-child({column})"
        read = "cells => cells.map(c => parseFloat(c.getAttribute('data-v') ?? '-Infinity'))"
        header.click()
        down = page.locator(cells).evaluate_all(read)
        assert down == sorted(down, reverse=True) and len(set(down)) > 2
        header.click()
        up = page.locator(cells).evaluate_all(read)
        assert up == sorted(up)
        links = page.locator("#traces tbody a")
        if links.count():
            href = links.first.get_attribute("href")
            assert href.startswith("reports/") and (archive["out"] / href).is_file()
        page.locator('input.filter[data-table="traces"]').fill("run-03")
        assert page.locator("#traces tbody tr:not([hidden])").count() == 1


def test_index_page_and_reports_are_inert_for_hostile_traces(tmp_path):
    from report_fixtures import FAKE_TOKEN, hostile_trace

    src = tmp_path / "in"
    src.mkdir()
    hostile_trace().write(src / "<script>alert(9)<.json.gz")
    out = tmp_path / "out"
    result = run_batch([str(src)], out_dir=str(out), jobs=1, reports=True)
    assert result.summary.height == 1 and result.summary["error"].to_list() == [None]
    pages = [out / "index.html", *sorted(out.rglob("*.html"))]
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert html.count("<script") == 1 and "<img" not in html and "</style><" not in html
        assert not re.search(r"""(href|src)\s*=\s*["']?\s*javascript""", html)  # hostile text stays text
        assert FAKE_TOKEN not in html and "s3cretpw" not in html
    written = [p for p in out.rglob("*") if p.is_file()]
    assert all(out in p.parents for p in written) and not any("<" in p.name for p in written)


def test_a_fifo_among_the_sources_is_an_error_row_not_a_hang(tmp_path):
    import os

    src = tmp_path / "in"
    src.mkdir()
    TraceBuilder().write(src / "ok.json.gz")
    os.mkfifo(src / "pipe.json")  # a directory scan skips it; named as a source, it is refused
    result = run_batch([str(src), str(src / "pipe.json")], out_dir=str(tmp_path / "out"), jobs=1)
    errors = dict(zip(result.summary["source"].map_elements(lambda s: s.rsplit("/", 1)[-1], return_dtype=pl.String),
                      result.summary["error"]))
    assert errors["ok.json.gz"] is None
    assert "not a regular file (a FIFO)" in errors["pipe.json"]
