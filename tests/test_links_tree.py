"""Golden traces for the launch -> op link rule and the op tree rule (docs/metrics.md,
"Launch links" and "The op tree"), with the answers worked out by hand."""

from __future__ import annotations

import polars as pl
from builders import TraceBuilder
from conftest import both_ways

from tracekit.analysis import links
from tracekit.analysis.attribution import attribute

# -- an External id that collides with an unrelated op ---------------------------------------

def _colliding(tmp_path):
    """conv2d [0, 50 µs] launches a kernel from a call at [10, 15 µs] whose External id is its
    correlation, 1001 (as PyTorch 2.0-era Kineto writes it), and op 1001 is an unrelated
    aten::empty_strided at [200, 205 µs]; relu [60, 80 µs] launches one with an External id
    no op has; mm [100, 150 µs] one with its own id (3): a right link. A fourth kernel has no
    launch call and the External id of conv2d (1)."""
    b = TraceBuilder()
    b.op("aten::conv2d", 0, 50_000)  # ext 1
    b.op("aten::relu", 60_000, 20_000)  # ext 2
    b.op("aten::mm", 100_000, 50_000)  # ext 3
    b.op("aten::empty_strided", 200_000, 5_000, ext=1001)
    b.launch_kernel("conv_kernel", launch_ns=10_000, launch_dur_ns=5_000, start_ns=20_000, dur_ns=30_000, ext=1001)
    b.launch_kernel("relu_kernel", launch_ns=65_000, launch_dur_ns=5_000, start_ns=70_000, dur_ns=4_000, ext=1002)
    b.launch_kernel("mm_kernel", launch_ns=110_000, launch_dur_ns=5_000, start_ns=120_000, dur_ns=8_000, ext=3)
    b.kernel("orphan_kernel", 300_000, 1_000, corr=5000, ext=1)
    return b.load(tmp_path)


def test_colliding_external_id_is_rejected_for_containment(tmp_path):
    trace = _colliding(tmp_path)
    got, reference = both_ways(lambda: links.launch_ops(trace))
    assert got.equals(reference)
    calls = got.select("name", "ts_ns", "op_name", pl.col("link").cast(pl.String)).sort("ts_ns").rows()
    assert [(t, op, link) for _, t, op, link in calls] == [
        (10_000, "aten::conv2d", "containment"),  # not aten::empty_strided (External id 1001)
        (65_000, "aten::relu", "containment"),
        (110_000, "aten::mm", "external_id"),
    ]
    gpu = links.gpu_links(trace).select("name", "op_name", pl.col("link").cast(pl.String)).sort("name").rows()
    assert gpu == [("conv_kernel", "aten::conv2d", "containment"), ("mm_kernel", "aten::mm", "external_id"),
                   ("orphan_kernel", None, None),  # no launch call to check its External id against
                   ("relu_kernel", "aten::relu", "containment")]
    warnings = links.link_warnings(trace).select("code", "count").rows()
    assert warnings == [("external_id_rejected", 1), ("gpu_external_id_unchecked", 1)]


def test_colliding_external_id_in_the_op_table(tmp_path):
    a = attribute(_colliding(tmp_path))
    self_gpu = dict(a.ops.select("name", "gpu_self_ns").rows())
    assert self_gpu == {"aten::conv2d": 30_000, "aten::mm": 8_000, "aten::relu": 4_000, "aten::empty_strided": 0}
    assert a.warnings["count"].to_list() == [1, 1]
    assert a.unlinked_events == 1


# -- the op tree: zero-length ops at the instant others start and end -------------------------

TREE_OPS = [  # name, ts, dur (ns); eid order as written
    ("aten::linear", 0, 100_000),
    ("aten::addmm", 10_000, 40_000),
    ("aten::result_type", 10_000, 0),  # a run of zero-length ops at the start of the longer addmm
    ("aten::result_type", 10_000, 0),
    ("aten::result_type", 10_000, 0),
    ("aten::item", 50_000, 0),  # at the instant addmm ends, where nothing longer starts
    ("aten::_local_scalar_dense", 50_000, 0),
    ("aten::add", 60_000, 20_000),
    ("aten::empty", 80_000, 0),  # at the instant add ends, where the longer relu starts
    ("aten::relu", 80_000, 10_000),
    ("aten::zeros", 100_000, 0),  # at the instant linear ends
    ("aten::sum", 120_000, 10_000),
    ("aten::result_type", 130_000, 0),  # at the instant sum ends
    ("aten::result_type", 200_000, 0),  # alone
]
TREE_EXPECTED = [  # (depth, parent's index in TREE_OPS)
    (0, None),  # linear
    (1, 0),  # addmm
    (2, 1), (2, 1), (2, 1),  # the run: siblings in addmm (a zero-length op contains nothing)
    (2, 1), (2, 1),  # item, _local_scalar_dense: in addmm, siblings
    (1, 0),  # add
    (2, 9),  # empty: in relu, which starts there (add is over for what starts with relu)
    (1, 0),  # relu
    (1, 0),  # zeros: in linear
    (0, None),  # sum
    (1, 11),  # result_type in sum
    (0, None),
]


def test_zero_length_ops_hand_computed_tree(tmp_path):
    b = TraceBuilder()
    for name, ts, dur in TREE_OPS:
        b.op(name, ts, dur)
    trace = b.load(tmp_path)
    got, reference = both_ways(lambda: links.cpu_ops(trace))
    assert got.equals(reference)
    rows = got.sort("eid").select("eid", "depth", "parent_eid").rows()
    index = {eid: i for i, (eid, _, _) in enumerate(rows)}
    assert [(d, None if p is None else index[p]) for _, d, p in rows] == TREE_EXPECTED
    # CPU self: each op's length less its children's; no op's self exceeds its total
    a = attribute(trace)
    self_ns = dict(a.ops.select("name", "cpu_self_ns").rows())
    assert self_ns["aten::linear"] == 100_000 - 40_000 - 20_000 - 10_000
    assert self_ns["aten::addmm"] == 40_000 and self_ns["aten::add"] == 20_000
    assert a.ops.filter(pl.col("cpu_self_ns") > pl.col("cpu_total_ns")).is_empty()
