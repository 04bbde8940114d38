"""Report pieces for the analyses that build on the core ones: critical path, attention,
roofline, what-if estimates. Each returns nothing when its analysis did not run."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.analyse import Analysis
from tracekit.report.model import Section


def evidence_text(e: Any) -> str:
    """One evidence item as a line of text (dicts as `key=value` pairs)."""
    if isinstance(e, str):
        return e
    if isinstance(e, dict):
        return ", ".join(f"{k}={v}" for k, v in e.items() if v is not None)
    return str(e)


def recoverable_ns(a: Analysis) -> int | None:
    return None


def critical_path_lanes(a: Analysis) -> list[tuple[str, str, pl.DataFrame]]:
    return []


def critical_path_section(a: Analysis) -> Section | None:
    return None


def attention_section(a: Analysis, *, top: int) -> Section | None:
    return None


def roofline_section(a: Analysis, *, top: int) -> Section | None:
    return None
