"""Findings that weigh what they cost: tiny_grids leaves collectives and persistent kernels
aside, hidden_copy names each copy's cause, and severity follows the share of the window lost."""

from __future__ import annotations


import pytest
from builders import TraceBuilder
from conftest import real_trace

from tracekit import load as tracekit_load
from tracekit.findings import RULES, Hit, rule, run_findings
from tracekit.findings.engine import band

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int, T1, T2)"
COPY = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(int, T1)")


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
