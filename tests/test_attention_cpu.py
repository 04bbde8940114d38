"""Attention on CPU captures: slow eager chains, flex as a compiled region, like-for-like
comparison and the spread over repeats. Traces are built by hand (tests/builders.py)."""

from __future__ import annotations

from pathlib import Path

from builders import TraceBuilder

from tracekit.analysis.attention import analyze_attention
from tracekit.analysis.attention.compare import compare_attention

MS = 1_000_000
EAGER_CHAIN = ("aten::matmul", "aten::mul", "aten::masked_fill", "aten::softmax", "aten::matmul")


def _meta(impl: str, variant: str | None = None) -> dict:
    return {"tracekit_capture": {"variant": variant or impl, "attn_implementation": impl, "device": "cpu"}}


def eager_call(b: TraceBuilder, t: int, op_ms: float, *, gap_ms: float = 1) -> int:
    """An attn_fwd range (gap, 5 chain ops of op_ms each, gap); returns its end."""
    op, gap = int(op_ms * MS), int(gap_ms * MS)
    b.annotation("attn_fwd", t, 5 * op + 2 * gap)
    for i, name in enumerate(EAGER_CHAIN):
        b.op(name, t + gap + i * op, op)
    return t + 5 * op + 2 * gap


def stepped(b: TraceBuilder, step: int, t: int, body) -> int:
    """A ProfilerStep#step range around `body(t)` (which returns its end)."""
    end = body(t + MS)
    b.annotation(f"ProfilerStep#{step}", t, end + MS - t)
    return end + 2 * MS


def test_eager_chain_slower_than_the_window_is_found_inside_its_range(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[], extra_top=_meta("eager"))
    eager_call(b, 0, 30)  # chain 150 ms > the 100 ms window, inside attn_fwd (152 ms)
    r = analyze_attention(b.load(tmp_path))
    assert r.calls["backend"].to_list() == ["eager"]
    assert r.calls["core_kind"].to_list() == ["eager"]
    assert r.calls["cpu_ns"].to_list() == [150 * MS] and r.warnings == ()


def test_loose_eager_chain_keeps_the_window(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[])
    for i, name in enumerate(EAGER_CHAIN):  # no range: 150 ms chain is not an attention call
        b.op(name, i * 30 * MS, 30 * MS)
    assert analyze_attention(b.load(tmp_path)).call_count == 0


def flex_call(b: TraceBuilder, t: int) -> int:
    """What flex_attention on CPU records: a compiled region inside the attention range."""
    b.annotation("attention#0", t, 800_000)
    b.op("TorchDynamo Cache Lookup", t + 50_000, 50_000)
    b.op("Torch-Compiled Region: 0/0", t + 100_000, 600_000)
    b.op("Pregraph bytecode", t + 110_000, 5_000)
    b.annotation("## Call CompiledFxGraph fw67clyysgb6 ##", t + 150_000, 400_000)
    return t + 800_000


def test_flex_on_cpu_is_the_compiled_region_inside_the_range(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[], extra_top=_meta("flex_attention"))
    flex_call(b, 0)
    flex_call(b, MS)
    r = analyze_attention(b.load(tmp_path))
    assert r.calls["backend"].to_list() == ["flex", "flex"]
    assert r.calls["core_kind"].to_list() == ["compiled", "compiled"]
    assert r.calls["cpu_ns"].to_list() == [600_000, 600_000]  # the region, not the 800 µs range
    assert r.calls["range_cpu_ns"].to_list() == [800_000, 800_000]
    assert r.warnings == ()


def test_declared_backend_not_recognised_is_a_warning(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[], extra_top=_meta("flex_attention"))
    b.annotation("attention#0", 0, MS)
    b.op("aten::linear", 100_000, 200_000)
    r = analyze_attention(b.load(tmp_path))
    assert r.calls["backend"].to_list() == ["unknown"]
    assert any("1 of 1 calls show no recognisable backend (expected flex)" in w for w in r.warnings)


