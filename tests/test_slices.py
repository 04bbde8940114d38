"""The C passes over slices (nesting, innermost) against hand-computed answers and their
Polars references."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import as_reference, both_ways, real_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import native
from tracekit.analysis import intervals
from tracekit.analysis.interval_keys import group_numbers
from tracekit.analysis.nesting import in_time_order, rows_of, with_parents
from tracekit.model import TEXT
from tracekit.native import _slices, kernels

needs_c = pytest.mark.skipif(not native.BUILT, reason="the C pass is not built (no C compiler at install)")
SCHEMA = {"eid": pl.Int64, "pid": pl.String, "tid": pl.String, "ts_ns": pl.Int64, "dur_ns": pl.Int64}


def _frame(rows: list[tuple]) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema=SCHEMA, orient="row")
    return frame.with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"))


def _both(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    return both_ways(lambda: with_parents(frame))


# thread 1/1: 10 [0,100) > 11 [10,50) > 12 [20,30); 13 [50,50) zero-length at 11's end, where
# nothing longer starts: inside 11; 14 [60,90) under 10; 15 [100,120) top level again (it
# starts at 10's end); 16 [110,130) overlaps 15's end (overlapping slices: the count's answer).
# thread 1/2: 20 [5,15), 21 [5,15) same span (eid order: 20 outer), 22 [15,15) at their end:
# inside 21.
HAND = [
    (10, "1", "1", 0, 100), (11, "1", "1", 10, 40), (12, "1", "1", 20, 10), (13, "1", "1", 50, 0),
    (14, "1", "1", 60, 30), (15, "1", "1", 100, 20), (16, "1", "1", 110, 20),
    (20, "1", "2", 5, 10), (21, "1", "2", 5, 10), (22, "1", "2", 15, 0),
]
EXPECTED = {  # eid: (depth, parent_eid)
    10: (0, None), 11: (1, 10), 12: (2, 11), 13: (2, 11), 14: (1, 10), 15: (0, None), 16: (1, 15),
    20: (0, None), 21: (1, 20), 22: (2, 21),
}


def test_hand_computed_depths_and_parents(implementation):
    frame = with_parents(_frame(HAND))
    assert {e: (d, p) for e, d, p in frame.select("eid", "depth", "parent_eid").iter_rows()} == EXPECTED


@needs_c
def test_the_c_pass_runs_and_can_be_turned_off(monkeypatch):
    calls = []
    real = _slices.nest
    monkeypatch.setattr(_slices, "nest", lambda *a: calls.append(1) or real(*a))
    with native.use(native.C):
        with_parents(_frame(HAND))
    assert calls == [1]
    with native.use(native.REFERENCE):
        with_parents(_frame(HAND))
    assert calls == [1]


def test_null_times_take_the_polars_joins():
    rows = [*HAND, (30, "1", "1", None, 5)]
    got, reference = _both(_frame(rows))
    assert got.equals(reference)


slices = st.lists(st.tuples(st.sampled_from(["1", "2", None]), st.sampled_from(["7", "8"]), st.integers(0, 30),
                            st.sampled_from([0, 0, 1, 2, 5, 10, 30])), max_size=40)
# few instants, many zero lengths: equal starts, zero-length slices at the instants others
# start and end, and runs of them (each tuple repeated 1-4 times)
crowded = st.lists(st.tuples(st.sampled_from(["1", None]), st.sampled_from(["7", "8"]), st.sampled_from([0, 5, 10, 15]),
                             st.sampled_from([0, 0, 0, 5, 10, 15]), st.integers(1, 4)), max_size=20).map(
    lambda rows: [r[:4] for r in rows for _ in range(r[4])])


def _stack_tree(rows: list[tuple]) -> dict[int, tuple[int, int | None]]:
    """eid -> (depth, parent) by the rule (`nesting`): per thread in (start, longer first,
    eid) order, the child of the last earlier slice of positive length that ends at or
    after it."""
    out, stack = {}, {}
    for eid, pid, tid, ts, dur in sorted(rows, key=lambda r: (r[1] or "", r[2], r[3], -r[4], r[0])):
        open_ = stack.setdefault((pid, tid), [])
        while open_ and not (open_[-1][2] > 0 and ts + dur <= open_[-1][1]):
            open_.pop()
        out[eid] = (len(open_), open_[-1][0] if open_ else None)
        open_.append((eid, ts + dur, dur))
    return out


def _nested_rows(rnd, lo: int, hi: int, depth: int, out: list) -> None:
    """Properly nested slices in [lo, hi] (as profilers write them), on a grid of 5 ns:
    children that touch, zero-length ones at any instant (also at a parent's ends), runs
    of them, and equal spans."""
    at = lo
    while at <= hi and len(out) < 40:
        kind = rnd.random()
        if kind < 0.3:  # a run of zero-length slices
            out.extend([(at, 0)] * rnd.randint(1, 3))
        elif depth < 4 and at < hi:
            end = rnd.randrange(at + 5, hi + 5, 5)
            out.extend([(at, end - at)] * (2 if rnd.random() < 0.1 else 1))
            _nested_rows(rnd, at, end, depth + 1, out)
            at = end
            continue
        at += rnd.choice([0, 5, 5, 10])
        if rnd.random() < 0.2:
            break


@settings(max_examples=300, deadline=None)
@given(slices)
def test_c_pass_matches_the_polars_joins(rows):
    frame = _frame([(100 + i, p, t, ts, dur) for i, (p, t, ts, dur) in enumerate(rows)])
    # in any order, and in time order (a trace's, where the C pass's sort keeps the eid order)
    for rows_in in (frame, frame.sort("ts_ns", "eid")):
        assert with_parents(rows_in).equals(as_reference(lambda r=rows_in: with_parents(r)))


@settings(max_examples=300, deadline=None)
@given(crowded, st.randoms(use_true_random=False))
def test_c_pass_matches_the_polars_joins_at_crowded_instants(rows, rnd):
    rnd.shuffle(rows)
    frame = _frame([(100 + i, p, t, ts, dur) for i, (p, t, ts, dur) in enumerate(rows)])
    for rows_in in (frame, frame.sort("ts_ns", "eid")):
        assert with_parents(rows_in).equals(as_reference(lambda r=rows_in: with_parents(r)))


@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False), st.randoms(use_true_random=False))
def test_properly_nested_slices_get_the_rule_s_tree(rnd, order):
    spans: list[tuple[int, int]] = []
    _nested_rows(rnd, 0, 60, 0, spans)
    rows = [(100 + i, "1", "7", ts, dur) for i, (ts, dur) in enumerate(spans)]
    order.shuffle(rows)
    want = _stack_tree(rows)
    frame = _frame(rows)
    for got in (with_parents(frame), as_reference(lambda: with_parents(frame))):
        assert {e: (d, p) for e, d, p in got.select("eid", "depth", "parent_eid").iter_rows()} == want


@pytest.mark.real
def test_real_trace_nesting_agrees():
    import tracekit

    ops = tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz")).ops
    got, reference = _both(ops.filter(pl.col("cat") != "gpu_user_annotation"))
    assert got.height > 1000 and int(got["depth"].max()) > 5
    assert got.equals(reference)


# thread 1/1 slices: 1 [0,100) > 2 [10,50) > 3 [20,30); 4 [20,30) same span as 3, longer-first
# order then eid: 4 is picked over 3 at equal start and length; 5 [60,60) zero-length;
# thread 1/2: 6 [0,10). Points (gid, pid, tid, t):
POINT_ROWS = [
    (1, "1", "1", 25),  # in 1, 2, 3, 4: the last started; 3 and 4 tie: the higher eid, 4
    (2, "1", "1", 30),  # 3 and 4 ended at 30 (half-open): 2
    (3, "1", "1", 60),  # 5 is zero-length (contains nothing): 1
    (4, "1", "1", 100),  # 1 ended: none
    (5, "1", "2", 5),  # 6
    (6, "2", "1", 25),  # no slice on that thread: none
    (7, "1", "1", None),  # no time: none
]
SLICE_ROWS = [(1, "1", "1", 0, 100), (2, "1", "1", 10, 40), (3, "1", "1", 20, 10), (4, "1", "1", 20, 10),
              (5, "1", "1", 60, 0), (6, "1", "2", 0, 10)]
POINTS = {"gid": pl.Int64, "pid": pl.String, "tid": pl.String, "t": pl.Int64}


def _innermost(points: pl.DataFrame, slices: pl.DataFrame) -> pl.DataFrame:
    return intervals.innermost(points, slices.select("eid", "pid", "tid", "ts_ns", "end_ns", "dur_ns"), on=["pid", "tid"])


def test_innermost_hand_computed(implementation):
    points = pl.DataFrame(POINT_ROWS, schema=POINTS, orient="row")
    got = _innermost(points, _frame(SLICE_ROWS))
    assert got.select("gid", "eid").rows() == [(1, 4), (2, 2), (3, 1), (5, 6)]
    assert got.equals(as_reference(lambda: _innermost(points, _frame(SLICE_ROWS))))


def test_innermost_of_slices_starting_together_is_the_shorter():
    """Two slices start together on one thread, the shorter first in eid order: the point
    inside both takes the shorter, with the slices in time order or not."""
    slices = _frame([(101, "1", "7", 10, 5), (102, "1", "7", 10, 20), (103, "1", "7", 0, 40)])
    points = pl.DataFrame([(1, "1", "7", 12), (2, "1", "7", 25)], schema=POINTS, orient="row")
    for frame in (slices, slices.sort("ts_ns", "eid"), slices.reverse()):
        got, reference = both_ways(lambda f=frame: _innermost(points, f))
        assert got.select("gid", "eid").rows() == reference.select("gid", "eid").rows() == [(1, 101), (2, 102)]


points_st = st.lists(st.tuples(st.sampled_from(["1", "2", None]), st.sampled_from(["7", "8"]),
                               st.one_of(st.none(), st.integers(0, 40))), max_size=30)


@settings(max_examples=300, deadline=None)
@given(slices, points_st)
def test_innermost_c_pass_matches_the_polars_steps(rows, pts):
    frame = _frame([(100 + i, p, t, ts, dur) for i, (p, t, ts, dur) in enumerate(rows)])
    points = pl.DataFrame([(i, p, t, at) for i, (p, t, at) in enumerate(pts)], schema=POINTS, orient="row")
    got = _innermost(points, frame)
    assert got.equals(as_reference(lambda: _innermost(points, frame)))
    # slices in time order, as a trace's are (the C pass's sort then keeps their eid order)
    assert _innermost(points, frame.sort("ts_ns", "eid")).equals(got)
    # threads as codes (a trace's pid and tid: their codes make the group numbers, not a rank)
    coded = _innermost(points.cast({"pid": TEXT, "tid": TEXT}), frame.cast({"pid": TEXT, "tid": TEXT}))
    assert coded.select("gid", "eid").equals(got.select("gid", "eid"))
    # the definition: of the slices containing the point, the last started, then the shortest, then the highest eid
    for gid, pid, tid, at in points.rows():
        inside = [r for r in frame.rows(named=True) if (r["pid"], r["tid"]) == (pid, tid) and pid is not None
                  and at is not None and r["ts_ns"] <= at < r["end_ns"]]
        best = max(inside, key=lambda r: (r["ts_ns"], -r["dur_ns"], r["eid"]), default=None)
        row = got.filter(pl.col("gid") == gid)
        assert (row["eid"].to_list() or [None])[0] == (best["eid"] if best else None)


@pytest.mark.parametrize("dtypes", [
    {"pid": TEXT, "tid": TEXT},  # codes side by side
    {"pid": pl.Enum(["1", "2", "3"]), "tid": TEXT},
    {"pid": pl.String, "tid": pl.String},  # ranked
    {"pid": pl.Int32},  # one integer, as it is
    {"pid": pl.Int64, "tid": pl.Int64},  # ranked
])
def test_group_numbers_are_equal_exactly_where_the_keys_are(dtypes):
    first = pl.DataFrame({"pid": ["1", "2", "1", "3"], "tid": ["7", "7", "8", "7"]}).select(list(dtypes))
    second = pl.DataFrame({"pid": ["2", "1", "3", "1"], "tid": ["7", "8", "8", "7"]}).select(list(dtypes))
    first, second = first.cast(dtypes), second.cast(dtypes)
    numbers = group_numbers(first, second).to_list()
    keys = [*first.rows(), *second.rows()]
    assert len(numbers) == len(keys) == 8
    for i, a in enumerate(keys):
        for j, b in enumerate(keys):
            assert (numbers[i] == numbers[j]) == (a == b), (a, b)


def _stab(points: pl.DataFrame, slices: pl.DataFrame) -> pl.DataFrame:
    return intervals.stab(points, slices.select("eid", "pid", "ts_ns", "end_ns"))


def test_stab_hand_computed(implementation):
    """Every slice containing the point, whatever its thread: the pairs in the points'
    order, then the slices'; `pid` (in both) gets the suffix on the slices' side."""
    points = pl.DataFrame(POINT_ROWS, schema=POINTS, orient="row")
    got = _stab(points, _frame(SLICE_ROWS))
    expected = [(1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (3, 1), (5, 1), (5, 6), (6, 1), (6, 2), (6, 3), (6, 4)]
    assert got.columns == ["gid", "pid", "tid", "t", "eid", "pid_right", "ts_ns", "end_ns"]
    assert got.select("gid", "eid").rows() == expected


@settings(max_examples=300, deadline=None)
@given(slices, points_st)
def test_stab_c_pass_matches_the_join(rows, pts):
    frame = _frame([(100 + i, p, t, ts, dur) for i, (p, t, ts, dur) in enumerate(rows)])
    frame = frame.with_columns(end_ns=pl.when(pl.col("eid") % 7 == 3).then(None).otherwise(pl.col("end_ns")))
    points = pl.DataFrame([(i, p, t, at) for i, (p, t, at) in enumerate(pts)], schema=POINTS, orient="row")
    got = _stab(points, frame)
    assert got.equals(as_reference(lambda: _stab(points, frame)))
    # the definition: start <= at < end, nulls in neither
    pairs = [(g, r["eid"]) for g, _, _, at in points.rows() for r in frame.rows(named=True)
             if at is not None and r["ts_ns"] is not None and r["end_ns"] is not None and r["ts_ns"] <= at < r["end_ns"]]
    assert got.select("gid", "eid").rows() == pairs


def _capsule(values: list[int]) -> object:
    return kernels.arrow(pl.Series(values, dtype=pl.Int64))


def _flag_up(parent: list[int], flagged: list[int], levels: int) -> list[int]:
    out = kernels.series(_slices.flag_up((_capsule(parent), _capsule(flagged)), levels))
    return out.to_list()


def _climb(parent, hit, go, op, starts, levels):
    tree = tuple(_capsule(c) for c in (parent, hit, go, op))
    found = _slices.climb(tree, _capsule(starts), levels)
    return [kernels.series(c).to_list() for c in found]


def _up_until(parent, end, starts, need, levels):
    tree = (_capsule(parent), _capsule(end))
    return kernels.series(_slices.up_until(tree, _capsule(starts), _capsule(need), levels)).to_list()


@needs_c
def test_tree_walks_hand_computed():
    # 0 <- 1 <- 2, 0 <- 3, 4 alone, 4 <- 5
    parent = [-1, 0, 1, 0, -1, 4]
    assert _flag_up(parent, [0, 0, 1, 0, 0, 0], 256) == [1, 1, 1, 0, 0, 0]
    assert _flag_up(parent, [0, 0, 1, 0, 0, 0], 1) == [0, 1, 1, 0, 0, 0]  # one level up only
    assert _flag_up(parent, [0, 0, 1, 0, 0, 1], 0) == [0, 0, 1, 0, 0, 1]
    # walk up from 2: ops at 2 and 0, a module (hit) at 1 ends the walk there
    hit, go, op = [0, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 1], [1, 0, 1, 0, 0, 0]
    assert _climb(parent, hit, go, op, [2, 3, 5, -1], 256) == [[1, -1, -1, -1], [2, 0, -1, -1]]
    assert _climb(parent, hit, go, op, [2], 1) == [[-1], [2]]  # one row: 2 itself
    with pytest.raises(IndexError):
        _flag_up([5, -1], [1, 0], 3)
    # the first row up from the start (itself included) that ends at or after `need`
    end = [100, 50, 30, 90, 10, 5]
    assert _up_until(parent, end, [2, 2, 2, 5, -1], [30, 31, 60, 20, 0], 64) == [2, 1, 0, -1, -1]
    assert _up_until(parent, end, [2], [60], 2) == [-1]  # two rows only: 2 and 1


forests = st.integers(1, 30).flatmap(lambda n: st.tuples(
    st.tuples(*[st.integers(-1, i - 1) for i in range(n)]),
    st.lists(st.integers(0, 1), min_size=n, max_size=n), st.lists(st.integers(0, 1), min_size=n, max_size=n),
    st.lists(st.integers(0, 1), min_size=n, max_size=n), st.lists(st.integers(0, 1), min_size=n, max_size=n),
    st.integers(0, 5)))


@needs_c
@settings(max_examples=300, deadline=None)
@given(forests)
def test_tree_walks_match_their_definitions(case):
    parent, flagged, hit, go, op, levels = case
    parent = list(parent)
    n = len(parent)
    want = list(flagged)
    for i in range(n):  # every ancestor at most `levels` steps above a flagged row
        p, left = parent[i], levels
        while flagged[i] and p >= 0 and left > 0:
            want[p], p, left = 1, parent[p], left - 1
    assert _flag_up(parent, flagged, levels) == want
    hits, ops = [], []
    for i in range(n):
        at, h, o = i, -1, -1
        for _ in range(levels):
            if at < 0:
                break
            h, o = (at if hit[at] else h), (at if op[at] else o)
            at = parent[at] if go[at] else -1
        hits.append(h)
        ops.append(o)
    assert _climb(parent, hit, go, op, list(range(n)), levels) == [hits, ops]
    ends = [10 * h + o for h, o in zip(hit, op)]  # 0, 1, 10 or 11
    needs = [(7 * i) % 12 for i in range(n)]
    ups = []
    for i in range(n):
        at, found = i, -1
        for _ in range(levels):
            if at < 0:
                break
            if ends[at] >= needs[i]:
                found = at
                break
            at = parent[at]
        ups.append(found)
    assert _up_until(parent, ends, list(range(n)), needs, levels) == ups


@pytest.mark.real
@needs_c
def test_real_critical_path_same_with_and_without_the_c_passes():
    import tracekit
    from tracekit.analysis.critical_path import critical_path

    trace = tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz"))
    got, reference = both_ways(lambda: critical_path(trace))
    assert got.segments.height > 1000
    assert got.segments.equals(reference.segments)
    assert got.graph.segments.equals(reference.graph.segments) and got.graph.edges.equals(reference.graph.edges)
    assert got.by_context.equals(reference.by_context) and got.weight_ns == reference.weight_ns


@pytest.mark.real
@needs_c
def test_real_launch_links_same_with_and_without_the_c_passes():
    import tracekit
    from tracekit.analysis.links import launch_ops

    trace = tracekit.load(real_trace("a100_dlrm_6streams_rank0.json.gz"))
    got, reference = both_ways(lambda: launch_ops(trace))
    assert (got["link"] == "containment").sum() > 100
    assert got.equals(reference)


def _chains(parent: list[int], code: list[int]) -> list[list[int]]:
    found = _slices.chains((_capsule(parent), _capsule(code)))
    return [kernels.series(c).to_list() for c in found]


@needs_c
def test_chains_hand_computed():
    # rows 0 > 1 > 2 and 3 > 4 > 5 spell the same codes (5 > 6 > 7); row 6 is 5 > 6 again
    assert _chains([-1, 0, 1, -1, 3, 4, 0], [5, 6, 7, 5, 6, 7, 6]) == [[0, 1, 2, 0, 1, 2, 1], [-1, 0, 1], [5, 6, 7]]
    # a child listed before its parent still gets its parent's chain first
    assert _chains([1, -1], [9, 8]) == [[1, 0], [-1, 0], [8, 9]]
    with pytest.raises(ValueError, match="cycle"):
        _chains([1, 0], [1, 1])
    with pytest.raises(ValueError, match="out of range"):
        _chains([3, -1], [1, 1])


@settings(max_examples=200, deadline=None)
@given(forests, st.lists(st.sampled_from(["aten::mm", "aten::linear", "aten::add", "nn.Module: A"]), min_size=30,
                         max_size=30), st.randoms(use_true_random=False))
def test_op_paths_c_pass_matches_the_closure(case, names, rnd):
    from tracekit.analysis.attribution import op_paths

    parent = list(case[0])
    n = len(parent)
    depth = []
    for p in parent:
        depth.append(0 if p < 0 else depth[p] + 1)
    order = list(range(n))
    rnd.shuffle(order)  # rows in any order: a child may come before its parent
    eid = [1000 + 7 * i for i in range(n)]
    nested = pl.DataFrame({"eid": [eid[i] for i in order],
                           "parent_eid": [eid[parent[i]] if parent[i] >= 0 else None for i in order],
                           "depth": [depth[i] for i in order], "name": [names[i] for i in order]},
                          schema={"eid": pl.Int64, "parent_eid": pl.Int64, "depth": pl.Int64, "name": pl.String})
    wanted = pl.Series([eid[i] for i in range(0, n, 2)] + [5, None])  # 5: not an op
    got = op_paths(nested, wanted)
    assert got.sort("eid").equals(as_reference(lambda: op_paths(nested, wanted)).sort("eid"))
    for e, path in got.iter_rows():
        i = eid.index(e)
        chain = []
        while i >= 0:
            chain.append(names[i])
            i = parent[i]
        assert path == " > ".join(reversed(chain))


@pytest.mark.real
def test_real_op_paths_same_with_and_without_the_c_passes():
    import tracekit
    from tracekit.analysis.attribution import op_paths
    from tracekit.analysis.links import cpu_ops, gpu_links

    trace = tracekit.load(real_trace("a100_dlrm_6streams_rank0.json.gz"))
    nested, links = cpu_ops(trace), gpu_links(trace)
    got, reference = both_ways(lambda: op_paths(nested, links["op_eid"]))
    assert got.height > 1000 and got["op_path"].str.contains(" > ").any()
    assert got.sort("eid").equals(reference.sort("eid"))


# -- attribution's walks up the op tree (tree_sums, same_above) ------------------------------

def _tree_sums(parent, row, dur, kernel, levels):
    found = _slices.tree_sums((_capsule(parent),), (_capsule(row), _capsule(dur), _capsule(kernel)), levels)
    return [kernels.series(c).to_list() for c in found]


def _same_above(parent, code, levels):
    return kernels.series(_slices.same_above((_capsule(parent), _capsule(code)), levels)).to_list()


@needs_c
def test_attribution_walks_hand_computed():
    # 0 <- 1 <- 2, 0 <- 3, 4 alone, 4 <- 5; events on rows 2 (two), 1, 3, 5 and on no row (-1)
    parent = [-1, 0, 1, 0, -1, 4]
    row, dur, kernel = [2, 2, 1, 3, -1, 5], [10, 20, 5, 7, 100, 1], [1, 0, 1, 1, 1, 0]
    # events_self, ns_self, events_incl, kernels_incl, ns_incl
    assert _tree_sums(parent, row, dur, kernel, 256) == [
        [0, 1, 2, 1, 0, 1], [0, 5, 30, 7, 0, 1], [4, 3, 2, 1, 1, 1], [3, 2, 1, 1, 0, 0], [42, 35, 30, 7, 1, 1]]
    # one level: row 2's events reach row 1 and no further
    assert _tree_sums(parent, row, dur, kernel, 1)[2:] == [[2, 3, 2, 1, 1, 1], [2, 2, 1, 1, 0, 0], [12, 35, 30, 7, 1, 1]]
    assert _same_above(parent, [7, 8, 7, 7, 8, 8], 256) == [0, 0, 1, 1, 0, 1]
    assert _same_above(parent, [7, 8, 7, 7, 8, 8], 1) == [0, 0, 0, 1, 0, 1]  # row 2's same-code row is 2 up
    with pytest.raises(IndexError):
        _tree_sums(parent, [6], [1], [1], 256)
    with pytest.raises(IndexError):
        _same_above([3, -1], [1, 1], 256)


def _attribution_frames(parent: list[int], names: list[str], owners: list[int], rnd) -> tuple[pl.DataFrame, ...]:
    """An op tree (rows in a shuffled order, eids apart) and GPU events on its ops (-1: an op
    eid that is not in the tree), as `attribution` reads them."""
    n = len(parent)
    depth = []
    for p in parent:
        depth.append(0 if p < 0 else depth[p] + 1)
    order = list(range(n))
    rnd.shuffle(order)
    eid = [1000 + 7 * i for i in range(n)]
    nested = pl.DataFrame({
        "eid": [eid[i] for i in order], "name": [names[i % len(names)] for i in order], "pid": "1", "tid": "1",
        "ts_ns": [10 * i for i in order], "dur_ns": [100 - depth[i] for i in order],
        "end_ns": [10 * i + 100 - depth[i] for i in order], "depth": [depth[i] for i in order],
        "parent_eid": [eid[parent[i]] if parent[i] >= 0 else None for i in order], "external_id": None,
    }, schema={"eid": pl.Int64, "name": pl.String, "pid": pl.String, "tid": pl.String, "ts_ns": pl.Int64,
               "dur_ns": pl.Int64, "end_ns": pl.Int64, "depth": pl.Int64, "parent_eid": pl.Int64,
               "external_id": pl.Int64})
    gpu = pl.DataFrame({
        "eid": [5000 + k for k in range(len(owners))],
        "op_eid": [eid[o % n] if o >= 0 else 1 for o in owners],
        "dur_ns": [None if k % 5 == 4 else 3 + k for k in range(len(owners))],
        "cat": ["kernel" if k % 3 else "gpu_memcpy" for k in range(len(owners))],
    }, schema={"eid": pl.Int64, "op_eid": pl.Int64, "dur_ns": pl.Int64, "cat": pl.String})
    launches = pl.DataFrame(schema={"name": pl.String, "op_eid": pl.Int64})
    return nested, gpu, launches


@needs_c
@settings(max_examples=200, deadline=None)
@given(forests, st.lists(st.sampled_from(["aten::mm", "aten::linear", "nn.Module: A"]), min_size=1, max_size=4),
       st.lists(st.integers(-1, 40), max_size=40), st.randoms(use_true_random=False))
def test_attribution_c_walks_match_the_closure(case, names, owners, rnd):
    from tracekit.analysis import attribution as A

    nested, gpu, launches = _attribution_frames(list(case[0]), names, owners, rnd)
    tree = A._tree_native(nested, gpu)
    assert tree is not None
    closure = A.closure_pairs(nested)
    got = A._instances(nested, launches, gpu, None, sums=tree[0])
    reference = A._instances(nested, launches, gpu, closure)
    assert got.equals(reference)
    total = int(gpu["dur_ns"].sum() or 0)
    assert A._per_name(got, gpu, None, total_ns=total, recursive=tree[1]).equals(
        A._per_name(reference, gpu, closure, total_ns=total))


@needs_c
def test_attribution_leaves_null_names_and_deep_trees_to_the_closure():
    import random

    from tracekit.analysis import attribution as A

    nested, gpu, _ = _attribution_frames([-1, 0, 1], ["aten::mm"], [2], random.Random(0))
    assert A._tree_native(nested, gpu) is not None
    assert A._tree_native(nested.with_columns(name=pl.lit(None, pl.String)), gpu) is None
    assert A._tree_native(nested.with_columns(depth=pl.lit(A.LEVELS, pl.Int64)), gpu) is None


@pytest.mark.real
@needs_c
def test_real_attribution_same_with_and_without_the_c_passes():
    import tracekit
    from tracekit.analysis.attribution import attribute

    trace = tracekit.load(real_trace("v100_ddp_mlp_memory_rank1.json.gz"))
    got, reference = both_ways(lambda: attribute(trace))
    assert got.instances.height > 50_000 and (got.instances["gpu_events_incl"] > got.instances["gpu_events_self"]).any()
    assert got.ops.equals(reference.ops) and got.instances.equals(reference.instances)


# -- eid -> row lookup (nesting.rows_of) -------------------------------------------------------

def _rows_of(keys: list[int | None], queries: list[int | None]) -> tuple[list[int], list[int]]:
    frame = pl.DataFrame({"eid": keys}, schema={"eid": pl.Int64})
    series = pl.Series(queries, dtype=pl.Int64)
    got, reference = both_ways(lambda: rows_of(frame, series))
    return got.to_list(), reference.to_list()


def test_rows_of_hand_computed(implementation):
    # keys 7, 3, 9 at rows 0, 1, 2; 5 and 10 are absent, null is absent, -2**63 is far below
    frame = pl.DataFrame({"eid": [7, 3, 9]}, schema={"eid": pl.Int64})
    got = rows_of(frame, pl.Series([9, 3, None, 5, 7, 10, -(2**63), 2**63 - 1], dtype=pl.Int64))
    assert got.to_list() == [2, 1, -1, -1, 0, -1, -1, -1]


@needs_c
def test_rows_of_table_and_its_fallbacks(monkeypatch):
    """The C table serves dense unique keys; sparse, repeated or null keys take the join."""
    keys = pl.Series([5, 6, 8], dtype=pl.Int64)
    found = _slices.rows(kernels.arrow(keys), kernels.arrow(pl.Series([8, 4, 9, 5], dtype=pl.Int64)), 5, 4)
    assert kernels.series(found).to_list() == [2, -1, -1, 0]
    assert _slices.rows(kernels.arrow(pl.Series([5, 5], dtype=pl.Int64)), kernels.arrow(keys), 5, 1) is None
    with pytest.raises(ValueError, match="outside the span"):
        _slices.rows(kernels.arrow(keys), kernels.arrow(keys), 5, 3)
    calls = []
    real = _slices.rows
    monkeypatch.setattr(_slices, "rows", lambda *a: calls.append(1) or real(*a))
    assert _rows_of([1, 2, 2], [2, 1])[0] == [1, 2, 0]  # one row per match, as the join gives
    assert _rows_of([0, 10**9], [10**9])[0] == [1]  # sparse: no table of a billion slots
    assert _rows_of([None, 4], [4])[0] == [1]
    assert len(calls) == 1  # only the repeated keys reached C (and gave it back)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-50, 50), unique=True, max_size=40),
       st.lists(st.one_of(st.none(), st.integers(-60, 60)), max_size=60))
def test_rows_of_table_matches_the_join(keys, queries):
    frame = pl.DataFrame({"eid": keys}, schema={"eid": pl.Int64})
    series = pl.Series(queries, dtype=pl.Int64)
    got = rows_of(frame, series).to_list()
    assert got == [keys.index(q) if q in keys else -1 for q in queries]


@given(st.lists(st.integers(0, 5), max_size=30), st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_in_time_order_sorts_only_what_is_out_of_order(times, rnd):
    eids = list(range(len(times)))
    rnd.shuffle(eids)
    frame = pl.DataFrame({"eid": eids, "ts_ns": times, "x": [str(t) for t in times]},
                         schema={"eid": pl.Int64, "ts_ns": pl.Int64, "x": pl.String})
    expected = frame.sort("ts_ns", "eid")
    assert in_time_order(frame).equals(expected)
    assert in_time_order(expected) is expected  # already in order: the same frame, not a copy
