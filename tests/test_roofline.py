"""Roofline: work formulas (golden shapes), device ceilings, per-op/per-kernel rates, SVG, CLI."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET

import polars as pl
import pytest
from builders import A100, BATCH_GEMM, H100, TraceBuilder
from click.testing import CliRunner
from conftest import all_real_traces, real_trace

import tracekit
from tracekit.analysis.ceilings import PRODUCTS, device_ceilings, load_ceilings_file, match_device, override
from tracekit.analysis.roofline import roofline
from tracekit.analysis.roofline_findings import roofline_findings
from tracekit.analysis.work import work_of
from tracekit.cli.main import cli
from tracekit.errors import UsageError
from tracekit.report.roofline_chart import roofline_svg

BF, F16, F32, I64 = "c10::BFloat16", "c10::Half", "float", "long int"


def w(name: str, dims: list, types: list, concrete: list | None = None):
    concrete = concrete if concrete is not None else [""] * len(dims)
    return work_of(name, json.dumps(dims), json.dumps(types), json.dumps(concrete))


# -- work formulas ----------------------------------------------------------------------------
def test_mm_bf16():
    got = w("aten::mm", [[128, 256], [256, 64]], [BF, BF])
    assert got.work_class == "gemm" and got.compute_dtype == "bf16"
    assert got.flops == 2 * 128 * 256 * 64
    assert got.bytes == (128 * 256 + 256 * 64 + 128 * 64) * 2


def test_bmm_and_baddbmm():
    got = w("aten::bmm", [[4, 128, 256], [4, 256, 64]], [BF, BF])
    assert got.flops == 2 * 4 * 128 * 256 * 64
    assert got.bytes == 4 * (128 * 256 + 256 * 64 + 128 * 64) * 2
    bad = w("aten::baddbmm", [[4, 128, 64], [4, 128, 256], [4, 256, 64], [], []], [BF, BF, BF, "Scalar", "Scalar"])
    assert bad.flops == got.flops
    assert bad.bytes == got.bytes + 4 * 128 * 64 * 2


def test_addmm_counts_bias_bytes_not_flops():
    got = w("aten::addmm", [[64], [128, 256], [256, 64], [], []], [BF, BF, BF, "Scalar", "Scalar"], ["", "", "", "1", "1"])
    assert got.flops == 2 * 128 * 256 * 64  # like the profiler: alpha/beta/bias not counted
    assert got.bytes == (64 + 128 * 256 + 256 * 64 + 128 * 64) * 2


def test_linear_with_and_without_bias():
    x, wt = [2, 128, 256], [64, 256]
    with_bias = w("aten::linear", [x, wt, [64]], [BF, BF, BF])
    assert with_bias.flops == 2 * 256 * 256 * 64
    assert with_bias.bytes == (2 * 128 * 256 + 64 * 256 + 64 + 256 * 64) * 2
    no_bias = w("aten::linear", [x, wt, []], [BF, BF, ""])
    assert no_bias.flops == with_bias.flops and no_bias.bytes == with_bias.bytes - 64 * 2


def test_matmul_broadcasts_batch_and_handles_vectors():
    got = w("aten::matmul", [[2, 1, 128, 256], [3, 256, 64]], [F32, F32])
    assert got.flops == 2 * 6 * 128 * 256 * 64 and got.compute_dtype == "fp32"
    assert got.bytes == (2 * 128 * 256 + 3 * 256 * 64 + 6 * 128 * 64) * 4
    assert w("aten::mv", [[128, 256], [256]], [F32, F32]).flops == 2 * 128 * 256
    assert w("aten::mm", [[128, 256], [255, 64]], [BF, BF]) is None  # inconsistent shapes: unknown


SDPA_TYPES = [BF, BF, BF, "", "Scalar", "Scalar", "Scalar", "Scalar"]


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_causal_halves_flops(causal):
    q = [2, 8, 512, 64]
    got = w("aten::scaled_dot_product_attention", [q, q, q, [], [], [], [], []], SDPA_TYPES,
            ["", "", "", "", "0.", str(causal), "", "False"])
    full = 4 * 2 * 8 * 512 * 512 * 64
    assert got.work_class == "attention" and got.causal is causal
    assert got.flops == (full / 2 if causal else full)
    assert got.bytes == 4 * 2 * 8 * 512 * 64 * 2  # q, k, v read, out written


def test_attention_backends_read_their_layout_and_flag():
    q = [16, 559, 16, 64]  # _flash_attention_forward: (batch, seq, heads, dim)
    dims = [q, q, q] + [[]] * 12
    types = [BF, BF, BF, "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "", "", "", ""]
    conc = ["", "", "", "", "", "559", "559", "0.", "True", "False", "0.125", "", "", "", ""]
    got = w("aten::_flash_attention_forward", dims, types, conc)
    assert got.causal and got.flops == 4 * 16 * 16 * 559 * 559 * 64 / 2
    sdpa = w("aten::_scaled_dot_product_flash_attention", [[16, 16, 559, 64]] * 3 + [[]] * 4,
             [BF, BF, BF, "Scalar", "Scalar", "Scalar", "Scalar"], ["", "", "", "0.", "True", "False", "0.125"])
    assert sdpa.flops == got.flops and sdpa.bytes == got.bytes
    eff = w("aten::_efficient_attention_forward", [q, q, q] + [[]] * 8, [BF, BF, BF] + [""] * 8,
            ["", "", "", "", "", "", "", "", "0.", "1", "False"])
    assert eff.causal and eff.flops == got.flops
    gqa = w("aten::scaled_dot_product_attention", [[1, 32, 128, 128], [1, 8, 1024, 128], [1, 8, 1024, 128]]
            + [[]] * 5, SDPA_TYPES, [""] * 8)
    assert gqa.flops == 4 * 32 * 128 * 1024 * 128 and not gqa.causal


def test_conv2d_matches_profiler_formula():
    dims = [[8, 3, 224, 224], [64, 3, 7, 7], [64], [], [], [], []]
    types = [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar"]
    got = w("aten::conv2d", dims, types, ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "1"])
    oh = ow = (224 + 2 * 3 - 1 * (7 - 1) - 1) // 2 + 1
    assert oh == 112
    assert got.flops == 2 * 8 * oh * ow * 7 * 7 * 3 * 64  # torch/csrc/profiler/util.cpp computeFlops
    assert got.bytes == (8 * 3 * 224 * 224 + 64 * 3 * 49 + 64 + 8 * 64 * 112 * 112) * 4
    dw = w("aten::conv2d", [[1, 32, 56, 56], [32, 1, 3, 3], [], [], [], [], []], [F32, F32, ""] + types[3:],
           ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "32"])
    assert dw.flops == 2 * 56 * 56 * 3 * 3 * 32 * 32 / 32


def test_elementwise_broadcast_and_bool_outputs():
    n = 16 * 559 * 1024
    add = w("aten::add", [[16, 559, 1024], [16, 559, 1024], []], [BF, BF, "Scalar"], ["", "", "1"])
    assert (add.work_class, add.flops, add.bytes) == ("elementwise", n, 3 * n * 2)
    mul = w("aten::mul", [[16, 559, 1024], [16, 559, 1]], [F32, F32])
    assert mul.flops == n and mul.bytes == (n + 16 * 559 + n) * 4
    inplace = w("aten::mul_", [[16, 559, 1024], [16, 559, 1024]], [BF, BF])
    assert inplace.flops == n
    eq = w("aten::eq", [[16, 559], []], [I64, "Scalar"], ["", "1"])
    assert eq.bytes == 16 * 559 * 8 + 16 * 559 * 1
    where = w("aten::where", [[4, 4], [4, 4], [4, 4]], ["bool", BF, BF])
    assert where.bytes == 16 * 1 + 16 * 2 * 2 + 16 * 2


def test_norms_softmax_reductions():
    n = 4 * 128 * 768
    ln = w("aten::layer_norm", [[4, 128, 768], [], [768], [768], [], []], [BF, "ScalarList", BF, BF, "Scalar", "Scalar"])
    assert ln.work_class == "normalization" and ln.flops == 7 * n and ln.bytes == (2 * n + 2 * 768) * 2
    rms = w("aten::rms_norm", [[4, 128, 768], [], [768], []], [BF, "ScalarList", BF, "Scalar"])
    assert rms.flops == 4 * n
    sm = w("aten::_softmax", [[4, 12, 128, 128], [], []], [F32, "Scalar", "Scalar"], ["", "-1", "False"])
    m = 4 * 12 * 128 * 128
    assert sm.work_class == "softmax" and sm.flops == 5 * m and sm.bytes == 2 * m * 4
    up = w("aten::_softmax", [[4, 12, 128, 128], [], []], [BF, "Scalar", "Scalar"], ["", "-1", "True"])
    assert up.bytes == m * 2 + m * 4  # half_to_float writes fp32
    mean = w("aten::mean", [[16, 559, 1024], [], [], []], [F32, "ScalarList", "Scalar", ""], ["", "[-1]", "True", ""])
    assert mean.work_class == "reduction" and mean.flops == 16 * 559 * 1024
    assert mean.bytes == (16 * 559 * 1024 + 16 * 559) * 4
    total = w("aten::sum", [[8, 8]], [F32])
    assert total.bytes == (64 + 1) * 4


def test_embedding_gather_and_copies():
    emb = w("aten::embedding", [[151936, 1024], [16, 559], [], [], []], [BF, I64, "Scalar", "Scalar", "Scalar"])
    rows = 16 * 559
    assert emb.flops == 0 and emb.bytes == rows * 8 + 2 * rows * 1024 * 2
    sel = w("aten::index_select", [[151936, 1024], [], [8944]], [BF, "Scalar", I64], ["", "0", ""])
    assert sel.bytes == emb.bytes and sel.work_class == "gather"
    n = 16 * 559 * 1024
    cp = w("aten::copy_", [[16, 559, 1024], [16, 559, 1024], []], [F32, BF, "Scalar"], ["", "", "False"])
    assert (cp.work_class, cp.flops, cp.bytes) == ("copy", 0, n * 4 + n * 2)
    assert w("aten::clone", [[16, 559, 1024], []], [BF, "Scalar"]).bytes == 2 * n * 2
    to = w("aten::_to_copy", [[16, 559, 1024], [], [], [], [], [], []], [BF, "Scalar", "", "", "", "Scalar", ""],
           ["", "6", "", "", "", "False", ""])
    assert to.bytes == n * 2 + n * 4


def test_op_work_without_shapes_is_the_join_of_null_work():
    """No op's work known (no recorded shapes): every op gets null work columns, without the
    join on the text keys; with one shape known, that op gets its work and the rest null."""
    from tracekit.analysis.work import WORK_SCHEMA, op_work

    ops = pl.DataFrame({"eid": [1, 2, 3], "name": ["aten::mm", "aten::add", "aten::mm"],
                        "input_dims": [None, None, None], "input_types": [None, None, None],
                        "concrete_inputs": [None, None, None], "flops": [None, 8.0, None]},
                       schema_overrides={c: pl.String for c in ("input_dims", "input_types", "concrete_inputs")})
    bare = op_work(ops)
    assert bare.columns == ["eid", "name", "input_dims", "input_types", "concrete_inputs", "profiler_flops",
                            *WORK_SCHEMA, "flops_source"]
    assert bare["flops"].to_list() == [None, 8.0, None]  # the profiler's own, else nothing
    assert bare["flops_source"].to_list() == [None, "profiler", None]
    assert all(bare[c].null_count() == 3 for c in WORK_SCHEMA if c != "flops")
    shaped = op_work(ops.with_columns(input_dims=pl.Series(['[[4, 8], [8, 2]]', None, None]),
                                      input_types=pl.Series(['["c10::BFloat16", "c10::BFloat16"]', None, None])))
    assert shaped.schema == bare.schema and shaped.drop(list(WORK_SCHEMA), "flops_source", "input_dims",
                                                        "input_types").equals(bare.drop(list(WORK_SCHEMA),
                                                        "flops_source", "input_dims", "input_types"))
    assert shaped["flops"].to_list() == [2 * 4 * 8 * 2, 8.0, None]
    assert shaped["flops_source"].to_list() == ["formula", "profiler", None]


def test_unknown_and_malformed_inputs_give_none():
    assert w("aten::view", [[4, 4], []], [F32, "ScalarList"]) is None
    assert work_of("aten::mm", "not json", "[]", "[]") is None
    assert work_of("aten::mm", None, None, None) is None
    assert w("aten::mm", [[4, 4], [4, 4]], ["c10::Weird", "c10::Weird"]) is None


# -- ceilings -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "mem", "sms", "product"), [
    ("NVIDIA H100 80GB HBM3", None, 132, "H100 SXM"),
    ("NVIDIA H100 PCIe", None, 114, "H100 PCIe"),
    ("NVIDIA H100 NVL", None, 132, "H100 NVL"),
    ("Tesla V100-SXM2-32GB", None, 80, "V100 SXM2"),
    ("Tesla V100-SXM2-16GB", None, 80, "V100 SXM2"),
    ("Tesla V100-PCIE-16GB", None, 80, "V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", None, 80, "V100S PCIe"),
    ("NVIDIA A100-SXM4-80GB", None, 108, "A100 SXM 80GB"),
    ("NVIDIA A100-SXM4-40GB", None, 108, "A100 SXM 40GB"),
    ("NVIDIA A100-PCIE-40GB", None, 108, "A100 PCIe 40GB"),
    ("NVIDIA A100 80GB PCIe", None, 108, "A100 PCIe 80GB"),
    ("NVIDIA A100-PG509-200", 42297524224, 108, "A100 SXM 40GB"),
    ("NVIDIA A100-SXM4", 85899345920, 108, "A100 SXM 80GB"),
    ("NVIDIA H200", None, 132, "H200 SXM"),
    ("NVIDIA H200 NVL", None, 132, "H200 NVL"),
    ("NVIDIA H800", None, 132, "H800 SXM"),
    ("NVIDIA H800 PCIe", None, 114, "H800 PCIe"),
    ("NVIDIA B200", None, 148, "B200 (HGX)"),
    ("NVIDIA L4", None, 58, "L4"),
    ("NVIDIA L40S", None, 142, "L40S"),
    ("AMD Instinct MI210", None, 104, "MI210"),
    ("AMD Instinct MI250X", None, 110, "MI250X (one GCD)"),
    ("AMD Instinct MI250", None, 104, "MI250 (one GCD)"),
    ("AMD Instinct MI250X / MI250", None, 110, "MI250X (one GCD)"),
    ("AMD Instinct MI250X / MI250", None, 104, "MI250 (one GCD)"),
    ("AMD Instinct MI300X", None, 304, "MI300X"),
    ("AMD Radeon Graphics", 68702699520, 104, "MI250 (one GCD)"),
])
def test_device_names_match(name, mem, sms, product):
    got = match_device(name, total_global_mem=mem, num_sms=sms)
    assert got is not None and got[0].product == product


@pytest.mark.parametrize("name", ["NVIDIA GB200", "NVIDIA L40", "NVIDIA GeForce RTX 4090", "", None,
                                  "AMD Radeon Graphics"])
def test_unknown_devices_give_none(name):
    assert match_device(name, num_sms=60) is None


def test_datasheet_figures_are_dense_and_consistent():
    h100 = PRODUCTS["h100_sxm"]
    assert (h100.bf16, h100.fp8, h100.tf32, h100.hbm_gbps) == (989.5, 1979.0, 494.5, 3350.0)
    for c in PRODUCTS.values():
        assert c.fp32 and c.hbm_gbps and c.bf16 and c.source
        assert all(v is None or v >= c.fp32 for v in (c.tf32, c.fp16, c.fp8))


def test_override_wins_and_validates():
    c = override(PRODUCTS["h100_sxm"], peak_tflops=100.0, peak_gbps=1000.0)
    assert (c.bf16, c.fp32, c.fp8, c.hbm_gbps) == (100.0, 100.0, 100.0, 1000.0)
    c = override(PRODUCTS["h100_sxm"], peak_tflops={"bf16": 800})
    assert (c.bf16, c.fp32) == (800.0, 67.0)
    assert override(None, peak_gbps=500).hbm_gbps == 500.0
    with pytest.raises(UsageError):
        override(None, peak_tflops={"bf17": 1})
    with pytest.raises(UsageError):
        override(None, peak_gbps=-1)


def test_unknown_device_null_ceilings_with_note_and_override():
    devices = pl.DataFrame({"id": [0], "name": ["Mystery GPU"], "total_global_mem": [1], "num_sms": [10]})
    frame, notes = device_ceilings(devices)
    assert frame["hbm_gbps"].to_list() == [None] and frame["bf16"].to_list() == [None]
    assert len(notes) == 1 and "--peak-tflops" in notes[0]
    frame, notes = device_ceilings(devices, device_ids=[1], peak_tflops=50, peak_gbps=500)
    assert frame["bf16"].to_list() == [50.0, 50.0] and notes == [] and frame["matched_by"][0] == "override"


def test_ceilings_file(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('peak_gbps = 2000\n[peak_tflops]\nbf16 = 700\nfp32 = 50\n')
    assert load_ceilings_file(toml) == {"peak_tflops": {"bf16": 700, "fp32": 50}, "peak_gbps": 2000}
    js = tmp_path / "c.json"
    js.write_text('{"peak_tflops": 400}')
    assert load_ceilings_file(js) == {"peak_tflops": 400}
    for bad in ('{"peak_tflop": 400}', '{"peak_tflops": "x"}', '{"peak_gbps": [1]}', '[1]', '{'):
        js.write_text(bad)
        with pytest.raises(UsageError):
            load_ceilings_file(js)


# -- roofline on generated traces ------------------------------------------------------------------
MM_ARGS = {"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": [BF, BF], "Concrete Inputs": ["", ""]}


def mm_trace(tmp_path, *, devices=None, dur_ns=200_000, extra_args=None):
    b = TraceBuilder(devices=devices)
    ext = b.op("aten::mm", 1_000, 20_000, args={**MM_ARGS, **(extra_args or {})})
    b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", launch_ns=2_000,
                    launch_dur_ns=5_000, start_ns=30_000, dur_ns=dur_ns, ext=ext)
    return b.load(tmp_path)


def test_mm_exact_rates_on_h100(tmp_path):
    r = roofline(mm_trace(tmp_path))
    call = r.calls.row(0, named=True)
    flops, nbytes = 2 * 4096**3, 3 * 4096 * 4096 * 2
    assert call["flops"] == flops and call["bytes"] == nbytes and call["gpu_ns"] == 200_000
    assert call["achieved_tflops"] == pytest.approx(flops / 200_000 / 1e3, rel=1e-12)  # 687.19 TFLOP/s
    assert call["achieved_tflops"] == pytest.approx(687.19476736, rel=1e-12)
    assert call["peak_tflops"] == 989.5 and call["peak_gbps"] == 3350.0
    assert call["intensity"] == pytest.approx(flops / nbytes) and call["bound"] == "compute"
    assert call["ridge"] == pytest.approx(989.5e3 / 3350)
    assert call["efficiency"] == pytest.approx(687.19476736 / 989.5, rel=1e-12)
    assert call["time_lost_ns"] == pytest.approx(200_000 - flops / 989.5e3, rel=1e-12)
    assert r.efficiency == pytest.approx(call["efficiency"]) and r.coverage == 1.0
    assert r.devices["product"].to_list() == ["H100 SXM"] and r.notes == ()


def test_profiler_flops_kept_and_used_only_without_formula(tmp_path):
    r = roofline(mm_trace(tmp_path, extra_args={"flops": 2 * 4096**3}))
    call = r.calls.row(0, named=True)
    assert call["flops_source"] == "formula" and call["profiler_flops"] == call["flops"]
    b = TraceBuilder()
    ext = b.op("custom::op", 0, 10_000, args={"flops": 1e9})
    b.launch_kernel("my_kernel", launch_ns=100, launch_dur_ns=100, start_ns=1_000, dur_ns=2_000, ext=ext)
    call = roofline(b.load(tmp_path, "p.json.gz")).calls.row(0, named=True)
    assert call["flops_source"] == "profiler" and call["achieved_tflops"] == pytest.approx(500.0)


def test_unknown_device_and_override(tmp_path):
    mystery = {**H100, "name": "Mystery GPU 9000"}
    r = roofline(mm_trace(tmp_path, devices=[mystery]))
    assert r.calls["efficiency"].to_list() == [None] and r.rated_ns == 0 and r.efficiency is None
    assert r.calls["achieved_tflops"][0] == pytest.approx(687.19476736) and len(r.notes) == 1
    r = roofline(mm_trace(tmp_path, devices=[mystery]), peak_tflops=1000.0, peak_gbps=2000.0)
    assert r.calls["efficiency"][0] == pytest.approx(0.68719476736) and r.notes == ()
    r = roofline(mm_trace(tmp_path, devices=[A100]), peak_tflops={"bf16": 500.0})
    assert r.calls["peak_tflops"][0] == 500.0 and r.calls["peak_gbps"][0] == 2039.0


def test_nested_ops_count_work_once_and_split_by_kernel_time(tmp_path):
    b = TraceBuilder()
    x, wt = [8, 512, 1024], [1024, 1024]
    lin = {"Input Dims": [x, wt, [1024]], "Input type": [BF, BF, BF], "Concrete Inputs": ["", "", ""]}
    addmm = {"Input Dims": [[1024], [4096, 1024], [1024, 1024], [], []],
             "Input type": [BF, BF, BF, "Scalar", "Scalar"], "Concrete Inputs": ["", "", "", "1", "1"]}
    b.op("aten::linear", 1_000, 50_000, args=lin)
    b.op("aten::t", 2_000, 1_000, args={"Input Dims": [wt], "Input type": [BF], "Concrete Inputs": [""]})
    ext = b.op("aten::addmm", 5_000, 40_000, args=addmm)
    b.launch_copy("", launch_ns=6_000, launch_dur_ns=1_000, start_ns=60_000, dur_ns=1_000, nbytes=64,
                  ext=ext, api="cudaMemsetAsync", memset=True)
    b.launch_kernel("sm90_xmma_gemm_bf16_splitk", launch_ns=8_000, launch_dur_ns=2_000, start_ns=70_000,
                    dur_ns=30_000, ext=ext)
    b.launch_kernel("cublasLt::splitKreduce_kernel", launch_ns=12_000, launch_dur_ns=2_000, start_ns=100_000,
                    dur_ns=10_000, ext=ext)
    r = roofline(b.load(tmp_path))
    flops = 2 * 4096 * 1024 * 1024
    assert r.calls["name"].to_list() == ["aten::addmm"] and r.flops == pytest.approx(flops)
    assert r.calls["gpu_ns"][0] == 41_000 and r.gpu_ns == 41_000
    k = {row["kernel"]: row for row in r.kernels.to_dicts()}
    assert k["sm90_xmma_gemm_bf16_splitk"]["flops"] == pytest.approx(flops * 0.75)
    assert k["cublasLt::splitKreduce_kernel"]["flops"] == pytest.approx(flops * 0.25)
    assert k["Memset (Device)"]["flops"] == 0 and k["Memset (Device)"]["efficiency"] == 0
    assert r.kernels["min_ns"].sum() == pytest.approx(r.calls["min_ns"][0])
    assert r.op_types["name"].to_list() == ["aten::addmm"]


def test_call_with_only_a_memset_is_not_measured_and_no_shapes_noted(tmp_path):
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 10_000, args=MM_ARGS)  # its GEMM kernel is missing (sampled trace)
    b.launch_copy("", launch_ns=100, launch_dur_ns=100, start_ns=1_000, dur_ns=1_000, nbytes=64, ext=ext,
                  api="cudaMemsetAsync", memset=True)
    ext = b.op("aten::zero_", 20_000, 10_000, args={"Input Dims": [[1024]], "Input type": [F32],
                                                      "Concrete Inputs": [""]})
    b.launch_copy("", launch_ns=20_100, launch_dur_ns=100, start_ns=21_000, dur_ns=1_000, nbytes=4096,
                  ext=ext, api="cudaMemsetAsync", memset=True)
    r = roofline(b.load(tmp_path))
    assert r.calls["name"].to_list() == ["aten::zero_"] and r.covered_ns == 1_000 and r.gpu_ns == 2_000
    assert r.calls["achieved_gbps"][0] == pytest.approx(4096 / 1_000)
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 10_000)
    b.launch_kernel("gemm", launch_ns=100, launch_dur_ns=100, start_ns=1_000, dur_ns=1_000, ext=ext)
    r = roofline(b.load(tmp_path, "noshapes.json.gz"))
    assert r.covered_ns == 0 and any("record_shapes" in n for n in r.notes)


CONV_FP16 = "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"


def _no_efficiency_above_one(r) -> None:
    for frame in (r.calls, r.ops, r.op_types, r.kernels, r.classes):
        assert not (frame["efficiency"] > 1).any()
    assert r.efficiency is None or r.efficiency <= 1


def test_conv_without_recorded_stride_is_unknown_and_in_no_total(tmp_path):
    """A stride-2, pad-1 3x3 conv recorded without Concrete Inputs (2021 traces): at the
    default stride 1, pad 0 it would count 2*32*54*54*128*128*9 = 27.5 GFLOP (1834 TFLOP/s
    in 15 us, 185 % of the H100's 989.5); the real count is 7.4 GFLOP. It is unknown: left
    out of every total, only the mm (200 us) is rated."""
    b = TraceBuilder()
    ext = b.op("aten::mm", 1_000, 20_000, args=MM_ARGS)
    b.launch_kernel(BATCH_GEMM, launch_ns=2_000, launch_dur_ns=5_000, start_ns=30_000, dur_ns=200_000,
                    ext=ext)
    dims = [[32, 128, 56, 56], [128, 128, 3, 3], []]
    b.op("aten::conv2d", 300_000, 40_000, args={"Input Dims": dims + [[]] * 4, "Input type": [F16, F16, ""]})
    b.op("aten::convolution", 301_000, 38_000,
         args={"Input Dims": dims + [[]] * 6, "Input type": [F16, F16, ""]})
    ext = b.op("aten::cudnn_convolution", 302_000, 36_000,
               args={"Input Dims": dims[:2] + [[]] * 7, "Input type": [F16, F16]})
    b.launch_kernel(CONV_FP16, launch_ns=303_000, launch_dur_ns=5_000, start_ns=310_000, dur_ns=15_000,
                    ext=ext)
    r = roofline(b.load(tmp_path))
    _no_efficiency_above_one(r)
    min_mm = 2 * 4096**3 / 989.5e3  # 138,897.38 ns
    assert (r.gpu_ns, r.covered_ns, r.rated_ns) == (215_000, 200_000, 200_000)
    conv = r.calls.filter(pl.col("name") == "aten::cudnn_convolution").row(0, named=True)
    assert conv["excluded"] == "unknown" and conv["flops"] is None and conv["efficiency"] is None
    assert conv["reason"] == "stride, padding, dilation, groups not recorded (no Concrete Inputs)"
    assert conv["gpu_ns"] == 15_000 and conv["covered_ns"] == 0 and conv["rated_ns"] == 0
    assert r.calls.height == 2  # the innermost conv op only: conv2d/convolution are above it
    assert r.excluded["name"].to_list() == ["aten::cudnn_convolution"] and r.excluded_ns == 15_000
    assert r.min_ns == pytest.approx(min_mm, rel=1e-12) and r.efficiency == pytest.approx(min_mm / 200_000)
    assert r.time_lost_ns == pytest.approx(200_000 - min_mm, rel=1e-12)
    assert r.classes.filter(pl.col("kernel_class") == "conv")["covered_ns"].to_list() == [0]


def test_shape_above_the_ceiling_is_a_mismatch_and_losses_never_cancel(tmp_path):
    """Three shapes on an H100 (989.5 bf16 TFLOP/s, 3350 GB/s):
    mm 4096^3 in 200 us: min 2*4096^3/989.5e3 = 138,897.38 ns, loss 61,102.62 ns;
    mm 2048^3 in 11,575 ns: min 2*2048^3/989.5e3 = 17,362.17 ns = 150.0 % of the ceiling;
    add of 2^24 bf16 elements in 60 us: min 3*2^24*2/3350 = 30,048.75 ns, loss 29,951.25 ns.
    The 150 % shape is a model mismatch, in no total; the headline loss is 61,102.62 +
    29,951.25 = 91,053.87 ns (net of the mismatch's -5,787 ns it would read 85,266.7)."""
    b = TraceBuilder()
    ext = b.op("aten::mm", 1_000, 20_000, args=MM_ARGS)
    b.launch_kernel(BATCH_GEMM, launch_ns=2_000, launch_dur_ns=5_000, start_ns=30_000, dur_ns=200_000,
                    ext=ext)
    small = {"Input Dims": [[2048, 2048], [2048, 2048]], "Input type": [BF, BF], "Concrete Inputs": ["", ""]}
    ext = b.op("aten::mm", 300_000, 20_000, args=small)
    b.launch_kernel(BATCH_GEMM, launch_ns=301_000, launch_dur_ns=5_000, start_ns=310_000, dur_ns=11_575,
                    ext=ext)
    n = 1 << 24
    add = {"Input Dims": [[n], [n], []], "Input type": [BF, BF, "Scalar"], "Concrete Inputs": ["", "", "1"]}
    ext = b.op("aten::add", 400_000, 10_000, args=add)
    b.launch_kernel("void at::native::vectorized_elementwise_kernel<4>", launch_ns=401_000, launch_dur_ns=4_000,
                    start_ns=410_000, dur_ns=60_000, ext=ext)
    r = roofline(b.load(tmp_path))
    big_min, small_min, add_min = 2 * 4096**3 / 989.5e3, 2 * 2048**3 / 989.5e3, 3 * n * 2 / 3350
    assert small_min / 11_575 == pytest.approx(1.5, abs=1e-4)
    lost = (200_000 - big_min) + (60_000 - add_min)
    assert r.time_lost_ns == pytest.approx(lost, rel=1e-12)
    assert r.time_lost_ns == pytest.approx(91_053.87, abs=0.01)
    _no_efficiency_above_one(r)
    out = r.excluded.row(0, named=True)
    assert r.excluded.height == 1 and out["input_dims"] == "[[2048,2048],[2048,2048]]"
    assert out["excluded"] == "model mismatch" and out["reason"].startswith("150.0 % of the ceiling")
    assert out["efficiency"] is None and out["time_lost_ns"] is None
    kept = r.ops.filter(pl.col("excluded").is_null())
    assert r.time_lost_ns == kept["time_lost_ns"].clip(lower_bound=0).sum()  # exactly the shapes' sum
    assert (r.rated_ns, r.covered_ns) == (260_000, 260_000)
    assert r.efficiency == pytest.approx((big_min + add_min) / 260_000, rel=1e-12)
    assert r.kernels.filter(pl.col("kernel") == BATCH_GEMM)["min_ns"].item() == pytest.approx(big_min)
    data = json.loads(CliRunner().invoke(cli, ["roofline", "--json", "--no-cache",
                                               str(tmp_path / "trace.json.gz")]).output)
    assert data["time_lost_ns"] == pytest.approx(lost) and data["excluded"][0]["excluded"] == "model mismatch"


def test_empty_trace_gives_empty_typed_frames():
    r = roofline(tracekit.model.Trace.empty())
    assert r.calls.is_empty() and r.ops.is_empty() and r.gpu_ns == 0 and r.coverage is None
    assert "efficiency" in r.ops.columns and roofline_findings(r) == []
    ET.fromstring(roofline_svg(r))


def test_findings_gemm_fp32_and_chains(tmp_path):
    b = TraceBuilder()
    t = 0
    for _ in range(3):  # fp32 GEMM, then a chain of 3 memory-bound ops, three times
        ext = b.op("aten::mm", t, 5_000, args={"Input Dims": [[1000, 1000], [1000, 1000]],
                                                "Input type": [F32, F32], "Concrete Inputs": ["", ""]})
        b.launch_kernel("void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>", launch_ns=t + 100,
                        launch_dur_ns=100, start_ns=t + 1_000, dur_ns=400_000, ext=ext)
        for i, name in enumerate(["aten::mul", "aten::add", "aten::neg"]):
            e = b.op(name, t + 6_000 + i * 1_000, 500, args={"Input Dims": [[1000, 1000], [1000, 1000]],
                                                            "Input type": [BF, BF], "Concrete Inputs": ["", ""]})
            b.launch_kernel("elementwise_kernel", launch_ns=t + 6_100 + i * 1_000, launch_dur_ns=100,
                            start_ns=t + 410_000 + i * 20_000, dur_ns=10_000, ext=e)
        t += 1_000_000
    found = {f["id"]: f for f in roofline_findings(roofline(b.load(tmp_path)))}
    gemm = found["roofline.gemm_below_ceiling"]
    assert "FP32" in gemm["advice"] and gemm["evidence"][0]["calls"] == 3 and gemm["time_lost_ns"] > 0
    assert "sgemm" in gemm["evidence"][0]["top_kernel"]
    chain = found["roofline.fusible_chain"]
    assert chain["evidence"][0]["signature"] == "mul → add → neg" and chain["evidence"][0]["occurrences"] == 3
    assert chain["time_lost_ns"] == 3 * 20_000  # each chain would cost its largest member (10 µs)
    assert {f["severity"] for f in found.values()} <= {"high", "medium", "low"}


# -- SVG and CLI ---------------------------------------------------------------------------------------
def test_svg_well_formed_deterministic_and_escaped(tmp_path):
    r = roofline(mm_trace(tmp_path))
    svg = roofline_svg(r)
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg") and svg == roofline_svg(r)
    assert len(root.findall(".//{http://www.w3.org/2000/svg}circle")) >= 1
    hostile = dataclasses.replace(
        r, ops=r.ops.with_columns(name=pl.lit("<script>alert('x')</script>")),
        devices=r.devices.with_columns(device_name=pl.lit('"><script>')))
    svg = roofline_svg(hostile, title="</svg><script>")
    ET.fromstring(svg)
    assert "<script>" not in svg and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in svg


def test_cli_json_text_and_svg(tmp_path):
    path = tmp_path / "mm.json.gz"
    b = TraceBuilder()
    ext = b.op("aten::mm", 1_000, 20_000, args=MM_ARGS)
    b.launch_kernel("sm90_xmma_gemm_bf16", launch_ns=2_000, launch_dur_ns=5_000, start_ns=30_000,
                    dur_ns=200_000, ext=ext)
    b.write(path)
    runner = CliRunner()
    res = runner.invoke(cli, ["roofline", str(path), "--json", "--peak-tflops", "1000", "--peak-gbps", "2000"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["top_lost"][0]["efficiency"] == pytest.approx(0.68719476736)
    assert data["devices"][0]["matched_by"] == "name+override"
    svg = tmp_path / "r.svg"
    res = runner.invoke(cli, ["roofline", str(path), "--top", "3", "--svg", str(svg)])
    assert res.exit_code == 0, res.output
    assert "H100 SXM" in res.output and "aten::mm" in res.output
    ET.fromstring(svg.read_text())


# -- the real H100 Qwen trace -----------------------------------------------------------------------------
@pytest.mark.real
def test_real_qwen_h100():
    r = roofline(tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz")))
    assert r.devices["product"].to_list() == ["H100 SXM"]
    gemms = r.calls.filter(pl.col("name").is_in(["aten::mm", "aten::addmm"]))
    assert len(gemms) == 168 and (gemms["compute_dtype"] == "bf16").all()
    for row in gemms.unique("input_dims").to_dicts():
        dims = json.loads(row["input_dims"])
        a, b = (dims[1], dims[2]) if row["name"] == "aten::addmm" else (dims[0], dims[1])
        assert row["flops"] == 2 * a[0] * a[1] * b[1]  # the profiler's computeFlops for mm/addmm
        assert row["profiler_flops"] is None or row["profiler_flops"] == row["flops"]
    assert gemms["peak_tflops"].unique().to_list() == [989.5]
    assert ((gemms["efficiency"] > 0) & (gemms["efficiency"] <= 1)).all()
    assert gemms["achieved_tflops"].mean() == pytest.approx(600, rel=0.15)
    flash = r.calls.filter(pl.col("name") == "aten::_flash_attention_forward")
    assert len(flash) == 24 and flash["causal"].all() and (flash["flops"] == 4 * 16 * 16 * 559**2 * 64 / 2).all()
    assert ((flash["efficiency"] > 0) & (flash["efficiency"] <= 1)).all()
    assert 0 < flash["achieved_tflops"].sum() / flash["peak_tflops"].sum() <= 1
    # work counted once: SDPA wrappers and linear never carry work of their own
    assert not r.calls["name"].is_in(["aten::linear", "aten::scaled_dot_product_attention", "aten::matmul"]).any()
    assert 0 < r.covered_ns <= r.gpu_ns and r.min_ns <= r.rated_ns
    ids = {f["id"] for f in roofline_findings(r)}
    assert {"roofline.fusible_chain", "roofline.attention_below_expected"} <= ids


@pytest.mark.real
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: p.name)
def test_real_no_efficiency_above_one_and_the_loss_is_the_shapes_sum(path):
    """On every shared trace: nothing above 100 % of a ceiling, and the headline loss is the
    sum over op shapes of max(0, GPU time - roofline time), recomputed here from the calls."""
    from test_graph import load_cached

    from tracekit.analysis.roofline import SHAPE_KEYS

    r = roofline(load_cached(path))
    _no_efficiency_above_one(r)
    kept = r.calls.filter(pl.col("excluded").is_null() & (pl.col("rated_ns") > 0))
    shapes = kept.group_by(SHAPE_KEYS).agg(pl.col("rated_ns").sum(), pl.col("min_ns").sum())
    lost = sum(max(0.0, rated - ideal) for rated, ideal in shapes.select("rated_ns", "min_ns").iter_rows())
    assert r.time_lost_ns == pytest.approx(lost, rel=1e-9, abs=1e-6)
    assert r.rated_ns == kept["rated_ns"].sum() and r.min_ns == pytest.approx(kept["min_ns"].sum(), rel=1e-9)
    out = r.calls.filter(pl.col("excluded").is_not_null())
    assert out["reason"].null_count() == 0 and (out["rated_ns"] == 0).all() and (out["covered_ns"] == 0).all()


@pytest.mark.real
def test_real_resnet50_2021_convs_are_unknown():
    """The 2021 trace records conv shapes but no Concrete Inputs: its 318 innermost conv
    calls (128.96 ms of kernels, recounted from the raw JSON) are unknown, in no total."""
    r = roofline(tracekit.load(real_trace("resnet50_2021_array_form.json.gz")))
    unknown = r.calls.filter(pl.col("excluded") == "unknown")
    assert unknown.height == 318 and unknown["gpu_ns"].sum() == 128_960_000
    assert set(unknown["name"]) == {"aten::cudnn_convolution"} and unknown["flops"].null_count() == 318
    assert r.classes.filter(pl.col("kernel_class") == "conv")["covered_ns"].item() == 0
