"""The timeline's CPU lanes: a golden trace with hand-computed lanes (the busiest threads,
what each interval is, the order of the rows)."""

from __future__ import annotations

from builders import TraceBuilder

from tracekit.report.lanes import cpu_lanes


def test_cpu_lanes_pick_the_busiest_threads_and_class_their_rows(tmp_path):
    b = TraceBuilder()
    # thread 1: ops 300 + 200 ns, a launch 50, a blocking sync 200, an async copy 100 (a launch): 850 ns
    b.op("aten::mm", 0, 300, tid=1)
    b.annotation("forward", 400, 200, tid=1)
    b.runtime("cudaLaunchKernel", 100, 50, tid=1)
    b.runtime("cudaDeviceSynchronize", 700, 200, tid=1)
    b.runtime("cudaMemcpyAsync", 1_000, 100, tid=1)
    b.op("aten::add", 0, 1_000, tid=2)  # the busiest: 1000 ns
    b.runtime("cudaStreamSynchronize", 0, 100, tid=3)  # 100 ns (the step range below does not count)
    b.annotation("ProfilerStep#1", 0, 5_000, tid=3)
    b.op("aten::relu", 0, 50, tid=4)  # 50 ns, tied with thread 5: the lower tid wins the last lane
    b.op("aten::relu", 0, 50, tid=5)
    b.op("aten::mm", 5_000, 9_000, tid=5)  # outside the window: not counted
    trace = b.load(tmp_path)

    lanes = cpu_lanes(trace, t0=0, t1=2_000)

    assert [label for label, _, _ in lanes] == ["CPU thread 2", "CPU thread 1", "CPU thread 3", "CPU thread 4"]
    assert lanes[1][1] == "process 1000, thread 1 (thread 1)"
    rows = {label: iv.rows() for label, _, iv in lanes}
    assert rows["CPU thread 2"] == [(0, 1_000, "cpu", 1)]
    # the ops first, then the calls, each in time order
    assert rows["CPU thread 1"] == [(0, 300, "cpu", 1), (400, 600, "cpu", 1), (100, 150, "launch", 2),
                                    (700, 900, "sync", 3), (1_000, 1_100, "launch", 2)]
    assert rows["CPU thread 3"] == [(0, 100, "sync", 3)]
    assert rows["CPU thread 4"] == [(0, 50, "cpu", 1)]
    assert all(list(iv.schema) == ["start_ns", "end_ns", "cls", "prio"] for _, _, iv in lanes)


def test_an_async_copy_to_pageable_memory_is_drawn_as_a_sync(tmp_path):
    b = TraceBuilder()
    pageable = b.runtime("cudaMemcpyAsync", 0, 300, tid=1)  # returns when its copy to pageable memory is done
    b.gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 200, 90, corr=pageable)
    pinned = b.runtime("cudaMemcpyAsync", 400, 20, tid=1)
    b.gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 500, 90, corr=pinned)
    (lane,) = cpu_lanes(b.load(tmp_path), t0=0, t1=1_000)
    assert lane[2].rows() == [(0, 300, "sync", 3), (400, 420, "launch", 2)]


def test_cpu_lanes_of_a_window_without_cpu_work_are_empty(tmp_path):
    b = TraceBuilder()
    b.op("aten::mm", 0, 300, tid=1)
    b.kernel("K", 100, 100)
    assert cpu_lanes(b.load(tmp_path), t0=10_000, t1=20_000) == []


def test_ticks_count_from_the_origin_at_round_times():
    from tracekit.report.timeline import ticks

    # a window [430, 830) ns drawn 400 px wide: ticks every 50 ns, labelled from the origin
    zoom = ticks(430, 830, 400, 0.0, origin=0)
    assert [(round(t.x, 6), t.label) for t in zoom] == [(20.0 + 50 * i, f"{450 + 50 * i} ns") for i in range(8)]
    whole = ticks(430, 830, 400, 0.0)  # no origin: from the window's start
    assert [t.label for t in whole][:3] == ["0 ns", "50 ns", "100 ns"] and whole[0].x == 0.0
