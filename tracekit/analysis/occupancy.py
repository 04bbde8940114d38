"""Theoretical occupancy, recomputed from launch parameters and `deviceProperties`.

Kineto's `est. achieved occupancy %` runs NVIDIA's occupancy calculator with the *default*
per-block shared-memory limit (48 KB): kernels that opted into more (cuDNN SDPA, FA3, many
CUTLASS and cuBLAS kernels) read 0 %. This module repeats the calculator
(`cuda_occupancy.h`, `cudaOccMaxActiveBlocksPerMultiprocessor`) with the opt-in limit, as
vectorised Polars expressions, and names the limiting factor.

Per kernel launch, with `W` = warp size and the device joined on `device == devices.id`:

    warps_per_block   = ceil(threads_per_block / W)
    limit_warps       = (max_threads_per_sm / W) // warps_per_block   (0 if block too large)
    regs_per_warp     = ceil(registers_per_thread * W / 256) * 256
    limit_registers   = (regs_per_sm / P // regs_per_warp) * P // warps_per_block
                        (P = 4 register sub-partitions, 2 on sm_60; unlimited for 0 regs;
                        0 if the block exceeds `regs_per_block`, counting warps rounded up
                        to P as the hardware check does, or regs > 255)
    smem_per_block    = ceil((shared_memory + reserved) / granularity) * granularity
                        (reserved = 1 KB per block on sm_80+, 0 before; granularity
                        128 B on sm_80+, 256 B before)
    limit_shared_mem  = shared_mem_per_sm // smem_per_block, or 0 when smem_per_block exceeds
                        the per-block limit: `shared_mem_per_block` (48 KB) + reserved, or
                        `shared_mem_per_block_optin` + reserved when the kernel uses more
                        than 48 KB (it must have opted in, or it could not have launched)
    limit_blocks      = max resident blocks per SM (`MAX_BLOCKS_PER_SM`, by capability)
    active_blocks     = min(the four limits above)
    grid_blocks_per_sm = grid_x * grid_y * grid_z / num_sms   (an average, as Kineto uses)
    theoretical_occupancy = min(active_blocks, grid_blocks_per_sm) * warps_per_block
                            / (max_threads_per_sm / W)
    sm_efficiency     = min(grid_blocks / num_sms, 1)   (TensorBoard's "est. SM efficiency")

`limiting_factor` is `grid` when the grid is too small to fill the resident slots
(grid_blocks_per_sm < active_blocks); otherwise the first limit equal to `active_blocks` in
the calculator's order: warps, registers, shared_memory, blocks.

Assumptions: the default shared-memory carveout (the full `shared_mem_per_sm` is
available); Kineto's `shared memory` is static + dynamic shared memory per block; warps
are counted allocated (rounded up), where Kineto counts threads. Every output is null for
rows without launch parameters, without a matching device, for devices whose warp size is
not 32 (AMD: the CUDA model does not apply) and for compute capabilities missing from
`MAX_BLOCKS_PER_SM`.
"""

from __future__ import annotations

import polars as pl

from tracekit.analysis.taxonomy import category_in
from tracekit.model import ENGINE

# Max resident blocks per SM, CUDA C++ Programming Guide, "Technical Specifications per
# Compute Capability" (also cuda_occupancy.h for 3.x-8.x). Keys are major * 10 + minor.
MAX_BLOCKS_PER_SM: dict[int, int] = {
    30: 16, 32: 16, 35: 16, 37: 16,
    50: 32, 52: 32, 53: 32, 60: 32, 61: 32, 62: 32,
    70: 32, 72: 32, 75: 16,
    80: 32, 86: 16, 87: 16, 89: 24,
    90: 32, 100: 32, 101: 32, 103: 32, 120: 32, 121: 32,
}
REG_ALLOC_UNIT = 256  # registers, per warp, all supported capabilities
MAX_REGS_PER_THREAD = 255
LIMITING_FACTORS: tuple[str, ...] = ("grid", "warps", "registers", "shared_memory", "blocks")

