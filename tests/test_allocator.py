"""The command line sets the allocators up before Polars loads; a library import does not."""

from __future__ import annotations

import os
import subprocess
import sys

from tracekit import allocator

PROBE = ("import os, sys; {imports}; "
         "print('polars' in sys.modules, os.environ.get('_RJEM_MALLOC_CONF', '-'))")


def probe(imports: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = subprocess.run([sys.executable, "-c", PROBE.format(imports=imports)], capture_output=True, text=True,
                         check=True, env={**clean, **env})
    return out.stdout.strip()


def test_cli_import_sets_jemalloc_decay_before_polars():
    expected = f"dirty_decay_ms:{allocator.DECAY_MS},muzzy_decay_ms:0"
    assert probe("import tracekit.cli.main") == f"False {expected}"


def test_a_users_setting_wins():
    assert probe("import tracekit.cli.main", _RJEM_MALLOC_CONF="dirty_decay_ms:7") == "False dirty_decay_ms:7"


def test_library_import_changes_nothing():
    # `import tracekit` loads neither Polars nor any allocator setting; Polars then sets its own default
    assert probe("import tracekit") == "False -"
    loaded, conf = probe("import tracekit; tracekit.load").split()
    assert loaded == "True" and f"dirty_decay_ms:{allocator.DECAY_MS}," not in conf  # Polars' own default


def test_configure_after_polars_says_so():
    assert probe("import polars, tracekit.allocator as a; print(a.configure())").splitlines()[0] == "False"
