"""A lean trace: the frames less what no analysis reads, for commands that only analyse.

A trace holds more than the analyses read, a part of a report's peak held for the whole
of it:
- the flow events (`flows`): the analyses link launches to GPU work by correlation id,
  not by flow;
- the ops' leftover `args` text and their autograd and Python ids
  (`model.UNREAD_OP_COLUMNS`): `Ev Idx`, `Record function id`, sequence numbers;
- the runtime calls' CUPTI callback ids (`model.UNREAD_RUNTIME_COLUMNS`);
- the GPU rows' `args` text (`model.UNREAD_GPU_COLUMNS`) but that of `cuda_sync` records,
  where the dependency graph reads which stream a wait was on.

`lean_trace` keeps every frame and column: flows has no rows, and the columns left out
hold nulls (constant columns, which take no memory: `loader.constants`). `meta.lean`
says so. The load's notes are made before, from the whole trace, so they are the same.
Every analysis, report, finding and diff of a lean trace is the same as of the whole one
(tests compare them); `tracekit info`, which counts the flows, loads the whole trace.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from tracekit.model import UNREAD_GPU_COLUMNS, UNREAD_OP_COLUMNS, UNREAD_RUNTIME_COLUMNS, Trace

KEPT_GPU_ARGS = "cuda_sync"  # the GPU rows whose `UNREAD_GPU_COLUMNS` a lean trace keeps (their `cat`)


def lean_trace(trace: Trace) -> Trace:
    """`trace` without what no analysis reads (see the module's docstring); a lean trace
    as it is."""
    if trace.meta.lean:
        return trace
    synced = pl.col("cat") == KEPT_GPU_ARGS
    gpu = trace.gpu
    if gpu.select(synced.any()).item():
        gpu = gpu.with_columns(pl.when(synced).then(pl.col(c)).alias(c) for c in UNREAD_GPU_COLUMNS)
    else:
        gpu = _nulls(gpu, UNREAD_GPU_COLUMNS)
    return trace.replace(ops=_nulls(trace.ops, UNREAD_OP_COLUMNS), runtime=_nulls(trace.runtime, UNREAD_RUNTIME_COLUMNS),
                         gpu=gpu, flows=trace.flows.clear(), meta=replace(trace.meta, lean=True))


def _nulls(frame: pl.DataFrame, columns: tuple[str, ...]) -> pl.DataFrame:
    """`frame` with `columns` all null, as constant columns (no memory: `loader.constants`)."""
    return frame.with_columns(pl.lit(None, frame.schema[c]).alias(c) for c in columns)
