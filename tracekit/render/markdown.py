"""Report model -> GitHub-flavoured Markdown for a pull-request comment (under 60,000 characters).

Trace-derived text is escaped so it cannot open HTML, links, images or tables of its own.
"""

from __future__ import annotations

import re

from tracekit.report.model import Report, Table, for_display

MAX_CHARS = 60_000
_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~])")


def md(text: object) -> str:
    """Plain text safe inside Markdown prose and table cells."""
    s = " ".join(str(text).split())
    s = _SPECIAL.sub(r"\\\1", s)
    s = s.replace("&", "&amp;").replace("://", "\\:\\/\\/")  # no autolinks from trace text
    return re.sub(r"(?i)\bwww\.", lambda m: m.group(0)[:-1] + "\\.", s)


def code(text: object, limit: int = 120) -> str:
    """Text inside an inline code span (backticks and pipes cannot break out)."""
    s = " ".join(str(text).split()).replace("`", "'").replace("|", "¦")
    return s if len(s) <= limit else s[: limit - 1] + "…"


WARNINGS = 5  # loader warnings listed in a comment


def table(t: Table, rows: int) -> list[str]:
    head = "| " + " | ".join(md(c.label) for c in t.columns) + " |"
    rule = "|" + "|".join("---:" if c.numeric else "---" for c in t.columns) + "|"
    body = []
    for row in t.rows[:rows]:
        cells = [f"`{code(cell.text, 70)}`" if i == 0 else md(cell.text) for i, cell in enumerate(row)]
        body.append("| " + " | ".join(cells) + " |")
    out = [f"#### {md(t.title)}", "", head, rule, *body]
    shown = min(rows, len(t.rows))
    total = t.total_rows or len(t.rows)
    if total > shown:
        out.append(f"\n_{shown} of {total} rows; the HTML report has them all._")
    return out + [""]


def render_markdown(report: Report, *, tables: tuple[str, ...] = (), rows: int = 10, findings: int = 10) -> str:
    return _render(for_display(report), tables=tables, rows=rows, findings=findings)


def _render(report: Report, *, tables: tuple[str, ...], rows: int, findings: int) -> str:
    lines = [f"### {md(report.title)}", "", md(report.subtitle), "", f"**{md(report.verdict)}**", ""]
    lines += ["| | |", "|---|---|"] + [f"| {md(k)} | {md(v)} |" for k, v in report.facts] + [""]
    if report.warnings:  # a partial or repaired trace says so here too, not only in the HTML
        lines += ["**What the loader noticed**", ""] + [f"- {md(w)}" for w in report.warnings[:WARNINGS]]
        more = len(report.warnings) - WARNINGS
        lines += [f"- _and {more} more (the HTML report lists them all)_"] * (more > 0) + [""]
    if report.cards:
        lines.append("| " + " | ".join(md(c.label) for c in report.cards) + " |")
        lines.append("|" + "|".join("---" for _ in report.cards) + "|")
        lines.append("| " + " | ".join(md(c.value) + (f" ({md(c.detail)})" if c.detail else "") for c in report.cards) + " |")
        lines.append("")
    lines += [f"#### {md(report.extra.get('findings_title', 'Findings'))}", ""]
    for i, f in enumerate(report.findings[:findings], 1):
        lines.append(f"{i}. **{md(f.title)}** ({f.severity}, {md(f.time_lost)}, {md(f.share)})")
        lines += [f"   - `{code(e)}`" for e in f.evidence[:3]]
        lines.append(f"   - {md(f.advice)}")
    if not report.findings:
        lines.append(md(report.extra.get("findings_empty", "No findings above their thresholds.")))
    lines.append("")
    wanted = [t for s in report.sections for t in s.tables if t.rows and (not tables or t.id in tables)]
    for t in wanted:
        lines += table(t, rows)
    lines.append(f"_{md(report.generator)}_")
    text = "\n".join(lines) + "\n"
    if len(text) > MAX_CHARS:
        return _render(report, tables=tables, rows=max(3, rows // 2), findings=max(3, findings // 2)) \
            if rows > 3 else text[: MAX_CHARS - 40] + "\n\n_(truncated to fit a comment)_\n"
    return text
