"""Findings that weigh what they cost: tiny_grids leaves collectives and persistent kernels
aside, hidden_copy names each copy's cause, and severity follows the share of the window lost."""

from __future__ import annotations

import collections
import gzip
import json
import re

import pytest
from builders import BATCH_GEMM, TraceBuilder
from conftest import real_trace

from tracekit import format as fmt
from tracekit import load as tracekit_load
from tracekit.findings import RULES, Hit, rule, run_findings
from tracekit.findings.engine import band
from tracekit.findings.rules.sync import COPY_CAUSES

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int, T1, T2)"
COPY = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(int, T1)")


# -- tiny_grids -----------------------------------------------------------------------------
def test_tiny_grids_leaves_out_collectives_and_persistent_kernels(tmp_path):
    """On 132 SMs: an all-reduce of 2 blocks (100 µs), a GEMM launched once with 132 blocks
    (50 µs) and once with (30,4,1) = 120 (40 µs), an add of 33 blocks (60 µs). Only the add
    is charged: 60 x (1 - 33/132) = 45 µs, 60 of the 250 µs of kernel time."""
    b = TraceBuilder()
    b.launch_kernel(NCCL, launch_ns=0, launch_dur_ns=2_000, start_ns=10_000, dur_ns=100_000, grid=(2, 1, 1), stream=20)
    b.launch_kernel(BATCH_GEMM, launch_ns=3_000, launch_dur_ns=2_000, start_ns=10_000, dur_ns=50_000, grid=(132, 1, 1))
    b.launch_kernel(BATCH_GEMM, launch_ns=6_000, launch_dur_ns=2_000, start_ns=60_000, dur_ns=40_000, grid=(30, 4, 1))
    b.launch_kernel(ADD, launch_ns=9_000, launch_dur_ns=2_000, start_ns=100_000, dur_ns=60_000, grid=(33, 1, 1))
    [f] = run_findings(b.load(tmp_path), rules=["tiny_grids"]).findings
    assert f.time_lost_ns == 45_000
    assert f.title == ("24 % of kernel time is in grids smaller than the SM count (1 launch, 1 kernel); not counted: "
                       "1 launch of communication kernels (100 µs) and 1 launch of persistent kernels (40 µs)")
    assert [e.name for e in f.evidence] == [ADD]


def persistent_by_shapes(shapes: list[list[list[int]]], grid=(30, 4, 1)) -> TraceBuilder:
    """One GEMM kernel name, always launched with `grid`, by aten::addmm with these input shapes."""
    b = TraceBuilder()
    t = 0
    for dims in shapes:
        ext = b.op("aten::addmm", t, 8_000, args={"Input Dims": dims})
        b.launch_kernel(BATCH_GEMM, launch_ns=t + 1_000, launch_dur_ns=2_000, start_ns=t + 10_000, dur_ns=40_000,
                        ext=ext, grid=grid)
        t += 50_000
    return b


LINEARS = [[[768], [25088, 768], [768, 2304]], [[768], [25088, 768], [768, 768]], [[3072], [25088, 768], [768, 3072]]]


@pytest.mark.parametrize(("shapes", "grid", "charged"), [
    (LINEARS, (30, 4, 1), False),  # one grid of 120 blocks for three output shapes: sized to the device
    (LINEARS[:1] * 3, (30, 4, 1), True),  # one shape: a tile count that happens to be 120
    (LINEARS, (28, 4, 1), True),  # 112 blocks, under 90 % of the SMs: not taken for a persistent grid
])
def test_a_gemm_grid_that_ignores_the_problem_size_is_persistent(tmp_path, shapes, grid, charged):
    result = run_findings(persistent_by_shapes(shapes, grid).load(tmp_path), rules=["tiny_grids"])
    if charged:
        [f] = result.findings
        assert f.time_lost_ns == 3 * 40_000 * (132 - grid[0] * grid[1]) // 132 and "not counted" not in f.title
    else:
        assert not result.findings


