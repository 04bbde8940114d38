"""Hostile input that the pages must survive: unbounded names, many streams, a full disk.

A page (HTML, Markdown) shows at most `fmt.DISPLAY_CHARS` of any one name; the JSON form
keeps it whole.
"""

from __future__ import annotations

import json

import pytest
from builders import TraceBuilder

from tracekit import format as fmt
from tracekit.cli.main import main

LONG = 5_000_000  # characters of the hostile kernel name (a 5 MB name)


@pytest.fixture(scope="module")
def long_name(tmp_path_factory):
    folder = tmp_path_factory.mktemp("long")
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1_000_000)
    ext = b.op("aten::mm", 1_000, 100_000)
    b.launch_kernel("k" * LONG, launch_ns=2_000, launch_dur_ns=5_000, start_ns=10_000, dur_ns=30_000, ext=ext)
    b.launch_kernel("short", launch_ns=20_000, launch_dur_ns=5_000, start_ns=50_000, dur_ns=30_000, ext=ext)
    return b.write(folder / "long.json.gz"), folder


def test_clip_name():
    assert fmt.clip_name("abc", 3) == "abc"
    assert fmt.clip_name("abcd", 3) == "ab…"
    assert len(fmt.clip_name("k" * LONG)) == fmt.DISPLAY_CHARS


@pytest.mark.parametrize("command", ["report", "diff"])
@pytest.mark.parametrize("kind", ["html", "md"])
def test_a_5mb_name_makes_a_page_under_1mb(long_name, command, kind):
    trace, folder = long_name
    out = folder / f"{command}.{kind}"
    args = [command, str(trace)] + [str(trace)] * (command == "diff")
    assert main([*args, "--no-cache", "--format", kind, "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert len(page.encode()) < 1_000_000
    if (command, kind) != ("diff", "md"):  # (a comment lists only the rows that changed)
        assert "k" * 60 + "…" in page  # the name is shown, only cut


def test_the_json_report_keeps_the_whole_name(long_name):
    trace, folder = long_name
    out = folder / "report.json"
    assert main(["report", str(trace), "--no-cache", "--format", "json", "-o", str(out)]) == 0
    values = [c["value"] for s in json.loads(out.read_text())["sections"] for t in s["tables"]
              for row in t["rows"] for c in row]
    assert "k" * LONG in values


def test_many_streams_draw_the_busiest_and_count_the_rest(tmp_path):
    """200 streams of one short kernel each, stream 300 busier: 32 lanes per timeline, the
    busiest first among them, and the 168 left out counted in the timeline's note."""
    from tracekit.report.build import ReportOptions, build_report
    from tracekit.report.lanes import MAX_GPU_LANES

    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 100_000)
    ext = b.op("aten::foo", 1_000, 90_000)
    for i in range(200):
        b.launch_kernel("kern", launch_ns=2_000 + 100 * i, launch_dur_ns=50, start_ns=30_000 + 100 * i,
                        dur_ns=500 if i == 199 else 50, ext=ext, stream=101 + i)
    report = build_report(b.load(tmp_path), options=ReportOptions())
    timeline = next(s for s in report.sections if s.id == "timeline").timelines[0]
    streams = [lane.label for lane in timeline.lanes if "stream" in lane.label]
    assert MAX_GPU_LANES == 32 and len(streams) == 32
    assert "GPU 0 · stream 300" in streams
    assert timeline.note == "+168 more GPU streams with work in this window, not drawn (the busiest 32 are)"
