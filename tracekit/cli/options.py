"""Option types shared by the group and the commands (light: imported by `tracekit --help`)."""

from __future__ import annotations

import math
from typing import Any

import click

from tracekit.format import parse_size


class Finite(click.FloatRange):
    """A float in range that is a number: `nan` and `inf` (which `float()` accepts) are
    refused, as they would end in a crash or in JSON no parser reads."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        out = super().convert(value, param, ctx)
        if not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return out


MAX_BYTES_KEY = "tracekit.max_bytes"  # ctx.meta key set by a command's --max-bytes
MAX_BYTES_HELP = ("Refuse a trace whose JSON (decompressed) is larger than SIZE, e.g. 512M or 2G "
                  "(default: 16G, or 75% of physical memory where that is less).")


class Size(click.ParamType):
    """A byte count: `10000000`, `512M`, `2G`, `1.5GiB` (K/M/G/T are powers of 1024)."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            size = parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if size <= 0:
            self.fail(f"{value!r}: the size must be positive", param, ctx)
        return size


def _remember_max_bytes(ctx: click.Context, _param: click.Parameter, value: int | None) -> None:
    if value is not None:
        ctx.meta[MAX_BYTES_KEY] = value


# on each trace-reading command too: `tracekit info --max-bytes 2G T` as well as `tracekit --max-bytes 2G info T`
max_bytes_opt = click.option("--max-bytes", type=Size(), default=None, expose_value=False, is_eager=True,
                             callback=_remember_max_bytes, metavar="SIZE", help=MAX_BYTES_HELP)

no_redact_opt = click.option("--no-redact", is_flag=True,
                             help="Keep strings that look like credentials (tokens, passwords, keys: redacted by default; "
                                  "docs/report.md lists the rules).")
full_path_opt = click.option("--full-path", is_flag=True,
                             help="Show the trace's path as given (default: its file name only).")


def shown_path(path: str, full_path: bool) -> str:
    """The trace as an output names it: its file name, or the path as given with --full-path."""
    import os

    return path if full_path else os.path.basename(path.rstrip("/\\")) or path
