"""A wheel built from the repository, installed into a fresh virtualenv, renders a report."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from report_fixtures import decode_trace

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_templates_and_renders(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
                   check=True, capture_output=True)
    wheel = next(dist.glob("tracekit_gpu-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    # everything under tracekit/: the repository's capture/ and reports/templates/ install as
    # tracekit/capture and tracekit/templates, never as top-level packages beside tracekit
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"tracekit"}, tops
    assert "tracekit/capture/cli.py" in names and "tracekit/templates/report.html.j2" in names, names
    for package in _repo_packages():  # every subpackage of tracekit/ (pyproject lists them by hand)
        assert f"{package.replace('.', '/')}/__init__.py" in names, package
    if shutil.which("cc") or shutil.which("gcc"):  # the compiled scanner is in the wheel
        assert any(n.startswith("tracekit/native/_scan.") and n.endswith(".so") for n in names), names
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    target = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    # install the wheel alone into the fresh environment; its dependencies come from this one
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    deps = sysconfig.get_paths()["purelib"]
    trace = decode_trace(2).write(tmp_path / "t.json.gz")
    out = tmp_path / "r.html"
    code = ("import sys; sys.path.append(sys.argv[1]); import tracekit, tracekit.capture.cli; "
            "assert tracekit.__file__.startswith(sys.argv[2]), tracekit.__file__; "
            "from tracekit.cli.main import main; sys.exit(main(['report', sys.argv[3], '-o', sys.argv[4]]))")
    done = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", code, deps, str(target), str(trace), str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")
    # the distribution is tracekit-gpu, and it installs the `tracekit` command
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "\nName: tracekit-gpu\n" in zipfile.ZipFile(wheel).read(meta).decode()
    script = target / "bin" / "tracekit"
    assert script.exists()
    env = {"PYTHONPATH": f"{target}:{deps}", "PATH": "/usr/bin:/bin"}
    ran = subprocess.run([str(venv / "bin" / "python"), str(script), "--version"], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert ran.returncode == 0 and ran.stdout.startswith("tracekit"), ran.stderr


def _repo_packages() -> list[str]:
    return sorted(".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tracekit").rglob("__init__.py"))


def test_pyproject_lists_every_package():
    """The wheel's package list is written by hand (capture/ is mapped into tracekit): a new
    subpackage of tracekit/ that is not in it would be left out of the wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert set(_repo_packages()) | {"tracekit.capture", "tracekit.templates"} == listed
