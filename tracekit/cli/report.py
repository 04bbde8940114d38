"""`tracekit report TRACE -o report.html`: the self-contained report (or Markdown / JSON)."""

from __future__ import annotations

import sys

import click

from tracekit.cli.common import analyse_trace, format_from, load_trace, trace_arg, write_output
from tracekit.cli.progress import Status, progress_opt
from tracekit.render.html import render_html
from tracekit.render.json import render_json
from tracekit.render.markdown import render_markdown
from tracekit.report.build import ReportOptions, build_report

RENDERERS = {"html": render_html, "md": lambda r: render_markdown(r, tables=("kernels", "ops", "gaps", "attention-calls")),
             "json": render_json}


@click.command()
@trace_arg
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str),
              help="Where to write the report (default: stdout for md/json, TRACE-NAME.html for html).")
@click.option("--format", "fmt", type=click.Choice(sorted(RENDERERS)), default=None,
              help="html (default, or from the -o suffix), md (GitHub Markdown for a PR comment) or json.")
@click.option("--zoom", metavar="WINDOW", help="Also draw the timeline of this window (e.g. ProfilerStep#3); "
              "default: the median profiler step.")
@click.option("--top", type=click.IntRange(1, 500), default=30, show_default=True, help="Rows in the top-N tables.")
@click.option("--no-redact", is_flag=True, help="Show metadata values that look like credentials (redacted by default).")
@progress_opt
def report(trace: str, output: str | None, fmt: str | None, zoom: str | None, top: int, no_redact: bool,
           progress: bool | None) -> None:
    """Analyse TRACE and write a report: findings, timeline, GPU time, idle gaps and more.

    The HTML file is self-contained (inline CSS, SVG and script; nothing is fetched), so it
    opens from disk, a CI artifact or an email attachment.
    """
    kind = fmt or format_from(output)
    options = ReportOptions(redact=not no_redact, top=top, zoom=zoom)
    status = Status(enabled=progress)
    try:
        loaded = load_trace(trace, status=status)
        analysis = analyse_trace(loaded, trace, options=options.analysis, status=status)
        status.step("building the report")
        model = build_report(loaded, options=options, analysis=analysis)
        status.step(f"writing the {kind.upper() if kind != 'md' else 'Markdown'} report")
        text = RENDERERS[kind](model)
    finally:
        status.close()
    if output is None and kind != "html":
        sys.stdout.write(text)
        return
    path = output or _default_name(trace)
    write_output(path, text)
    click.echo(f"wrote {path}", err=True)


def _default_name(trace: str) -> str:
    from pathlib import Path

    name = Path(trace).name
    for suffix in (".gz", ".tmp", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return f"{name}.report.html"
