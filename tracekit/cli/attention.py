"""`tracekit attention TRACE...|index.json`: attention calls, backends, and variants compared."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import click

from tracekit.cli.common import Loading, cache_opt, emit_json, json_opt, load_trace, table
from tracekit.cli.options import max_bytes_opt
from tracekit.errors import UsageError


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@json_opt
@cache_opt
@max_bytes_opt
def attention(paths: tuple[str, ...], as_json: bool) -> None:
    """Attention per call: backend, kernels, GPU/CPU time, findings.

    One trace: the attention summary and its findings. Several traces, or a capture
    sweep's index.json (paths in it are relative to the index), the article's comparison
    table: per variant the backend, median kernels, GPU and CPU time per forward, the
    speed-up against the first, and notes.
    """
    entries = _entries(paths)
    if _single(paths, entries):
        _one(entries[0]["path"], as_json)
        return
    from tracekit.analysis.attention import analyze_attention
    from tracekit.analysis.attention.compare import (
        HEADERS,
        SCOPES,
        compare_attention,
        skipped_row,
        variant_label,
        with_skipped,
    )

    loaded, skipped = [], []
    for entry in entries:
        if not entry["path"]:
            skipped.append(skipped_row(entry.get("variant") or "?", entry.get("note")))
            continue
        trace = load_trace(entry["path"])
        result = analyze_attention(trace)
        found = [f.to_dict() for f in _findings(trace, result)] if as_json else []
        loaded.append((variant_label(trace, entry["path"], entry), result, entry["path"], found))
    comparison = with_skipped(
        compare_attention([(lbl, r) for lbl, r, *_ in loaded], paths=[p for _, _, p, _ in loaded]), skipped
    )
    if as_json:
        emit_json({**comparison.to_dict(), "findings": {lbl: found for lbl, _, _, found in loaded}})
        return
    click.echo(table(HEADERS, comparison.table_rows(), right=(2, 3, 4, 5, 6, 7)))
    click.echo(
        f"\nmedians per attention call, timed on {SCOPES[comparison.scope]} for every variant; "
        f"min–max (n): per-repeat medians over n repeats; speed-up on {comparison.basis.upper()} time "
        f"against {comparison.baseline}; kernels count memcpys and memsets as the article does"
    )


def _single(paths: tuple[str, ...], entries: list[dict[str, Any]]) -> bool:
    return (
        len(paths) == 1 and len(entries) == 1 and entries[0]["path"] is not None and not _is_index(paths[0])
    )


def _one(path: str, as_json: bool) -> None:
    loading = Loading(path)  # read while the analysis (and Polars) is imported
    from tracekit.analysis.attention import analyze_attention
    from tracekit.report.attention import attention_section

    trace = loading.result()
    result = analyze_attention(trace)
    findings = _findings(trace, result)
    if as_json:
        emit_json({"file": path, **result.to_dict(), "findings": [f.to_dict() for f in findings]})
        return
    section = attention_section(result, findings)
    lines = [section["title"], "", *section["paragraphs"]]
    for t in section["tables"]:
        lines += ["", t["title"], table(t["headers"], t["rows"], right=range(1, len(t["headers"])))]
    if findings:
        lines += ["", "Findings"]
        lines += [
            f"  [{f['severity']}] {f['title']} (time lost {f['time_lost']})\n      {f['advice']}"
            for f in section["findings"]
        ]
    click.echo("\n".join(lines))


def _findings(trace: Any, result: Any) -> tuple[Any, ...]:
    """The registered `attention_*` rules alone, on the analysis already made."""
    from tracekit.findings import run_findings
    from tracekit.findings.rules.attention import RULE_IDS

    return run_findings(trace, rules=list(RULE_IDS), seed={"attention": result}).findings


def _is_index(path: str) -> bool:
    """A capture sweep index: a `.json` file holding a list of {variant, path, ...} entries."""
    if not path.endswith(".json"):
        return False
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the open: the loader refuses it
            return False
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"[") and b'"variant"' in head and b'"ph"' not in head


def _entries(paths: tuple[str, ...]) -> list[dict[str, Any]]:
    """Trace entries: each path, or the entries of a sweep index (paths made absolute)."""
    out: list[dict[str, Any]] = []
    for path in paths:
        if not _is_index(path):
            out.append({"path": path, "variant": None})
            continue
        try:
            items = json.loads(Path(path).read_text())
        except (OSError, ValueError, RecursionError) as exc:
            raise UsageError(f"cannot read the index {path}: {type(exc).__name__}: {exc}") from None
        if not isinstance(items, list):
            raise UsageError(f"{path} is not a capture index (a list of {{variant, path}})")
        base = Path(path).parent
        for item in items:
            item = item if isinstance(item, dict) else {}
            # an entry's fields as text (a number or list where text belongs is shown, not used as a path)
            entry = {k: v if v is None or isinstance(v, str) else json.dumps(v) for k, v in item.items()
                     if k in ("variant", "note")}
            rel = item.get("path")
            out.append({**entry, "path": str(base / rel) if isinstance(rel, str) and rel else None})
    return out
