"""The `tracekit` command: a thin layer that parses arguments and calls the Python API.

Sub-commands live in their own modules and are imported only when used, so
`tracekit --help` stays fast and `tracekit capture` needs torch only when it runs.
"""

from __future__ import annotations

import importlib
import io
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from tracekit import runtime

runtime.configure(sys.argv[1:])  # the allocators and the collector, before anything imports Polars

import click

from tracekit import __version__
from tracekit.cache.writes import writes_behind
from tracekit.cli.options import MAX_BYTES_HELP, Size
from tracekit.errors import CacheWarning, TraceError
from tracekit.format import printable

# name -> "module:attribute" of a click command
COMMANDS: dict[str, str] = {
    "info": "tracekit.cli.info:info",
    "summary": "tracekit.cli.summary:summary",
    "kernels": "tracekit.cli.tables:kernels",
    "ops": "tracekit.cli.tables:ops",
    "gaps": "tracekit.cli.summary:gaps",
    "critical-path": "tracekit.cli.findings:critical_path",
    "findings": "tracekit.cli.findings:findings",
    "annotate": "tracekit.cli.findings:annotate",
    "attention": "tracekit.cli.attention:attention",
    "roofline": "tracekit.cli.roofline:roofline",
    "report": "tracekit.cli.report:report",
    "diff": "tracekit.cli.diff:diff",
    "batch": "tracekit.cli.batch:batch",
    "capture": "tracekit.cli.capture:capture",
}


# each command's one-line help, for `tracekit --help` without importing every command (and
# Polars with them); tests/test_cli_help.py checks each against the command's own help
SHORT_HELP: dict[str, str] = {
    "info": "Describe trace files: format, devices, span, events per category, streams, steps, warnings.",
    "summary": "Headline figures: GPU utilisation, the verdict, the attention backend, the top findings; then GPU "
               "busy/idle per device, time breakdown, idle by cause, top kernels and ops, steps.",
    "kernels": "GPU kernels by total time, with their class (gemm, attention, ...) read from the name.",
    "ops": "CPU ops by the GPU time they launched: calls, CPU total/self, inclusive/self GPU time.",
    "gaps": "Idle gaps per device and stream, each with a cause and the CPU op to blame.",
    "critical-path": "The critical path of a window: what it is made of, whose time it is, and what-ifs.",
    "findings": "Rules that say what wastes GPU time, ranked by the time it costs, with evidence and advice.",
    "annotate": "Write the trace with the critical path (flow arrows, a track) and findings (instants) added.",
    "attention": "Attention per call: backend, kernels, GPU/CPU time, findings.",
    "roofline": "Achieved TFLOP/s and GB/s per op against the device's ceilings, and the time left on the table.",
    "report": "Analyse TRACE and write a report: findings, timeline, GPU time, idle gaps and more.",
    "diff": "Compare AFTER with BEFORE step by step: step time, GPU busy and idle by cause, kernels, ops, "
            "launches, syncs and copies, each with its step-to-step noise.",
    "batch": "Analyse every trace in SOURCES (files, folders, globs, fsspec URLs such as s3://bucket/run/).",
    "capture": "Record Chrome traces of Hugging Face transformers inference with torch.profiler.",
}


class LazyGroup(click.Group):
    """A group whose sub-commands are imported on first use; missing modules are hidden."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._load(name) is not None]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `--help`, from SHORT_HELP: no command module is imported."""
        names = list(COMMANDS)
        limit = formatter.width - 6 - max(map(len, names))
        rows = [(name, click.Command(name, help=SHORT_HELP[name]).get_short_help_str(limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return self._load(name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                return None
            raise
        return getattr(module, attr, None)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="tracekit")
@click.option("--debug", is_flag=True, help="Show Python tracebacks instead of one-line errors.")
@click.option("--max-bytes", type=Size(), default=None, metavar="SIZE", help=MAX_BYTES_HELP)
@click.pass_context
def cli(ctx: click.Context, debug: bool, max_bytes: int | None) -> None:
    """tracekit: where transformer inference wastes GPU time.

    Reads torch.profiler (Kineto) and other Chrome-format traces (.json, .json.gz,
    crashed .tmp files) and says where the GPU waits, why, and what to change.
    """
    ctx.obj = {"debug": debug, "max_bytes": max_bytes}


class _PrintableOut(io.TextIOBase):
    """stdout that shows control characters from trace strings as \\xNN instead of obeying them."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        return self.inner.write(printable(text))

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.inner, "encoding", "utf-8")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI; bad input exits 2 with one line on stderr."""
    args = sys.argv[1:] if argv is None else argv
    stdout, showwarning = sys.stdout, warnings.showwarning
    sys.stdout = _PrintableOut(stdout)
    warnings.showwarning = _show_warning
    try:
        return _run(args)
    finally:
        sys.stdout, warnings.showwarning = stdout, showwarning


_default_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """tracekit's own warnings (a damaged cache entry) as one line; others as Python shows them."""
    if issubclass(category, CacheWarning):
        click.echo(f"tracekit: warning: {_one_line(str(message))}", err=True)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


# commands after which the process may skip the interpreter's teardown (see `run`): not
# `capture` (torch and the profiler clean up at exit) nor `batch` (worker pools, Dask)
QUICK_EXIT = frozenset(COMMANDS) - {"capture", "batch"}


def run() -> None:
    """The console script: `main`, then exit. After the analysis commands the process ends
    without the interpreter's teardown (`os._exit`, once stdout and stderr are flushed):
    unloading Polars and a few hundred modules took 60-90 ms, as long as the rest of a
    small trace's `tracekit info`. Everything a command writes is closed before it returns."""
    args = sys.argv[1:]
    code = main(args)
    command = next((a for a in args if not a.startswith("-")), None)
    if command not in QUICK_EXIT:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # the reader went away, or the stream was closed
        pass
    os._exit(code)


@contextmanager
def _storing() -> Iterator[None]:
    """The status line (on a terminal) while the command waits for its cache writes."""
    from tracekit.cli.progress import Status

    status = Status()
    status.step("writing the cache")
    try:
        yield
    finally:
        status.close()


def _run(args: list[str]) -> int:
    debug = "--debug" in args
    try:
        # the caches are written while the command goes on; it returns once they are
        with writes_behind(waiting=_storing):
            rc = cli.main(args=args, prog_name="tracekit", standalone_mode=False)
        return rc if isinstance(rc, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.NoArgsIsHelpError as exc:  # `tracekit` alone: the help, as --help shows it
        click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        return 0
    except click.Abort:
        click.echo("tracekit: aborted", err=True)
        return 130
    except click.UsageError as exc:
        if debug:
            raise
        where = f" (see 'tracekit {exc.ctx.command_path.split(' ', 1)[-1]} --help')" if exc.ctx and " " in exc.ctx.command_path else ""
        click.echo(f"tracekit: error: {_one_line(exc.format_message())}{where}", err=True)
        return 2
    except click.ClickException as exc:
        if debug:
            raise
        click.echo(f"tracekit: error: {_one_line(exc.format_message())}", err=True)
        return 2 if exc.exit_code in (1, 2) else exc.exit_code
    except TraceError as exc:
        if debug:
            raise
        click.echo(f"tracekit: error: {_one_line(str(exc))}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("tracekit: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if debug:
            raise
        click.echo(f"tracekit: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
                   "(run with --debug for the traceback)", err=True)
        return 3


def _one_line(text: str) -> str:
    return printable(" ".join(text.split())[:500])


if __name__ == "__main__":  # pragma: no cover
    run()
