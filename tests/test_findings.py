"""Findings engine: for every rule a golden trace where it must fire and a near miss where it
must not; the registry and configuration; the CLI; every shared trace."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import polars as pl
import pytest
from builders import A100, TraceBuilder
from conftest import all_real_traces, real_trace
from hypothesis import given, settings
from hypothesis import strategies as st
from test_graph import ADD, GEMM, gpu_bound, launch_bound, sync_stalled

from tracekit import UsageError
from tracekit import load as tracekit_load
from tracekit.analysis.order import longest, longest_gaps
from tracekit.cli.main import main
from tracekit.findings import RULES, Config, Hit, rule, run_findings

SGEMM = "volta_sgemm_128x64_nn"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
FLASH = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 64, 4> >(Params)"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false>(T1*)"
PASCAL = {**A100, "name": "Tesla P100", "computeMajor": 6, "numSms": 56}

Build = Callable[[TraceBuilder], None]


def clean(b: TraceBuilder, *, steps: int = 3) -> None:
    """A healthy trace: 1 ms steps, six 150 µs tensor-core GEMMs (full grids) per step, a pinned
    async HtoD copy, no syncs, one stream."""
    for s in range(steps):
        t = s * 1_000_000
        b.annotation(f"ProfilerStep#{s + 1}", t, 1_000_000)
        b.launch_copy("HtoD (Pinned -> Device)", launch_ns=t + 1_000, launch_dur_ns=2_000, start_ns=t + 20_000,
                      dur_ns=10_000, nbytes=1 << 20)
        for i in range(6):
            ext = b.op("aten::mm", t + 10_000 + i * 5_000, 4_000)
            b.launch_kernel(GEMM, launch_ns=t + 11_000 + i * 5_000, launch_dur_ns=2_000,
                            start_ns=t + 50_000 + i * 150_000, dur_ns=150_000, ext=ext)


def steps_busy(busy_ns: int) -> Build:
    def build(b: TraceBuilder) -> None:
        for s in range(3):
            t = s * 1_000_000
            b.annotation(f"ProfilerStep#{s + 1}", t, 1_000_000)
            b.launch_kernel(GEMM, launch_ns=t + 1_000, launch_dur_ns=2_000, start_ns=t + 10_000, dur_ns=busy_ns)
    return build


def gap(gap_ns: int) -> Build:
    def build(b: TraceBuilder) -> None:
        b.launch_kernel(GEMM, launch_ns=0, launch_dur_ns=2_000, start_ns=10_000, dur_ns=100_000)
        b.launch_kernel(GEMM, launch_ns=5_000, launch_dur_ns=2_000, start_ns=110_000 + gap_ns, dur_ns=100_000)
    return build


def two_streams(offset_ns: int) -> Build:
    """Three 200 µs kernels on stream 7 and three on stream 20, `offset_ns` after each other."""
    def build(b: TraceBuilder) -> None:
        for i in range(3):
            t = 10_000 + i * 400_000
            b.launch_kernel(GEMM, launch_ns=i * 10_000, launch_dur_ns=2_000, start_ns=t, dur_ns=200_000)
            b.launch_kernel(GEMM, launch_ns=i * 10_000 + 5_000, launch_dur_ns=2_000, start_ns=t + offset_ns,
                            dur_ns=200_000, stream=20)
    return build


def grids(blocks: int) -> Build:
    def build(b: TraceBuilder) -> None:
        for i in range(5):
            b.launch_kernel(ADD, launch_ns=i * 5_000, launch_dur_ns=2_000, start_ns=10_000 + i * 50_000,
                            dur_ns=50_000, grid=(blocks, 1, 1))
    return build


def durations(*extra_ns: int) -> Build:
    def build(b: TraceBuilder) -> None:
        t = 10_000
        for i, d in enumerate([10_000] * 20 + list(extra_ns)):
            b.launch_kernel(ADD, launch_ns=i * 1_000, launch_dur_ns=500, start_ns=t, dur_ns=d)
            t += d + 1_000
    return build


def sgemm(b: TraceBuilder) -> None:
    for i in range(4):
        b.launch_kernel(SGEMM, launch_ns=i * 5_000, launch_dur_ns=2_000, start_ns=10_000 + i * 100_000, dur_ns=100_000)


def first_step(first_ns: int) -> Build:
    def build(b: TraceBuilder) -> None:
        t = 0
        for s, d in enumerate([first_ns, 1_000_000, 1_000_000, 1_000_000]):
            b.annotation(f"ProfilerStep#{s + 1}", t, d)
            b.launch_kernel(GEMM, launch_ns=t + 1_000, launch_dur_ns=2_000, start_ns=t + 10_000, dur_ns=d - 20_000)
            t += d
    return build


def overhead(dur_ns: int) -> Build:
    def build(b: TraceBuilder) -> None:
        b.launch_kernel(GEMM, launch_ns=0, launch_dur_ns=2_000, start_ns=10_000, dur_ns=990_000)
        b.op("Activity Buffer Request", 500_000, dur_ns, cat="overhead", tid=7)
    return build


def memcpy(kind: str, api: str) -> Build:
    def build(b: TraceBuilder) -> None:
        ext = b.op("aten::copy_", 0, 60_000)
        b.launch_copy(kind, launch_ns=1_000, launch_dur_ns=50_000, start_ns=10_000, dur_ns=40_000, nbytes=1 << 24,
                      ext=ext, api=api)
    return build


def masked_fill(inplace: bool) -> Build:
    def build(b: TraceBuilder) -> None:
        if inplace:
            ext = b.op("aten::masked_fill_", 0, 20_000)
            b.launch_kernel(ADD, launch_ns=2_000, launch_dur_ns=3_000, start_ns=10_000, dur_ns=5_000, ext=ext)
            return
        b.op("aten::masked_fill", 0, 30_000)
        b.op("aten::clone", 1_000, 19_000)
        ext = b.op("aten::copy_", 2_000, 15_000)
        b.launch_copy("DtoD (Device -> Device)", launch_ns=3_000, launch_dur_ns=4_000, start_ns=10_000,
                      dur_ns=6_000, nbytes=1 << 20, ext=ext)
        ext = b.op("aten::masked_fill_", 21_000, 8_000)
        b.launch_kernel(ADD, launch_ns=22_000, launch_dur_ns=3_000, start_ns=26_000, dur_ns=5_000, ext=ext)
    return build


def eager(second_matmul: bool) -> Build:
    def build(b: TraceBuilder) -> None:
        names = ["aten::matmul", "aten::softmax", "aten::matmul" if second_matmul else "aten::add"]
        for i, name in enumerate(names):
            t = i * 20_000
            ext = b.op(name, t, 15_000)
            kernel = GEMM if name == "aten::matmul" else SOFTMAX if name == "aten::softmax" else ADD
            b.launch_kernel(kernel, launch_ns=t + 2_000, launch_dur_ns=3_000, start_ns=t + 8_000, dur_ns=10_000, ext=ext)
    return build


def sdpa(backend: str) -> Build:
    def build(b: TraceBuilder) -> None:
        for c in range(2):
            t = c * 100_000
            b.op("aten::scaled_dot_product_attention", t, 90_000)
            b.op(backend, t + 1_000, 88_000)
            if backend.endswith("_math"):
                for i, name in enumerate(["aten::matmul", "aten::_safe_softmax", "aten::matmul"]):
                    ext = b.op(name, t + 2_000 + i * 25_000, 20_000)
                    b.launch_kernel(SGEMM if "matmul" in name else SOFTMAX, launch_ns=t + 3_000 + i * 25_000,
                                    launch_dur_ns=3_000, start_ns=t + 10_000 + i * 25_000, dur_ns=15_000, ext=ext)
            else:
                ext = b.op("aten::_flash_attention_forward", t + 2_000, 80_000)
                b.launch_kernel(FLASH, launch_ns=t + 3_000, launch_dur_ns=3_000, start_ns=t + 10_000, dur_ns=50_000,
                                ext=ext)
    return build


def masks(inside: bool) -> Build:
    def build(b: TraceBuilder) -> None:
        if not inside:
            b.op("aten::ones", 0, 5_000)
            b.op("aten::tril", 6_000, 3_000)
        for c in range(2):
            t = 10_000 + c * 100_000
            b.op("nn.Module: LlamaAttention_0", t, 90_000, cat="python_function")
            if inside:
                b.op("aten::ones", t + 1_000, 5_000)
                b.op("aten::tril", t + 7_000, 3_000)
            ext = b.op("aten::scaled_dot_product_attention", t + 20_000, 60_000)
            b.launch_kernel(FLASH, launch_ns=t + 21_000, launch_dur_ns=3_000, start_ns=t + 30_000, dur_ns=40_000, ext=ext)
    return build


def comm(overlap: bool) -> Build:
    def build(b: TraceBuilder) -> None:
        b.launch_kernel(GEMM, launch_ns=0, launch_dur_ns=2_000, start_ns=10_000, dur_ns=400_000)
        start = 50_000 if overlap else 410_000
        b.launch_kernel(NCCL, launch_ns=5_000, launch_dur_ns=2_000, start_ns=start, dur_ns=200_000, stream=20)
    return build


def with_device(device: dict, build: Build) -> Callable[[], TraceBuilder]:
    def make() -> TraceBuilder:
        b = TraceBuilder(devices=[device])
        build(b)
        return b
    return make


def plain(build: Build) -> Callable[[], TraceBuilder]:
    return with_device(TraceBuilder().devices[0], build)


def wrap(make: Callable[..., TraceBuilder], **kw) -> Callable[[], TraceBuilder]:
    return lambda: make(**kw)


# rule -> (trace where it fires, near miss where it must not)
CASES: dict[str, tuple[Callable[[], TraceBuilder], Callable[[], TraceBuilder]]] = {
    "low_gpu_utilisation": (plain(steps_busy(300_000)), plain(steps_busy(600_000))),
    "gpu_gaps": (plain(gap(2_000_000)), plain(gap(500_000))),
    "stream_serialisation": (plain(two_streams(200_000)), plain(two_streams(100_000))),
    "tiny_grids": (plain(grids(8)), plain(grids(132))),
    "kernel_outliers": (plain(durations(100_000, 90_000)), plain(durations(14_000))),
    "fp32_gemm": (plain(sgemm), with_device(PASCAL, sgemm)),
    "launch_bound": (wrap(launch_bound, n=30), wrap(launch_bound, n=10)),
    "host_bound_path": (wrap(launch_bound, n=10), wrap(gpu_bound)),
    "cold_first_step": (plain(first_step(2_000_000)), plain(first_step(1_400_000))),
    "profiler_overhead": (plain(overhead(100_000)), plain(overhead(5_000))),
    "sync_in_loop": (wrap(sync_stalled, steps=3), wrap(sync_stalled, steps=1)),
    "sync_memcpy": (plain(memcpy("DtoH (Device -> Pinned)", "cudaMemcpy")),
                    plain(memcpy("DtoH (Device -> Pinned)", "cudaMemcpyAsync"))),
    "pageable_memcpy": (plain(memcpy("HtoD (Pageable -> Device)", "cudaMemcpyAsync")),
                        plain(memcpy("HtoD (Pinned -> Device)", "cudaMemcpyAsync"))),
    "hidden_copy": (plain(masked_fill(False)), plain(masked_fill(True))),
    "eager_attention": (plain(eager(True)), plain(eager(False))),
    "sdpa_math": (plain(sdpa("aten::_scaled_dot_product_attention_math")),
                  plain(sdpa("aten::_scaled_dot_product_flash_attention"))),
    "mask_rebuilt": (plain(masks(True)), plain(masks(False))),
    "low_comm_overlap": (plain(comm(False)), plain(comm(True))),
}
OWN_RULES = sorted(CASES)


def _run(make: Callable[[], TraceBuilder], tmp_path, rule_id: str, name: str):
    return run_findings(make().load(tmp_path, f"{name}.json.gz"), rules=[rule_id])


@pytest.mark.parametrize("rule_id", OWN_RULES)
def test_rule_fires(rule_id, tmp_path):
    result = _run(CASES[rule_id][0], tmp_path, rule_id, "pos")
    assert not result.errors
    assert [f.rule for f in result.findings] == [rule_id], result.clean
    f = result.findings[0]
    assert f.title and "\n" not in f.title and f.advice and f.time_lost_ns > 0 and 0 < f.share <= 1
    assert f.evidence and all(e.name and e.lane is not None for e in f.evidence)
    assert f.thresholds == {k: v for k, v in RULES[rule_id].defaults.items() if k != "enabled"}


@pytest.mark.parametrize("rule_id", OWN_RULES)
def test_rule_near_miss_is_clean(rule_id, tmp_path):
    result = _run(CASES[rule_id][1], tmp_path, rule_id, "neg")
    assert not result.errors and not result.findings
    assert [c.rule for c in result.clean] == [rule_id] and "{" not in result.clean[0].text


def test_clean_trace_has_no_findings(tmp_path):
    b = TraceBuilder()
    clean(b)
    result = run_findings(b.load(tmp_path))
    assert not result.errors
    assert result.findings == (), [f.title for f in result.findings]
    assert len(result.clean) == len(result.ran) >= 15


def test_exact_time_lost(tmp_path):
    """Time lost where it is known by construction."""
    def lost(make, rule_id, name):
        return _run(make, tmp_path, rule_id, name).findings[0].time_lost_ns

    assert lost(plain(gap(2_000_000)), "gpu_gaps", "a") == 2_000_000
    assert lost(plain(durations(100_000, 90_000)), "kernel_outliers", "b") == 90_000 + 80_000
    assert lost(plain(first_step(2_000_000)), "cold_first_step", "c") == 1_000_000
    assert lost(plain(overhead(100_000)), "profiler_overhead", "d") == 100_000
    assert lost(plain(masked_fill(False)), "hidden_copy", "e") == 6_000
    assert lost(plain(comm(False)), "low_comm_overlap", "f") == 200_000
    assert lost(plain(sgemm), "fp32_gemm", "g") == 300_000  # 400 µs x (1 - 1/4)
    assert lost(wrap(sync_stalled, steps=3), "sync_in_loop", "h") == 300_000  # 3 x 100 µs sync tail
    assert lost(wrap(launch_bound, n=10), "host_bound_path", "i") == 235_000  # 255 µs of host work -> 20 µs GPU
    assert lost(wrap(launch_bound, n=30), "launch_bound", "j") == 29 * 23_000


def test_ranking_and_result_lists(tmp_path):
    b = launch_bound(n=40)  # (a window of 1.005 ms: one under 1 ms is never high)
    result = run_findings(b.load(tmp_path))
    lost = [f.time_lost_ns for f in result.findings]
    assert lost == sorted(lost, reverse=True)
    assert {f.rule for f in result.findings} >= {"launch_bound", "host_bound_path"}
    assert set(result.ran) == {f.rule for f in result.findings} | {c.rule for c in result.clean}
    d = result.to_dict()
    assert json.loads(json.dumps(d))["findings"][0]["evidence"][0]["rel_us"] >= 0
    assert result.at_least("high") and result.worst() == "high"


def test_clean_texts_give_time_thresholds_in_words(tmp_path):
    result = _run(plain(gap(500_000)), tmp_path, "gpu_gaps", "clean")
    assert result.clean[0].text == "No GPU gap of 1 ms or more (profiler overhead and the first/last gaps excluded)."
    moved = run_findings(plain(gap(500_000))().load(tmp_path, "moved.json.gz"), rules=["gpu_gaps"],
                         config={"gpu_gaps.min_gap_ns": 2_500_000})
    assert moved.clean[0].text.startswith("No GPU gap of 2.5 ms or more")
    clash = dataclasses.replace(RULES["gpu_gaps"], nothing_found="{min_gap}")
    assert clash.clean_text({"min_gap_ns": 2_000, "min_gap": 7}) == "7"  # a threshold's own name wins


def test_config_overrides(tmp_path):
    trace = plain(gap(2_000_000))().load(tmp_path)
    assert run_findings(trace, rules=["gpu_gaps"]).findings
    assert not run_findings(trace, rules=["gpu_gaps"], config={"gpu_gaps.min_gap_ns": 3_000_000}).findings
    assert not run_findings(trace, rules=["gpu_gaps"], config={"gpu_gaps": {"min_gap_ns": 3e6}}).findings
    assert not run_findings(trace, rules=["gpu_gaps"], config=Config.from_strings(["gpu_gaps.min_gap_ns=3e6"])).findings
    off = run_findings(trace, rules=["gpu_gaps"], config=Config.from_strings(["gpu_gaps.enabled=false"]))
    assert off.skipped == ("gpu_gaps",) and not off.ran
    assert Config({"gpu_gaps.min_gap_ns": "5000000"}).params("gpu_gaps").min_gap_ns == 5_000_000
    for bad in (["nope.x=1"], ["gpu_gaps.nope=1"], ["gpu_gaps.min_gap_ns=abc"], ["gpu_gaps.min_gap_ns=1.5"], ["x=1"]):
        with pytest.raises(UsageError):
            Config.from_strings(bad)


def test_registration_from_another_module(tmp_path):
    @rule(id="test_dummy", severity="info", title="dummy", advice="none", nothing_found="nothing", limit_ns=5)
    def dummy(ctx, p):
        return Hit(title=f"dummy {p.limit_ns}", time_lost_ns=7)

    try:
        result = run_findings(plain(gap(0))().load(tmp_path), rules=["test_dummy"], config={"test_dummy.limit_ns": 9})
        assert [(f.rule, f.title, f.severity, f.time_lost_ns) for f in result.findings] == [("test_dummy", "dummy 9", "info", 7)]
        with pytest.raises(ValueError, match="already registered"):
            rule(id="test_dummy", severity="info", title="", advice="", nothing_found="")(lambda c, p: None)
    finally:
        RULES.pop("test_dummy")


def test_failing_rule_is_reported_not_raised(tmp_path):
    @rule(id="test_broken", severity="low", title="broken", advice="", nothing_found="")
    def broken(ctx, p):
        raise RuntimeError("boom")

    try:
        result = run_findings(plain(gap(0))().load(tmp_path), rules=["test_broken", "gpu_gaps"])
        assert result.errors == (("test_broken", "RuntimeError: boom"),) and "gpu_gaps" in result.ran
    finally:
        RULES.pop("test_broken")


def test_failing_rules_are_errors_in_order_and_the_others_still_find(tmp_path):
    def broken(name):
        def fails(ctx, p):
            raise RuntimeError(name)

        return fails

    for name in ("test_broken_a", "test_broken_b"):
        rule(id=name, severity="low", title="broken", advice="", nothing_found="")(broken(name))
    try:
        trace = launch_bound(n=30).load(tmp_path)
        result = run_findings(trace)
        assert result.findings
        assert result.errors == (("test_broken_a", "RuntimeError: test_broken_a"),
                                 ("test_broken_b", "RuntimeError: test_broken_b"))
    finally:
        RULES.pop("test_broken_a")
        RULES.pop("test_broken_b")


@pytest.mark.real
@pytest.mark.parametrize("name", ["v100_ddp_mlp_memory_rank1.json.gz", "h100_qwen15_05b_hf_inference.json.gz",
                                  "a100_dlrm_6streams_rank0.json.gz"])
def test_the_pipeline_findings_are_those_the_rules_find_alone(name):
    """Seeded with the pipeline's analyses or computing what they read themselves, the rules
    find the same: the seed is the same analysis, not another one."""
    from tracekit.pipeline import analyse

    trace = tracekit_load(real_trace(name))
    seeded = analyse(trace).findings
    assert seeded == run_findings(trace) and not seeded.errors and seeded.findings


def test_superseded_rule_is_skipped(tmp_path):
    @rule(id="test_specific", severity="low", title="", advice="", nothing_found="")
    def specific(ctx, p):
        return None

    @rule(id="test_generic", severity="low", title="", advice="", nothing_found="", superseded_by="test_specific")
    def generic(ctx, p):
        return Hit(title="generic", time_lost_ns=1)

    try:
        trace = plain(gap(0))().load(tmp_path)
        assert run_findings(trace, rules=["test_generic", "test_specific"]).skipped == ("test_generic",)
        assert run_findings(trace, rules=["test_generic"]).findings
        both = run_findings(trace, rules=["test_generic", "test_specific"], config={"test_specific.enabled": False})
        assert [f.rule for f in both.findings] == ["test_generic"]
    finally:
        RULES.pop("test_specific"), RULES.pop("test_generic")


def test_cli_findings(tmp_path, capsys):
    path = launch_bound(n=40).write(tmp_path / "t.json.gz")  # (a window of 1.005 ms: one under 1 ms is never high)
    assert main(["findings", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[high] launch_bound" in out and "nothing found:" in out and "advice:" in out
    assert main(["findings", str(path), "--json", "--set", "launch_bound.min_kernels=100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "launch_bound" in {c["rule"] for c in data["clean"]}
    assert main(["findings", str(path), "--fail-on", "high"]) == 1
    capsys.readouterr()
    ok = plain(gap(0))().write(tmp_path / "ok.json.gz")
    assert main(["findings", str(ok), "--fail-on", "low"]) == 0
    assert main(["findings", str(path), "--set", "nope.x=1"]) == 2
    assert "unknown rule" in capsys.readouterr().err


def test_cli_critical_path(tmp_path, capsys):
    path = sync_stalled().write(tmp_path / "t.json.gz")
    assert main(["critical-path", str(path), "--window", "ProfilerStep#2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("this window is 50 % sync-bound") and "what if" in out and "ProfilerStep#2" in out
    assert main(["critical-path", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "sync-bound" and {w["scenario"] for w in data["what_if"]} >= {"no_syncs"}
    assert main(["critical-path", str(path), "--window", "nope"]) == 2


@pytest.mark.real
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: p.name)
def test_cli_findings_on_every_shared_trace(path, capsys, monkeypatch):
    from test_graph import critical_path_cached, load_cached

    monkeypatch.setattr("tracekit.cli.common.load_trace", lambda path, **_: load_cached(path))  # (the command's `Loading`)
    # the whole-trace critical path host_bound_path reads: the one test_critical_path computed
    monkeypatch.setattr("tracekit.analysis.critical_path.critical_path", lambda trace, **kw: critical_path_cached(path))
    assert main(["findings", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert not data["errors"], data["errors"]
    assert len(data["ran"]) >= 15
    for f in data["findings"]:
        assert f["time_lost_ns"] >= 0 and f["severity"] in ("high", "medium", "low", "info")


def test_titles_say_one_and_many_in_words(tmp_path):
    """Counts in titles take the noun (and verb) in their number, never "call(s)"."""
    def title(make, rule_id, name):
        return _run(make, tmp_path, rule_id, name).findings[0].title

    # 20 calls of 10 µs (median 10 µs) and the outliers: 100 µs is 90 µs over, 90 µs 80 µs over
    assert title(plain(durations(100_000)), "kernel_outliers", "one") == \
        "1 kernel call of 1 kernel runs far over its median, 90 µs over"
    assert title(plain(durations(100_000, 90_000)), "kernel_outliers", "two") == \
        "2 kernel calls of 1 kernel run far over their median, 170 µs over in all"
    # the second kernel was queued (launched at 5 µs) long before its stream went idle: nothing explains the gap
    assert title(plain(gap(2_000_000)), "gpu_gaps", "gap") == "1 GPU gap of 1 ms or more: 2 ms, other"

    def three_gaps(b: TraceBuilder) -> None:
        """Gaps of 1.5 ms (queued work), 2 ms (the launch came late: CPU work) and 1.5 ms (queued)."""
        b.launch_kernel(GEMM, launch_ns=0, launch_dur_ns=2_000, start_ns=10_000, dur_ns=100_000)
        b.launch_kernel(GEMM, launch_ns=3_000, launch_dur_ns=2_000, start_ns=1_610_000, dur_ns=100_000)
        b.launch_kernel(GEMM, launch_ns=3_707_000, launch_dur_ns=2_000, start_ns=3_710_000, dur_ns=100_000)
        b.launch_kernel(GEMM, launch_ns=6_000, launch_dur_ns=2_000, start_ns=5_310_000, dur_ns=100_000)

    # every kernel but the first waits on its launch (test_exact_time_lost)
    assert title(wrap(launch_bound, n=1_201), "launch_bound", "many").startswith("Launch-bound: 1,200 short kernels ")
    # "mostly": the cause with the most gap time (3 ms queued), not the longest gap's (2 ms of CPU work)
    assert title(plain(three_gaps), "gpu_gaps", "three") == \
        "3 GPU gaps of 1 ms or more, 5 ms in all (longest 2 ms, mostly other)"
    # one `.item()` sync per step, 100 µs of GPU idle after each
    assert title(wrap(sync_stalled, steps=3), "sync_in_loop", "sync") == (
        "3 host-device syncs repeat in the loop (`aten::item > aten::_local_scalar_dense` x3 in 3 steps); "
        "the GPU idles 300 µs around them")


def shapes(slow_ns: int | None = None) -> Build:
    """One GEMM kernel name for two shapes of aten::mm: 18 calls of 20 µs (K=1024) and 6 of
    50 µs (K=2816), each launched inside its op; `slow_ns`: the last K=1024 call takes that long."""
    def build(b: TraceBuilder) -> None:
        t = 10_000
        for i in range(24):
            k = 2816 if i % 4 == 0 else 1024
            dur = 20_000 if k == 1024 else 50_000
            if slow_ns is not None and i == 23:
                dur = slow_ns
            ext = b.op("aten::mm", t - 5_000, 4_000, args={"Input Dims": [[64, k], [k, 1024]]})
            b.launch_kernel(GEMM, launch_ns=t - 4_000, launch_dur_ns=2_000, start_ns=t, dur_ns=dur, ext=ext)
            t += dur + 10_000
    return build


def test_outliers_compare_calls_of_the_same_shape(tmp_path):
    """A quarter of the calls take 2.5x the others because they do 2.75x the work: no outlier
    (by the kernel's name alone, median 20 µs and MAD 0, all six would be 30 µs over). A call
    of 60 µs among the 20 µs ones of its shape is one, 40 µs over."""
    assert not _run(plain(shapes()), tmp_path, "kernel_outliers", "even").findings
    [found] = _run(plain(shapes(60_000)), tmp_path, "kernel_outliers", "slow").findings
    assert found.time_lost_ns == 40_000 and found.title.startswith("1 kernel call of 1 kernel runs far over its median")


def test_evidence_notes_give_times_and_counts_in_words(tmp_path):
    outliers = _run(plain(durations(100_000)), tmp_path, "kernel_outliers", "o").findings[0]
    assert [e.note for e in outliers.evidence] == ["median 10 µs"]  # 20 calls of 10 µs, and the outlier
    tiny = _run(plain(grids(8)), tmp_path, "tiny_grids", "g").findings[0]
    assert {e.note for e in tiny.evidence} == {"median 8 blocks"}
    host = _run(wrap(launch_bound, n=10), tmp_path, "host_bound_path", "h").findings[0]
    # the 255 µs of host work in the module (test_exact_time_lost); the step's zero-length pieces are no evidence
    assert [(e.name, e.note) for e in host.evidence] == [("nn.Module: LlamaAttention_0", "255 µs of host time on the path")]


def test_longest_breaks_ties_by_time_then_id():
    rows = pl.DataFrame({"eid": [5, 3, 9, 1, 7], "ts_ns": [20, 20, 10, 30, 10], "dur_ns": [4, 4, 4, 9, None]})
    for seed in range(4):  # whatever order the rows come in
        assert longest(rows.sample(fraction=1.0, shuffle=True, seed=seed))["eid"].to_list() == [1, 9, 3, 5, 7]
    gaps = pl.DataFrame({"gap_ns": [5, 5, 5], "start_ns": [7, 7, 2], "device": [1, 0, 3], "stream": [None, None, None]})
    assert longest_gaps(gaps.reverse())["device"].to_list() == [3, 0, 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 4)), st.integers(0, 3)), max_size=30),
       st.integers(0, 12))
def test_the_head_of_longest_is_the_head_of_the_whole_order(rows, head):
    """`longest(head=n)` sorts only the rows that can be among the first n: the same rows,
    ties and nulls included, as the whole order's first n."""
    frame = pl.DataFrame({"dur_ns": [d for d, _ in rows], "ts_ns": [t for _, t in rows],
                          "eid": list(range(len(rows)))}, schema={"dur_ns": pl.Int64, "ts_ns": pl.Int64, "eid": pl.Int64})
    assert longest(frame, head=head).equals(longest(frame).head(head))


@pytest.mark.real
def test_evidence_is_the_same_on_every_run():
    """A trace with equal-length kernels of different names: the FP32 GEMM evidence used to
    come out in the order of a group-by, which changed from run to run."""
    trace = tracekit_load(real_trace("dlrm_8rank_v100/worker4.json.gz"))
    runs = [run_findings(trace, rules=["fp32_gemm"]) for _ in range(4)]
    assert all(r == runs[0] for r in runs[1:])
    names = [e.name for e in runs[0].findings[0].evidence]
    totals = dict(trace.kernels.group_by("name").agg(pl.col("dur_ns").sum()).iter_rows())
    order = [(-totals[n], n) for n in names]
    assert len(names) == 5 and order == sorted(order)  # the most GPU time first, ties by name
    assert len({t for t, _ in order}) < 5  # (the trace has such ties)


def test_pageable_memcpy_names_the_host_time_async_calls_blocked(tmp_path):
    """An async copy to pageable host memory blocks its call until done (50 us here, 40 of
    them the copy); one from pageable memory (HtoD) does not count as blocking."""
    titles = {}
    for kind in ("DtoH (Device -> Pageable)", "HtoD (Pageable -> Device)"):
        result = run_findings(plain(memcpy(kind, "cudaMemcpyAsync"))().load(tmp_path, f"{kind[:4]}.json.gz"),
                              rules=["pageable_memcpy"])
        titles[kind[:4]] = result.findings[0].title
    assert titles == {
        "DtoH": "1 copy of 16.8 MB uses pageable host memory (40 µs of copy time); the host waited 50 µs in the call "
                "that copied to it (an async call returns only when such a copy is done)",
        "HtoD": "1 copy of 16.8 MB uses pageable host memory (40 µs of copy time)",
    }


def test_context_properties_are_computed_once_per_context(tmp_path, monkeypatch):
    from tracekit.findings import context

    trace = launch_bound(n=5).load(tmp_path)
    calls, real = [], context.op_tree
    monkeypatch.setattr(context, "op_tree", lambda t: calls.append(1) or real(t))
    ctx = context.Context(trace)
    assert ctx.nested is ctx.nested and len(calls) == 1
    assert context.Context(trace).nested is not ctx.nested  # once per context: another computes its own
    assert len(calls) == 2


@pytest.mark.real
def test_the_attention_analysis_runs_once_for_the_rules(monkeypatch):
    """The attention rules share one analysis per context."""
    from tracekit.analysis import attention

    calls, real = [], attention.analyze_attention
    monkeypatch.setattr(attention, "analyze_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    trace = tracekit_load(real_trace("h100_qwen15_05b_hf_inference.json.gz"))
    one = run_findings(trace)
    assert len(calls) == 1  # once per run, whichever rule asks first
    assert len([r for r in one.ran if r.startswith("attention")]) >= 5 and not one.errors


@pytest.mark.real
def test_a_standalone_run_builds_the_op_tree_and_links_once(monkeypatch):
    """Every analysis the rules read is made from the Context's one op tree, launch calls and
    GPU links (`tracekit findings` runs the rules without the pipeline)."""
    from tracekit.analysis import links

    made = {"cpu_ops": 0, "_launch_ops": 0, "_gpu_links": 0}
    for name in made:
        real = getattr(links, name)
        monkeypatch.setattr(links, name, lambda *a, _real=real, _name=name, **k: made.__setitem__(
            _name, made[_name] + 1) or _real(*a, **k))
    result = run_findings(tracekit_load(real_trace("h100_qwen15_05b_hf_inference.json.gz")))
    assert result.findings and not result.errors
    assert made == {"cpu_ops": 1, "_launch_ops": 1, "_gpu_links": 1}
