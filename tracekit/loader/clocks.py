"""Notes on what a trace cannot show: a GPU side that was not recorded, host and GPU clocks
that disagree. Either would otherwise read as a finding about the program.

- `no_gpu_activity`: launch calls (`LAUNCH_CALL`) but no kernel, memcpy or memset at all.
- `clock_offset`: the launch calls' waits (first GPU start of the call's work minus the
  call's start, over calls with work in the trace) have a median of at least
  `OFFSET_MIN_NS`, even the quickest launches waited that long (the 1st percentile), and
  the device was busy less than `OFFSET_MAX_BUSY` of the time those at or above the median
  waited. With agreeing clocks a launch onto an idle GPU starts within microseconds
  (every shared real trace has launches that start 1.8-15.7 µs after their call); a wait of
  milliseconds with nothing running is the GPU clock read ahead of the host's. Traces
  whose work waits on something the trace does not show (an event, another rank) still
  have quick launches, so they do not qualify.
"""

from __future__ import annotations

import polars as pl

from tracekit.model import ENGINE, GPU_WORK_CATS

# launch and copy API names of every family (`analysis.launches.FAMILY_RULES`, together)
LAUNCH_CALL = r"^(cuda|cu|hip)(GraphLaunch|\w*Launch\w*(Kernel|Grid)|LaunchByPtr|Memcpy|Memset)"
OFFSET_MIN_NS = 1_000_000
OFFSET_QUICK_QUANTILE = 0.01
OFFSET_MAX_BUSY = 0.5
OFFSET_MIN_LAUNCHES = 5
# the notes that say what the trace cannot show: `summary` shows them beside its figures
LIMIT_CODES = ("no_gpu_activity", "clock_offset")


def no_gpu_note(notes, runtime: pl.DataFrame, gpu: pl.DataFrame) -> None:
    """`no_gpu_activity`: launch calls, and no GPU work at all."""
    if gpu.select(pl.col("cat").is_in(GPU_WORK_CATS).any()).item():
        return
    calls = runtime.select("eid", "name").filter(pl.col("name").str.contains(LAUNCH_CALL))
    notes.rows_of("no_gpu_activity", calls,
                  "the trace has {n:,} launch [calls|call] but no GPU activity: the GPU side was not recorded "
                  "(activities=[ProfilerActivity.CUDA] missing, or CUPTI failed)")


def launch_waits(runtime: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """One row per launch call with work in the trace: eid, device, `call_ns` (its start),
    `gpu_ns` (its work's first start), `wait_ns` (the difference)."""
    first = pl.col("correlation").is_not_null() & pl.col("correlation").is_first_distinct()
    calls = runtime.lazy().filter(first).select("eid", "correlation", call_ns=pl.col("ts_ns"))
    work = gpu.lazy().filter(pl.col("cat").is_in(GPU_WORK_CATS) & pl.col("correlation").is_not_null()).group_by(
        "correlation").agg(gpu_ns=pl.col("ts_ns").min(), device=pl.col("device").sort_by("ts_ns").first())
    return calls.join(work, on="correlation", how="inner").select(
        "eid", "device", "call_ns", "gpu_ns", wait_ns=pl.col("gpu_ns") - pl.col("call_ns")).collect(engine=ENGINE)


def clock_note(notes, runtime: pl.DataFrame, gpu: pl.DataFrame) -> None:
    """`clock_offset` (the module's rule)."""
    if runtime.is_empty() or gpu.is_empty():
        return
    waits = launch_waits(runtime, gpu)
    if waits.height < OFFSET_MIN_LAUNCHES:
        return
    median = float(waits["wait_ns"].median())  # type: ignore[arg-type]
    quick = float(waits["wait_ns"].quantile(OFFSET_QUICK_QUANTILE, "lower"))  # type: ignore[arg-type]
    if median < OFFSET_MIN_NS or quick < OFFSET_MIN_NS:
        return
    slow = waits.filter(pl.col("wait_ns") >= median)
    busy = busy_share(slow, gpu)
    if busy >= OFFSET_MAX_BUSY:
        return
    notes.add("clock_offset", waits.height,
              f"the median launch latency (GPU start - call start, over {{n:,}} [launches|launch]) is "
              f"{median / 1e6:.3g} ms, 99 % of them waited at least {quick / 1e6:.3g} ms, and the GPU was busy "
              f"{busy:.0%} of those waits: the host and GPU clocks disagree (by about {quick / 1e6:.3g} ms); "
              "launch latency, launch overhead and the gaps' host-side causes are not judged", int(slow["eid"].min()))


def busy_share(windows: pl.DataFrame, gpu: pl.DataFrame) -> float:
    """The share of the windows [call_ns, gpu_ns) during which their device ran any GPU work."""
    merged = (gpu.lazy().filter(pl.col("cat").is_in(GPU_WORK_CATS))
              .select(pl.col("device").fill_null(-1), "ts_ns", "end_ns")
              .sort("device", "ts_ns")
              .with_columns(_reach=pl.col("end_ns").cum_max().shift(1).over("device"))
              .with_columns(_run=(pl.col("ts_ns") > pl.col("_reach").fill_null(pl.col("ts_ns") - 1)).cum_sum().over("device"))
              .group_by("device", "_run").agg(start=pl.col("ts_ns").min(), end=pl.col("end_ns").max())
              .sort("device", "start")
              .with_columns(_before=(pl.col("end") - pl.col("start")).cum_sum().over("device")
                            - (pl.col("end") - pl.col("start")))
              .sort("start")  # (for the as-of join: sorted on its key)
              .collect(engine=ENGINE))

    def busy_before(t: str) -> pl.Expr:  # ns of work on the device before time `t`
        return pl.col("_before") + (pl.col(t) - pl.col("start")).clip(0, pl.col("end") - pl.col("start"))

    def at(t: str) -> pl.Series:
        points = windows.select(pl.col("device").fill_null(-1), t).with_row_index("_i").sort(t)
        hit = points.join_asof(merged, left_on=t, right_on="start", by="device", strategy="backward",
                               check_sortedness=False)  # (both sorted on it above)
        return hit.sort("_i").select(busy_before(t).fill_null(0)).to_series()

    total = int((windows["gpu_ns"] - windows["call_ns"]).sum())
    busy = int((at("gpu_ns") - at("call_ns")).sum())
    return busy / total if total > 0 else 1.0

