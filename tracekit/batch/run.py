"""`run_batch`: every trace of an archive analysed once, in parallel, resumable.

The main process lists the sources, hashes each one's bytes (sha256), serves what the
cache (`tracekit.cache.results`) already holds, and hands the rest to an executor: a local `ProcessPoolExecutor`
(spawn), a Dask cluster (`dask://HOST:PORT`), any `concurrent.futures.Executor`, or
in-line when `jobs=1`. At most two jobs per worker are in flight, so pending work holds
paths, not traces. Each result is written to the cache as soon as it arrives; the tables
are built from the rows at the end.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.batch import schema as S
from tracekit.batch.rows import scrub_frame
from tracekit.batch.sources import Item, Job, expand, prepare, safe_name
from tracekit.batch.executors import Pool, open_executor
from tracekit.batch.store import Store
from tracekit.batch.worker import error_entry, fingerprint, message, one_line, run_job
from tracekit.cache import Cache
from tracekit.cache.results import Results
from tracekit.errors import TraceError, UsageError
from tracekit.loader.source import DEFAULT_MAX_BYTES

Progress = Callable[[int, int, dict[str, Any]], None]


@dataclass(frozen=True)
class BatchResult:
    """The batch's tables (schemas in `tracekit.batch.schema`, documented in docs/batch.md)."""

    summary: pl.DataFrame  # one row per trace (or rank group)
    kernel_classes: pl.DataFrame  # per trace x kernel class
    findings: pl.DataFrame  # per trace x finding
    ranks: pl.DataFrame  # per rank group x rank (group_ranks=True)
    analysed: int  # results computed by this run
    cached: int  # rows served from the cache (OUTDIR/.cache unless given another)
    failed: int  # rows with an error
    seconds: float
    out_dir: Path | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def line(self) -> str:
        """One line for the end of a run."""
        where = f" -> {self.out_dir / 'index.html'}" if self.out_dir else ""
        return (
            f"tracekit batch: {fmt.counted(self.summary.height, 'trace')} ({self.analysed} analysed, {self.cached} cached, "
            f"{self.failed} failed) in {fmt.ns(self.seconds * 1e9)}{where}"
        )


def run_batch(
    sources: Any,
    *,
    out_dir: str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    executor: Executor | str | None = None,
    group_ranks: bool = False,
    reports: bool = False,
    progress: Progress | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    redact: bool = True,
    cache: Cache | None = None,
) -> BatchResult:
    """Analyse every trace named by `sources` (paths, directories, globs, fsspec URLs).

    Results are kept by content hash in `cache` (`Cache.results`; by default, with an
    `out_dir`, `Cache.beside(out_dir)`: `out_dir/.cache`), so a rerun analyses only new
    bytes. With `out_dir` the tables, `index.html` and, with `reports`, one HTML report per trace are
    written there. `progress(done, total, row)` is called as each row is ready.
    `max_bytes`: refuse a trace whose JSON (decompressed) is larger (the loader's limit,
    `DEFAULT_MAX_BYTES` by default); such a trace becomes a row with its error,
    which is not cached (a later run may allow more). `redact`: credentials in the tables'
    strings replaced (`rows.scrub_frame`; the cache keeps them as read).
    """
    refuse_in_spawned_worker()
    started = time.perf_counter()
    if reports and out_dir is None:
        raise UsageError("per-trace reports need an output folder (out_dir)")
    if jobs is not None and jobs < 1:
        raise UsageError("jobs must be at least 1")
    items = expand(sources, group_ranks=group_ranks)
    if items and all(i.paths and not i.url and not os.path.lexists(i.paths[0]) for i in items):
        missing = ", ".join(i.source for i in items[:3]) + (", ..." if len(items) > 3 else "")
        raise UsageError(f"no trace files found: {missing} does not exist" if len(items) == 1
                         else f"no trace files found: none of {missing} exists")
    if not items:
        raise UsageError(
            f"no trace files found in {sources if isinstance(sources, (str, os.PathLike)) else list(sources)}"
        )
    store = Store(out_dir) if out_dir is not None else None
    if cache is None and out_dir is not None:
        cache = Cache.beside(out_dir)
    runner = Runner(
        store, cache.results() if cache is not None else None, reports=reports and report_builder_available(),
        progress=progress, total=len(items), max_bytes=max_bytes,
    )
    if executor is None and (jobs is None or jobs > 1) and len(items) > 1:
        refuse_unguarded_main()
    with open_executor(executor, jobs, tasks=len(items)) as (pool, limit):
        runner.run(items, pool, limit)
    notes = runner.notes(reports_wanted=reports)
    result = runner.result(time.perf_counter() - started, store, notes, redact=redact)
    if store is not None:
        write_outputs(store, result)
    return result


