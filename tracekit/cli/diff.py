"""`tracekit diff BEFORE AFTER`: what changed between two traces, for a code review (or CI)."""

from __future__ import annotations

import os
import sys

import click

from tracekit import format as fmt
from tracekit.atomic import check_output, write_output
from tracekit.cli.common import analyse_trace, cache_opt, format_from, load_trace
from tracekit.cli.options import Finite, full_path_opt, max_bytes_opt, no_redact_opt
from tracekit.cli.progress import Status, progress_opt
from tracekit.diff import diff as diff_traces
from tracekit.diff.core import check_metric
from tracekit.diff.report import build_diff_report, render_diff
from tracekit.errors import UsageError

FORMATS = ("html", "md", "json")
SUFFIXES = {".html": "html", ".htm": "html", ".md": "md", ".json": "json"}
trace_path = click.Path(exists=True, dir_okay=False, path_type=str)


def _metric(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        check_metric(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from exc
    return value


@click.command()
@click.argument("before", type=trace_path)
@click.argument("after", type=trace_path)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str),
              help="Where to write the diff (default: stdout for md/json, diff.html for html).")
@click.option("--format", "kind", type=click.Choice(FORMATS), default=None,
              help="html (default, or from the -o suffix), md (GitHub Markdown for a PR comment) or json.")
@click.option("--fail-if-slower", "fail_pct", type=Finite(min=0), metavar="PCT",
              help="Exit with code 1 when AFTER is slower than BEFORE by more than PCT percent on the metric "
                   "and the change is beyond the step-to-step noise; exit 2 when the traces look like different "
                   "workloads.")
@click.option("--raw-threshold", is_flag=True,
              help="With --fail-if-slower: fail on any slowdown above PCT, even one within the noise.")
@click.option("--allow-unrelated", is_flag=True,
              help="With --fail-if-slower: gate even when the two traces look like different workloads.")
@click.option("--metric", default="step", show_default=True, callback=_metric, metavar="step|gpu-busy|window:NAME",
              help="The figure --fail-if-slower and the verdict use: median step time, median GPU busy time per "
                   "step, or the median time of the annotation NAME (record_function range).")
@click.option("--top", type=click.IntRange(1, 500), default=30, show_default=True, help="Rows in the delta tables.")
@no_redact_opt
@full_path_opt
@cache_opt
@max_bytes_opt
@progress_opt
def diff(before: str, after: str, output: str | None, kind: str | None, fail_pct: float | None,
         raw_threshold: bool, allow_unrelated: bool, metric: str, top: int, no_redact: bool, full_path: bool,
         progress: bool | None) -> None:
    """Compare AFTER with BEFORE step by step: step time, GPU busy and idle by cause, kernels,
    ops, launches, syncs and copies, each with its step-to-step noise.

    Exit codes: 0, or 1 with --fail-if-slower when AFTER regressed by more than PCT beyond the
    noise; 2 on bad input (unreadable trace, bad arguments, an -o suffix that names no format)
    and, with --fail-if-slower, when the traces look like different workloads (see
    --allow-unrelated).
    """
    if kind is None and output is not None:
        suffix = os.path.splitext(output)[1].lower()
        if suffix not in SUFFIXES:
            raise click.BadParameter(f"cannot tell the format from {output!r}: use a .html, .md or .json file, "
                                     "or --format html|md|json", param_hint="'-o' / '--output'")
    kind = kind or format_from(output)
    if output is not None or kind == "html":
        check_output(output or "diff.html", [before, after])
    status = Status(enabled=progress)
    try:
        status.label = "before: "
        first = analyse_trace(load_trace(before, status=status), before, status=status)
        second = first
        if os.path.realpath(after) != os.path.realpath(before):
            status.label = "after: "
            second = analyse_trace(load_trace(after, status=status), after, status=status)
        status.label = ""
        status.step("comparing")
        result = diff_traces(first, second, metric=metric)
        text = render_diff(build_diff_report(result, top=top, redact_metadata=not no_redact, full_path=full_path), kind)
    finally:
        status.close()
    if output is None and kind != "html":
        sys.stdout.write(text)
    else:
        path = output or "diff.html"
        write_output(path, text, inputs=[before, after])
        click.echo(f"wrote {path}", err=True)
    h = result.headline
    if fail_pct is None:
        return
    if not result.comparable and not allow_unrelated:
        click.echo(f"tracekit: not gating: {result.comparable_reason}; pass --allow-unrelated to gate anyway",
                   err=True)
        raise click.exceptions.Exit(2)
    if h.fails(fail_pct, raw=raw_threshold):
        noise = ("; with one sample on a side the noise is unknown" if h.significant is None
                 else "" if h.significant else " (within the noise; gated by --raw-threshold)")
        click.echo(f"tracekit: after is slower on {h.label}: {fmt.ns(h.before_ns)} → {fmt.ns(h.after_ns)} "
                   f"({fmt.pct(h.delta_pct)}), more than the {fail_pct:g} % allowed{noise}", err=True)
        raise click.exceptions.Exit(1)
    if h.regressed(fail_pct):
        click.echo(f"tracekit: after is {fmt.pct(h.delta_pct)} slower on {h.label}, within the step-to-step noise "
                   f"({fmt.ns(h.noise_ns)}): not a significant change, so not failing (--raw-threshold fails it)",
                   err=True)
