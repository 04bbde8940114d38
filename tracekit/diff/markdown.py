"""A diff as a pull-request comment a reviewer reads in 20 seconds.

Outside `<details>`: the verdict (its first sentence in bold, the caveats and the ranked
changes as bullets), at most `KEY_ROWS` key figures, and the new or worse findings with
their advice and evidence. Everything else (facts, the delta tables with only the rows that
changed, warnings) is folded inside `<details>`. Trace-derived text is escaped as in
`tracekit.render.markdown`.
"""

from __future__ import annotations

from tracekit.render.markdown import MAX_CHARS, WARNINGS, code, md
from tracekit.report.model import Report, Table

KEY_ROWS = 5
FINDINGS = 5
EVIDENCE = 2
ROWS = 8
TABLES = ("diff-summary", "kernel-deltas", "kernels-appeared", "kernels-disappeared", "op-deltas", "copy-deltas",
          "findings-diff")
UNCHANGED = ("no change",)


def render(report: Report, *, rows: int = ROWS) -> str:
    parts = list(report.extra.get("verdict_parts") or [report.verdict])
    lines = [f"### {md(report.title)}", "", f"**{md(parts[0])}**"]
    lines += [f"- {md(p)}" for p in parts[1:]]
    lines.append("")
    cards = [c for c in report.cards if "no change" not in (c.detail or "")][:KEY_ROWS]
    if not cards and report.cards:
        lines += ["Every key figure (" + ", ".join(md(c.label) for c in report.cards) + ") is unchanged.", ""]
    if cards:
        lines += ["| figure | before → after | Δ |", "|---|---:|---:|"]
        lines += [f"| {md(c.label)} | {md(c.value)} | {md(c.detail or '')} |" for c in cards]
        lines.append("")
    lines += _findings(report)
    lines += ["<details><summary>Details: facts and the tables of what changed</summary>", ""]
    lines += ["| | |", "|---|---|"] + [f"| {md(k)} | {md(v)} |" for k, v in report.facts] + [""]
    if report.warnings:
        lines += ["**What the loader noticed**", ""] + [f"- {md(w)}" for w in report.warnings[:WARNINGS]] + [""]
    for t in (t for s in report.sections for t in s.tables if t.id in TABLES):
        lines += _table(t, rows)
    lines += ["</details>", "", f"_{md(report.generator)}_"]
    text = "\n".join(lines) + "\n"
    if len(text) > MAX_CHARS and rows > 2:
        return render(report, rows=rows // 2)
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 40] + "\n\n_(truncated to fit a comment)_\n"


def _findings(report: Report) -> list[str]:
    if not report.findings:
        return [md(report.extra.get("findings_empty", "No new or worse findings.")), ""]
    out = [f"**{md(report.extra.get('findings_title', 'New and worse findings'))}**", ""]
    for i, f in enumerate(report.findings[:FINDINGS], 1):
        out.append(f"{i}. **{md(f.title)}** ({f.severity}, {md(f.time_lost)}, {md(f.share)}): {md(f.advice)}")
        out += [f"   - `{code(e)}`" for e in f.evidence[:EVIDENCE]]
    more = len(report.findings) - FINDINGS
    if more > 0:
        out.append(f"_and {more} more in the findings table below_")
    return out + [""]


def _changed(t: Table) -> list:
    """Rows whose significance cell says something changed (all rows of tables without one)."""
    if not t.columns or t.columns[-1].key != "significance":
        return list(t.rows)
    return [r for r in t.rows if r[-1].text not in UNCHANGED]


def _table(t: Table, rows: int) -> list[str]:
    body = _changed(t)
    if not body:
        return []
    head = "| " + " | ".join(md(c.label) for c in t.columns) + " |"
    rule = "|" + "|".join("---:" if c.numeric else "---" for c in t.columns) + "|"
    cells = ["| " + " | ".join(f"`{code(c.text, 70)}`" if i == 0 else md(c.text) for i, c in enumerate(r)) + " |"
             for r in body[:rows]]
    out = [f"**{md(t.title)}**", "", head, rule, *cells]
    total = len(body) if len(body) < len(t.rows) else (t.total_rows or len(t.rows))
    if total > min(rows, len(body)):
        out.append(f"\n_{min(rows, len(body))} of {total} rows_")
    return out + [""]
