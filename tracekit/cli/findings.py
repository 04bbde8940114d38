"""`tracekit critical-path`, `tracekit findings`, `tracekit annotate`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from tracekit import format as fmt
from tracekit.cli.common import Loading, analyse_trace, clip, emit_json, json_opt, table, trace_arg
from tracekit.cli.options import full_path_opt, no_redact_opt, shown_path
from tracekit.report.redact import scrub

if TYPE_CHECKING:
    from tracekit.analysis.critical_path import CriticalPath
    from tracekit.analysis.whatif import WhatIf
    from tracekit.findings import FindingsResult

window_opt = click.option("--window", default="all", show_default=True, metavar="NAME|all",
                          help="An annotation: exact name (ProfilerStep#3), kind (ProfilerStep) or regex; all = whole trace.")
index_opt = click.option("--index", type=int, default=None,
                         help="Which instance of --window (0-based, negative from the end); default: all of them.")
set_opt = click.option("--set", "sets", multiple=True, metavar="RULE.PARAM=VALUE",
                       help="Override a rule threshold (repeatable), e.g. --set gpu_gaps.min_gap_ns=5e6.")


@click.command("critical-path")
@trace_arg
@window_opt
@index_opt
@json_opt
@no_redact_opt
@full_path_opt
def critical_path(trace: str, window: str, index: int | None, as_json: bool, no_redact: bool, full_path: bool) -> None:
    """The critical path of a window: what it is made of, whose time it is, and what-ifs.

    Verdict: gpu-bound, launch-bound, cpu-bound, sync-bound, idle, no-gpu, or empty (a window of no length; docs/findings.md).
    """
    loading = Loading(trace)  # read while the analyses (and Polars) are imported
    from tracekit.analysis import whatif
    from tracekit.analysis.critical_path import critical_path as compute

    cp = compute(loading.result(), window=None if window == "all" else window, index=index)
    scenarios = whatif.standard(cp.graph) if cp.graph is not None and cp.edges else []
    if as_json:
        emit_json(scrub({"file": shown_path(trace, full_path), **cp.to_dict(), "what_if": [w.to_dict() for w in scenarios]},
                        not no_redact))
        return
    click.echo(scrub(render_critical_path(cp, scenarios), not no_redact))


@click.command()
@trace_arg
@json_opt
@set_opt
@click.option("--fail-on", type=click.Choice(["high", "medium", "low"]), default=None,
              help="Exit with status 1 when a finding of this severity or worse exists.")
@no_redact_opt
@full_path_opt
def findings(trace: str, as_json: bool, sets: tuple[str, ...], fail_on: str | None, no_redact: bool,
             full_path: bool) -> None:
    """Rules that say what wastes GPU time, ranked by the time it costs, with evidence and advice."""
    loading = Loading(trace)
    from tracekit.findings import Config
    from tracekit.pipeline import AnalysisOptions

    config = Config.from_strings(sets)  # (a bad --set is refused while the trace is read)
    # the pipeline's findings, on every analysis (read from the cache after a report)
    analysis = analyse_trace(loading.result(), trace, options=AnalysisOptions(findings_config=config.overrides()))
    if analysis.findings is None:
        raise RuntimeError("; ".join(analysis.notes))  # (an internal error: the rules themselves never raise)
    result = analysis.findings
    if as_json:
        emit_json(scrub({"file": shown_path(trace, full_path), **result.to_dict()}, not no_redact))
    else:
        click.echo(scrub(render_findings(result), not no_redact))
    if fail_on and result.at_least(fail_on):
        raise click.exceptions.Exit(1)


@click.command()
@trace_arg
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, writable=True),
              help="Where to write the annotated trace (gzip when the name ends in .gz).")
@window_opt
@index_opt
@set_opt
@click.option("--redact", is_flag=True, help="Replace strings that look like credentials in the written trace, the "
              "original events' included (docs/report.md lists the rules; default: events copied as they are).")
def annotate(trace: str, output: str, window: str, index: int | None, sets: tuple[str, ...], redact: bool) -> None:
    """Write the trace with the critical path (flow arrows, a track) and findings (instants) added."""
    from tracekit.atomic import check_output

    check_output(output, [trace])
    loading = Loading(trace)
    from tracekit.analysis.critical_path import critical_path as compute
    from tracekit.findings import Config, run_findings
    from tracekit.findings.annotate import write_annotated

    config = Config.from_strings(sets)
    loaded = loading.result()
    cp = compute(loaded, window=None if window == "all" else window, index=index)
    whole = window == "all" and index is None  # (the findings' own critical path is the whole trace's)
    found = run_findings(loaded, config=config, seed={"critical_path": cp} if whole else None)
    counts = write_annotated(trace, output, cp, found, redact=redact)
    click.echo(f"wrote {output}: {fmt.count(counts['events'])} original events, {counts['flows']} critical-path "
               f"arrows, {counts['path_slices']} path slices, {counts['instants']} finding instants")


def render_critical_path(cp: CriticalPath, scenarios: list[WhatIf]) -> str:
    graph = (f"graph       {fmt.count(cp.nodes)} nodes, {fmt.count(cp.edges)} edges; "
             f"{fmt.count(cp.inferred_edges)} inferred (syncs and stream waits read from timing)")
    lines = [cp.sentence, "", f"window      {cp.window}: {fmt.ns(cp.window_ns)}", graph, "",
             table(["class", "time", "share"],
                   [[c, fmt.ns(n), fmt.pct(s)] for c, n, s in cp.by_class.filter(cp.by_class["ns"] > 0).iter_rows()],
                   right=(1, 2)), "",
             table(["class", "where", "time", "share"],
                   [[c, clip(w, 60), fmt.ns(n), fmt.pct(s)] for c, w, n, s in cp.by_context.head(12).iter_rows()],
                   right=(2, 3))]
    if scenarios:
        rows = [[w.description, fmt.ns(w.saved_ns), fmt.pct(w.saved_share), fmt.ns(w.estimate_ns)] for w in scenarios]
        lines += ["", table(["what if", "saves", "share", "window then"], rows, right=(1, 2, 3))]
    return "\n".join(lines)


def render_findings(result: FindingsResult) -> str:
    head = (f"{fmt.counted(len(result.findings), 'finding')} in a window of {fmt.ns(result.window_ns)}; "
            f"{fmt.counted(len(result.ran), 'rule')} ran, {len(result.clean)} found nothing")
    lines = [head, ""]
    for f in result.findings:
        lines.append(f"[{f.severity}] {f.rule}: {f.title}")
        lines.append(f"    costs {fmt.ns(f.time_lost_ns)} ({fmt.pct(f.share)} of the window)")
        for e in f.evidence[:3]:
            lines.append(f"    at {e.rel_us:,.1f} µs  {e.lane}  {clip(e.name, 70)}" + (f"  ({clip(e.note, 40)})" if e.note else ""))
        lines.append(f"    advice: {f.advice}")
        lines.append("")
    if result.clean:
        lines.append("nothing found:")
        lines += [f"  {c.rule}: {c.text}" for c in result.clean]
    for rule_id, message in result.errors:
        lines.append(f"  {rule_id}: failed on this trace: {message}")
    return "\n".join(lines)
