"""`tracekit --help` lists every command from a table, without importing them: the table
must say what each command's own help says."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from tracekit.cli.main import COMMANDS, SHORT_HELP, LazyGroup, cli


def test_short_help_table_matches_each_command():
    assert set(SHORT_HELP) == set(COMMANDS)
    for name in COMMANDS:
        assert LazyGroup._load(name).get_short_help_str(limit=1000) == SHORT_HELP[name], name


def test_help_lists_every_command():
    out = CliRunner().invoke(cli, ["--help"]).output
    lines = out.split("Commands:")[1].splitlines()
    listed = [line.split()[0] for line in lines if line.startswith("  ") and line.split()]
    assert listed == list(COMMANDS)
    assert "  report         Analyse TRACE and write a report" in out


def test_help_imports_no_command_and_no_polars():
    code = ("import sys; from tracekit.cli.main import main\n"
            "try: main(['--help'])\nexcept SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m == 'polars' or m.startswith('tracekit.cli.') "
            "and m not in ('tracekit.cli.main', 'tracekit.cli.options')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
