"""Theoretical occupancy: hand-computed launches on A100/H100/V100/sm_86, the rows the model
does not apply to, the per-name table, and agreement with Kineto on real traces."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from conftest import real_trace

import tracekit
from tracekit.analysis.occupancy import (
    LIMITING_FACTORS, OCCUPANCY_SCHEMA, OCCUPANCY_TABLE_SCHEMA, occupancy, occupancy_table,
)
from tracekit.model import DEVICES_SCHEMA, GPU_SCHEMA

A100 = dict(id=0, name="NVIDIA A100-SXM4-80GB", total_global_mem=85899345920, compute_major=8,
            compute_minor=0, num_sms=108, max_threads_per_block=1024, max_threads_per_sm=2048,
            regs_per_block=65536, regs_per_sm=65536, warp_size=32, shared_mem_per_block=49152,
            shared_mem_per_block_optin=166912, shared_mem_per_sm=167936)
H100 = {**A100, "name": "NVIDIA H100 80GB HBM3", "compute_major": 9, "num_sms": 132,
        "shared_mem_per_block_optin": 232448, "shared_mem_per_sm": 233472}
V100 = {**A100, "name": "Tesla V100-SXM2-32GB", "compute_major": 7, "num_sms": 80,
        "shared_mem_per_block_optin": 98304, "shared_mem_per_sm": 98304}
RTX3090 = {**A100, "name": "NVIDIA GeForce RTX 3090", "compute_minor": 6, "num_sms": 82,
           "max_threads_per_sm": 1536, "shared_mem_per_block_optin": 101376,
           "shared_mem_per_sm": 102400}
MI250 = {**A100, "name": "AMD Radeon Graphics", "compute_major": 9, "warp_size": 64,
         "regs_per_sm": None, "num_sms": 104}


def devices(*props: dict) -> pl.DataFrame:
    return pl.DataFrame(list(props), schema=DEVICES_SCHEMA)


def launch(grid: int, block: int, regs: int | None, smem: int | None, *, name: str = "k",
           device: int = 0, dur: int = 1000, est: float | None = None, cat: str = "kernel",
           block_y: int = 1) -> dict:
    return dict(eid=0, cat=cat, name=name, device=device, stream=7, ts_ns=0, dur_ns=dur,
                end_ns=dur, grid_x=grid, grid_y=1, grid_z=1, block_x=block, block_y=block_y,
                block_z=1, registers_per_thread=regs, shared_memory=smem, est_occupancy_pct=est)


def occ(rows: list[dict], *props: dict) -> list[dict]:
    gpu = pl.DataFrame(rows, schema=GPU_SCHEMA)
    return occupancy(gpu, devices(*(props or (A100,)))).to_dicts()


def summary(row: dict) -> tuple:
    return row["active_blocks_per_sm"], row["theoretical_occupancy"], row["limiting_factor"]


# -- hand-computed launches (A100: 108 SMs, 64 warps/SM, 64K regs, 164 KB smem/SM) -------------

def test_warps_limit():
    # 8 warps/block -> 64 // 8 = 8 blocks; 32 regs -> 1024/warp -> 16 warps per sub-partition
    # x 4 = 64 warps = 8 blocks too: the tie is reported as warps (the calculator's order)
    row = occ([launch(1000, 256, 32, 0)])[0]
    assert (row["limit_warps"], row["limit_registers"], row["limit_blocks"]) == (8, 8, 32)
    assert summary(row) == (8, 1.0, "warps")


def test_register_limit():
    # 128 regs x 32 = 4096 per warp; 16384 per sub-partition -> 4 warps x 4 = 16 warps = 2 blocks
    row = occ([launch(1000, 256, 128, 0)])[0]
    assert summary(row) == (2, 0.25, "registers")


def test_register_limit_uses_sub_partitions():
    # 40 regs -> 1280 per warp: 16384 // 1280 = 12 per sub-partition -> 48 warps -> 3 blocks of
    # 16 warps (65536 // 1280 = 51 warps would give the same 3 blocks, 75 %, Kineto's figure)
    row = occ([launch(512, 512, 40, 400, est=75.0)])[0]
    assert summary(row) == (3, 0.75, "registers")
    # 1 warp per block: 48 blocks by registers, where a whole-SM count would say 51
    assert occ([launch(10_000, 32, 40, 0)])[0]["limit_registers"] == 48


def test_register_hardware_check_rounds_warps_to_sub_partitions():
    # 200 regs -> 6400 per warp; 9 warps allocate 57600 <= 65536, but the hardware checks
    # 12 warps (9 rounded up to 4 sub-partitions) = 76800 > 65536: the block cannot launch
    row = occ([launch(1000, 288, 200, 0)])[0]
    assert summary(row) == (0, 0.0, "registers")


def test_shared_memory_limit_with_opt_in():
    # 100 KB + 1 KB reserved = 103424 B (128 B granules): 167936 // 103424 = 1 block
    row = occ([launch(1000, 256, 32, 100 * 1024)])[0]
    assert row["limit_shared_memory"] == 1
    assert summary(row) == (1, 0.125, "shared_memory")
    # 16 KB: (16384 + 1024) -> 17408 -> 9 blocks, warps (8) still bind
    assert occ([launch(1000, 256, 32, 16 * 1024)])[0]["limit_shared_memory"] == 9


def test_shared_memory_beyond_opt_in_does_not_fit():
    row = occ([launch(1000, 128, 32, 170_000)])[0]
    assert summary(row) == (0, 0.0, "shared_memory")


def test_grid_limit_and_sm_efficiency():
    # 54 blocks on 108 SMs: half a block per SM on average
    row = occ([launch(54, 256, 32, 0)])[0]
    assert row["grid_blocks_per_sm"] == 0.5
    assert summary(row) == (8, 0.5 * 8 / 64, "grid")
    assert row["sm_efficiency"] == 0.5
    assert occ([launch(1000, 256, 32, 0)])[0]["sm_efficiency"] == 1.0


def test_block_limit_depends_on_capability():
    # 1-warp blocks, 16 regs: A100 keeps 32 blocks (50 % of 64 warps) ...
    row = occ([launch(100_000, 32, 16, 0)])[0]
    assert summary(row) == (32, 0.5, "blocks")
    # ... sm_86 keeps 16 blocks of 48 warps
    row = occ([launch(100_000, 32, 16, 0)], RTX3090)[0]
    assert summary(row) == (16, 16 / 48, "blocks")


def test_block_too_large_for_the_device():
    row = occ([launch(1000, 1024, 16, 0, block_y=2)])[0]
    assert row["threads_per_block"] == 2048
    assert summary(row) == (0, 0.0, "warps")


def test_zero_registers_and_zero_shared_memory_do_not_limit():
    row = occ([launch(10_000, 128, 0, 0)], V100)[0]
    assert row["limit_registers"] is None and row["limit_shared_memory"] is None
    assert summary(row) == (16, 1.0, "warps")


def test_volta_has_256_byte_granules_and_no_reserved_block():
    # 40000 -> 40192 B; 98304 // 40192 = 2 blocks
    row = occ([launch(1000, 128, 32, 40_000)], V100)[0]
    assert row["limit_shared_memory"] == 2
    assert summary(row) == (2, 8 / 64, "shared_memory")


def test_kineto_zero_for_opt_in_kernels_becomes_a_real_figure():
    # the H100 Qwen trace's sm90_xmma GEMM: Kineto 0 % because 226 KB > the 48 KB default
    row = occ([launch(132, 384, 168, 231_424, est=0.0)], H100)[0]
    assert row["kineto_occupancy_pct"] == 0.0
    # 168 regs -> 5376 per warp -> 3 warps per sub-partition -> 12 warps = 1 block;
    # 231424 + 1024 = 232448 B -> 233472 // 232448 = 1 block: registers come first in the tie
    assert summary(row) == (1, 12 / 64, "registers")
    assert row["theoretical_occupancy"] > 0


# -- rows the model does not apply to ---------------------------------------------------------

def test_no_devices_gives_nulls_and_keeps_kinetos_figure():
    gpu = pl.DataFrame([launch(1000, 256, 32, 0, est=100.0)], schema=GPU_SCHEMA)
    for devs in (pl.DataFrame(schema=DEVICES_SCHEMA), pl.DataFrame()):
        row = occupancy(gpu, devs).row(0, named=True)
        assert row["theoretical_occupancy"] is None and row["limiting_factor"] is None
        assert row["sm_efficiency"] is None
        assert row["kineto_occupancy_pct"] == 100.0


def test_missing_launch_parameters_unknown_device_amd_and_unknown_capability():
    rows = [launch(1000, 256, None, 0), launch(1000, 256, 32, 0, device=5),
            launch(1000, 256, 32, 0, device=1), launch(1000, 256, 32, 0, device=2)]
    got = occ(rows, A100, {**MI250, "id": 1}, {**A100, "id": 2, "compute_major": 11})
    assert [r["theoretical_occupancy"] for r in got] == [None, None, None, None]
    # SM efficiency needs only the grid and the SM count
    assert [r["sm_efficiency"] for r in got] == [1.0, None, 1.0, 1.0]


def test_only_kernels_in_order_and_duplicate_devices_do_not_multiply_rows():
    rows = [launch(10, 64, 16, 0, name="a"), launch(10, 64, 16, 0, name="m", cat="gpu_memcpy"),
            launch(20, 64, 16, 0, name="b", cat="Kernel")]
    got = occ(rows, A100, A100)
    assert [r["name"] for r in got] == ["a", "b"]


def test_empty_frames():
    empty = pl.DataFrame(schema=GPU_SCHEMA)
    assert occupancy(empty, devices(A100)).schema == pl.Schema(OCCUPANCY_SCHEMA)
    assert occupancy(empty, pl.DataFrame()).is_empty()
    table = occupancy_table(empty, pl.DataFrame(schema=DEVICES_SCHEMA))
    assert table.schema == pl.Schema(OCCUPANCY_TABLE_SCHEMA) and table.is_empty()


# -- per-name table ---------------------------------------------------------------------------

def test_occupancy_table_weights_by_duration():
    rows = [
        launch(1000, 256, 32, 0, name="k", dur=100, est=100.0),   # 1.0, warps
        launch(1000, 256, 128, 0, name="k", dur=300, est=25.0),   # 0.25, registers
        launch(1000, 256, 128, 0, name="k", dur=0, est=25.0),     # 0.25, registers
        launch(54, 256, 32, 0, name="small", dur=50),             # grid
    ]
    gpu = pl.DataFrame(rows, schema=GPU_SCHEMA)
    table = occupancy_table(gpu, devices(A100))
    assert table["name"].to_list() == ["k", "small"]
    k = table.row(0, named=True)
    assert (k["count"], k["total_ns"], k["limiting_factor"]) == (3, 400, "registers")
    assert k["theoretical_occupancy"] == pytest.approx((100 * 1.0 + 300 * 0.25) / 400)
    assert k["kineto_occupancy_pct"] == pytest.approx((100 * 100 + 300 * 25) / 400)
    assert k["sm_efficiency"] == 1.0
    assert table.row(1, named=True)["limiting_factor"] == "grid"


def test_occupancy_table_mode_ties_are_alphabetical():
    rows = [launch(1000, 256, 128, 0, name="k"), launch(1000, 256, 32, 0, name="k")]
    table = occupancy_table(pl.DataFrame(rows, schema=GPU_SCHEMA), devices(A100))
    assert table["limiting_factor"].to_list() == ["registers"]


def test_the_table_from_a_given_per_launch_frame_and_the_rules_columns():
    """The table made from a per-launch frame the caller has (`per_launch=`) is the one made
    from the plan, without the plan; the findings' `Context.occupancy` is the per-launch
    frame's rule columns, the same rows."""
    from tracekit.analysis import occupancy as occupancy_mod
    from tracekit.findings.context import OCCUPANCY_COLUMNS, Context

    rows = [launch(1000, 256, 32, 0, name="k", dur=100), launch(54, 256, 128, 0, name="small", dur=50),
            launch(0, 0, None, None, name="copy", cat="gpu_memcpy")]
    gpu = pl.DataFrame(rows, schema=GPU_SCHEMA)
    table = occupancy_table(gpu, devices(A100))
    per_launch = occupancy(gpu, devices(A100))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(occupancy_mod, "occupancy_plan", lambda *a: pytest.fail("the plan was made again"))
        assert occupancy_table(gpu, devices(A100), per_launch=per_launch).equals(table)
    assert table["name"].to_list() == ["k", "small"] and table["count"].to_list() == [1, 1]
    trace = tracekit.Trace.empty().replace(gpu=gpu)
    trace = trace.replace(meta=replace(trace.meta, devices=devices(A100)))
    got = Context(trace).occupancy
    assert got.columns == list(OCCUPANCY_COLUMNS)
    assert got.equals(occupancy(gpu, devices(A100)).select(OCCUPANCY_COLUMNS))
    assert got["sm_efficiency"].to_list() == [1.0, 0.5]


