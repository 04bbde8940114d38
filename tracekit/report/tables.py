"""Polars frames -> report `Table`s, with each value formatted by its kind."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.report.model import Cell, Column, Table


def _text(v: Any) -> str:
    return "" if v is None else str(v)


FORMATS: dict[str, Callable[[Any], str]] = {
    "text": _text,
    "label": _text,  # text kept on one line
    "ns": fmt.ns,
    "pct": fmt.pct,
    "count": fmt.count,
    "bytes": fmt.size,
    "float": lambda v: "–" if v is None else f"{v:,.2f}",
    "float1": lambda v: "–" if v is None else f"{v:,.1f}",
    "gbps": lambda v: "–" if v is None else f"{v:,.1f} GB/s",
    "tflops": lambda v: "–" if v is None else f"{v:,.1f} TFLOP/s",
    "bool": lambda v: "–" if v is None else ("yes" if v else "no"),
}
NUMERIC = {"ns", "pct", "count", "bytes", "float", "float1", "gbps", "tflops"}
CLIP = 110


def frame_table(
    id: str,
    title: str,
    frame: pl.DataFrame,
    columns: Sequence[tuple[str, str, str] | tuple[str, str, str, str]],
    *,
    limit: int | None = 50,
    note: str | None = None,
    total_rows: int | None = None,
) -> Table:
    """`columns`: (frame column, label, kind[, help]). Rows beyond `limit` are dropped.
    `total_rows`: the rows the table is the head of, when `frame` holds only that head
    (default: the frame's)."""
    cols = [Column(key=c[0], label=c[1], numeric=c[2] in NUMERIC, help=c[3] if len(c) > 3 else None,
                   nowrap=c[2] == "label") for c in columns]
    shown = frame if limit is None else frame.head(limit)
    present = [c[0] for c in columns if c[0] in shown.columns]
    rows = []
    for record in shown.select(present).iter_rows(named=True):
        row = []
        for key, _label, kind, *_ in columns:
            v = record.get(key)
            text = FORMATS[kind](v)
            hover = None
            if kind == "text" and len(text) > CLIP:
                hover, text = fmt.clip_name(text), fmt.clip_name(text, CLIP)
            value = v if kind in NUMERIC or v is None else str(v)
            row.append(Cell(text=text, value=value, title=hover))
        rows.append(row)
    return Table(id=id, title=title, columns=cols, rows=rows, note=note,
                 total_rows=frame.height if total_rows is None else total_rows)
