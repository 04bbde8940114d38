"""`tracekit report TRACE -o report.html`: the self-contained report (or Markdown / JSON)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import click

from tracekit.atomic import check_output, write_output
from tracekit.cli.common import Loading, analyse_trace, format_from, trace_arg
from tracekit.cli.options import full_path_opt, no_redact_opt
from tracekit.cli.progress import Status, progress_opt
from tracekit.runtime import trimming

FORMATS = ("html", "json", "md")


@click.command()
@trace_arg
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str),
              help="Where to write the report (default: stdout for md/json; for html, NAME.report.html in this "
                   "folder, NAME being the trace file's name without .json, .gz, .tmp or .pt.trace).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="html (default, or from the -o suffix), md (GitHub Markdown for a PR comment) or json.")
@click.option("--zoom", metavar="WINDOW", help="Also draw the timeline of this window (e.g. ProfilerStep#3); "
              "default: the median profiler step.")
@click.option("--top", type=click.IntRange(1, 500), default=None,
              help="Rows in the top-N tables (default: 30; in Markdown, 10, fewer if the comment would be too long).")
@no_redact_opt
@full_path_opt
@progress_opt
def report(trace: str, output: str | None, fmt: str | None, zoom: str | None, top: int | None, no_redact: bool,
           full_path: bool, progress: bool | None) -> None:
    """Analyse TRACE and write a report: findings, timeline, GPU time, idle gaps and more.

    The HTML file is self-contained (inline CSS, SVG and script; nothing is fetched), so it
    opens from disk, a CI artifact or an email attachment.
    """
    kind = fmt or format_from(output)
    check_output(output or _default_name(trace), [trace])
    status = Status(enabled=progress)
    try:
        loading = Loading(trace, status=status)
        # imported while the trace is read (they are not needed before)
        import tracekit.pipeline  # noqa: F401  (the analyses, run below: imported while the trace is read)
        from tracekit.runtime.sizing import large
        from tracekit.report.build import Builder, ReportOptions, check_zoom

        render = _renderer(kind, top)
        options = ReportOptions(redact=not no_redact, full_path=full_path, top=top or ReportOptions.top, zoom=zoom)
        loaded = loading.result()
        check_zoom(loaded, zoom)
        # (a large trace's memory kept in bounds through the report's build too)
        with trimming(large(loaded)), Builder(options) as builder:
            analysis = analyse_trace(loaded, trace, options=options.analysis, status=status)
            status.step("building the report")
            model = builder.finish(loaded, analysis)
            status.step(f"writing the {kind.upper() if kind != 'md' else 'Markdown'} report")
            text = render(model)
    finally:
        status.close()
    if output is None and kind != "html":
        sys.stdout.write(text)
        return
    path = output or _default_name(trace)
    write_output(path, text, inputs=[trace])
    click.echo(f"wrote {path}", err=True)


MD_ROWS = 10  # rows of a Markdown report's tables (a pull-request comment) unless --top says otherwise


def _renderer(kind: str, top: int | None = None) -> Callable[[Any], str]:
    if kind == "html":
        from tracekit.cache import Cache
        from tracekit.render.html import render_html

        # compiled once, kept in the default cache folder (whatever --cache/--no-cache says)
        return partial(render_html, template_cache=Cache().templates)
    if kind == "md":
        from tracekit.render.markdown import render_markdown

        return partial(render_markdown, tables=("kernels", "ops", "gaps", "attention-calls"), rows=top or MD_ROWS)
    from tracekit.render.json import render_json

    return render_json


def _default_name(trace: str) -> str:
    from pathlib import Path

    name = Path(trace).name
    for suffix in (".gz", ".tmp", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return f"{name}.report.html"
