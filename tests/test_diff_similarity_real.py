"""The diff's kernel similarity recomputed from the raw JSON of real traces: the kernels each
step's launch calls made (the warm-up step left out), grouped by family, time-weighted."""

from __future__ import annotations

import gzip
import json
import statistics
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from conftest import real_trace

import tracekit
from tracekit.diff import diff
from tracekit.diff.names import kernel_base, kernel_key
from tracekit.diff.similarity import THRESHOLD, family

pytestmark = pytest.mark.real


def _ns(us: object) -> int:
    return round(Decimal(str(us)) * 1000)


def _step_kernels(path: Path) -> pl.DataFrame:
    """(family, ns) of the kernels launched inside a counted ProfilerStep, from the raw events."""
    events = json.load(gzip.open(path), parse_float=Decimal)["traceEvents"]
    steps = sorted((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in events
                   if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                   and str(e.get("name", "")).startswith("ProfilerStep#"))
    lengths = [b - a for a, b in steps]
    if len(steps) > 2 and lengths[0] > 1.5 * statistics.median(lengths[1:]):
        steps = steps[1:]  # the warm-up step
    launch = {e["args"]["correlation"]: _ns(e["ts"]) for e in events
              if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in (e.get("args") or {})}
    rows = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            at = launch.get((e.get("args") or {}).get("correlation"), _ns(e["ts"]))
            if any(a <= at < b for a, b in steps):
                rows.append((e["name"], _ns(e["dur"])))
    frame = pl.DataFrame(rows, schema={"name": pl.String, "ns": pl.Int64}, orient="row")
    return frame.group_by(family(kernel_base(kernel_key(pl.col("name")))).alias("family")).agg(pl.col("ns").sum())


def _covered(x: pl.DataFrame, y: pl.DataFrame) -> float:
    return x.filter(pl.col("family").is_in(y["family"].implode()))["ns"].sum() / x["ns"].sum()


@pytest.mark.parametrize(("before", "after", "comparable"), [
    ("diff_control_a100_dlrm.json.gz", "diff_test_v100_dlrm.json.gz", True),
    ("v100_resnet_ns_timestamps.json.gz", "diff_control_a100_dlrm.json.gz", False),
])
def test_similarity_is_the_raw_time_weighted_family_coverage(before: str, after: str, comparable: bool) -> None:
    b, a = real_trace(before), real_trace(after)
    kb, ka = _step_kernels(b), _step_kernels(a)
    expected = min(_covered(kb, ka), _covered(ka, kb))
    sim = diff(tracekit.load(b), tracekit.load(a)).similarity
    assert sim.kernel_score == pytest.approx(expected, abs=5e-4)  # the scores are kept to three places
    assert sim.score == max(sim.kernel_score, sim.op_score)
    assert sim.comparable is comparable and (sim.score >= THRESHOLD) is comparable
