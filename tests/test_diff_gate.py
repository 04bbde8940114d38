"""Diffs a reviewer can trust: unrelated workloads refused, the gate on the noise verdict,
findings' advice carried, configuration caveats, CPU-only drift, a short PR comment."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
from builders import TraceBuilder
from conftest import SHARED_TRACES, real_trace
from test_diff import ADD, GEMM, analysed, golden

from tracekit.cli.main import main
from tracekit.diff import diff
from tracekit.diff.report import build_diff_report, render_diff

CONV = "void cudnn::cnn::conv2d_grouped_direct_kernel<float, float, float>"


def conv_net(steps: int = 3) -> TraceBuilder:
    """Another workload: per 800 µs step a 200 µs convolution and the same 5 µs add as `golden`."""
    b = TraceBuilder()
    for s in range(steps):
        t = s * 800_000
        b.annotation(f"ProfilerStep#{s + 1}", t, 800_000)
        ext = b.op("aten::cudnn_convolution", t + 1_000, 30_000)
        b.launch_kernel(CONV, ext=ext, launch_ns=t + 2_000, launch_dur_ns=5_000, start_ns=t + 10_000, dur_ns=200_000)
        ext = b.op("aten::add", t + 300_000, 20_000)
        b.launch_kernel(ADD, ext=ext, launch_ns=t + 301_000, launch_dur_ns=4_000, start_ns=t + 400_000, dur_ns=5_000)
    return b


def steps_of(lengths_us: list[int]) -> TraceBuilder:
    """Steps of the given lengths, each with one 50 µs GEMM: the same work, noisy step times."""
    b, t = TraceBuilder(), 0
    for i, us in enumerate(lengths_us):
        b.annotation(f"ProfilerStep#{i + 1}", t, us * 1_000)
        ext = b.op("aten::mm", t + 1_000, 10_000)
        b.launch_kernel(GEMM, ext=ext, launch_ns=t + 2_000, launch_dur_ns=5_000, start_ns=t + 10_000, dur_ns=50_000)
        t += us * 1_000
    return b


def test_unrelated_workloads_refused_under_the_gate(tmp_path, capsys):
    # kernel time per step: before GEMM 100 + add 5 + flash 60 = 165 µs, after conv 200 + add 5 = 205 µs;
    # only the add runs on both sides: covered 5/165 = 0.0303 and 5/205 = 0.0244 -> kernels 0.024;
    # self CPU time of the ops: before mm 30 + add 20 + flash 20 = 70 µs, after conv 30 + add 20 = 50 µs:
    # covered 20/70 = 0.286 and 20/50 = 0.4 -> ops 0.286; the score is the better one, 0.286 < 0.7
    a, b = golden(3).write(tmp_path / "a.json.gz"), conv_net(3).write(tmp_path / "b.json.gz")
    out = tmp_path / "d.json"
    assert main(["diff", str(a), str(b), "--fail-if-slower", "5", "-o", str(out)]) == 2
    assert "not gating" in capsys.readouterr().err
    extra = json.loads(out.read_text())["extra"]
    sim = extra["similarity"]
    assert extra["comparable"] is False and (sim["kernel_score"], sim["op_score"], sim["score"]) == (0.024, 0.286, 0.286)
    assert "different workloads" in extra["comparable_reason"]
    assert "Not comparable" in json.loads(out.read_text())["verdict"]
    # step 400 -> 800 µs: +100 % and beyond the noise, so with --allow-unrelated it fails as usual
    assert main(["diff", str(a), str(b), "--fail-if-slower", "5", "--allow-unrelated", "--format", "json"]) == 1
    assert main(["diff", str(a), str(b), "--format", "json"]) == 0  # no gate: the diff is still written


def test_same_workload_is_comparable(base, tmp_path):
    d = diff(base, analysed(golden(3, scale=2), tmp_path, "slow.json.gz"))
    assert d.comparable and d.similarity.score == 1.0 and d.comparable_reason is None


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return analysed(golden(3), tmp_path_factory.mktemp("base"), "base.json.gz")


def test_noisy_but_unchanged_passes_the_default_gate(tmp_path, capsys):
    # before 400/600/400/600/400 µs: median 400, IQR 400–600; after 420/600/420/600/420: median 420.
    # +5 % but noise = (600 − 400) + (420 − 420) = 200 µs > 20 µs: not significant
    a = steps_of([400, 600, 400, 600, 400]).write(tmp_path / "a.json.gz")
    b = steps_of([420, 600, 420, 600, 420]).write(tmp_path / "b.json.gz")
    assert main(["diff", str(a), str(b), "--fail-if-slower", "1", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert "within the step-to-step noise" in out.err
    h = json.loads(out.out)["extra"]["headline"]
    assert h["significant"] is False and h["delta_pct"] == pytest.approx(5.0)  # percent, as PCT is
    assert main(["diff", str(a), str(b), "--fail-if-slower", "1", "--raw-threshold", "--format", "json"]) == 1


def test_one_sample_a_side_says_the_noise_is_unknown(tmp_path, capsys):
    a = golden(3, profiler_steps=False).write(tmp_path / "a.json.gz")
    b = golden(3, profiler_steps=False, scale=2).write(tmp_path / "b.json.gz")
    assert main(["diff", str(a), str(b), "--fail-if-slower", "5", "--format", "json"]) == 1
    assert "noise is unknown" in capsys.readouterr().err


def test_unknown_output_suffix_is_refused(tmp_path, capsys):
    a = golden(2).write(tmp_path / "a.json.gz")
    out = tmp_path / "x.txt"
    assert main(["diff", str(a), str(a), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert ".html, .md or .json" in err and not out.exists()


def test_findings_carry_evidence_and_advice(base, tmp_path):
    ev = SimpleNamespace(name="cudaStreamSynchronize", rel_us=1500.0, lane="thread 1000 (pid 1000)", note="")
    after = replace(base, findings=SimpleNamespace(ran=("sync_stall",), findings=[SimpleNamespace(
        rule="sync_stall", severity="high", title="a sync stalls", time_lost_ns=2_000_000, evidence=(ev,),
        advice="Remove the .item() call.")]))
    model = build_diff_report(diff(replace(base, findings=SimpleNamespace(ran=(), findings=[])), after))
    (f,) = model.findings
    assert f.advice == "Remove the .item() call."
    assert f.evidence == ["cudaStreamSynchronize at 1.500 ms on thread 1000 (pid 1000)"]
    assert "Remove the .item\\(\\) call." in render_diff(model, "md")


def cpu_only(mm_ns: int, steps: int = 3) -> TraceBuilder:
    """CPU-only steps of 1 ms: 4 aten::mm calls of `mm_ns` each, nothing on a GPU."""
    b = TraceBuilder(devices=[])
    for s in range(steps):
        t = s * 1_000_000
        b.annotation(f"ProfilerStep#{s + 1}", t, 1_000_000)
        for i in range(4):
            b.op("aten::mm", t + 10_000 + i * 200_000, mm_ns)
    return b


def test_cpu_only_diff_shows_host_figures_and_flags_drift(tmp_path):
    # same 4 aten::mm calls per step, 100 µs -> 21.3 µs each: 400 / 85.2 = 4.7× faster
    d = diff(analysed(cpu_only(100_000), tmp_path, "a.json.gz"), analysed(cpu_only(21_300), tmp_path, "b.json.gz"))
    assert "Capture noise likely" in d.verdict and "4.7× faster" in d.verdict
    model = build_diff_report(d)
    assert [c.label for c in model.cards] == ["Step time", "CPU op time per step", "Op calls"]
    assert model.cards[1].value == "400 µs → 85.2 µs"
    head = render_diff(model, "md").split("<details>")[0]
    assert "GPU busy" not in head and "GPU idle" not in head and "Kernels per step" not in head


def test_self_diff_markdown_has_no_rows_of_zeros(base):
    md = render_diff(build_diff_report(diff(base, base)), "md")
    assert not [line for line in md.splitlines() if line.endswith("| no change |")]
    assert "is unchanged" in md.splitlines()[4] and len(md.splitlines()) <= 30


PAIR = ("diff_control_a100_dlrm.json.gz", "diff_test_v100_dlrm.json.gz")


@pytest.mark.real
def test_dlrm_pull_request_comment_is_short():
    for name in PAIR:
        real_trace(name)
    from tracekit import load

    d = diff(load(SHARED_TRACES / PAIR[0]), load(SHARED_TRACES / PAIR[1]))
    assert d.comparable and (d.similarity.kernel_score, d.similarity.op_score, d.similarity.score) == (0.85, 0.926, 0.926)
    md = render_diff(build_diff_report(d), "md")
    outside = re.sub(r"<details>.*?</details>", "", md, flags=re.S).splitlines()
    assert len(outside) < 40
    assert outside[2].startswith("**After is 49.3 % slower per step")
    text = "\n".join(outside)
    for caveat in ("hardware NVIDIA A100-PG509-200 → Tesla V100-SXM2-16GB", "job size 8 ranks → 2 ranks",
                   "tensor-core share of matmul time 81 % → 0 %", "torch.compile switched on"):
        assert caveat.replace("(", "\\(") in text
    assert "Looks like code: Memcpy DtoD" in text and "the HTML" not in md
