"""Outputs written whole or not at all, with the permissions a plain open() would give."""

from __future__ import annotations

import os
import stat

import pytest
from test_graph import cross_stream

from tracekit.atomic import write_file, write_output
from tracekit.cli.main import main
from tracekit.errors import OutputError


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_get_the_umask_permissions_not_a_temporary_files(tmp_path, umask_027):
    write_file(tmp_path / "a.txt", "text")
    write_file(tmp_path / "b.bin", b"\x00\x01")
    write_file(tmp_path / "c.bin", lambda fh: fh.write(b"xyz"), sync=True)
    assert [(p.name, p.read_bytes(), mode(p)) for p in sorted(tmp_path.iterdir())] == [
        ("a.txt", b"text", 0o640), ("b.bin", b"\x00\x01", 0o640), ("c.bin", b"xyz", 0o640)]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")

    def fail(fh):
        fh.write(b"half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_file(target, fail)
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"] and target.read_text() == "old"


def test_write_output_says_which_file_and_why_in_one_line(tmp_path):
    with pytest.raises(OutputError, match=r"^cannot write .*missing/x\.html: No such file or directory$"):
        write_output(tmp_path / "missing" / "x.html", "<html>")


@pytest.mark.parametrize("command", [["annotate", "{src}", "-o", "{out}.json.gz"],
                                     ["report", "{src}", "-o", "{out}.html", "--no-cache"]])
def test_commands_write_with_the_umask_permissions(tmp_path, umask_027, command):
    src = cross_stream().write(tmp_path / "in.json.gz")
    args = [a.format(src=src, out=tmp_path / "out") for a in command]
    assert main(args) == 0
    (out,) = [p for p in tmp_path.iterdir() if p.name.startswith("out")]
    assert mode(out) == 0o640


def test_a_file_system_that_refuses_chmod_still_gets_the_file(tmp_path, monkeypatch):
    def refuse(fd, mode):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", refuse)
    opened = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    write_file(tmp_path / "out.txt", "kept")
    assert (tmp_path / "out.txt").read_text() == "kept" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    if opened is not None:
        assert len(os.listdir("/proc/self/fd")) == opened  # no descriptor left open


def test_the_mode_follows_the_umask_without_touching_it(umask_027):
    from tracekit.atomic import file_mode

    assert file_mode() == 0o640 and os.umask(0o027) == 0o027  # read, not changed