def test_comparison_times_whole_calls_when_a_variant_has_no_core(tmp_path: Path) -> None:
    a = TraceBuilder(devices=[], extra_top=_meta("eager"))
    eager_call(a, 0, 1.6)  # core 8 ms, range 10 ms
    c = TraceBuilder(devices=[], extra_top=_meta("sdpa", "opaque"))
    c.annotation("attn_fwd", 0, 5 * MS)  # no core: only the 5 ms range
    c.op("aten::linear", MS, MS)
    ra, rc = analyze_attention(a.load(tmp_path, "a.json.gz")), analyze_attention(c.load(tmp_path, "c.json.gz"))
    comp = compare_attention([("eager", ra), ("opaque", rc)])
    assert comp.scope == "call"
    assert comp.rows["cpu_ns_median"].to_list() == [10 * MS, 5 * MS]
    assert comp.rows["speedup"].to_list() == [1.0, 2.0]  # 10 ms / 5 ms, not the core's 8 / 5


def test_spread_over_repeats_and_the_noise_note(tmp_path: Path) -> None:
    a = TraceBuilder(devices=[], extra_top=_meta("eager"))
    t = 0
    for step, op_ms in enumerate((2, 4, 6), start=2):  # cores 10, 20, 30 ms
        t = stepped(a, step, t, lambda t0, op_ms=op_ms: eager_call(a, t0, op_ms))
    s = TraceBuilder(devices=[], extra_top=_meta("eager", "steady"))
    t = 0
    for step in (2, 3, 4):  # cores 9 ms each
        t = stepped(s, step, t, lambda t0: eager_call(s, t0, 1.8))
    ra, rs = analyze_attention(a.load(tmp_path, "a.json.gz")), analyze_attention(s.load(tmp_path, "s.json.gz"))
    assert ra.calls["step"].to_list() == [2, 3, 4]
    comp = compare_attention([("eager", ra), ("steady", rs)])
    rows = comp.rows.to_dicts()
    assert comp.scope == "core"
    assert (rows[0]["time_min_ns"], rows[0]["time_max_ns"], rows[0]["repeats"]) == (10 * MS, 30 * MS, 3)
    assert rows[0]["spread"] == 3.0 and rows[1]["spread"] == 1.0
    assert abs(rows[1]["speedup"] - 20 / 9) < 1e-9
    assert rows[1]["notes"][0] == "within noise: spread ×3.00 ≥ the ×2.22 difference"
    assert comp.table_rows()[0][6] == "10 ms–30 ms (3)"


EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "traces" / "cpu" / "attention-variants"


def test_shipped_cpu_attention_variants_table() -> None:
    """The shipped example's table: backends, calls, repeats and the timed scope (not timings)."""
    import gzip
    import json

    from click.testing import CliRunner

    from tracekit.cli.main import cli

    result = CliRunner().invoke(cli, ["attention", "--json", "--no-cache", str(EXAMPLES / "index.json")])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["basis"], out["scope"], out["baseline"]) == ("cpu", "core", "eager")
    got = [(r["variant"], r["backend"], r["calls"], r["repeats"], r["kernels_median"]) for r in out["rows"]]
    assert got == [
        ("eager", "eager", 3, 3, None),
        ("eager-inplace", "eager", 3, 3, None),
        ("sdpa-math", "sdpa_math", 3, 3, None),
        ("sdpa-flash", "sdpa_cpu_flash", 3, 3, None),
        ("sdpa-efficient", None, 0, 0, None),
        ("sdpa-cudnn", None, 0, 0, None),
    ]
    for row in out["rows"][:4]:
        path = EXAMPLES / row["variant"]
        path = path.with_name(path.name + ".json.gz")
        assert path.stat().st_size < 300_000
        with gzip.open(path, "rt") as fh:
            meta = json.load(fh)["tracekit_capture"]
        assert meta["host"]["threads"] == 1 and meta["repeats"] == 3
