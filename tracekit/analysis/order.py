"""Row orders that do not change from run to run.

A sort on one column leaves its ties in the order the rows came in, and after a group-by or
a join that order is Polars' choice of the moment: evidence lists and tables then changed
between two runs on the same trace. These sorts break ties on time and identity.
"""

from __future__ import annotations

import polars as pl


def longest(rows: pl.DataFrame, by: str = "dur_ns", then: tuple[str, ...] = ("ts_ns", "eid"), *,
            head: int | None = None) -> pl.DataFrame:
    """`rows` longest first (`by`), ties in time and event order (`then`, those present):
    the same evidence on every run. (A sort on the length alone left ties in whatever order
    the group-bys and joins before it produced, which changed from run to run.)

    head: only the first `head` rows of that order. Only rows at least as long as the
    head-th longest can be among them, so only those are sorted (a table of 30 rows of
    half a million need not sort them all)."""
    keys = [by, *(c for c in then if c in rows.columns)]
    if head is not None and 0 < head < rows.height and rows[by].count() >= head:  # (nulls sort last)
        rows = rows.filter(pl.col(by) >= rows[by].drop_nulls().top_k(head).min())
    out = rows.sort(keys, descending=[True] + [False] * (len(keys) - 1), nulls_last=True)
    return out if head is None else out.head(head)


def longest_gaps(gaps: pl.DataFrame, *, head: int | None = None) -> pl.DataFrame:
    """Idle gaps (`gaps.GAP_SCHEMA` rows) longest first, ties by start, device and stream."""
    return longest(gaps, "gap_ns", ("start_ns", "device", "stream"), head=head)


def sort_order(frame: pl.DataFrame, *by: str, maintain_order: bool = False) -> pl.Series:
    """The rows of `frame` in the order a sort on `by` puts them (ascending), moving none of
    its columns: a caller that keeps only some columns gathers those alone, each in its
    turn (a sort of the whole frame holds every column twice while it runs)."""
    row = pl.int_range(pl.len(), dtype=pl.get_index_type())
    return frame.select(row.sort_by(*by, maintain_order=maintain_order)).to_series()
