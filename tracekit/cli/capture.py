"""`tracekit capture`: record a trace with torch.profiler (needs the `capture` extra)."""

from __future__ import annotations

import importlib.util

import click

INSTALL_HINT = "tracekit capture needs torch and transformers: pip install 'tracekit-gpu[capture]'"


def _load() -> click.Command:
    if importlib.util.find_spec("tracekit.capture") is None:
        raise click.ClickException(INSTALL_HINT)
    from tracekit import capture

    problem = capture.available()
    if problem:
        raise click.ClickException(f"{problem} ({INSTALL_HINT})")
    from tracekit.capture.cli import capture_command

    return capture_command


class _LazyCapture(click.Command):
    """Shows its help without torch; imports the capture package only when it runs."""

    def _real(self) -> click.Command:
        return _load()

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        try:
            return self._real().get_params(ctx)
        except click.ClickException:
            return super().get_params(ctx)

    def get_help(self, ctx: click.Context) -> str:
        try:
            return self._real().get_help(ctx)
        except click.ClickException:
            return super().get_help(ctx) + "\n\n" + INSTALL_HINT

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if any(a in ("-h", "--help") for a in args):
            return super().parse_args(ctx, args)
        ctx.meta["capture_args"] = list(args)
        return []

    def invoke(self, ctx: click.Context) -> None:
        real = self._real()
        with real.make_context("tracekit capture", ctx.meta.get("capture_args", []), parent=ctx.parent) as sub:
            return real.invoke(sub)


capture = _LazyCapture(
    "capture",
    help="Record Chrome traces of Hugging Face transformers inference with torch.profiler.",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
