"""Helpers shared by the commands: loading with options, JSON output, text tables."""

from __future__ import annotations

import contextvars
import json
import os
import sys
import threading

from functools import partial
from types import EllipsisType
from typing import TYPE_CHECKING, Any

import click

from tracekit.cache import Cache
from tracekit.cli.interrupts import python_handles_sigint
from tracekit.cli.options import MAX_BYTES_KEY, max_bytes_opt
from tracekit.cli.progress import Status
from tracekit.render.text import clip, table  # noqa: F401  (the commands import them from here)
from tracekit.loader import load
from tracekit.loader.source import DEFAULT_MAX_BYTES

if TYPE_CHECKING:
    from tracekit.pipeline import Analysis, AnalysisOptions
    from tracekit.model import Trace

_trace_arg = click.argument("trace", type=click.Path(dir_okay=False, readable=False, path_type=str))
_traces_arg = click.argument("traces", nargs=-1, required=True, type=click.Path(readable=False, path_type=str))


def trace_arg(f: Any) -> Any:
    """The TRACE argument, with `--max-bytes` and `--cache/--no-cache` (read by `load_trace`)."""
    return cache_opt(max_bytes_opt(_trace_arg(f)))


def traces_arg(f: Any) -> Any:
    """TRACES (one or more), with `--max-bytes` and `--cache/--no-cache`."""
    return cache_opt(max_bytes_opt(_traces_arg(f)))


json_opt = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")

_CACHE_KEY = "tracekit.cache"


def _remember_cache(ctx: click.Context, _param: click.Parameter, value: bool | None) -> None:
    if value is not None:
        ctx.meta[_CACHE_KEY] = value


CACHE_MIN_BYTES = 1024 * 1024  # by default the CLI caches files at least this big

# The CLI caches loaded traces by default (`~/.cache/tracekit`, or `$XDG_CACHE_HOME/tracekit`),
# and the analyses of the commands that run them all (report, diff): commands are often run
# one after another on the same big trace. Every command taking TRACE gets the flag through
# `trace_arg`; `load_trace` and `analyse_trace` read the choice.
cache_opt = click.option(
    "--cache/--no-cache", default=None, expose_value=False, is_eager=True, callback=_remember_cache,
    help="Reuse (and store) the loaded trace, and its analysis, in the cache folder; default: on for files "
         "of 1 MB or more.",
)


SHOW_READING_BYTES = 32 * 1024 * 1024  # on a terminal, files this big show how far the reading is


def load_trace(path: str, *, cache: Cache | None | EllipsisType = ..., status: Status | None = None,
               limit: int | None = None, warn: bool = True, lean: bool = True) -> Trace:
    """Load a trace for a command, through `cache` (None: none; by default the command's,
    `command_cache`).

    The reading shows on `status`; without one, on a status line of its own when stderr is
    a terminal and the file is big. `limit`: the size limit (default: `max_bytes()`).
    `warn`: say on stderr when the file was broken and only partly read (`recovered_note`).
    `lean`: without what no analysis reads (`loader.lean`), as every command but `info`
    wants it."""
    if isinstance(cache, EllipsisType):
        cache = command_cache(path)
    python_handles_sigint()  # on the command's thread (the load needs Polars anyway)
    own = status is None and _size(path) >= SHOW_READING_BYTES
    if own:
        status = Status()
    try:
        progress = partial(status.reading, path) if status is not None and status.enabled else None
        trace = (load if cache is None else cache.load)(path, max_bytes=max_bytes() if limit is None else limit,
                                                        progress=progress, lean=lean)
    finally:
        if own and status is not None:
            status.close()
    if warn:
        warn_if_recovered(trace, path, status)
    return trace


RECOVERY_CODES = ("truncated", "truncated_gzip")


def recovered_note(trace: Trace, path: str) -> str | None:
    """One line for a trace read from a broken file: what the loader recovered, so that no
    figure of a partial trace passes for the whole run's (None for a whole file)."""
    if not trace.meta.recovered:
        return None
    import polars as pl

    said = trace.warnings.filter(pl.col("code").is_in(RECOVERY_CODES))["message"].to_list()
    return f"tracekit: warning: {path}: {'; '.join(said) or 'the file is broken; what could be read was read'}"


