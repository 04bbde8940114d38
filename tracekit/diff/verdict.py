"""The one-paragraph verdict at the top of a diff, built from its frames.

Shape: the headline change and whether it is beyond the noise; then its biggest causes
among the significant changes, or "Largest changes" when the noise is unknown (one sample
on a side) (an attention backend switch; the kernel with the largest change in time per
step; kernels that appeared or disappeared; the idle cause that moved most); then the
comparability notes (different hardware first).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.gaps import CAUSE_LABELS

NAME_WIDTH = 70


def short(name: str | None, width: int = NAME_WIDTH) -> str:
    text = " ".join(str(name or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def verdict(head: Any, *, scope: str, notes: list[str], **parts: pl.DataFrame) -> str:
    """The paragraph; `head` is the `Headline`, `parts` the diff's frames."""
    first = _headline_sentence(head, scope)
    per = "per step" if scope == "steps" else "over the span"
    causes = [c for c in (_attention(parts["attention"]), _classes(parts["kernel_classes"], per),
                          *_kernels(parts["kernels"], per), _idle(parts["summary"], per),
                          _findings(parts["findings"])) if c]
    if not causes:
        text = first + "."
    elif head.significant and head.delta_ns:
        text = f"{first}: {'; '.join(causes)}."
    elif head.significant is None or min(head.n_before, head.n_after) < 2:
        # one sample on a side: no change can be told from the noise, the headline's either
        text = f"{first}. Largest changes: {'; '.join(causes)}."
    else:
        text = f"{first}. Changes beyond the noise: {'; '.join(causes)}."
    return " ".join([text, *notes[:1]])


def _headline_sentence(h: Any, scope: str) -> str:
    window = h.metric.startswith("window:")
    unit = "instances" if window else "steps"
    per = "per instance" if window else "per step" if scope == "steps" else "over the whole GPU span"
    what = "" if h.metric == "step" else f" in {h.label}"
    per = "" if h.label.endswith(f" {per}") else f" {per}"  # "GPU busy time per step" says it already
    samples = f"median of {h.n_before} vs {h.n_after} {unit}" if window or scope == "steps" else "one sample per side"
    values = f"{fmt.ns(h.before_ns)} → {fmt.ns(h.after_ns)}, {samples}"
    if h.delta_ns == 0:
        return f"{h.label[:1].upper()}{h.label[1:]} is unchanged ({fmt.ns(h.before_ns)}, {samples})"
    if h.delta_pct is None:
        return f"After takes {fmt.ns(h.after_ns)}{what}{per} where before took none"
    word = "slower" if h.delta_ns > 0 else "faster"
    lead = f"After is {fmt.pct(abs(h.delta_pct))} {word}{what}{per} ({values})"
    if h.significant is False:
        return f"{lead}, within the spread of the {unit} (noise {fmt.ns(h.noise_ns)}), so not a significant change"
    if h.significant is None:
        return f"{lead}; with a single sample on a side the noise is unknown"
    return lead


def _attention(att: pl.DataFrame) -> str | None:
    rows = {r["side"]: r for r in att.iter_rows(named=True)}
    b, a = rows.get("before"), rows.get("after")
    if not b or not a:
        return None
    kb, ka = _calls(b["kernels_per_call"]), _calls(a["kernels_per_call"])
    if b["backend"] != a["backend"]:
        return f"attention moved from {b['backend']} ({kb} per call) to {a['backend']} ({ka} per call)"
    if kb != ka:
        return f"attention ({a['backend']}) went from {kb} to {ka} per call"
    return None


def _calls(v: float | None) -> str:
    if v is None:
        return "? kernels"
    n = fmt.count(float(v))
    return f"{n} kernel" if v == 1 else f"{n} kernels"


def _moved(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows whose time per step changed beyond the noise (or where the noise is unknown)."""
    return frame.filter(pl.col("total_ns_significant").fill_null(True) & (pl.col("total_ns_delta") != 0))


def _classes(classes: pl.DataFrame, per: str) -> str | None:
    moved = _moved(classes)
    if moved.is_empty():
        return None
    r = moved.row(0, named=True)
    word = "more" if r["total_ns_delta"] > 0 else "less"
    return f"{r['kernel_class']} kernels take {fmt.ns(abs(r['total_ns_delta']))} {word} {per}"


def _kernels(k: pl.DataFrame, per: str) -> list[str]:
    out = []
    for r in _moved(k).head(2).iter_rows(named=True):
        d = r["total_ns_delta"]
        name = short(r["name_before"] or r["name_after"])
        if r["status"] == "appeared":
            out.append(f"new kernel {name} (+{fmt.ns(d)} {per})")
        elif r["status"] == "disappeared":
            out.append(f"kernel {name} is gone (−{fmt.ns(-d)} {per})")
        else:
            word = "more" if d > 0 else "less"
            out.append(f"{name} takes {fmt.ns(abs(d))} {word} {per}")
    appeared = int((k["status"] == "appeared").sum())
    gone = int((k["status"] == "disappeared").sum())
    if appeared or gone:
        out.append(f"{fmt.counted(appeared, 'kernel name')} appeared and {gone} disappeared")
    return out


def _idle(summary: pl.DataFrame, per: str) -> str | None:
    idle = summary.filter(pl.col("figure").str.starts_with("idle_") & pl.col("significant").fill_null(True)
                          & (pl.col("delta") != 0))
    if idle.is_empty():
        return None
    r = idle.sort(pl.col("delta").abs(), descending=True).row(0, named=True)
    cause = r["figure"].removeprefix("idle_").removesuffix("_ns")
    word = "rose" if r["delta"] > 0 else "fell"
    return f"idle from {CAUSE_LABELS.get(cause, cause)} gaps {word} {fmt.ns(abs(r['delta']))} {per}"


def _findings(f: pl.DataFrame) -> str | None:
    parts = []
    for status in ("resolved", "introduced", "worse"):
        rules = f.filter(pl.col("status") == status)["rule"].to_list()
        if rules:
            more = f", +{len(rules) - 3} more" if len(rules) > 3 else ""
            parts.append(f"{len(rules)} {status} ({', '.join(rules[:3])}{more})")
    if not parts:
        return None
    return "findings: " + (parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1])
