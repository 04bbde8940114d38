"""Hostile input the pages and outputs must survive: unbounded names, many streams, a full disk.

A page (HTML, Markdown) shows at most `fmt.DISPLAY_CHARS` of any one name; the JSON form
keeps it whole.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from builders import TraceBuilder

from tracekit import format as fmt
from tracekit.batch.store import Store
from tracekit.cli.main import main
from tracekit.errors import OutputError

FIXTURES = Path(__file__).parent / "fixtures"

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


class _FullDisk:
    """An open file on a full disk: every write fails with ENOSPC."""

    def __init__(self, fh):
        self.fh = fh

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


@pytest.fixture
def full_disk(monkeypatch):
    import tracekit.atomic

    real = os.fdopen
    monkeypatch.setattr(tracekit.atomic.os, "fdopen", lambda fd, *a, **k: _FullDisk(real(fd, *a, **k)))


def test_batch_on_a_full_disk_exits_2_in_one_line(full_disk, tmp_path, capsys):
    assert main(["batch", str(FIXTURES / "kineto_step.json"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("tracekit: error: cannot write ") and err.endswith(": No space left on device")
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]  # no temp file left behind


@pytest.mark.parametrize("write", ["csv", "parquet"])
def test_a_frame_on_a_full_disk_is_an_output_error(full_disk, tmp_path, write):
    store = Store(tmp_path)
    with pytest.raises(OutputError, match=f"cannot write .*x.{write}: No space left on device"):
        store.write_frame(f"x.{write}", pl.DataFrame({"a": [1, 2]}))


@pytest.mark.parametrize("out, reason", [("a-file/out", "Not a directory"),
                                         ("/proc/self/out", "No such file or directory")])
def test_batch_to_a_folder_that_cannot_be_made_exits_2(tmp_path, out, reason):
    (tmp_path / "a-file").write_text("")
    run = subprocess.run([sys.executable, "-m", "tracekit", "batch", str(FIXTURES / "kineto_step.json"), "-o", out],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("tracekit: error: cannot write ")
    assert run.stderr.strip().endswith(f": {reason}")
