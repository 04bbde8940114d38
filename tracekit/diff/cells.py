"""Delta values to report cells: signed durations, sizes, counts and percentages, and the
significance flag in words. The only place a diff's numbers become text (via `tracekit.format`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.diff.stats import IQR_MIN_SAMPLES
from tracekit.report.model import Cell, Column, Table

MINUS = "−"
CLIP = 110


def _signed(fn: Callable[[Any], str]) -> Callable[[Any], str]:
    def out(v: Any) -> str:
        if v is None:
            return "–"
        if v == 0:
            return fn(0)
        return ("+" if v > 0 else MINUS) + fn(abs(v))
    return out


def _count(v: Any) -> str:
    return fmt.count(float(v)) if isinstance(v, (int, float)) else fmt.count(v)


def sig_text(significant: bool | None, delta: float | None) -> str:
    """How a delta reads against the noise rule (`diff.stats`)."""
    if delta is None or delta == 0:
        return "no change"
    if significant is None:
        return "unknown"
    return "yes" if significant else "within noise"


FORMATS: dict[str, Callable[[Any], str]] = {
    "text": lambda v: "" if v is None else str(v),
    "ns": fmt.ns, "dns": _signed(fmt.ns),
    "bytes": fmt.size, "dbytes": _signed(fmt.size),
    "count": _count, "dcount": _signed(_count),
    "pct": fmt.pct, "dpct": _signed(fmt.pct),
}
NUMERIC = {"ns", "dns", "bytes", "dbytes", "count", "dcount", "pct", "dpct"}


def value(kind: str, v: Any) -> str:
    return FORMATS[kind](v)


def unit_kind(unit: str, *, delta: bool = False) -> str:
    """The cell kind for a summary unit (ns | bytes | count)."""
    base = {"ns": "ns", "bytes": "bytes"}.get(unit, "count")
    return ("d" + base) if delta else base


def delta_table(id: str, title: str, frame: pl.DataFrame, columns: Sequence[tuple[str, str, str]], *,
                limit: int | None = 30, note: str | None = None, sig: tuple[str, str] | None = None) -> Table:
    """A table of `frame`: `columns` are (frame column, label, kind); kind `pair:K` shows
    `{column}_before → {column}_after`, each formatted as K. With `sig` =
    (significant column, delta column) a last column says whether the delta is beyond the noise."""
    cols = [Column(key=c, label=label, numeric=kind in NUMERIC or kind.startswith("pair:")) for c, label, kind in columns]
    if sig:
        cols.append(Column(key="significance", label="beyond noise",
                           help="larger than the step-to-step spread of both sides"))
    shown = frame if limit is None else frame.head(limit)
    rows = []
    for record in shown.iter_rows(named=True):
        row = [_pair(kind[5:], record, c) if kind.startswith("pair:") else _cell(kind, record.get(c))
               for c, _label, kind in columns]
        if sig:
            row.append(Cell(text=sig_text(record.get(sig[0]), record.get(sig[1]))))
        rows.append(row)
    return Table(id=id, title=title, columns=cols, rows=rows, note=note, total_rows=frame.height)


def _pair(kind: str, record: dict[str, Any], column: str) -> Cell:
    """`before → after` of `{column}_before` and `{column}_after`; sorts by the after value."""
    b, a = record.get(f"{column}_before"), record.get(f"{column}_after")
    return Cell(text=f"{FORMATS[kind](b)} → {FORMATS[kind](a)}", value=a)


def _cell(kind: str, v: Any) -> Cell:
    text = FORMATS[kind](v)
    hover = None
    if kind == "text" and len(text) > CLIP:
        hover, text = text, text[: CLIP - 1] + "…"
    return Cell(text=text, value=v if kind in NUMERIC or v is None else str(v), title=hover)


def summary_rows(frame: pl.DataFrame, figures: Sequence[str] | None = None) -> list[list[Cell]]:
    """Rows of the per-step figures table: each figure formatted by its own unit."""
    rows = []
    for r in frame.iter_rows(named=True):
        if figures is not None and r["figure"] not in figures:
            continue
        k, dk = unit_kind(r["unit"]), unit_kind(r["unit"], delta=True)
        rows.append([Cell(text=r["label"], value=r["figure"]),
                     _cell(k, r["before"]), Cell(text=_spread(k, r, "before")),
                     _cell(k, r["after"]), Cell(text=_spread(k, r, "after")),
                     _cell(dk, r["delta"]), _cell("dpct", r["delta_pct"]),
                     Cell(text=sig_text(r["significant"], r["delta"]))])
    return rows


SUMMARY_COLUMNS = [Column("figure", "per step"), Column("before", "before (median)", True),
                   Column("before_spread", "before spread"), Column("after", "after (median)", True),
                   Column("after_spread", "after spread"), Column("delta", "Δ", True), Column("delta_pct", "Δ %", True),
                   Column("significance", "beyond noise", help="larger than the step-to-step spread of both sides")]


def _spread(kind: str, r: dict[str, Any], side: str) -> str:
    n = r[f"n_{side}"]
    lo, hi = r.get(f"{side}_min"), r.get(f"{side}_max")
    if n < 2 or lo is None:
        return f"n={n}"
    if n >= IQR_MIN_SAMPLES:
        return f"IQR {value(kind, r[f'{side}_q1'])}–{value(kind, r[f'{side}_q3'])} (n={n})"
    return f"{value(kind, lo)}–{value(kind, hi)} (n={n})"
