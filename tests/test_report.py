"""Reports: the model holds the right figures; HTML/Markdown/JSON are safe and self-contained."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from conftest import real_trace
from report_fixtures import FAKE_TOKEN, decode_trace, hostile_trace

import tracekit
from tracekit.cache import Cache
from tracekit.pipeline import AnalysisOptions, analyse
from tracekit.cli.main import main
from tracekit.render.html import csp_hash, render_html
from tracekit.render.json import render_json
from tracekit.render.markdown import MAX_CHARS, render_markdown
from tracekit.report.build import ReportOptions, build_report
from tracekit.report.redact import REDACTED, redact


@pytest.fixture(scope="module")
def decode_report(tmp_path_factory):
    trace = decode_trace().load(tmp_path_factory.mktemp("r"))
    return trace, build_report(trace)


def test_model_headline_figures(decode_report):
    trace, r = decode_report
    cards = {c.label: c for c in r.cards}
    # GPU work per step: 100 µs + 5 µs + 60 µs + 2 µs = 167 µs; span runs from the first kernel
    # (10 µs into step 1) to the end of the last copy (262 µs into step 3 at 1.3 ms)
    span = (900_000 + 400_000 + 262_000) - 10_000
    assert cards["GPU utilisation"].value == f"{3 * 167_000 / span * 100:.1f} %"
    assert [s.id for s in r.sections][:3] == ["timeline", "gpu", "gaps"]
    kernels = next(t for s in r.sections for t in s.tables if t.id == "kernels")
    assert [row[0].text for row in kernels.rows][:1] == ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"]
    assert kernels.rows[0][4].value == 3 and kernels.rows[0][5].value == 300_000


@pytest.mark.parametrize(("trace_name", "expected"), [
    ("./logs/train_step_kineto.json", "recorded as train_step_kineto.json"),  # another machine's folder left out
    ("C:\\runs\\rank0.json", "recorded as rank0.json"),
    ("t.json", ""),  # the file's own name says nothing new
    ("/tmp/tmp8f047i33/file.json", ""),  # a temporary file's name neither
    ("C:\\Users\\me\\AppData\\Local\\Temp\\x.json", ""),
    ("/var/folders/x1/T/trace.json", ""),
    (None, ""),
])
def test_subtitle_names_the_recorded_file_only_when_it_says_something(tmp_path, trace_name, expected):
    top = {} if trace_name is None else {"traceName": trace_name}
    trace = tracekit.load(decode_trace(1, extra_top=top).write(tmp_path / "t.json"))
    assert trace.meta.trace_name == trace_name
    assert build_report(trace).subtitle == " · ".join(x for x in (expected, "NVIDIA H100 80GB HBM3", "kineto trace") if x)


def test_timeline_has_gpu_cpu_and_idle_lanes(decode_report):
    _, r = decode_report
    tl = next(s for s in r.sections if s.id == "timeline").timelines[0]
    labels = [lane.label for lane in tl.lanes]
    assert labels[0] == "GPU 0 · stream 7" and "GPU 0 idle" in labels
    assert any(label.startswith("CPU ") for label in labels)
    assert all(lane.rects for lane in tl.lanes)
    assert [b.label for b in tl.bands] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]


def test_html_is_self_contained_with_hash_csp(decode_report):
    _, r = decode_report
    html = render_html(r)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src 'none'" in csp
    script = re.search(r"<script>(.*?)</script>", html, re.S).group(1)
    style = re.search(r"<style>(.*?)</style>", html, re.S).group(1)
    assert f"'{csp_hash(script)}'" in csp and f"'{csp_hash(style)}'" in csp
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "@import" not in html and "url(" not in style
    svg = re.search(r'<svg class="timeline".*?</svg>', html, re.S).group(0)
    ET.fromstring(svg)  # well-formed


def test_hostile_strings_are_inert_everywhere(tmp_path):
    trace = hostile_trace().load(tmp_path)
    r = build_report(trace)
    html, md, js = render_html(r), render_markdown(r), render_json(r)
    assert html.count("<script") == 1 and html.count("</style>") == 1 and "<img" not in html
    assert "&lt;script&gt;alert(&#39;k&#39;)&lt;/script&gt;" in html  # shown as text
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html  # cannot close an attribute
    assert "{{ 7*7 }}" in html  # data is never evaluated as a template
    assert "href=" not in html
    for text in (html, md, js):
        assert FAKE_TOKEN not in text and "s3cretpw" not in text
    prose = re.sub(r"`[^`\n]*`", "", md)  # code spans render as literal text on GitHub
    assert "<" not in prose.replace("\\<", "") and "](javascript" not in md and "](" not in prose.replace("\\](", "")
    assert json.loads(js)["title"].startswith("tracekit report")


def test_markdown_is_small_and_valid_gfm(decode_report):
    _, r = decode_report
    md = render_markdown(r, tables=("kernels", "ops", "gaps"))
    assert len(md) < MAX_CHARS
    for block in re.findall(r"((?:^\|.*\|\n)+)", md, re.M):
        rows = block.strip("\n").split("\n")
        widths = {len(re.findall(r"(?<!\\)\|", row)) for row in rows}
        assert len(widths) == 1, block  # every row has the same number of cells
        assert re.fullmatch(r"\|(-{3}:?\|)+|\|(---:?\|)+", rows[1].replace("---:", "---")), rows[1]


def test_redaction_rules():
    data = {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz123456", "TOKENIZERS_PARALLELISM": "false", "max_tokens": 5,
            "aws_secret_access_key": "x", "list": ["OPENAI_API_KEY=sk-abcdefghijklmnopqrstu", "ok"],
            "note": "token ghp_abcdefghijklmnopqrstuvwxyz0123 in text", "author": "me"}
    out = redact(data)
    assert out["HF_TOKEN"] == REDACTED and out["aws_secret_access_key"] == REDACTED
    assert out["TOKENIZERS_PARALLELISM"] == "false" and out["max_tokens"] == 5 and out["author"] == "me"
    assert out["list"] == [f"OPENAI_API_KEY={REDACTED}", "ok"]
    assert out["note"] == f"token {REDACTED} in text"


def test_cli_report_formats_and_atomic_write(tmp_path, capsys):
    path = decode_trace(2).write(tmp_path / "t.json.gz")
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema_version"] == 1
    assert main(["report", str(path), "-o", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").read_text().startswith("### tracekit report")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tracekit-")] == []
    assert main(["report", str(tmp_path / "missing.json")]) == 2


@pytest.mark.real
def test_real_qwen_report_hides_the_token_and_fits():
    trace = tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz"))
    r = build_report(trace)
    html, md, js = render_html(r), render_markdown(r), render_json(r)
    for text in (html, md, js):
        assert FAKE_TOKEN not in text
    assert len(html.encode()) < 2_000_000 and len(md) < MAX_CHARS
    kernels = next(t for s in r.sections for t in s.tables if t.id == "kernels")
    classes = {row[0].text[:40]: row[1].text for row in kernels.rows}
    assert any(k.startswith("sm90_xmma_gemm") and v == "gemm" for k, v in classes.items())
    assert any("pytorch_flash::flash_fwd_kernel" in k and v == "attention" for k, v in classes.items())
    assert not r.extra.get("notes")
    # its traceName is the profiler's temporary file (/tmp/tmp8f047i33/file.json): not shown
    assert trace.meta.trace_name.startswith("/tmp/") and r.subtitle == "NVIDIA H100 80GB HBM3 · kineto trace"
    assert all(not w.startswith(("critical_path analysis failed", "findings analysis failed")) for w in r.warnings)



def test_compiled_templates_are_kept_and_a_bad_cache_costs_only_the_compiling(tmp_path, monkeypatch, decode_report):
    from tracekit.cache import Cache
    from tracekit.render import html

    _, r = decode_report
    expected = render_html(r)
    kept = tmp_path / "xdg" / "tracekit" / "templates"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Cache().templates == kept  # the command's folder (`tracekit report`)
    html.environment.cache_clear()  # a fresh process's environment: nothing compiled yet
    try:
        assert render_html(r) == expected and not kept.exists()  # no folder given: nothing written
        assert render_html(r, template_cache=kept) == expected
        entries = sorted(kept.iterdir())
        assert len(entries) == 2 and all(e.suffix == ".jinja" and e.stat().st_size > 1000 for e in entries)  # page, macros
        html.environment.cache_clear()
        compiled = []
        monkeypatch.setattr(html.jinja2.Environment, "_compile",
                            lambda self, source, filename: compiled.append(filename) or compile(source, filename, "exec"))
        assert render_html(r, template_cache=kept) == expected and compiled == []  # read back, not compiled
        for entry in entries:  # damaged entries: compiled again
            entry.write_bytes(entry.read_bytes()[:40])
        html.environment.cache_clear()
        assert render_html(r, template_cache=kept) == expected and len(compiled) == 2
        (tmp_path / "a-file").write_text("")  # not a folder: nothing kept, no error
        html.environment.cache_clear()
        assert render_html(r, template_cache=tmp_path / "a-file" / "templates") == expected and len(compiled) == 4
    finally:
        html.environment.cache_clear()


def test_a_report_is_the_same_analysed_inside_or_handed_its_analysis(tmp_path):
    trace = tracekit.load(decode_trace().write(tmp_path / "t.json"))
    given = build_report(trace, analysis=analyse(trace))
    inside = build_report(trace)
    assert render_json(inside) == render_json(given)
    assert render_html(inside) == render_html(given)
    assert [f.title for f in inside.findings] == [f.title for f in given.findings] and given.findings


def test_real_qwen_roofline_table_and_critical_path_legend():
    """The roofline table has every column it names, most time left first; the path's bar
    gives each class its own colour, and its table says classes in words."""
    trace = tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz"))
    r = build_report(trace)
    roof = next(t for s in r.sections for t in s.tables if t.id == "roofline")
    labels = [c.label for c in roof.columns]
    assert labels == ["op", "shapes", "dtype", "calls", "GPU time", "achieved", "bandwidth", "FLOP/byte", "bound",
                      "of ceiling", "time left"]
    left = [float(row[-1].value) for row in roof.rows if row[-1].value is not None]
    assert len(left) == len(roof.rows) > 5 and left == sorted(left, reverse=True)
    path = next(s for s in r.sections if s.id == "critical-path")
    bars = path.charts[0].bars
    assert len({b.css_class for b in bars}) == len(bars) >= 5
    ctx = next(t for t in path.tables if t.id == "path-context")
    assert {row[1].text for row in ctx.rows} <= {"GPU compute", "GPU memory", "communication", "launch overhead",
                                                 "CPU compute", "Python overhead", "sync wait", "idle"}