OCCUPANCY_SCHEMA: dict[str, pl.DataType] = {
    "eid": pl.Int64(), "name": pl.String(), "device": pl.Int64(), "stream": pl.Int64(),
    "ts_ns": pl.Int64(), "dur_ns": pl.Int64(),
    "threads_per_block": pl.Int64(), "warps_per_block": pl.Int64(), "grid_blocks": pl.Int64(),
    "limit_warps": pl.Int64(), "limit_registers": pl.Int64(),
    "limit_shared_memory": pl.Int64(), "limit_blocks": pl.Int64(),
    "active_blocks_per_sm": pl.Int64(), "grid_blocks_per_sm": pl.Float64(),
    "theoretical_occupancy": pl.Float64(), "limiting_factor": pl.String(),
    "kineto_occupancy_pct": pl.Float64(), "sm_efficiency": pl.Float64(),
}
OCCUPANCY_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String(), "count": pl.Int64(), "total_ns": pl.Int64(),
    "theoretical_occupancy": pl.Float64(), "limiting_factor": pl.String(),
    "kineto_occupancy_pct": pl.Float64(), "sm_efficiency": pl.Float64(),
}
_DEVICE_COLUMNS: dict[str, pl.DataType] = {
    "id": pl.Int64(), "num_sms": pl.Int64(), "max_threads_per_sm": pl.Int64(),
    "max_threads_per_block": pl.Int64(), "regs_per_sm": pl.Int64(),
    "regs_per_block": pl.Int64(), "warp_size": pl.Int64(), "shared_mem_per_block": pl.Int64(),
    "shared_mem_per_block_optin": pl.Int64(), "shared_mem_per_sm": pl.Int64(),
    "compute_major": pl.Int64(), "compute_minor": pl.Int64(),
}
_KERNEL_COLUMNS: tuple[str, ...] = (
    "eid", "name", "device", "stream", "ts_ns", "dur_ns", "grid_x", "grid_y", "grid_z",
    "block_x", "block_y", "block_z", "registers_per_thread", "shared_memory",
    "est_occupancy_pct",
)


def _ceil_div(a: pl.Expr, b: pl.Expr | int) -> pl.Expr:
    return (a + b - 1) // b


def _device_limits(devices: pl.DataFrame) -> pl.LazyFrame:
    """One row per device id with the capability-dependent constants added."""
    present = [c for c in _DEVICE_COLUMNS if c in devices.columns]
    dev = devices.lazy().select(present).with_columns(
        pl.lit(None, dtype=dtype).alias(c) for c, dtype in _DEVICE_COLUMNS.items() if c not in present
    ).cast(_DEVICE_COLUMNS).unique(subset="id", keep="first", maintain_order=True)
    cc = pl.col("compute_major") * 10 + pl.col("compute_minor")
    ampere_plus = pl.col("compute_major") >= 8
    return dev.drop_nulls("id").with_columns(
        max_blocks_per_sm=cc.replace_strict(MAX_BLOCKS_PER_SM, default=None, return_dtype=pl.Int64),
        sub_partitions=pl.when(cc == 60).then(2).otherwise(4),
        smem_reserved=pl.when(ampere_plus).then(1024).otherwise(0),
        smem_granularity=pl.when(ampere_plus).then(128).otherwise(256),
        optin=pl.coalesce("shared_mem_per_block_optin", "shared_mem_per_block"),
    )


