"""The verdict at the top of a diff, in short sentences built from its frames, in this order:

1. `Not comparable: …` when the workloads look unrelated (`similarity`);
2. the headline change and whether it is beyond the noise (unknown with one sample a side);
3. `Configuration changed: …`: hardware, job size, tensor-core share, compile, attention
   backend (`caveats`), named as such;
4. for CPU-only diffs, control-op drift (`host_drift`): a sign of capture noise;
5. `Looks like code: …`: changes of call counts (copies by kind, ops) and findings;
6. kernel-level changes (kernel class, kernels, idle cause), under `Follows the
   configuration change` when the configuration changed: a GEMM that got slower on other
   hardware is the hardware's doing, a 15× rise in device copies is the code's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.gaps import CAUSE_LABELS

NAME_WIDTH = 70


def short(name: str | None, width: int = NAME_WIDTH) -> str:
    text = " ".join(str(name or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def verdict(head: Any, *, scope: str, notes: list[str], similar: Any = None, changes: Sequence[Any] = (),
            **parts: pl.DataFrame) -> str:
    """The paragraph: `verdict_parts` joined."""
    return " ".join(verdict_parts(head, scope=scope, notes=notes, similar=similar, changes=changes, **parts))


def verdict_parts(head: Any, *, scope: str, notes: list[str], similar: Any = None, changes: Sequence[Any] = (),
                  **parts: pl.DataFrame) -> list[str]:
    """The sentences; `head` is the `Headline`, `parts` the diff's frames, `similar` the
    `Similarity`, `changes` the configuration changes (`caveats`)."""
    out = []
    if similar is not None and not similar.comparable:
        out.append(f"Not comparable: {similar.reason}.")
    out.append(_headline_sentence(head, scope) + ".")
    if changes:
        out.append("Configuration changed: " + "; ".join(c.text for c in changes) + ".")
    per = "per step" if scope == "steps" else "over the span"
    code = [c for c in (_copies(parts["copies"], per), _op_calls(parts["ops"], per), _findings(parts["findings"]))
            if c]
    kernel = [c for c in (_attention(parts["attention"]), _classes(parts["kernel_classes"], per),
                          *_kernels(parts["kernels"], per)[:2], _idle(parts["summary"], per)) if c]
    drift = host_drift(parts["ops"]) if parts["kernels"].is_empty() else None
    if drift:
        out.append(drift)
    if code:
        out.append("Looks like code: " + "; ".join(code) + ".")
    if kernel:
        lead = "Follows the configuration change" if changes else "Kernel-level changes"
        out.append(f"{lead}: " + "; ".join(kernel[:3]) + ".")
    out += [n for n in notes if not n.startswith(("Different hardware", "Different job sizes"))][:1]
    return out


DRIFT_RATIO = 2.0  # unchanged ops whose CPU time moved this many times point at capture noise


def host_drift(ops: pl.DataFrame) -> str | None:
    """Control-op drift on the host: ops called as often on both sides (same calls per step)
    whose CPU time per step still moved `DRIFT_RATIO` times or more, time-weighted over them.
    Same code, different speed: the capture (CPU frequency, contention, profiler overhead)
    moved, and any speed-up of the headline is suspect."""
    same = ops.filter((pl.col("calls_before") == pl.col("calls_after")) & (pl.col("calls_before") > 0)
                      & (pl.col("cpu_ns_before") > 0) & (pl.col("cpu_ns_after") > 0))
    if same.is_empty():
        return None
    ratio = float(same["cpu_ns_after"].sum() / same["cpu_ns_before"].sum())
    if 1 / DRIFT_RATIO < ratio < DRIFT_RATIO:
        return None
    top = same.sort("cpu_ns_before", descending=True).row(0, named=True)
    word = "slower" if ratio > 1 else "faster"
    times = ratio if ratio > 1 else 1 / ratio
    return (f"Capture noise likely: ops called as often on both sides ran {times:.1f}× {word} "
            f"(e.g. {short(top['name'], 40)}, {fmt.count(float(top['calls_before']))} calls per step both sides), "
            "so the host-side change is not all the code's.")


def _copies(copies: pl.DataFrame, per: str) -> str | None:
    """The copy kind whose count per step moved most (2× or more), or its time beyond the noise."""
    if copies.is_empty():
        return None
    c = copies.with_columns(_r=(pl.max_horizontal("count_before", "count_after") + 1)
                            / (pl.min_horizontal("count_before", "count_after") + 1))
    c = c.filter((pl.col("_r") >= 2) & (pl.col("count_before") != pl.col("count_after")))
    if c.is_empty():
        return None
    r = c.sort("_r", descending=True).row(0, named=True)
    b, a = float(r["count_before"]), float(r["count_after"])
    times = f" ({a / b:.0f}×)" if b and a > b else ""
    return f"{short(r['activity'], 40)} copies {per} {fmt.count(b)} → {fmt.count(a)}{times}"


def _op_calls(ops: pl.DataFrame, per: str) -> str | None:
    """The op whose call count changed with the largest time change (new ops included)."""
    if ops.is_empty():
        return None
    moved = ops.filter(pl.col("calls_before") != pl.col("calls_after"))
    if moved.is_empty():
        return None
    r = moved.sort(pl.col("change_ns").abs(), descending=True).row(0, named=True)
    b, a = float(r["calls_before"]), float(r["calls_after"])
    if not b:
        return f"new op {short(r['name'], 50)} ({fmt.counted(round(a), 'call')} {per})"
    if not a:
        return f"op {short(r['name'], 50)} is gone ({fmt.count(b)} calls {per} before)"
    return f"{short(r['name'], 50)} calls {per} {fmt.count(b)} → {fmt.count(a)}"


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
