"""The headline's sentences, shared by the report's first screen and `tracekit summary`, so
that both say the same thing in the same words."""

from __future__ import annotations

from typing import Any

from tracekit import format as fmt


def attention_facts(result: Any) -> dict[str, Any] | None:
    """The attention backend of most calls, the calls per backend and their GPU time (None
    when the attention analysis did not run)."""
    if result is None:
        return None
    return {"backend": result.backend, "backends": result.backends, "calls": result.call_count,
            "gpu_ns": result.attention_gpu_ns, "gpu_share": result.gpu_share, "cpu_ns_median": result.median("cpu_ns")}


def attention_line(att: dict[str, Any] | None) -> str:
    """`attention_facts` in one line: backend, calls (other backends), GPU time and share, or
    the median CPU time per call when no GPU time was measured."""
    if att is None:
        return "– (the attention analysis did not run)"
    if not att["calls"]:
        return "no attention calls found"
    others = [f"{b} {fmt.count(n)}" for b, n in att["backends"].items() if b != att["backend"]]
    text = f"{att['backend']}, {fmt.counted(att['calls'], 'call')}" + (f" (also {', '.join(others)})" if others else "")
    if att["gpu_share"] is not None:
        text += f", {fmt.ns(att['gpu_ns'])} of GPU time ({fmt.pct(att['gpu_share'])})"
    elif att["cpu_ns_median"] is not None:
        text += f", {fmt.ns(att['cpu_ns_median'])} CPU per call (median)"
    return text
