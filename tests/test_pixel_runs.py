"""Timeline pixel runs: hand-computed cases, the same drawing whatever the input order, and
the C pass against the Polars reference."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import as_reference
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import native
from tracekit.report.timeline import pixel_runs

SCHEMA = {"lane": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "cls": pl.String, "prio": pl.Int64}


def frame(rows: list[tuple[int, int, int, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def test_hand_computed_runs():
    # 100 ns over 4 pixels (25 ns each): a GEMM covers pixels 0-1 fully, a copy a third of pixel 2
    runs = pixel_runs(frame([(0, 0, 50, "gemm", 2), (0, 50, 58, "copy", 1)]), 0, 100, 4)
    assert runs.rows() == [(0, 0, 2, "gemm", 50.0, 2, 4), (0, 2, 3, "copy", 8.0, 1, 2)]
    # a third of a pixel (8 of 25 ns) is 1.28 quarters: drawn at level 2 (ceil)


def test_ties_pick_the_same_class_whatever_the_order():
    # two classes cover exactly half of the one pixel each: the tie goes to the first name
    rows = [(0, 0, 5, "zeta", 1), (0, 5, 10, "alpha", 1)]
    for order in (rows, rows[::-1]):
        assert pixel_runs(frame(order), 0, 10, 1).rows() == [(0, 0, 1, "alpha", 10.0, 1, 4)]


intervals = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10_000), st.integers(1, 3_000),
                               st.sampled_from(["gemm", "copy", "idle", "attention"]), st.integers(0, 3)),
                     min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(intervals, st.integers(1, 97), st.randoms(use_true_random=False))
def test_same_runs_whatever_the_input_order(rows, width, rnd):
    iv = frame([(lane, s, s + d, cls, prio) for lane, s, d, cls, prio in rows])
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    other = frame([(lane, s, s + d, cls, prio) for lane, s, d, cls, prio in shuffled])
    a, b = pixel_runs(iv, 0, 13_000, width), pixel_runs(other, 0, 13_000, width)
    assert a.equals(b)
    # every covered ns is in exactly one run
    clipped = iv.select((pl.col("end_ns").clip(0, 13_000) - pl.col("start_ns").clip(0, 13_000)).sum()).item()
    assert abs(a["covered_ns"].sum() - clipped) < 1e-6 * max(1, clipped)


one_lane = st.lists(st.tuples(st.integers(-2_000, 14_000), st.integers(0, 4_000),
                              st.sampled_from(["gemm", "copy", "idle", "attention", "Triton", "gap-other"]),
                              st.integers(0, 3)),
                    min_size=0, max_size=80)


def reference(iv: pl.DataFrame, t0: int, t1: int, width: int) -> pl.DataFrame:
    """The Polars code's runs (the reference of the C pass)."""
    return as_reference(lambda: pixel_runs(iv, t0, t1, width))


@pytest.mark.skipif(not native.BUILT, reason="the C passes are not built")
@settings(max_examples=150, deadline=None)
@given(one_lane, st.integers(1, 97), st.integers(0, 3_000), st.integers(1, 13_000), st.booleans())
def test_c_runs_match_the_polars_reference(rows, width, t0, length, as_enum):
    """One lane (how the timeline draws): the C pass gives the reference's frame exactly,
    zero-length and out-of-window intervals, overlaps, ties and Enum classes included."""
    iv = frame([(0, s, s + d, cls, prio) for s, d, cls, prio in rows])
    if as_enum:  # categories in an order that is not the names' order
        iv = iv.with_columns(pl.col("cls").cast(pl.Enum(["idle", "gemm", "copy", "attention", "Triton", "gap-other"])))
    t1 = t0 + length
    with native.use(native.C):
        got = pixel_runs(iv, t0, t1, width)
    want = reference(iv, t0, t1, width)
    assert got.schema == want.schema
    assert got.rows() == want.rows()


def test_c_runs_hand_computed_and_overlapping(implementation):
    # two overlapping CPU rows on a 100 ns window of 4 pixels (25 ns each): in pixel 0 a sync
    # (prio 3) covers 5 ns, under a quarter (score 0), and the op (prio 1) all 25; in pixel 1
    # the sync covers 20 ns, a quarter and more: its prio wins. Covered counts both rows.
    iv = frame([(0, 0, 50, "cpu", 1), (0, 20, 45, "sync", 3)])
    got = pixel_runs(iv, 0, 100, 4)
    assert got.rows() == [(0, 0, 1, "cpu", 30.0, 1, 4), (0, 1, 2, "sync", 45.0, 1, 4)]
    assert got.equals(reference(iv, 0, 100, 4))
    # a window too wide for 64-bit units: the reference answers
    wide = frame([(0, 0, 2**62, "cpu", 1)])
    assert pixel_runs(wide, 0, 2**62, 1100).rows() == reference(wide, 0, 2**62, 1100).rows()