def _geometry() -> list[pl.Expr]:
    threads = pl.col("block_x") * pl.col("block_y") * pl.col("block_z")
    return [
        threads.alias("threads_per_block"),
        _ceil_div(threads, pl.col("warp_size")).alias("warps_per_block"),
        (pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z")).alias("grid_blocks"),
    ]


def _limit_warps() -> pl.Expr:
    max_warps = pl.col("max_threads_per_sm") // pl.col("warp_size")
    too_big = pl.col("threads_per_block") > pl.col("max_threads_per_block").fill_null(1024)
    return pl.when(too_big).then(0).otherwise(max_warps // pl.col("warps_per_block"))


def _limit_registers() -> pl.Expr:
    regs, parts = pl.col("registers_per_thread"), pl.col("sub_partitions")
    per_warp = _ceil_div(regs * pl.col("warp_size"), REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    wpb = pl.col("warps_per_block")
    assumed = per_warp * _ceil_div(wpb, parts) * parts  # hardware check: warps rounded to P
    too_big = (
        (pl.col("regs_per_block") < assumed)
        | (pl.col("regs_per_block") < per_warp * wpb)
        | (regs > MAX_REGS_PER_THREAD)
    )
    fit = (pl.col("regs_per_sm") // parts // per_warp) * parts // wpb
    # regs == 0: no register limit (null, ignored by min_horizontal)
    return pl.when(regs == 0).then(None).when(too_big).then(0).otherwise(fit)


def _limit_shared_memory() -> pl.Expr:
    smem, gran = pl.col("shared_memory"), pl.col("smem_granularity")
    per_block = _ceil_div(smem + pl.col("smem_reserved"), gran) * gran
    opted_in = smem > pl.col("shared_mem_per_block")
    block_limit = (
        pl.when(opted_in).then(pl.col("optin")).otherwise(pl.col("shared_mem_per_block"))
        + pl.col("smem_reserved")
    )
    return (
        pl.when(per_block > block_limit).then(0)
        .when(per_block == 0).then(None)  # no shared memory: no limit
        .otherwise(pl.col("shared_mem_per_sm") // per_block)
    )


def _limiting_factor() -> pl.Expr:
    active = pl.col("active_blocks_per_sm")
    return (
        pl.when(pl.col("grid_blocks_per_sm") < active).then(pl.lit("grid"))
        .when(active == pl.col("limit_warps")).then(pl.lit("warps"))
        .when(active == pl.col("limit_registers")).then(pl.lit("registers"))
        .when(active == pl.col("limit_shared_memory")).then(pl.lit("shared_memory"))
        .when(active == pl.col("limit_blocks")).then(pl.lit("blocks"))
    )


def _computable() -> pl.Expr:
    """Rows the CUDA occupancy model applies to: NVIDIA device known, launch params present."""
    needed = (
        "threads_per_block", "grid_blocks", "registers_per_thread", "shared_memory",
        "max_blocks_per_sm", "max_threads_per_sm", "regs_per_sm", "regs_per_block",
        "shared_mem_per_block", "shared_mem_per_sm", "num_sms",
    )
    present = pl.all_horizontal(pl.col(c).is_not_null() for c in needed)
    return (
        present & (pl.col("warp_size") == 32) & (pl.col("threads_per_block") > 0)
        & (pl.col("grid_blocks") > 0) & (pl.col("num_sms") > 0)
    )


def _kernels(gpu: pl.DataFrame) -> pl.LazyFrame:
    return gpu.lazy().filter(category_in("kernel")).select(_KERNEL_COLUMNS)


def occupancy(gpu: pl.DataFrame, devices: pl.DataFrame) -> pl.DataFrame:
    """Per kernel launch: theoretical occupancy (0..1), its limiting factor, Kineto's figure.

    `gpu` is a frame with `tracekit.model.GPU_SCHEMA` columns (only `cat == "kernel"` rows
    are used); `devices` is `trace.meta.devices`. Rows keep the order of `gpu`. The table
    and the findings' rule can read only some of its columns, from `occupancy_plan`, or
    this frame when the caller has it (`occupancy_table(per_launch=)`).
    """
    return occupancy_plan(gpu, devices).collect(engine=ENGINE)


def occupancy_plan(gpu: pl.DataFrame, devices: pl.DataFrame) -> pl.LazyFrame:
    """`occupancy` as a lazy plan, for readers that aggregate it or need a few of its
    columns: they need not hold every column of every launch."""
    computable = _computable()
    frame = (
        _kernels(gpu)
        .join(_device_limits(devices), left_on="device", right_on="id", how="left",
              maintain_order="left")
        .with_columns(_geometry())
        .with_columns(
            limit_warps=_limit_warps(),
            limit_registers=_limit_registers(),
            limit_shared_memory=_limit_shared_memory(),
            limit_blocks=pl.col("max_blocks_per_sm"),
            grid_blocks_per_sm=pl.col("grid_blocks") / pl.col("num_sms"),
            sm_efficiency=pl.min_horizontal(pl.col("grid_blocks") / pl.col("num_sms"), pl.lit(1.0)),
            kineto_occupancy_pct=pl.col("est_occupancy_pct"),
        )
        .with_columns(
            active_blocks_per_sm=pl.min_horizontal(
                "limit_warps", "limit_registers", "limit_shared_memory", "limit_blocks"
            )
        )
        .with_columns(
            theoretical_occupancy=pl.min_horizontal("active_blocks_per_sm", "grid_blocks_per_sm")
            * pl.col("warps_per_block") / (pl.col("max_threads_per_sm") // pl.col("warp_size")),
            limiting_factor=_limiting_factor(),
        )
    )
    model_columns = [
        "warps_per_block", "limit_warps", "limit_registers", "limit_shared_memory",
        "limit_blocks", "active_blocks_per_sm", "theoretical_occupancy", "limiting_factor",
    ]
    return (
        frame.with_columns(pl.when(computable).then(pl.col(c)).alias(c) for c in model_columns)
        .with_columns(
            pl.when(pl.col("num_sms") > 0).then(pl.col(c)).alias(c)
            for c in ("grid_blocks_per_sm", "sm_efficiency")
        )
        .select(list(OCCUPANCY_SCHEMA))
        .cast(OCCUPANCY_SCHEMA)
    )


def _weighted_mean(col: str) -> pl.Expr:
    """Duration-weighted mean over rows where `col` is known; plain mean if all durations are 0."""
    known_dur = pl.when(pl.col(col).is_not_null()).then(pl.col("dur_ns"))
    weight = known_dur.sum()
    return (
        pl.when(weight > 0).then((pl.col(col) * pl.col("dur_ns")).sum() / weight)
        .otherwise(pl.col(col).mean())
    )


def occupancy_table(gpu: pl.DataFrame, devices: pl.DataFrame, *,
                    per_launch: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per kernel name: calls, total time, duration-weighted mean theoretical occupancy,
    the most frequent limiting factor (ties: alphabetical), Kineto's duration-weighted mean
    `est. achieved occupancy %` and the duration-weighted SM efficiency; by total time.

    From `per_launch` (`occupancy(gpu, devices)`, or a frame of at least the columns read
    here) when given; else from the launches' columns it reads (`occupancy_plan`), which
    are let go once it is made (the whole per-launch frame need not be)."""
    columns = ("name", "dur_ns", "theoretical_occupancy", "kineto_occupancy_pct", "sm_efficiency", "limiting_factor")
    plan = occupancy_plan(gpu, devices) if per_launch is None else per_launch.lazy()
    occ = plan.select(columns).collect(engine=ENGINE).lazy()
    modes = (
        occ.drop_nulls("limiting_factor")
        .group_by("name", "limiting_factor").agg(n=pl.len())
        .sort(["name", "n", "limiting_factor"], descending=[False, True, False])
        .unique(subset="name", keep="first")
        .select("name", "limiting_factor")
    )
    stats = occ.group_by("name").agg(
        count=pl.len(),
        total_ns=pl.col("dur_ns").sum(),
        theoretical_occupancy=_weighted_mean("theoretical_occupancy"),
        kineto_occupancy_pct=_weighted_mean("kineto_occupancy_pct"),
        sm_efficiency=_weighted_mean("sm_efficiency"),
    )
    return (
        stats.join(modes, on="name", how="left")
        .select(list(OCCUPANCY_TABLE_SCHEMA))
        .cast(OCCUPANCY_TABLE_SCHEMA)
        .sort(["total_ns", "name"], descending=[True, False], nulls_last=True)
        .collect(engine=ENGINE)
    )
