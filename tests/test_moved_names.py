"""Modules split by meaning (docs/architecture.md, Habits) keep every name other modules import
from them: each moved name is still importable from the module it left, as the same object."""

from __future__ import annotations

import importlib

import pytest

# the module a name was imported from -> (the module it moved to, the names)
MOVED = {
    "tracekit.analysis.graph": [
        ("tracekit.analysis.graph_columns", ["CLASS", "CLASSES", "EDGE_KINDS", "KIND", "ROLE", "ROLES", "EDGE_SCHEMA",
                                             "SEGMENT_SCHEMA", "SYNC_SCHEMA", "EVENT_RECORD_CALL",
                                             "DEFAULT_SYNC_TOLERANCE_NS", "DEFAULT_MIN_BLOCKING_NS",
                                             "DEFAULT_IDLE_GAP_NS"]),
        ("tracekit.analysis.graph_cpu", ["piece_runs", "run_sums", "MAX_PIECE_RUNS"]),
        ("tracekit.analysis.graph_gpu", ["sync_waits", "cross_stream_edges"]),
    ],
    "tracekit.analysis.critical_path": [
        ("tracekit.analysis.path_segments", ["EDGE", "MODULE", "PATH_SCHEMA", "longest_path", "path_nodes",
                                             "path_segments", "path_steps", "steps_to_segments"]),
        ("tracekit.analysis.path_verdict", ["GROUPS"]),
    ],
    "tracekit.analysis.intervals": [
        ("tracekit.analysis.slice_lookups", ["innermost", "touched"]),
    ],
    "tracekit.analysis.work": [
        ("tracekit.analysis.op_inputs", ["DTYPE_BYTES", "DTYPE_LABEL", "SCALAR_TYPES", "Args", "Work"]),
        ("tracekit.analysis.work_formulas", ["ATTENTION", "CONV", "CONV_ARGS", "matmul_dims"]),
    ],
}


@pytest.mark.parametrize("old, new, name", [(old, new, name) for old, moves in MOVED.items()
                                            for new, names in moves for name in names])
def test_a_moved_name_is_importable_where_it_was(old, new, name):
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize("old", list(MOVED))
def test_the_module_it_left_lists_it(old):
    listed = set(importlib.import_module(old).__all__)
    assert {name for _, names in MOVED[old] for name in names} <= listed
