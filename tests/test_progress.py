"""Progress of long work: the loader's reading, each analysis, the report command's status line."""

from __future__ import annotations

import gzip
import itertools
import io
import json

import pytest
from test_graph import gpu_bound

import tracekit
from tracekit.cache import Cache
from tracekit.pipeline import STEPS as PIPELINE
from tracekit.pipeline import analyse
from tracekit.cli import progress as progress_mod
from tracekit.cli.main import main
from tracekit.cli.progress import Status
from tracekit.loader.read import CHUNK_BYTES
from tracekit.loader.source import PIECE_BYTES


def _big_trace(n: int = 40_000) -> bytes:
    """About 3.5 MB of JSON: several 1 MB pieces."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5,
               "args": {"External id": i}} for i in range(n)]
    return json.dumps({"traceEvents": events}).encode()


@pytest.mark.parametrize("gz", [False, True])
def test_load_reports_bytes_of_the_file_read(tmp_path, gz):
    data = _big_trace()
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    size = path.stat().st_size
    calls: list[tuple[int, int]] = []
    trace = tracekit.load(path, progress=lambda done, total: calls.append((done, total)))
    assert trace.ops.height == 40_000
    assert {total for _, total in calls} == {size}
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] == size and done[0] > 0
    if not gz:  # a plain file: one call per read into a chunk's buffer
        # the head's 64 KB, then each chunk's text up to its target and one byte more (a
        # quarter of the 4 MB chunk, half, then the whole: each read tops up what the cut
        # before it left over; a window of 64 KB more is read where a cut is looked for),
        # the last read reaching the end of the file
        head = len(b'{"traceEvents": [')
        assert done[0] == 1 << 16
        assert head + (CHUNK_BYTES >> 2) + 1 in done  # the first chunk ends one byte past its target
        assert all(b - a <= (CHUNK_BYTES >> 1) + (1 << 16) + 1 for a, b in itertools.pairwise(done[:-2]))
        assert done[-2:] == [size, size]  # the last chunk reaches the end; a last read finds nothing more
    else:  # the compressed bytes read (here the whole 240 KB at once), per 1 MB of text
        assert len(calls) >= -(-len(data) // PIECE_BYTES)  # (a read can end a piece early)


def test_load_without_progress_and_from_the_cache_calls_nothing(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(_big_trace(2_000))
    calls: list[tuple[int, int]] = []
    Cache(tmp_path / "c").load(path, progress=lambda *a: calls.append(a))
    first = len(calls)
    assert first >= 1
    Cache(tmp_path / "c").load(path, progress=lambda *a: calls.append(a))
    assert len(calls) == first  # a cache hit reads nothing


STEPS = len(PIPELINE)  # the analyses and their intermediates, the findings last


def test_analyse_reports_each_analysis_once(tmp_path):
    trace = gpu_bound().load(tmp_path)
    calls: list[tuple[str, int, int]] = []
    analyse(trace, progress=lambda *a: calls.append(a))
    names = [name for name, _, _ in calls]
    assert [done for _, done, _ in calls] == list(range(1, STEPS + 1))
    assert {total for _, _, total in calls} == {STEPS}
    assert names[-1] == "findings" and len(set(names)) == STEPS
    assert {"critical_path", "gaps", "attribution", "attention", "roofline", "occupancy", "step_timeline",
            "launches", "compile"} <= set(names)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_status_redraws_one_line_on_a_terminal_and_clears_it(monkeypatch):
    clock = iter([0.0, 0.05, 0.2, 0.3, 0.4, 0.5])
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: next(clock))
    out = _Terminal()
    status = Status(out)
    assert status.enabled
    status.reading("/x/t.json", 10, 1000)  # t=0: drawn
    status.reading("/x/t.json", 20, 1000)  # t=0.05: too soon, skipped
    status.reading("/x/t.json", 500, 1000)  # t=0.2
    status.reading("/x/t.json", 1000, 1000)  # t=0.3: the end is always drawn
    status.analysing("critical_path", 3, 18)
    status.step("building the report")
    status.close()
    assert out.getvalue() == ("\rreading t.json: 1 % of 1.0 KB\x1b[K\rreading t.json: 50 % of 1.0 KB\x1b[K"
                              "\rreading t.json: 100 % of 1.0 KB\x1b[K\ranalysing: 3/18 (critical path done)\x1b[K"
                              "\rbuilding the report\x1b[K\r\x1b[K")


def test_status_is_off_in_a_log_unless_asked():
    out = io.StringIO()
    quiet = Status(out)
    quiet.step("building the report")
    quiet.close()
    assert not quiet.enabled and out.getvalue() == ""
    asked = Status(out, enabled=True)
    asked.analysing("gaps", 9, 18)
    asked.close()
    assert out.getvalue() == "analysing: 9/18 (gaps done)\n"


def test_report_command_progress_flag(tmp_path, capsys):
    path = gpu_bound().write(tmp_path / "t.json")
    assert main(["report", str(path), "--progress", "-o", str(tmp_path / "r.html")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"reading t.json: 100 % of {tracekit.format.size(path.stat().st_size)}"
    assert lines[1:STEPS + 1] == [line for line in lines[1:STEPS + 1] if line.startswith("analysing: ")]
    assert lines[STEPS] == f"analysing: {STEPS}/{STEPS} (findings done)"
    assert lines[STEPS + 1:] == ["building the report", "writing the HTML report", f"wrote {tmp_path / 'r.html'}"]
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0  # not a terminal: no status
    assert capsys.readouterr().err.splitlines() == [f"wrote {tmp_path / 'r.html'}"]


def test_status_shows_a_reading_once_per_text():
    out = io.StringIO()
    status = Status(out, enabled=True)
    status.label = "after: "
    for _ in range(3):  # gzip: the compressed file is read before its text is handed on
        status.reading("t.json.gz", 50, 50)
    assert out.getvalue() == "after: reading t.json.gz: 100 % of 50 B\n"


def test_diff_command_progress_names_each_trace(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    before = gpu_bound().write(tmp_path / "before.json")
    after = gpu_bound().write(tmp_path / "after.json")
    assert main(["diff", str(before), str(after), "--progress", "-o", str(tmp_path / "d.html")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("before: reading before.json: 100 % of ")
    n = STEPS
    assert lines[1:n + 1] == [f"before: analysing: {i}/{n} ({name})" for i, name in
                              enumerate((line.split("(", 1)[1][:-1] for line in lines[1:n + 1]), 1)]
    assert lines[n + 1].startswith("after: reading after.json: 100 % of ")
    assert lines[n + 2:2 * n + 2] == [line for line in lines[n + 2:2 * n + 2] if line.startswith("after: analysing: ")]
    assert lines[2 * n + 2:] == ["comparing", f"wrote {tmp_path / 'd.html'}"]
