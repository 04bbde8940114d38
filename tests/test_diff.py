"""Trace diff: golden pairs with known deltas (exact ns), noise, the CLI's exit codes, the
real A100-vs-V100 DLRM pair in every format, the page in a browser, and a property."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace

import polars as pl
import pytest
from builders import A100, TraceBuilder
from conftest import SHARED_TRACES, real_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from report_fixtures import FAKE_TOKEN, hostile_trace

from tracekit.pipeline import analyse
from tracekit.cli.main import main
from tracekit.diff import HARDWARE_NOTE, diff, kernel_base, kernel_key
from tracekit.diff.names import match_keys
from tracekit.diff.report import build_diff_report, render_diff
from tracekit.errors import UsageError
from tracekit.render.markdown import MAX_CHARS

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>"
STEP_NS = 400_000


def golden(steps: int = 3, *, gemm_ns: int = 100_000, add: bool = True, sync: bool = False, scale: int = 1,
           profiler_steps: bool = True, devices: list | None = None) -> TraceBuilder:
    """`steps` identical steps of `scale * 400 µs`: a GEMM (gemm_ns), an add (5 µs, optional),
    a flash-attention kernel (60 µs) and, optionally, an `aten::item` holding a 40 µs
    cudaStreamSynchronize. GPU work never overlaps, so busy per step = the kernel time."""
    b = TraceBuilder(devices=devices)
    for s in range(steps):
        t = s * STEP_NS * scale
        if profiler_steps:
            b.annotation(f"ProfilerStep#{s + 1}", t, STEP_NS * scale)
        b.annotation("## forward ##", t + 500, 300_000 * scale)
        ext = b.op("aten::mm", t + 1_000, 30_000)
        b.launch_kernel(GEMM, ext=ext, launch_ns=t + 2_000, launch_dur_ns=5_000, start_ns=t + 10_000, dur_ns=gemm_ns * scale)
        if add:
            ext = b.op("aten::add", t + 150_000, 20_000)
            b.launch_kernel(ADD, ext=ext, launch_ns=t + 151_000, launch_dur_ns=4_000, start_ns=t + 250_000 * scale,
                            dur_ns=5_000 * scale)
        ext = b.op("aten::_scaled_dot_product_flash_attention", t + 170_000, 20_000)
        b.launch_kernel(FLASH, ext=ext, launch_ns=t + 171_000, launch_dur_ns=6_000, start_ns=t + 270_000 * scale,
                        dur_ns=60_000 * scale)
        if sync:
            b.op("aten::item", t + 340_000 * scale, 50_000)
            b.runtime("cudaStreamSynchronize", t + 341_000 * scale, 40_000)
    return b


def analysed(builder: TraceBuilder, tmp_path, name: str):
    return analyse(builder.load(tmp_path, name))


def figure(d, name: str) -> dict:
    return d.summary.filter(pl.col("figure") == name).row(0, named=True)


def kernel(d, name_part: str) -> dict:
    rows = d.kernels.filter(pl.coalesce("name_before", "name_after").str.contains(name_part, literal=True))
    assert rows.height == 1, rows
    return rows.row(0, named=True)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return analysed(golden(3), tmp_path_factory.mktemp("base"), "base.json.gz")


# -- golden pairs ----------------------------------------------------------------------------


def test_kernel_removed(base, tmp_path):
    d = diff(base, analysed(golden(3, add=False), tmp_path, "after.json.gz"))
    k = kernel(d, "CUDAFunctor_add")
    assert (k["status"], k["count_before"], k["count_after"]) == ("disappeared", 1, 0)
    assert (k["total_ns_before"], k["total_ns_after"], k["total_ns_delta"]) == (5_000, 0, -5_000)
    assert k["total_ns_significant"] is True  # identical steps: no spread at all
    assert d.disappeared["key"].to_list() == [k["key"]] and d.appeared.is_empty()
    assert figure(d, "kernels")["delta"] == -1
    assert figure(d, "gpu_busy_ns")["delta"] == -5_000
    assert figure(d, "step_ns")["delta"] == 0 and d.headline.delta_ns == 0
    op = d.ops.filter(pl.col("key") == "aten::add").row(0, named=True)
    assert (op["status"], op["calls_before"], op["gpu_incl_ns_before"]) == ("disappeared", 1, 5_000)
    assert "gone" in d.verdict and "unchanged" in d.verdict


def test_kernel_twice_as_slow(base, tmp_path):
    d = diff(base, analysed(golden(3, gemm_ns=200_000), tmp_path, "after.json.gz"))
    k = kernel(d, "sm90_xmma_gemm")
    assert (k["status"], k["match"], k["count_before"], k["count_after"]) == ("matched", "exact", 1, 1)
    assert (k["total_ns_before"], k["total_ns_after"], k["total_ns_delta"]) == (100_000, 200_000, 100_000)
    assert (k["mean_ns_before"], k["mean_ns_after"], k["total_ns_delta_pct"]) == (100_000, 200_000, 1.0)
    assert figure(d, "gpu_busy_ns")["before"] == 165_000 and figure(d, "gpu_busy_ns")["delta"] == 100_000
    assert figure(d, "gpu_idle_ns")["delta"] == -100_000
    assert d.kernels.filter(pl.col("key") != k["key"])["total_ns_delta"].to_list() == [0, 0]
    assert d.kernel_classes.filter(pl.col("kernel_class") == "gemm")["total_ns_delta"].to_list() == [100_000]


def test_sync_added(base, tmp_path):
    d = diff(base, analysed(golden(3, sync=True), tmp_path, "after.json.gz"))
    s = d.syncs.row(0, named=True)
    assert (s["call"], s["status"], s["calls_after"], s["blocked_ns_after"]) == ("cudaStreamSynchronize", "appeared", 1, 40_000)
    assert (figure(d, "syncs")["delta"], figure(d, "sync_ns")["delta"]) == (1, 40_000)
    assert d.ops.filter(pl.col("key") == "aten::item")["status"].to_list() == ["appeared"]
    assert d.kernels["total_ns_delta"].abs().sum() == 0


def test_step_counts_differ(base, tmp_path):
    """3 vs 5 identical steps: per-step medians match exactly; only the sample counts differ."""
    d = diff(base, analysed(golden(5, gemm_ns=200_000), tmp_path, "after.json.gz"))
    assert (d.before.steps, d.after.steps, d.scope) == (3, 5, "steps")
    step = figure(d, "step_ns")
    assert (step["n_before"], step["n_after"], step["before"], step["after"], step["delta"]) == (3, 5, STEP_NS, STEP_NS, 0)
    k = kernel(d, "sm90_xmma_gemm")
    assert (k["count_before"], k["count_after"], k["total_ns_delta"]) == (1, 1, 100_000)
    assert (k["total_ns_before_sum"], k["total_ns_after_sum"]) == (300_000, 1_000_000)
    w = d.windows.filter(pl.col("kind") == "## forward ##").row(0, named=True)
    assert (w["n_before"], w["n_after"], w["cpu_ns_delta"]) == (3, 5, 0)


def test_self_diff_has_no_change(base):
    d = diff(base, base)
    assert d.headline.delta_ns == 0 and d.headline.significant is False
    assert not d.summary["significant"].any() and d.kernels["total_ns_significant"].sum() == 0
    assert d.appeared.is_empty() and d.disappeared.is_empty()
    assert "unchanged" in d.verdict


def test_noise_marks_small_changes(tmp_path):
    """Steps that vary by ±50 µs: a 10 µs shift is within the noise, a 300 µs shift is not."""
    def noisy(shift: int) -> TraceBuilder:
        b, t = TraceBuilder(), 0
        for s, jitter in enumerate((0, 50_000, 100_000, 20_000, 80_000)):
            length = STEP_NS + jitter + shift
            b.annotation(f"ProfilerStep#{s + 1}", t, length)
            b.launch_kernel(GEMM, launch_ns=t + 1_000, launch_dur_ns=2_000, start_ns=t + 5_000, dur_ns=10_000)
            t += length
        return b

    before = analysed(noisy(0), tmp_path, "b.json.gz")
    small = diff(before, analysed(noisy(10_000), tmp_path, "s.json.gz"))
    big = diff(before, analysed(noisy(300_000), tmp_path, "l.json.gz"))
    assert small.headline.delta_ns == 10_000 and small.headline.significant is False
    assert "not a significant change" in small.verdict
    assert big.headline.delta_ns == 300_000 and big.headline.significant is True
    # steps of 400, 420, 450, 480, 500 µs: median 450, IQR 420–480; after +300 µs: 750, IQR 720–780.
    # The noise of a rise is (480 - 450) + (750 - 720) µs: the intervals are 240 µs apart
    assert big.headline.noise_ns == 60_000 and small.headline.noise_ns == 60_000


def test_no_steps_compares_whole_span(tmp_path):
    b = analysed(golden(2, profiler_steps=False), tmp_path, "b.json.gz")
    a = analysed(golden(2, profiler_steps=False, gemm_ns=150_000), tmp_path, "a.json.gz")
    d = diff(b, a)
    assert d.scope == "gpu-span" and d.headline.n_before == 1
    assert kernel(d, "sm90_xmma_gemm")["total_ns_delta"] == 100_000  # both GEMMs of the trace
    assert kernel(d, "sm90_xmma_gemm")["total_ns_significant"] is None
    assert any("whole GPU span" in n for n in d.notes)


def test_window_metric_and_bad_metric(base, tmp_path):
    after = analysed(golden(3, scale=2), tmp_path, "a.json.gz")
    d = diff(base, after, metric="window:## forward ##")
    assert (d.headline.before_ns, d.headline.after_ns, d.headline.delta_pct) == (300_000, 600_000, 1.0)
    with pytest.raises(UsageError):
        diff(base, after, metric="window:nothing-like-this")
    with pytest.raises(UsageError):
        diff(base, after, metric="fastest")


def test_hardware_note_and_findings_by_rule(base, tmp_path):
    after = analysed(golden(3, devices=[A100]), tmp_path, "a100.json.gz")
    ran = ("launch_gaps", "sync_stall", "pageable_copy", "tiny_grids", "fp32_gemm", "hidden_copy")

    def fake(**lost: int) -> SimpleNamespace:
        items = [SimpleNamespace(rule=r, severity="high", title=f"{r} title", time_lost_ns=ns) for r, ns in lost.items()]
        return SimpleNamespace(findings=items, ran=ran)

    # worse: at least twice the time lost and 1 ms more; twice but under 1 ms more, or 1 ms more
    # but under twice, stays persisting
    d = diff(replace(base, findings=fake(launch_gaps=1_000, sync_stall=1_000, tiny_grids=1_000_000,
                                         fp32_gemm=900_000, hidden_copy=3_000_000)),
             replace(after, findings=fake(sync_stall=1_000, pageable_copy=1_000, tiny_grids=2_000_000,
                                          fp32_gemm=1_800_000, hidden_copy=5_999_999)))
    assert d.comparable and not d.same_hardware and HARDWARE_NOTE in d.notes[0]
    assert d.changes[0].kind == "hardware" and "Configuration changed: hardware" in d.verdict
    status = dict(zip(d.findings["rule"], d.findings["status"]))
    assert status == {"pageable_copy": "introduced", "tiny_grids": "worse", "launch_gaps": "resolved",
                      "fp32_gemm": "persisting", "hidden_copy": "persisting", "sync_stall": "persisting"}
    assert "findings: 1 resolved (launch_gaps), 1 introduced (pageable_copy) and 1 worse (tiny_grids)" in d.verdict
    model = build_diff_report(d)
    assert [(f.id, f.title, f.share) for f in model.findings] == [
        ("pageable_copy", "new: pageable_copy title", "introduced by after"),
        ("tiny_grids", "worse: tiny_grids title", "was 1 ms before")]


def test_kernel_names_normalise_conservatively():
    names = pl.DataFrame({"n": [
        "void foo<float>(int, float*)", "triton_poi_fused_add_0", "kernel at 0x7f3a12ab00",
        "at::native::elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
        "at::native::elementwise_kernel<4, at::native::CUDAFunctor_mul<float>>", "volta_sgemm_128x32_nn",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>"]})
    keys = names.select(kernel_key(pl.col("n")))["n"].to_list()
    assert keys[:3] == ["foo<float>", "triton_poi_fused_add", "kernel at 0x…"]
    assert keys[3] != keys[4]  # template arguments are kept: add and mul stay apart
    assert keys[6] == "at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>"
    bases = names.select(kernel_base(kernel_key(pl.col("n"))))["n"].to_list()
    assert bases[3] == bases[4] == "at::native::elementwise_kernel" and bases[5] == "sgemm_128x32_nn"
    before = pl.DataFrame({"key": ["volta_sgemm_128x32_nn", "k<1>", "k<2>"], "base": ["sgemm_128x32_nn", "k", "k"]})
    after = pl.DataFrame({"key": ["ampere_sgemm_128x32_nn", "k<3>"], "base": ["sgemm_128x32_nn", "k"]})
    pairs = match_keys(before, after)  # `k` is ambiguous on the before side: not paired
    assert pairs.rows() == [("ampere_sgemm_128x32_nn", "volta_sgemm_128x32_nn")]


def test_hostile_names_are_inert_and_secrets_redacted(base, tmp_path):
    d = diff(base, analysed(hostile_trace(), tmp_path, "hostile.json.gz"))
    model = build_diff_report(d)
    html, md, js = (render_diff(model, k) for k in ("html", "md", "json"))
    assert html.count("<script") == 1 and "<img" not in html and "href=" not in html
    assert "&lt;script&gt;alert(&#39;k&#39;)&lt;/script&gt;" in html
    for text in (html, md, js):
        assert FAKE_TOKEN not in text and "s3cretpw" not in text
    prose = re.sub(r"`[^`\n]*`", "", md)
    prose = re.sub(r"</?details>|</?summary>", "", prose)  # the renderer's own folding, nothing from the trace
    assert "<" not in prose.replace("\\<", "") and "](javascript" not in md


# -- CLI ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    return {"a": golden(3).write(d / "a.json.gz"), "slow": golden(3, scale=2).write(d / "slow.json.gz"), "dir": d}


def test_cli_self_diff_passes(files, capsys):
    out = files["dir"] / "self.html"
    assert main(["diff", str(files["a"]), str(files["a"]), "--fail-if-slower", "1", "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_cli_regression_fails(files, capsys):
    rc = main(["diff", str(files["a"]), str(files["slow"]), "--fail-if-slower", "10", "--format", "json"])
    assert rc == 1
    cap = capsys.readouterr()
    data = json.loads(cap.out)
    assert data["extra"]["headline"]["delta_pct"] == 100.0 and "slower" in cap.err
    assert main(["diff", str(files["slow"]), str(files["a"]), "--fail-if-slower", "10", "--format", "md"]) == 0


def test_cli_bad_input_exits_2(files, capsys):
    assert main(["diff", str(files["a"]), str(files["dir"] / "missing.json.gz")]) == 2
    assert main(["diff", str(files["a"]), str(files["a"]), "--metric", "fastest"]) == 2
    broken = files["dir"] / "broken.json"
    broken.write_text("this is not a trace")
    assert main(["diff", str(files["a"]), str(broken)]) == 2


def test_cli_cache_and_size_options(files, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    out = tmp_path / "d.json"
    # the golden files are under the 1 MB default: --cache stores both, --no-cache nothing
    assert main(["diff", str(files["a"]), str(files["slow"]), "--no-cache", "-o", str(out)]) == 0
    assert not (tmp_path / "xdg").exists()
    assert main(["diff", str(files["a"]), str(files["slow"]), "--cache", "-o", str(out)]) == 0
    cache = tmp_path / "xdg" / "tracekit"
    assert len([p for p in cache.iterdir() if p.name not in ("analyses", "templates")]) == 2
    assert len(list((cache / "analyses").iterdir())) == 2
    capsys.readouterr()
    assert main(["diff", str(files["a"]), str(files["slow"]), "--no-cache", "--max-bytes", "1K", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "more than 1,024 bytes (limit)" in err


# -- property ----------------------------------------------------------------------------------


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.integers(1, 4), gemm=st.integers(1, 200).map(lambda x: x * 1_000), add=st.booleans(),
       sync=st.booleans(), profiler_steps=st.booleans())
def test_self_diff_all_deltas_zero(tmp_path, steps, gemm, add, sync, profiler_steps):
    a = analysed(golden(steps, gemm_ns=gemm, add=add, sync=sync, profiler_steps=profiler_steps), tmp_path, "p.json.gz")
    d = diff(a, a)
    for name in ("summary", "kernels", "kernel_classes", "ops", "launches", "syncs", "copies", "windows"):
        frame = getattr(d, name)
        deltas = [c for c in frame.columns if c.endswith("delta")]
        assert deltas and all(frame[c].abs().sum() == 0 for c in deltas), name
        sig = [c for c in frame.columns if c.endswith("significant")]
        assert not any(frame[c].fill_null(False).any() for c in sig), name
    assert d.headline.delta_ns == 0 and not d.regressed(0)


# -- the real DLRM pair (A100 rank 3 of 8 vs V100 rank 1 of 2, Kineto 2022) ----------------------


PAIR = ("diff_control_a100_dlrm.json.gz", "diff_test_v100_dlrm.json.gz")


@pytest.fixture(scope="module")
def dlrm_or_none():
    """The real pair's diff and report model, or None when ../shared/traces is absent."""
    if not all((SHARED_TRACES / name).exists() for name in PAIR):
        return None
    from tracekit import load

    d = diff(load(SHARED_TRACES / PAIR[0]), load(SHARED_TRACES / PAIR[1]))
    return d, build_diff_report(d)


