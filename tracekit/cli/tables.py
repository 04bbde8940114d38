"""`tracekit ops TRACE` and `tracekit kernels TRACE`: where the time goes, per op and per kernel."""

from __future__ import annotations

import click

from tracekit import format as fmt
from tracekit.cli.common import Loading, clip, emit_json, json_opt, table, trace_arg

top_opt = click.option("--top", type=click.IntRange(min=1), default=25, show_default=True,
                       help="Rows to show.")


@click.command()
@trace_arg
@top_opt
@json_opt
def ops(trace: str, top: int, as_json: bool) -> None:
    """CPU ops by the GPU time they launched: calls, CPU total/self, inclusive/self GPU time.

    Inclusive GPU time counts the kernels and copies launched by the op and by the ops
    below it; self GPU time only those it launched itself. docs/metrics.md ("Attribution,
    launches, syncs and copies") defines every column.
    """
    loading = Loading(trace)  # read while the analysis (and Polars) is imported
    from tracekit.analysis.attribution import attribute

    a = attribute(loading.result())
    rows = a.ops.head(top)
    if as_json:
        emit_json({"file": trace, "gpu_events": a.gpu_events, "gpu_total_ns": a.gpu_total_ns,
                   "unlinked_events": a.unlinked_events, "unlinked_ns": a.unlinked_ns,
                   "warnings": a.warnings.to_dicts(), "ops": rows.to_dicts()})
        return
    click.echo(f"GPU work: {fmt.count(a.gpu_events)} events, {fmt.ns(a.gpu_total_ns)} summed; "
               f"not tied to any op: {fmt.count(a.unlinked_events)} ({fmt.ns(a.unlinked_ns)})")
    for w in a.warnings.iter_rows(named=True):  # what the links noticed (`links.link_warnings`)
        click.echo(f"[{w['level']}] {w['code']}: {w['message']}")
    click.echo("")
    if rows.is_empty():
        click.echo("no CPU ops (cpu_op events) in this trace")
        return
    body = [[clip(r["name"], 50), fmt.count(r["calls"]), fmt.ns(r["cpu_total_ns"]), fmt.ns(r["cpu_self_ns"]),
             fmt.ns(r["gpu_incl_ns"]), fmt.ns(r["gpu_self_ns"]), fmt.pct(r["gpu_share"]),
             f"{r['kernels_per_call']:.2f}"] for r in rows.iter_rows(named=True)]
    heads = ["op", "calls", "CPU total", "CPU self", "GPU incl", "GPU self", "GPU %", "kernels/call"]
    click.echo(table(heads, body, right=range(1, 8)))


@click.command()
@trace_arg
@top_opt
@json_opt
def kernels(trace: str, top: int, as_json: bool) -> None:
    """GPU kernels by total time, with their class (gemm, attention, ...) read from the name."""
    loading = Loading(trace)
    from tracekit.analysis.taxonomy import kernel_table

    rows = kernel_table(loading.result().gpu).head(top)
    if as_json:
        emit_json({"file": trace, "kernels": rows.to_dicts()})
        return
    if rows.is_empty():
        click.echo("no GPU kernels in this trace")
        return
    body = [[clip(r["name"], 60), r["kernel_class"], fmt.count(r["count"]), fmt.ns(r["total_ns"]),
             fmt.ns(r["mean_ns"]), fmt.pct(r["share"])] for r in rows.iter_rows(named=True)]
    click.echo(table(["kernel", "class", "count", "total", "mean", "share"], body, right=range(2, 6)))
