"""The report model: ready-to-print values that every renderer reads and none computes.

Everything a page shows is here already formatted (`text`) beside the raw value
(`value`, used for sorting and by scripts reading the JSON form). Renderers (HTML,
Markdown, JSON) only lay these values out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

from tracekit import format as fmt

REPORT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Cell:
    text: str
    value: float | int | str | None = None  # sort key / machine value
    title: str | None = None  # hover text (full name when `text` is clipped)


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    numeric: bool = False
    help: str | None = None
    nowrap: bool = False  # a short label (a cause, a class) kept on one line


@dataclass(frozen=True)
class Table:
    id: str
    title: str
    columns: list[Column]
    rows: list[list[Cell]]
    note: str | None = None
    total_rows: int | None = None  # rows before truncation, when truncated


@dataclass(frozen=True)
class Card:
    label: str
    value: str
    detail: str = ""
    tone: str = "neutral"  # good | warn | bad | neutral


@dataclass(frozen=True)
class Evidence:
    text: str  # e.g. "kernel sm90_xmma… on stream 7 at 12.301 ms (ts 1428625746378.566 µs)"


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str  # high | medium | low | info
    title: str
    time_lost: str
    time_lost_ns: int
    share: str
    evidence: list[str]
    advice: str


@dataclass(frozen=True)
class Bar:
    label: str
    value_text: str
    fraction: float  # 0..1 of the chart's full width
    css_class: str
    x: float = 0.0  # for stacked bars: start fraction


@dataclass(frozen=True)
class BarChart:
    id: str
    title: str
    bars: list[Bar]
    stacked: bool = False
    note: str | None = None


@dataclass(frozen=True)
class Rect:
    x: float
    width: float
    css_class: str
    title: str


@dataclass(frozen=True)
class Lane:
    label: str
    title: str
    y: float
    height: float
    rects: list[Rect]


@dataclass(frozen=True)
class Band:
    x: float
    width: float
    label: str


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Timeline:
    id: str
    title: str
    width: float
    height: float
    label_width: float
    lanes: list[Lane]
    bands: list[Band]
    ticks: list[Tick]
    legend: list[tuple[str, str]]  # (css class, label)
    window: str  # which window is drawn, in words
    note: str = ""


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    intro: str = ""  # how to read this section
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    charts: list[BarChart] = field(default_factory=list)
    timelines: list[Timeline] = field(default_factory=list)
    svgs: list[str] = field(default_factory=list)  # pre-escaped SVG documents (e.g. roofline)


@dataclass(frozen=True)
class Report:
    title: str
    subtitle: str
    verdict: str
    facts: list[tuple[str, str]]  # header key/value lines: trace, workload, devices, span...
    cards: list[Card]
    findings: list[Finding]
    sections: list[Section]
    metadata: list[tuple[str, str]]  # redacted
    warnings: list[str]
    perfetto: list[str]  # how to open the trace in Perfetto, step by step
    generator: str
    schema_version: int = REPORT_SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)


PRE_ESCAPED = frozenset({"svgs"})  # markup built (and clipped) by its own code: not cut here


def for_display(value: Any) -> Any:
    """`value` (a `Report` or any part of one) with every string cut by `fmt.clip_name`, for
    the pages (HTML, Markdown); the JSON form is rendered from the model itself, names whole."""
    if isinstance(value, str):
        return fmt.clip_name(value)
    if is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: for_display(getattr(value, f.name)) for f in fields(value) if f.name not in PRE_ESCAPED}
        return replace(value, **changes)
    if isinstance(value, list):
        return [for_display(v) for v in value]
    if isinstance(value, tuple):
        return tuple(for_display(v) for v in value)
    if isinstance(value, dict):
        return {k: for_display(v) for k, v in value.items()}
    return value