@pytest.fixture
def dlrm(dlrm_or_none):
    if dlrm_or_none is None:
        real_trace(PAIR[0])  # skips with the usual message
        real_trace(PAIR[1])
    return dlrm_or_none


@pytest.mark.real
def test_real_pair_renders_everywhere(dlrm):
    d, model = dlrm
    html, md, js = (render_diff(model, k) for k in ("html", "md", "json"))
    assert model.title == "tracekit diff: diff_control_a100_dlrm.json.gz → diff_test_v100_dlrm.json.gz"
    assert len(md) < MAX_CHARS and HARDWARE_NOTE in md and "hardware NVIDIA A100-PG509-200 → Tesla V100-SXM2-16GB" in d.verdict
    assert "compare shapes of the profile" in html
    data = json.loads(js)
    assert data["extra"]["kind"] == "diff" and data["verdict"] == d.verdict
    top = next(t for s in model.sections for t in s.tables if t.id == "kernel-deltas")
    assert len(top.rows) >= 10 and top.rows[0][0].text in md
    assert d.kernels["total_ns_delta"].abs().head(5).min() > 1_000_000  # the biggest deltas come first
    assert d.scope == "steps" and (d.before.steps, d.after.steps) == (6, 6)


@pytest.mark.real
def test_real_pair_cards_and_metadata(dlrm):
    _d, model = dlrm
    labels = [c.label for c in model.cards]
    assert labels == ["Step time", "GPU busy per step", "GPU idle per step", "Kernels per step"]
    assert any(k.startswith("before.devices") for k, _ in model.metadata)
    assert any(k.startswith("after.devices") for k, _ in model.metadata)


# -- browser -------------------------------------------------------------------------------------


@pytest.mark.browser
def test_diff_page_in_browser(tmp_path, dlrm_or_none):
    from browser import open_page, require_browser, screenshot

    require_browser()
    if dlrm_or_none is not None:
        model = dlrm_or_none[1]
    else:  # no shared traces: a golden pair
        before, after = golden(3).load(tmp_path, "b.json.gz"), golden(5, gemm_ns=200_000).load(tmp_path, "a.json.gz")
        model = build_diff_report(diff(before, after))
    path = tmp_path / "diff.html"
    path.write_text(render_diff(model, "html"), encoding="utf-8")
    with open_page(path) as (page, errors, requests):
        assert page.locator("#verdict").inner_text().strip() == model.verdict.strip() != ""
        assert page.locator("#kernel-deltas tbody tr").count() > 0
        page.locator("#kernel-deltas th").nth(5).click()  # sort by Δ time/step: the page's script runs
        assert page.locator("#kernel-deltas th").nth(5).get_attribute("aria-sort") == "descending"
        shot = screenshot(page, "diff.png")
    assert errors == [] and requests == []
    assert shot.stat().st_size > 10_000
