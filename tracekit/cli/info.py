"""`tracekit info TRACE...`: what is in a trace file."""

from __future__ import annotations

import click

from tracekit import format as fmt
from tracekit.cli.common import Loading, clip, emit_json, load_trace, table, traces_arg


@click.command()
@traces_arg
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON instead of text: a list of one object per trace, in the order given (a list for one trace too).")
def info(traces: tuple[str, ...], as_json: bool) -> None:
    """Describe trace files: format, devices, span, events per category, streams, steps, warnings.

    Exit code 0 on success; 2 with a one-line error when a file cannot be read.
    """
    first = Loading(traces[0], warn=False, lean=False)  # read while the summary's code (and Polars) is imported
    from tracekit.info import trace_info

    infos = [trace_info(first.result() if i == 0 else load_trace(path, warn=False, lean=False))
             for i, path in enumerate(traces)]
    if as_json:
        emit_json(infos)  # the same shape however many traces a glob matched
        return
    click.echo("\n\n".join(render_info(i) for i in infos))


def render_info(i: dict) -> str:
    span = i["span"]
    lines = [
        f"file        {i['file']}  ({fmt.size(i['size_bytes'])})",
        f"format      {i['format']}" + (f", schema {i['schema_version']}" if i["schema_version"] is not None else "")
        + (" (recovered from a broken file)" if i["recovered"] else ""),
        f"events      {fmt.count(i['events'])}",
        f"span        {fmt.ns(span['duration_ns'])}",
    ]
    if i["rank"] is not None:
        lines.append(f"rank        {i['rank']}" + (f" of {i['world_size']}" if i["world_size"] else ""))
    if i["vendor"]:
        lines.append(f"vendor      {i['vendor']}")
    lines.append(f"cpu threads {i['threads']}")
    steps = i["steps"]
    lines.append(f"steps       {steps['count']}" + (f"  ({', '.join(steps['names'][:6])}{' …' if steps['count'] > 6 else ''})" if steps["count"] else ""))
    if i["devices"]:
        lines += ["", "devices"]
        rows = [[d["device"], clip(d.get("name") or "(unnamed)", 40), d.get("num_sms"), d["streams"], fmt.count(d["activities"])] for d in i["devices"]]
        lines.append(_indent(table(["id", "name", "SMs", "streams", "activities"], rows, right=(0, 2, 3, 4))))
    if i["streams"]:
        lines += ["", "streams"]
        rows = [[s["device"], s["stream"], fmt.count(s["kernels"]), fmt.count(s["activities"])] for s in i["streams"]]
        lines.append(_indent(table(["device", "stream", "kernels", "activities"], rows, right=(0, 1, 2, 3))))
    lines += ["", "events per category"]
    rows = [[cat, fmt.count(n)] for cat, n in i["categories"].items()]
    lines.append(_indent(table(["category", "events"], rows, right=(1,))))
    if i["warnings"]:
        lines += ["", "warnings"]
        lines += [f"  [{w['level']}] {w['code']}: {w['message']}" + _first(w) for w in i["warnings"]]
    return "\n".join(lines)


def _first(warning: dict) -> str:
    eid = warning.get("first_eid")
    return "" if eid is None else f" (first at event #{eid:,})"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