# -- real traces ------------------------------------------------------------------------------

@functools.cache
def _load(path: Path) -> tracekit.Trace:
    return tracekit.load(path)


@pytest.mark.real
def test_h100_qwen_trace():
    t = _load(real_trace("h100_qwen15_05b_hf_inference.json.gz"))
    got = occupancy(t.gpu, t.meta.devices)
    assert got.height == t.kernels.height
    values = got["theoretical_occupancy"]
    assert values.null_count() == 0
    assert values.min() >= 0.0 and values.max() <= 1.0
    assert set(got["limiting_factor"]) <= set(LIMITING_FACTORS)
    gemm = got.filter(pl.col("name").str.starts_with("sm90_xmma_gemm"))
    assert (gemm["kineto_occupancy_pct"] == 0).all()
    assert (gemm["theoretical_occupancy"] > 0).all()
    table = occupancy_table(t.gpu, t.meta.devices)
    assert table["count"].sum() == got.height


@pytest.mark.real
@pytest.mark.parametrize("name", [
    "h100_qwen15_05b_hf_inference.json.gz", "a100_ddp_cnn_nccl_rank0.json.gz",
    "v100_resnet_ns_timestamps.json.gz",
])
def test_agrees_with_kineto_where_kineto_is_not_zero(name):
    # Kineto runs the same calculator with the 48 KB default and prints whole percents; where
    # it reports a figure, ours must match it to within its rounding (measured: <= 0.5 point).
    t = _load(real_trace(name))
    got = occupancy(t.gpu, t.meta.devices).filter(pl.col("kineto_occupancy_pct") > 0)
    assert got.height > 100
    diff = (got["theoretical_occupancy"] * 100 - got["kineto_occupancy_pct"]).abs()
    assert diff.max() <= 0.5 + 1e-9
