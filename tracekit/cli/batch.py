"""`tracekit batch`: analyse an archive of traces into tables, an index page and reports."""

from __future__ import annotations

import sys
from typing import Any

import click

from tracekit.batch import run_batch
from tracekit.cache import Cache
from tracekit.cli.common import max_bytes
from tracekit.cli.options import max_bytes_opt, no_redact_opt


@click.command()
@click.argument("sources", nargs=-1, required=True)
@click.option(
    "-o",
    "--out-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=str),
    help="Folder for summary.parquet/.csv, the long tables, index.html, reports and the cache.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes on this machine (default: one per core; 1 runs in-process).",
)
@click.option(
    "--executor",
    default=None,
    metavar="dask://HOST:PORT",
    help="Run the jobs on a running Dask distributed scheduler instead (needs the 'cluster' extra).",
)
@click.option("--reports", is_flag=True, help="Also write one HTML report per trace (reports/NAME.html).")
@click.option(
    "--group-ranks",
    is_flag=True,
    help="Analyse the rank files of one job (same folder, names differing in their last number) together.",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="Folder that keeps the results by content, for reruns (default: OUT_DIR/.cache); "
         "another run, or the other commands' cache folder, may share it.",
)
@max_bytes_opt
@no_redact_opt
def batch(
    sources: tuple[str, ...],
    out_dir: str,
    jobs: int | None,
    executor: str | None,
    reports: bool,
    group_ranks: bool,
    cache_dir: str | None,
    no_redact: bool,
) -> None:
    """Analyse every trace in SOURCES (files, folders, globs, fsspec URLs such as s3://bucket/run/).

    Results are cached in OUT_DIR/.cache (or --cache-dir) by the sha256 of each file, so a
    rerun only analyses new traces; a trace that cannot be read becomes a row with its error. A worker that dies
    is replaced and its jobs are run once more.

    Exit status: 0 when every row was analysed, 1 when any row has an error (the last line
    says how many), 2 on bad arguments or when SOURCES name no trace, 130 on Ctrl-C.
    """
    bar = ProgressBar() if sys.stderr.isatty() else None
    try:
        result = run_batch(
            list(sources),
            out_dir=out_dir,
            jobs=jobs,
            executor=executor,
            group_ranks=group_ranks,
            reports=reports,
            progress=bar,
            max_bytes=max_bytes(),
            redact=not no_redact,
            cache=Cache(cache_dir) if cache_dir is not None else None,
        )
    finally:
        if bar is not None:
            bar.close()
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(result.line())
    if result.failed:
        raise click.exceptions.Exit(1)


class ProgressBar:
    """`[#####.....] 12/40 traces, 1 failed` on stderr, redrawn in place (terminals only)."""

    WIDTH = 30

    def __init__(self) -> None:
        self.failed = 0
        self.drawn = False

    def __call__(self, done: int, total: int, row: dict[str, Any]) -> None:
        self.failed += row.get("error") is not None
        filled = self.WIDTH * done // max(total, 1)
        text = f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total} traces"
        sys.stderr.write(text + (f", {self.failed} failed" if self.failed else "") + "\x1b[K")
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
