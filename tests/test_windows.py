"""Annotation windows and steps: two ProfilerSteps with GPU twins (never double counted, the
last one kept), GPU projection via correlation, per-kind statistics, warm-up, window bounds."""

from __future__ import annotations

import polars as pl
import pytest
from builders import TraceBuilder

from tracekit.analysis.windows import (
    BOUNDS_SCHEMA, INSTANCE_SCHEMA, STATS_SCHEMA, STEP_SCHEMA, steps, window_bounds, windows,
)
from tracekit.model import Trace

T2 = 2000  # the autograd (backward) thread


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory) -> Trace:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 100_000, gpu=True)
    b.annotation("ProfilerStep#2", 100_000, 50_000, gpu=True)
    b.annotation("fwd", 5_000, 20_000)
    ext = b.op("aten::mm", 10_000, 10_000)
    b.launch_kernel("K1", launch_ns=12_000, launch_dur_ns=3_000, start_ns=30_000, dur_ns=20_000, ext=ext)
    ext = b.op("aten::add", 60_000, 10_000)  # its kernel runs during step 2: still step 1's work
    b.launch_kernel("K2", launch_ns=62_000, launch_dur_ns=2_000, start_ns=110_000, dur_ns=10_000, ext=ext)
    ext = b.op("aten::copy_", 79_000, 7_000)
    b.launch_copy("HtoD (Pinned -> Device)", launch_ns=80_000, launch_dur_ns=5_000, start_ns=90_000,
                  dur_ns=5_000, nbytes=1 << 20, ext=ext, stream=8)
    b.annotation("fwd", 101_000, 39_000)
    ext = b.op("aten::mul", 101_500, 2_500)
    b.launch_kernel("K4", launch_ns=102_000, launch_dur_ns=1_000, start_ns=130_000, dur_ns=10_000, ext=ext)
    ext = b.op("autograd::engine::evaluate_function: MmBackward0", 104_500, 2_000, tid=T2)
    b.launch_kernel("K3", launch_ns=105_000, launch_dur_ns=1_000, start_ns=125_000, dur_ns=5_000, ext=ext,
                    tid=T2)
    return b.load(tmp_path_factory.mktemp("win"))


def test_steps_use_the_cpu_annotation_and_keep_the_last(two_steps: Trace) -> None:
    s = steps(two_steps)
    assert s.select("name", "step", "start_ns", "end_ns", "dur_ns").rows() == [
        ("ProfilerStep#1", 1, 0, 100_000, 100_000), ("ProfilerStep#2", 2, 100_000, 150_000, 50_000)]
    assert s.schema == pl.Schema(STEP_SCHEMA)
    assert two_steps.gpu.filter(pl.col("cat") == "gpu_user_annotation").height == 2  # twins exist


def test_instances_project_onto_the_gpu(two_steps: Trace) -> None:
    w = windows(two_steps)
    assert w.instances.schema == pl.Schema(INSTANCE_SCHEMA)
    rows = w.instances.select("name", "cpu_ns", "gpu_start_ns", "gpu_end_ns", "gpu_ns", "gpu_busy_ns",
                              "kernels", "gpu_events", "warmup").rows()
    assert rows == [
        ("ProfilerStep#1", 100_000, 30_000, 120_000, 90_000, 35_000, 2, 3, True),
        ("fwd", 20_000, 30_000, 50_000, 20_000, 20_000, 1, 1, False),
        ("ProfilerStep#2", 50_000, 125_000, 140_000, 15_000, 15_000, 2, 2, False),  # both threads
        ("fwd", 39_000, 130_000, 140_000, 10_000, 10_000, 1, 1, False),  # its own thread only
    ]
    assert (w.steps, w.warmup_steps) == (2, 1)