MAIN_GUARD = (
    "run_batch was called while a worker process was starting: the worker re-ran the main script, "
    "which has no `if __name__ == \"__main__\":` guard. Put the call under that guard "
    "(worker processes are spawned and import the main script)"
)


def refuse_in_spawned_worker() -> None:
    """A spawned worker imports the main script (as `__mp_main__`) while it bootstraps,
    before `parent_process()` is set; multiprocessing marks that phase `_inheriting` (its
    own check reads it). An unguarded `run_batch` there would start a batch in every worker
    (each failing, the run twice as slow)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise UsageError(MAIN_GUARD)


def refuse_unguarded_main() -> None:
    """Before a local pool starts: a main script whose text has no `__name__ == "__main__"`
    test would be re-run by every spawned worker (each starting a batch of its own, each
    failing): refused at once, in this process, with what to change. Interactive sessions,
    `-c` and `-m` runs of guarded modules pass."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path or not str(path).endswith(".py"):
        return
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    if not re.search(r"""__name__\s*==\s*['"]__main__['"]|['"]__main__['"]\s*==\s*__name__""", text):
        raise UsageError(f"{path} calls run_batch with worker processes but has no "
                         f"`if __name__ == \"__main__\":` guard: each spawned worker imports the main "
                         f"script and would run the batch again. Put the call under that guard (or pass jobs=1)")


