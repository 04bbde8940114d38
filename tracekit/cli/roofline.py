"""`tracekit roofline TRACE`: how far each op is from what the GPU can do (docs/roofline.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit import format as fmt
from tracekit.atomic import write_output
from tracekit.cli.common import Loading, clip, emit_json, json_opt, table, trace_arg
from tracekit.cli.options import Finite

if TYPE_CHECKING:
    from tracekit.analysis.roofline import RooflineResult

ROW_COLUMNS = ["name", "input_dims", "compute_dtype", "causal", "calls", "gpu_ns", "flops", "bytes",
               "achieved_tflops", "achieved_gbps", "intensity", "bound", "peak_tflops", "peak_gbps",
               "efficiency", "time_lost_ns", "top_kernel", "first_ts_ns", "example_eids"]
EXCLUDED_COLUMNS = ["name", "input_dims", "calls", "gpu_ns", "excluded", "reason"]


@click.command()
@trace_arg
@click.option("--peak-tflops", type=Finite(min=0, min_open=True),
              help="Compute ceiling in TFLOP/s for every dtype (overrides the device table).")
@click.option("--peak-gbps", type=Finite(min=0, min_open=True),
              help="Memory bandwidth ceiling in GB/s (overrides the device table).")
@click.option("--ceilings", "ceilings_file", type=click.Path(dir_okay=False, exists=True),
              help="TOML/JSON file with peak_tflops (number or dtype table) and peak_gbps.")
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True, help="Rows to show.")
@click.option("--svg", "svg_file", type=click.Path(dir_okay=False), help="Also write the chart as SVG here.")
@json_opt
def roofline(trace: str, peak_tflops: float | None, peak_gbps: float | None, ceilings_file: str | None,
             top: int, svg_file: str | None, as_json: bool) -> None:
    """Achieved TFLOP/s and GB/s per op against the device's ceilings, and the time left on the table.

    Needs a trace recorded with record_shapes=True. Ops with known work (GEMMs, attention,
    convolutions, elementwise, norms, softmax, reductions, copies) are placed on the
    roofline; the rest of the GPU time is reported as not covered.
    """
    options: dict[str, Any] = {}
    if ceilings_file:  # (a bad file is refused before the trace is read)
        from tracekit.analysis.ceilings import load_ceilings_file

        options = load_ceilings_file(ceilings_file)
    loading = Loading(trace)  # read while the analysis (and Polars) is imported
    from tracekit.analysis.roofline import roofline as analyse
    from tracekit.analysis.roofline_findings import roofline_findings
    from tracekit.report.roofline_chart import roofline_svg

    given = {"peak_tflops": peak_tflops, "peak_gbps": peak_gbps}
    options.update({k: v for k, v in given.items() if v is not None})
    loaded = loading.result()
    result = analyse(loaded, **options)
    findings = roofline_findings(result)
    if svg_file:
        svg = roofline_svg(result, title=f"Roofline: {Path(trace).name}")
        write_output(svg_file, svg, inputs=[trace])
    if as_json:
        emit_json(_json(trace, result, findings, top))
        return
    active = set(loaded.gpu_work["device"].drop_nulls().unique().to_list())
    click.echo(_text(result, findings, top, active))


def _json(trace: str, r: RooflineResult, findings: list[dict], top: int) -> dict[str, Any]:
    return {"file": trace, "devices": r.devices.to_dicts(), "gpu_ns": r.gpu_ns, "covered_ns": r.covered_ns,
            "unlinked_ns": r.unlinked_ns,
            "rated_ns": r.rated_ns, "min_ns": r.min_ns, "time_lost_ns": r.time_lost_ns,
            "excluded_ns": r.excluded_ns,
            "excluded": r.excluded.select(*EXCLUDED_COLUMNS).head(top).to_dicts(),
            "coverage": r.coverage, "efficiency": r.efficiency, "flops": r.flops, "bytes": r.bytes,
            "top_lost": r.top_lost(top).select(ROW_COLUMNS).to_dicts(),
            "ops": r.ops.head(top).select(ROW_COLUMNS).to_dicts(),
            "op_types": r.op_types.drop("example_eids").head(top).to_dicts(),
            "kernel_classes": r.classes.to_dicts(), "findings": findings, "notes": list(r.notes)}


def _rate(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}g}"


def _text(r: RooflineResult, findings: list[dict], top: int, active: set[int] | None = None) -> str:
    """`active`: the devices with GPU work; only those are listed when there are any (the
    device properties name every GPU of the machine, not only the ones the trace used)."""
    import polars as pl
    known = r.devices.to_dicts()
    used = [d for d in known if active and d["device"] in active] or known
    devices = [f"{d['device']}: {d['product'] or 'unknown'} ({d['device_name'] or 'unnamed'}), bf16 "
               f"{_rate(d['bf16'], 4)} / fp32 {_rate(d['fp32'], 4)} TFLOP/s, "
               f"HBM {_rate(d['hbm_gbps'], 4)} GB/s"
               for d in used]
    if len(used) < len(known):
        devices.append(f"({fmt.counted(len(known) - len(used), 'other device')} in the trace, with no GPU work)")
    lines = ["devices     " + ("\n            ".join(devices) or "none"),
             f"GPU time    {fmt.ns(r.gpu_ns)}; under ops with known work {fmt.ns(r.covered_ns)} "
             f"({fmt.pct(r.coverage)}); tied to no op {fmt.ns(r.unlinked_ns)}",
             f"roofline    {fmt.ns(r.min_ns)} at the ceilings for {fmt.ns(r.rated_ns)} of rated work: "
             f"{fmt.pct(r.efficiency)} efficiency, {fmt.ns(r.time_lost_ns)} left on the table "
             "(the sum of the shapes' losses)"]
    out = r.excluded
    if out.height:
        kinds = [f"{fmt.counted(int(g.height), 'shape')} {kind} ({fmt.ns(int(g['gpu_ns'].sum()))})"
                 for kind, g in ((k, out.filter(pl.col("excluded") == k)) for k in ("unknown", "model mismatch"))
                 if g.height]
        lines.append(f"left out    {'; '.join(kinds)}: in no total")
    lines.append("")
    heads = ["op", "shapes", "dtype", "calls", "GPU time", "TFLOP/s", "GB/s", "FLOP/B", "bound", "% ceiling",
             "lost"]
    rows = [[clip(x["name"], 34), clip(x["input_dims"], 34), x["compute_dtype"] or "?", fmt.count(x["calls"]),
             fmt.ns(x["gpu_ns"]), _rate(x["achieved_tflops"]), _rate(x["achieved_gbps"], 4),
             _rate(x["intensity"]), x["bound"] or "–", fmt.pct(x["efficiency"]), fmt.ns(x["time_lost_ns"])]
            for x in r.top_lost(top).to_dicts()]
    lines += ["ops with the most time left on the table", table(heads, rows, right=range(3, 11)), ""]
    if out.height:
        rows = [[clip(x["name"], 34), clip(x["input_dims"], 34), fmt.count(x["calls"]), fmt.ns(x["gpu_ns"]),
                 x["reason"]] for x in out.sort(["gpu_ns", "name"], descending=[True, False]).head(top).to_dicts()]
        lines += ["op shapes left out (work unknown, or a model above the ceiling)",
                  table(["op", "shapes", "calls", "GPU time", "why"], rows, right=range(2, 4)), ""]
    rows = [[x["kernel_class"], fmt.count(x["count"]), fmt.ns(x["gpu_ns"]), fmt.ns(x["covered_ns"]),
             _rate(x["achieved_tflops"]), _rate(x["achieved_gbps"], 4), fmt.pct(x["efficiency"]),
             fmt.ns(x["time_lost_ns"])] for x in r.classes.to_dicts()]
    lines += ["per kernel class (work split over kernels by time share)",
              table(["class", "kernels", "GPU time", "covered", "TFLOP/s", "GB/s", "% ceiling", "lost"], rows,
                    right=range(1, 8))]
    for f in findings:
        lost = f"{fmt.ns(f['time_lost_ns'])}, {fmt.pct(f['share'])} of GPU time"
        lines += ["", f"[{f['severity']}] {f['title']} ({lost})", f"  {f['advice']}"]
    lines += ["", *(f"note: {n}" for n in r.notes)] if r.notes else []
    return "\n".join(lines)
