"""What runs in a worker process: one job in, one small result entry out.

`run_job` is a top-level function of an importable module, so it pickles by reference for
`ProcessPoolExecutor` (spawn) and for Dask. The entry it returns holds only plain values
(rows as dicts, an optional report as text), never frames of events. The trace is
dropped before the function returns, so a worker holds one trace at a time.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import signal
import sys
import threading
import time
from typing import Any

import polars as pl

from tracekit import __version__
from tracekit.pipeline import analyse
from tracekit.batch import arrivals
from tracekit.batch import ranks as rk
from tracekit.batch import rows
from tracekit.batch.schema import BATCH_SCHEMA_VERSION
from tracekit.batch.sources import Job, load_job_trace
from tracekit.errors import TraceError, TraceTooLargeError
from tracekit.model import Trace

# Optional analyses whose presence changes the rows (the report builder does not: not listed).
OPTIONAL_MODULES = ("tracekit.findings", "tracekit.analysis.critical_path", "tracekit.analysis.attention")


def fingerprint() -> str:
    """What a cached entry must match to be reused: schema, tracekit version, analyses present."""
    present = [m.rsplit(".", 1)[-1] for m in OPTIONAL_MODULES if importlib.util.find_spec(m) is not None]
    return f"batch{BATCH_SCHEMA_VERSION}/tracekit{__version__}/{'+'.join(present)}"


PARENT_POLL_S = 1.0


def die_with_parent(parent: int) -> None:
    """Pool initializer: end this worker when the batch's process (`parent`, its pid) dies
    (killed, crashed), instead of finishing its queue alone (150-170 MB each, alive minutes
    later). On Linux the kernel sends SIGKILL (prctl PR_SET_PDEATHSIG); elsewhere a daemon
    thread sees the parent's pid change. A parent that died while this worker started (before
    either was set) is seen at once: the worker's parent is then no longer `parent`."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # (checked after the prctl: no moment is left uncovered)
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="tracekit-parent", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def run_job(job: Job) -> dict[str, Any]:
    """Load and analyse one job; a bad trace becomes an entry with `error`, never an exception."""
    started = time.perf_counter()
    try:
        entry = _group_entry(job) if job.group else _trace_entry(job)
        entry["cacheable"] = True
    except TraceTooLargeError as exc:  # over this run's limit: another run may allow more
        entry = error_entry(message(exc), cacheable=False)
    except TraceError as exc:
        entry = error_entry(message(exc), cacheable=True)
    except MemoryError:
        entry = error_entry("out of memory while analysing this trace", cacheable=False)
    except Exception as exc:  # noqa: BLE001  (one trace must never stop the batch)
        entry = error_entry(f"internal error: {type(exc).__name__}: {one_line(str(exc))}", cacheable=False)
    entry["summary"]["analysis_s"] = time.perf_counter() - started
    entry["summary"]["analysed_at"] = now_us()
    entry |= {"fingerprint": fingerprint(), "content_hash": job.content_hash}
    return entry


def _trace_entry(job: Job) -> dict[str, Any]:
    trace = load_job_trace(job)
    a = analyse(trace)
    summary = rows.summary_values(a)
    html = None
    if job.report:
        try:
            html = render_report(trace, a)
        except Exception as exc:  # noqa: BLE001  (a report failing must not lose the row)
            note = f"report failed: {type(exc).__name__}: {one_line(str(exc))}"
            summary["analysis_notes"] = "; ".join(filter(None, [summary["analysis_notes"], note]))
    return {
        "summary": summary,
        "classes": rows.class_rows(a),
        "findings": rows.finding_rows(a),
        "ranks": [],
        "report_html": html,
    }


def _group_entry(job: Job) -> dict[str, Any]:
    from tracekit.loader import load_ranks

    traces = load_ranks(list(job.paths), max_bytes=job.max_bytes, lean=True)
    values, rank_rows, classes, findings, kernels, events = [], [], [], [], [], []
    for rank in list(traces):
        trace = traces.pop(rank)  # drop each rank's trace once analysed
        events.append(arrivals.rank_events(trace, rank))
        a = analyse(trace)
        v = rows.summary_values(a)
        values.append(v)
        rank_rows.append(rk.rank_row(a, rank, v))
        classes.append(rows.class_rows(a))
        findings += rows.finding_rows(a, rank=rank)
        kernels.append(a.kernels.select("name", "kernel_class", "tensor_cores", "total_ns"))
        del trace, a
    skew = arrivals.arrival_skew(events)
    rank_rows = rk.stragglers(rank_rows, skew)
    summary = rk.combine(values, rank_rows, pl.concat(kernels), skew)
    if skew.note:
        summary["analysis_notes"] = "; ".join(filter(None, [summary.get("analysis_notes"), skew.note]))
    collectives = skew.collectives.to_dicts()
    html = None
    if job.report:
        from tracekit.batch.group_page import render_group_page

        html = render_group_page(job.source, summary, rank_rows, collectives, skew.window)
    return {
        "summary": summary,
        "classes": rk.combine_classes(classes),
        "findings": findings,
        "ranks": rank_rows,
        "collectives": collectives,
        "window": skew.window,
        "report_html": html,
    }


def render_report(trace: Trace, analysis: Any) -> str | None:
    """The single-trace HTML report, when this tracekit has the report builder."""
    try:
        from tracekit.render.html import render_html
        from tracekit.report.build import build_report
    except ImportError:
        return None
    return render_html(build_report(trace, analysis=analysis))


def error_entry(text: str, *, cacheable: bool) -> dict[str, Any]:
    return {
        "summary": {"error": text, "tracekit_version": __version__},
        "classes": [],
        "findings": [],
        "ranks": [],
        "report_html": None,
        "cacheable": cacheable,
    }


def message(exc: TraceError) -> str:
    """The one-line message of a TraceError, without the path (the row names its source)."""
    return one_line(Exception.__str__(exc)) or type(exc).__name__


def one_line(text: str) -> str:
    return " ".join(text.split())[:500]


def now_us() -> int:
    return int(dt.datetime.now(dt.UTC).timestamp() * 1_000_000)
