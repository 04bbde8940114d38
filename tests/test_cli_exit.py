"""The console script ends analysis commands without the interpreter's teardown: all they
write must still arrive, and the exit code must be the command's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from report_fixtures import decode_trace

from tracekit.cli import main as cli_main
from tracekit.cli.main import main

SCRIPT = Path(sys.executable).parent / "tracekit"


def console(*args: str, **kw) -> subprocess.CompletedProcess:
    if not SCRIPT.exists():
        pytest.skip("the tracekit console script is not installed beside this Python")
    return subprocess.run([str(SCRIPT), *args], capture_output=True, check=False, timeout=300, **kw)


def test_piped_output_arrives_whole(tmp_path, capsys):
    path = decode_trace(3).write(tmp_path / "t.json.gz")
    assert main(["report", str(path), "--format", "json", "--no-cache"]) == 0
    expected = capsys.readouterr().out
    out = console("report", str(path), "--format", "json", "--no-cache")
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode() == expected  # about 130 KB, more than a pipe holds: nothing lost
    assert json.loads(out.stdout)["schema_version"] == 1
    md = console("report", str(path), "--format", "md", "-o", str(tmp_path / "r.md"), "--no-cache")
    assert md.returncode == 0 and b"wrote" in md.stderr
    assert (tmp_path / "r.md").read_text().startswith("### tracekit report")


def test_exit_codes_pass_through(tmp_path):
    assert console("info", str(tmp_path / "missing.json")).returncode == 2
    assert console("findings", "--no-such-option").returncode == 2
    assert console("--version").returncode == 0


def test_a_reader_that_goes_away_is_not_an_error(tmp_path):
    if not SCRIPT.exists():
        pytest.skip("the tracekit console script is not installed beside this Python")
    path = decode_trace(3).write(tmp_path / "t.json.gz")  # a 130 KB report: more than the pipe holds
    proc = subprocess.Popen([str(SCRIPT), "report", str(path), "--format", "json", "--no-cache"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0
    assert b"Traceback" not in err and b"Exception ignored" not in err


def test_commands_that_clean_up_at_exit_take_the_normal_exit():
    assert {"capture", "batch"}.isdisjoint(cli_main.QUICK_EXIT)
    assert {"report", "info", "summary", "diff", "findings"} <= cli_main.QUICK_EXIT