def warn_if_recovered(trace: Trace, path: str, status: Status | None = None) -> None:
    note = recovered_note(trace, path)
    if note is not None:
        if status is not None:
            status.note(note)
        else:
            click.echo(note, err=True)


class Loading:
    """`load_trace` on a thread of its own, so that a command can import what it needs next
    (the analyses, the report, the templates: 0.1 s) while the trace is read. The command's
    options are read here, on the command's thread (click's context is per thread).
    `result()` waits, and raises what the load raised."""

    def __init__(self, path: str, *, status: Status | None = None, warn: bool = True, lean: bool = True) -> None:
        self._args = {"path": path, "cache": command_cache(path), "status": status, "limit": max_bytes(), "warn": False,
                      "lean": lean}
        self._path, self._status, self._warn = path, status, warn
        self._trace: Trace | None = None
        self._error: BaseException | None = None
        # a daemon: an interrupted command must not wait for the reading to end
        # in a copy of the command's context: the trace cache's write goes behind (`cache.writes`)
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                        name="tracekit-load", daemon=True)
        self._thread.start()
        python_handles_sigint()  # Polars is imported here while the thread reads

    def _run(self) -> None:
        try:
            self._trace = load_trace(**self._args)
        except BaseException as exc:  # noqa: BLE001  (handed to the command's thread by result())
            self._error = exc

    def result(self) -> Trace:
        """The trace (said on stderr, once, if it was recovered from a broken file)."""
        self._thread.join()
        if self._error is not None:
            # handed over, not kept: the error's traceback holds the loader's frames (its
            # buffers too), and a reference from here or a local would make a cycle that
            # keeps them until the collector runs
            error, self._error = self._error, None
            try:
                raise error
            finally:
                del error
        assert self._trace is not None
        if self._warn:
            self._warn = False
            warn_if_recovered(self._trace, self._path, self._status)
        return self._trace


def analyse_trace(trace: Trace, path: str, *, options: AnalysisOptions | None = None,
                  status: Status | None = None) -> Analysis:
    """`analyse` for a command: on two threads where memory allows (`runtime.sizing`),
    through the command's cache when the trace goes through it (`command_cache`), a large
    trace's glibc heap trimmed meanwhile (`runtime.trimming`)."""
    from tracekit.pipeline import analyse
    from tracekit.runtime import trimming
    from tracekit.runtime.sizing import large, runner_for

    progress = status.analysing if status is not None else None
    cache = command_cache(path)
    with trimming(large(trace)):
        return (analyse if cache is None else cache.analyse)(trace, options=options, progress=progress,
                                                             runner=runner_for(trace))


def command_cache(path: str) -> Cache | None:
    """The cache a command reads and writes `path`'s trace and analysis through (the default
    folder), or None: as `--cache/--no-cache` says, else for files of `CACHE_MIN_BYTES` or more."""
    return Cache() if wants_cache(path) else None


def wants_cache(path: str) -> bool:
    """The command's `--cache/--no-cache`, else on for files of `CACHE_MIN_BYTES` or more."""
    ctx = click.get_current_context(silent=True)
    cache = ctx.meta.get(_CACHE_KEY) if ctx is not None else None
    return cache if cache is not None else _size(path) >= CACHE_MIN_BYTES


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # the load reports the problem


def max_bytes() -> int:
    """The decompressed-size limit: `--max-bytes` of the command, else of the group, else the default."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return DEFAULT_MAX_BYTES
    value = ctx.meta.get(MAX_BYTES_KEY)
    if value is None:
        obj = ctx.find_root().obj
        value = obj.get("max_bytes") if isinstance(obj, dict) else None
    return value or DEFAULT_MAX_BYTES


def emit_json(obj: Any) -> None:
    """Write JSON to stdout (stable key order as given, UTF-8)."""
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def format_from(output: str | None) -> str:
    """The report format an output path asks for by its suffix: md, json, else html."""
    if output and output.endswith(".md"):
        return "md"
    if output and output.endswith(".json"):
        return "json"
    return "html"