@pytest.mark.real
@pytest.mark.parametrize("name", ["h100_qwen15_05b_hf_inference.json.gz", "a100_ddp_cnn_nccl_rank0.json.gz",
                                  "dlrm_8rank_v100/worker0.json.gz"])
def test_tiny_grids_exclusions_on_real_traces_match_the_json(name):
    """From the JSON: launches with fewer blocks than `numSms` that are NCCL kernels, or of a
    kernel one of whose launches has exactly `numSms` blocks (on these traces no other rule
    of `_persistent` applies)."""
    path = real_trace(name)
    doc = json.load(gzip.open(path))
    sms = {d["id"]: d["numSms"] for d in doc["deviceProperties"]}
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "grid" in e.get("args", {})]
    blocks = [(e, e["args"]["grid"][0] * e["args"]["grid"][1] * e["args"]["grid"][2]) for e in kernels]
    full = {(e["args"]["device"], e["name"]) for e, n in blocks if n == sms[e["args"]["device"]]}
    comm, persistent = collections.Counter(), collections.Counter()
    for e, n in blocks:
        key = (e["args"]["device"], e["name"])
        if n < sms[key[0]]:
            into = comm if "nccl" in e["name"].lower() else persistent if key in full else None
            if into is not None:
                into["n"] += 1
                into["ns"] += round(e["dur"] * 1000)
    [f] = run_findings(tracekit_load(path), rules=["tiny_grids"], config={"tiny_grids.min_share": 0}).findings
    parts = [f"{fmt.counted(c['n'], 'launch', 'launches')} of {what} ({fmt.ns(c['ns'])})"
             for c, what in ((comm, "communication kernels"), (persistent, "persistent kernels")) if c]
    assert f.title.endswith("; not counted: " + " and ".join(parts)) if parts else "not counted" not in f.title
    assert persistent or comm


