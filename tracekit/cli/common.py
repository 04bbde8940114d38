"""Helpers shared by the commands: loading with options, JSON output, text tables."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from tracekit.loader import load
from tracekit.model import Trace

trace_arg = click.argument("trace", type=click.Path(dir_okay=False, path_type=str))
traces_arg = click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=str))
json_opt = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")

_CACHE_KEY = "tracekit.cache"


def _remember_cache(ctx: click.Context, _param: click.Parameter, value: bool | None) -> None:
    if value is not None:
        ctx.meta[_CACHE_KEY] = value


CACHE_MIN_BYTES = 1024 * 1024  # by default the CLI caches files at least this big

# The CLI caches loaded traces by default (`~/.cache/tracekit`, or `$XDG_CACHE_HOME/tracekit`):
# commands are often run one after another on the same big trace. A command that wants the
# flag adds `@cache_opt`; `load_trace` reads the choice, so the command's signature is unchanged.
cache_opt = click.option(
    "--cache/--no-cache", default=None, expose_value=False, is_eager=True, callback=_remember_cache,
    help="Reuse (and store) the loaded trace in the cache folder; default: on for files of 1 MB or more.",
)


def load_trace(path: str, *, cache: bool | None = None) -> Trace:
    """Load a trace for a command, through the cache unless `--no-cache` (or cache=False)."""
    if cache is None:
        ctx = click.get_current_context(silent=True)
        cache = ctx.meta.get(_CACHE_KEY) if ctx is not None else None
    if cache is None:
        try:
            cache = os.path.getsize(path) >= CACHE_MIN_BYTES
        except OSError:
            cache = False  # the load reports the problem
    return load(path, cache=cache)


def emit_json(obj: Any) -> None:
    """Write JSON to stdout (stable key order as given, UTF-8)."""
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[int] = ()) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def clip(text: str | None, width: int = 70) -> str:
    if text is None:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


def write_output(path: str, text: str) -> None:
    """Write text atomically: to a temporary file beside the target, then rename."""
    import os
    import tempfile

    target = os.path.abspath(path)
    directory = os.path.dirname(target) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tracekit-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