def test_stats_per_kind_skip_warmup(two_steps: Trace) -> None:
    stats = windows(two_steps).stats
    assert stats.schema == pl.Schema(STATS_SCHEMA)
    is_step_cpu = (pl.col("kind") == "ProfilerStep") & (pl.col("metric") == "cpu_ns")
    step = stats.filter(is_step_cpu).row(0, named=True)
    assert (step["instances"], step["warmup"], step["count"], step["mean_ns"]) == (2, 1, 1, 50_000)
    fwd = {r["metric"]: r for r in stats.filter(pl.col("kind") == "fwd").to_dicts()}
    cpu = fwd["cpu_ns"]
    assert (cpu["count"], cpu["mean_ns"], cpu["median_ns"]) == (2, 29_500, 29_500)
    assert (fwd["cpu_ns"]["min_ns"], fwd["cpu_ns"]["max_ns"]) == (20_000, 39_000)
    assert fwd["cpu_ns"]["cv"] == pytest.approx(9_500 / 29_500)
    assert fwd["gpu_ns"]["cv"] == pytest.approx(5_000 / 15_000)
    assert stats["kind"].to_list()[:3] == ["ProfilerStep"] * 3  # kinds in order of first start


@pytest.mark.parametrize(("first_ns", "warmup"), [(100_000, True), (97_500, False)])
def test_warmup_is_strictly_above_one_and_a_half_medians(tmp_path, first_ns: int, warmup: bool) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, first_ns)
    b.annotation("ProfilerStep#1", 200_000, 60_000)
    b.annotation("ProfilerStep#2", 300_000, 70_000)  # median of the others: 65 µs
    w = windows(b.load(tmp_path))
    assert w.instances["warmup"].to_list() == [warmup, False, False]


def test_an_empty_last_step_does_not_make_the_real_one_a_warmup(tmp_path) -> None:
    """The profiler opens ProfilerStep#2 as it stops: 50 µs, no GPU work. The 1 ms step before
    it is the capture's only real step, not a warm-up; with a second real step it would be."""
    def trace(real_steps: int):
        b = TraceBuilder()
        for i in range(real_steps):
            t = i * 2_000_000
            b.annotation(f"ProfilerStep#{i + 1}", t, 1_000_000 if i == 0 else 400_000)
            b.launch_kernel("k", launch_ns=t + 10_000, launch_dur_ns=5_000, start_ns=t + 20_000, dur_ns=100_000)
        b.annotation(f"ProfilerStep#{real_steps + 1}", real_steps * 2_000_000, 50_000)
        (tmp_path / str(real_steps)).mkdir()
        return windows(b.load(tmp_path / str(real_steps)))

    one = trace(1)
    assert (one.instances["warmup"].to_list(), one.warmup_steps) == ([False, False], 0)
    two = trace(2)  # 1 ms against the other real step's 0.4 ms: a warm-up
    assert (two.instances["warmup"].to_list(), two.warmup_steps) == ([True, False, False], 1)


def test_window_bounds_matching(two_steps: Trace) -> None:
    def names(pattern: str) -> list[str]:
        return window_bounds(two_steps, pattern)["window_name"].to_list()

    assert names("ProfilerStep#2") == ["ProfilerStep#2"]
    assert names("ProfilerStep") == ["ProfilerStep#1", "ProfilerStep#2"]
    assert names("^fw") == ["fwd", "fwd"]
    assert names("nothing") == [] and names("([") == []
    b = window_bounds(two_steps, "ProfilerStep#1")
    assert b.schema == pl.Schema(BOUNDS_SCHEMA)
    assert b.select("window_start_ns", "window_end_ns").row(0) == (0, 100_000)
    assert windows(two_steps, name="fwd").instances.height == 2


def test_old_traces_write_steps_as_cpu_ops(tmp_path) -> None:
    b = TraceBuilder()
    b.op("ProfilerStep#5", 0, 10_000)
    b.op("ProfilerStep#6", 10_000, 10_000)
    assert steps(b.load(tmp_path))["step"].to_list() == [5, 6]


def test_empty_trace() -> None:
    assert steps(Trace.empty()).schema == pl.Schema(STEP_SCHEMA)
    w = windows(Trace.empty())
    assert w.instances.is_empty() and w.stats.is_empty() and (w.steps, w.warmup_steps) == (0, 0)
    assert w.instances.schema == pl.Schema(INSTANCE_SCHEMA) and w.stats.schema == pl.Schema(STATS_SCHEMA)
    assert window_bounds(Trace.empty(), "ProfilerStep").is_empty()
    assert w.to_dict()["steps"] == 0