class Runner:
    """The state of one run: rows so far, and the jobs waiting on each content hash."""

    def __init__(self, store: Store | None, results: Results | None = None, *, reports: bool,
                 progress: Progress | None, total: int, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.store, self.results, self.reports, self.progress, self.total = store, results, reports, progress, total
        self.max_bytes = max_bytes
        self.fingerprint = fingerprint()
        self.summary: list[dict[str, Any]] = []
        self.classes: list[dict[str, Any]] = []
        self.findings: list[dict[str, Any]] = []
        self.ranks: list[dict[str, Any]] = []
        self.analysed = self.cached = 0
        self.waiting: dict[str, list[Job]] = {}
        self.retried: set[str] = set()  # jobs sent again after their worker died
        self.lost: list[Job] = []  # jobs whose worker died, to send again

    def run(self, items: list[Item], pool: Executor | Pool, limit: int) -> None:
        """Every item's row, from the cache or from `pool`. When a worker of a local pool dies
        (killed, out of memory, a crash in C), the pool breaks and fails every job in flight:
        the pool is started again and each of those jobs sent once more."""
        in_flight: dict[Future, str] = {}
        for item in items:
            job = self.prepare(item)
            if job is None:
                continue
            if job.content_hash in self.waiting:
                self.waiting[job.content_hash].append(job)
                continue
            entry = self.from_cache(job)
            if entry is not None:
                self.cached += 1
                self.emit(job, entry)
                continue
            self.waiting[job.content_hash] = [job]
            while len(in_flight) >= limit:
                self.collect(in_flight, timeout=None, pool=pool)
                self.resend(pool, in_flight)
            self.submit(pool, job, in_flight)
            self.collect(in_flight, timeout=0, pool=pool)
            self.resend(pool, in_flight)
        while in_flight:
            self.collect(in_flight, timeout=None, pool=pool)
            self.resend(pool, in_flight)

    def submit(self, pool: Executor | Pool, job: Job, in_flight: dict[Future, str]) -> None:
        try:
            in_flight[pool.submit(run_job, job)] = job.content_hash
        except BrokenProcessPool as exc:
            self.lose(pool, job.content_hash, exc)
        except Exception as exc:  # noqa: BLE001  (this job fails, the batch goes on)
            self.finish(job.content_hash, worker_failed(exc))

    def lose(self, pool: Executor | Pool, content_hash: str, exc: BaseException) -> None:
        """A job whose worker died: sent again once on a local pool (`resend`), else an error row."""
        if content_hash in self.retried or not isinstance(pool, Pool):
            self.finish(content_hash, worker_failed(exc, again=content_hash in self.retried))
        else:
            self.retried.add(content_hash)
            self.lost.append(self.waiting[content_hash][0])

    def resend(self, pool: Executor | Pool, in_flight: dict[Future, str]) -> None:
        """Send the lost jobs again, on a new pool once the jobs in flight are all in (each of
        them failed too, or finished first)."""
        if not self.lost or any(not f.done() for f in in_flight) or not isinstance(pool, Pool):
            return
        pool.restart()
        lost, self.lost = self.lost, []
        for job in lost:
            self.submit(pool, job, in_flight)

    def prepare(self, item: Item) -> Job | None:
        try:
            return prepare(item, report=self.reports, max_bytes=self.max_bytes)
        except TraceError as exc:
            row = {
                "name": safe_name(item, None),
                "source": item.source,
                "path": item.label or item.source,
                "kind": "ranks" if item.group else "trace",
                "error": message(exc),
            }
            self.add_row(row)
            return None

    def from_cache(self, job: Job) -> dict[str, Any] | None:
        if self.results is None:
            return None
        entry = self.results.get(job.content_hash, self.fingerprint)
        if entry is None:
            return None
        wants_report = self.reports and not entry["summary"].get("error")
        if wants_report and (self.store is None or not self.store.path(report_path(job)).exists()):
            return None  # analyse again: the report is made from the loaded trace
        return entry

    def collect(self, in_flight: dict[Future, str], *, timeout: float | None, pool: Executor | Pool) -> None:
        done, _ = wait(list(in_flight), timeout=timeout, return_when=FIRST_COMPLETED)
        for fut in done:
            content_hash = in_flight.pop(fut)
            try:
                entry = fut.result()
            except BrokenProcessPool as exc:
                self.lose(pool, content_hash, exc)
                continue
            except Exception as exc:  # noqa: BLE001  (a dead worker fails its job, not the batch)
                entry = worker_failed(exc)
            self.finish(content_hash, entry)

    def finish(self, content_hash: str, entry: dict[str, Any]) -> None:
        self.analysed += 1
        if self.results is not None and entry.get("cacheable"):
            self.results.put(content_hash, entry)
        for job in self.waiting.pop(content_hash, []):
            if self.store is not None and entry.get("report_html"):
                self.store.write_text(report_path(job), entry["report_html"])
            self.emit(job, entry)

    def emit(self, job: Job, entry: dict[str, Any]) -> None:
        src = {"name": job.name, "source": job.source, "content_hash": job.content_hash}
        has_report = self.store is not None and self.store.path(report_path(job)).exists()
        kind = "ranks" if job.group else "trace"
        self.add_row(
            {
                "kind": kind,
                **entry["summary"],
                **src,
                "path": job.label or job.source,
                "file_bytes": job.size_bytes,
                "report": report_path(job) if has_report else None,
            }
        )
        self.classes += [{**r, **src} for r in entry.get("classes", [])]
        self.findings += [{**r, **src} for r in entry.get("findings", [])]
        self.ranks += [{**r, **src} for r in entry.get("ranks", [])]

    def add_row(self, row: dict[str, Any]) -> None:
        self.summary.append(row)
        if self.progress is not None:
            self.progress(len(self.summary), self.total, row)

    def notes(self, *, reports_wanted: bool) -> tuple[str, ...]:
        out = []
        if reports_wanted and not self.reports:
            out.append(
                "per-trace reports skipped: this tracekit has no report builder (tracekit.report.build)"
            )
        found = {
            n
            for r in self.summary
            for n in (r.get("analysis_notes") or "").split("; ")
            if "not available" in n
        }
        return tuple(out + sorted(found))

    def result(self, seconds: float, store: Store | None, notes: tuple[str, ...], *, redact: bool = True) -> BatchResult:
        def frame(rows: list[dict[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
            return scrub_frame(S.frame(rows, schema), redact)

        summary = frame(self.summary, S.SUMMARY_SCHEMA).sort("source", "name")
        return BatchResult(
            summary=summary,
            kernel_classes=frame(self.classes, S.CLASSES_SCHEMA).sort("source", "total_ns", descending=[False, True]),
            findings=frame(self.findings, S.FINDINGS_SCHEMA).sort(
                "source", "rank", "time_lost_ns", descending=[False, False, True], nulls_last=True
            ),
            ranks=frame(self.ranks, S.RANKS_SCHEMA).sort("source", "rank"),
            analysed=self.analysed,
            cached=self.cached,
            failed=int(summary["error"].is_not_null().sum()),
            seconds=seconds,
            out_dir=store.root if store is not None else None,
            notes=notes,
        )


def worker_failed(exc: BaseException, *, again: bool = False) -> dict[str, Any]:
    """A job whose worker died or could not be reached: an error row, not cached (retried next run)."""
    said = f"worker failed{' twice' if again else ''}: {type(exc).__name__}: {one_line(str(exc))}"
    return error_entry(said, cacheable=False)


def report_path(job: Job) -> str:
    return f"reports/{job.name}.html"


def report_builder_available() -> bool:
    try:
        import tracekit.render.html  # noqa: F401
        import tracekit.report.build  # noqa: F401
    except ImportError:
        return False
    return True


def write_outputs(store: Store, result: BatchResult) -> None:
    """The tables and the index page; each file atomically."""
    from tracekit.batch.index import render_index

    store.write_frame("summary.parquet", result.summary)
    store.write_frame("summary.csv", result.summary)
    store.write_frame("kernel_classes.parquet", result.kernel_classes)
    store.write_frame("findings.parquet", result.findings)
    store.write_frame("ranks.parquet", result.ranks)
    store.write_text("index.html", render_index(result))
