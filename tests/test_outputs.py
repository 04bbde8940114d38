"""`-o` writes what it names without destroying it: regular files atomically, links followed,
devices and FIFOs written through, and never over an input trace.

Every special file is made by the test in a temporary folder (never the machine's own
`/dev/null`: a failing test would replace it)."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
from tracekit.atomic import write_output
from tracekit.cli.main import main
from tracekit.errors import OutputError

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "kineto_step.json"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.json"
    shutil.copy(FIXTURE, path)
    return path


def _run(*args: object) -> int:
    return main([str(a) for a in args])


def test_a_symlink_is_followed_and_kept(tmp_path: Path) -> None:
    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    write_output(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"


def test_a_fifo_is_written_through(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_output(fifo, "through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a character device needs root (CI runs as root)")
def test_a_character_device_is_written_through_not_replaced(tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a null device of the test's own
    write_output(null, "discarded")
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_link_to_a_device_is_written_through(tmp_path: Path) -> None:
    """The link is the test's own; what it points to is only opened for writing, never renamed."""
    link = tmp_path / "devnull"
    link.symlink_to(os.devnull)
    write_output(link, "discarded")
    assert link.is_symlink()


def test_the_input_is_refused_as_output(trace: Path) -> None:
    before = trace.read_bytes()
    with pytest.raises(OutputError, match="it is the input trace"):
        write_output(trace, "report", inputs=[trace])
    assert trace.read_bytes() == before


@pytest.mark.parametrize("command", [
    ["report", "{t}", "-o", "{t}"],
    ["report", "{t}", "--format", "md", "-o", "{link}"],
    ["diff", "{t}", "{t}", "-o", "{t}"],
    ["annotate", "{t}", "-o", "{link}"],
])
def test_commands_refuse_to_write_over_their_input(trace: Path, command: list[str], capsys) -> None:
    link = trace.with_name("alias.json")
    link.symlink_to(trace)
    before = trace.read_bytes()
    assert _run(*(a.format(t=trace, link=link) for a in command)) == 2
    assert "it is the input trace" in capsys.readouterr().err
    assert trace.read_bytes() == before
    assert link.is_symlink()


def test_a_folder_is_refused(tmp_path: Path, trace: Path) -> None:
    assert _run("report", trace, "--format", "md", "-o", tmp_path) == 2
    assert tmp_path.is_dir()