# -- hidden_copy ----------------------------------------------------------------------------
def copies(b: TraceBuilder) -> None:
    """Two casts (aten::to > _to_copy > copy_, float from bf16: 7 and 8 µs), one layout copy
    (aten::contiguous > clone > copy_, 11 µs) and one out-of-place masked_fill (its clone's
    copy, 6 µs, then masked_fill_ on the copy)."""
    t = 0
    for dur in (7_000, 8_000):
        b.op("aten::to", t, 30_000)
        b.op("aten::_to_copy", t + 1_000, 28_000)
        ext = b.op("aten::copy_", t + 2_000, 20_000, args={"Input type": ["float", "c10::BFloat16", "Scalar"]})
        b.launch_kernel(COPY, launch_ns=t + 3_000, launch_dur_ns=4_000, start_ns=t + 10_000, dur_ns=dur, ext=ext)
        t += 40_000
    b.op("aten::contiguous", t, 30_000)
    b.op("aten::clone", t + 1_000, 28_000)
    ext = b.op("aten::copy_", t + 2_000, 20_000, args={"Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]})
    b.launch_kernel(COPY, launch_ns=t + 3_000, launch_dur_ns=4_000, start_ns=t + 10_000, dur_ns=11_000, ext=ext)
    t += 40_000
    b.op("aten::masked_fill", t, 30_000)
    b.op("aten::clone", t + 1_000, 19_000)
    ext = b.op("aten::copy_", t + 2_000, 15_000)
    b.launch_kernel(COPY, launch_ns=t + 3_000, launch_dur_ns=4_000, start_ns=t + 10_000, dur_ns=6_000, ext=ext)
    ext = b.op("aten::masked_fill_", t + 21_000, 8_000)
    b.launch_kernel(ADD, launch_ns=t + 22_000, launch_dur_ns=3_000, start_ns=t + 26_000, dur_ns=5_000, ext=ext)


def test_hidden_copy_names_each_copy_by_its_cause(tmp_path):
    b = TraceBuilder()
    copies(b)
    found = run_findings(b.load(tmp_path), rules=["hidden_copy"]).findings
    assert [(f.title, f.time_lost_ns, f.advice) for f in found] == [
        ("2 device copies are dtype casts (under `aten::to`), 15 µs of GPU time", 15_000, COPY_CAUSES["cast"][1]),
        ("1 device copy is a layout copy (under `aten::contiguous`), 11 µs of GPU time", 11_000,
         COPY_CAUSES["layout"][1]),
        ("1 device copy is made by an out-of-place masked op (under `aten::masked_fill`), 6 µs of GPU time", 6_000,
         COPY_CAUSES["masked"][1]),
    ]
    assert "fuse" in found[0].advice and "masked_fill_" not in found[0].advice + found[1].advice
    assert "masked_fill_" in found[2].advice


def test_a_to_whose_copy_keeps_the_dtype_is_no_cast(tmp_path):
    """aten::to whose copy_ records the same type on both sides (a memory-format move)."""
    b = TraceBuilder()
    b.op("aten::to", 0, 30_000)
    b.op("aten::_to_copy", 1_000, 28_000)
    ext = b.op("aten::copy_", 2_000, 20_000, args={"Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]})
    b.launch_kernel(COPY, launch_ns=3_000, launch_dur_ns=4_000, start_ns=10_000, dur_ns=9_000, ext=ext)
    [f] = run_findings(b.load(tmp_path), rules=["hidden_copy"]).findings
    assert f.title == "1 device copy is a `to` copy that casts nothing (under `aten::to`), 9 µs of GPU time"
    assert f.advice == COPY_CAUSES["other"][1]


def raw_copy_causes(path) -> collections.Counter:
    """From the JSON: each copy kernel's or DtoD memcpy's launch call (correlation), the
    cpu_ops on that call's thread that contain it (its op and their parents), and the cause
    their names give; the innermost op's "Input type" tells a cast from a `to` that casts nothing."""
    events = json.load(gzip.open(path))["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X":
            ops[(e["pid"], e["tid"])].append(e)
    causes: collections.Counter = collections.Counter()
    for e in events:
        copy = (e.get("cat") == "kernel" and "copy" in e["name"].lower()
                or e.get("cat") == "gpu_memcpy" and e["name"].startswith("Memcpy DtoD"))
        call = calls.get(e.get("args", {}).get("correlation")) if copy else None
        if call is None:
            continue
        above = sorted((o for o in ops[(call["pid"], call["tid"])]
                        if o["ts"] <= call["ts"] and call["ts"] + call["dur"] <= o["ts"] + o["dur"]),
                       key=lambda o: (o["ts"], -o["dur"]))
        names = {o["name"] for o in above}
        types = above[-1]["args"].get("Input type", []) if above and above[-1]["name"] == "aten::copy_" else []
        typed = len(types) >= 2 and bool(types[0]) and bool(types[1])
        differ = typed and types[0] != types[1]
        cast = names & {"aten::to", "aten::_to_copy"}
        masked = names & {"aten::masked_fill", "aten::where"}
        layout = names & {"aten::contiguous", "aten::clone", "aten::reshape"}
        if differ and (cast or masked or layout):
            causes["cast"] += 1
        elif masked:
            causes["masked"] += 1
        elif cast:
            causes["other" if typed else "cast"] += 1
        elif layout:
            causes["layout"] += 1
    return causes


@pytest.mark.real
@pytest.mark.parametrize(("name", "expected"), [
    # RMSNorm's casts and the .contiguous() before a projection; no masked_fill at all
    ("h100_qwen15_05b_hf_inference.json.gz", {"cast": 101, "layout": 96}),
    ("h100_timesformer_hf_inference.json.gz", None),
    ("a100_dlrm_6streams_rank0.json.gz", None),
    ("mi300x_sglang_qwen3_8b_prefill_decode.json.gz", None),  # (one `to` that casts nothing)
    ("dlrm_8rank_v100/worker0.json.gz", None),
])
def test_hidden_copy_causes_on_real_traces_match_the_json(name, expected):
    path = real_trace(name)
    found = run_findings(tracekit_load(path), rules=["hidden_copy"]).findings
    counts: collections.Counter = collections.Counter()
    for f in found:
        n = int(re.match(r"([\d,]+) device cop", f.title).group(1).replace(",", ""))
        cause = next(c for c, (_, advice) in COPY_CAUSES.items() if advice == f.advice)
        counts[cause] += n
    assert counts == raw_copy_causes(path)
    if expected is not None:
        assert counts == expected


# -- severity -------------------------------------------------------------------------------
def window(b: TraceBuilder, window_ns: int) -> TraceBuilder:
    """A trace whose window is [0, window_ns): a launch at 0 and a full-grid kernel running
    from 100 ns (the middle of a shorter window) to window_ns."""
    start = min(100, window_ns // 2)
    b.launch_kernel(ADD, launch_ns=0, launch_dur_ns=start, start_ns=start, dur_ns=window_ns - start, grid=(132, 1, 1))
    return b


@pytest.fixture
def costs():
    """A rule of severity high that loses what `costs.lost_ns` says."""
    state = {}

    @rule(id="test_costs", severity="high", title="costs", advice="", nothing_found="")
    def costs_rule(ctx, p):
        return Hit(title="costs", time_lost_ns=state["lost"], severity=state.get("hit"))

    try:
        yield state
    finally:
        RULES.pop("test_costs")


@pytest.mark.parametrize(("window_ns", "lost_ns", "severity"), [
    (10_000_000, 1_000_000, "high"),  # 10 %: high
    (10_000_000, 999_999, "medium"),
    (10_000_000, 200_000, "medium"),  # 2 %
    (10_000_000, 199_999, "low"),
    (10_000_000, 50_000, "low"),  # 0.5 %
    (10_000_000, 49_999, "info"),
    (10_000_000, 1_960, "info"),  # a 1.96 µs copy
    (100_000, 49_999, "low"),  # half the window, but under 50 µs: never above low
    (100_000, 50_000, "medium"),  # 50 % of a window under 1 ms: never high
    (999_999, 999_999, "medium"),
    (1_000_000, 100_000, "high"),
    (130, 130, "low"),  # the whole of a 130 ns window
])
def test_severity_follows_the_share_of_the_window_lost(tmp_path, costs, window_ns, lost_ns, severity):
    costs["lost"] = lost_ns
    result = run_findings(window(TraceBuilder(), window_ns).load(tmp_path), rules=["test_costs"])
    assert result.window_ns == window_ns and band(lost_ns, window_ns) == severity
    [f] = result.findings
    assert (f.severity, f.share) == (severity, lost_ns / window_ns)


def test_a_rule_lowers_the_band_and_never_raises_it(tmp_path, costs):
    trace = window(TraceBuilder(), 10_000_000).load(tmp_path)
    costs.update(lost=5_000_000, hit="low")
    assert run_findings(trace, rules=["test_costs"]).findings[0].severity == "low"
    costs.update(lost=1_960, hit="high")
    assert run_findings(trace, rules=["test_costs"]).findings[0].severity == "info"
    costs.update(lost=5_000_000, hit=None)
    assert run_findings(trace, rules=["test_costs"], config={}).findings[0].severity == "high"
    assert RULES["kernel_outliers"].severity == "low"  # (a low rule stays at most low, whatever it costs)


def test_a_short_copy_in_a_long_window_does_not_fail_medium(tmp_path):
    """`findings --fail-on medium` no longer fails on a 1.96 µs copy in a 10 ms window."""
    from tracekit.cli.main import main

    b = window(TraceBuilder(), 10_000_000)
    b.op("aten::to", 100_000, 30_000)
    b.op("aten::_to_copy", 101_000, 28_000)
    ext = b.op("aten::copy_", 102_000, 20_000)
    b.launch_kernel(COPY, launch_ns=103_000, launch_dur_ns=4_000, start_ns=110_000, dur_ns=1_960, ext=ext, stream=20)
    path = b.write(tmp_path / "copy.json.gz")
    [f] = run_findings(tracekit_load(path), rules=["hidden_copy"]).findings
    assert (f.severity, f.time_lost_ns) == ("info", 1_960)
    assert main(["findings", str(path), "--fail-on", "medium"]) == 0
