"""`tracekit capture`: the click command, importable without torch.

Every bad argument ends in one `Error: ...` line on stderr and exit code 2, whether the
command runs alone or as a subcommand of the `tracekit` group.
"""

from __future__ import annotations

from typing import Any

import click

from . import available
from .errors import CaptureError
from .presets import DEFAULT_PRESET, PRESETS, model_source
from .settings import (
    ATTN_IMPLEMENTATIONS,
    DEVICES,
    DTYPES,
    MODES,
    SCENARIO_VARIANTS,
    SCENARIOS,
    CaptureSettings,
    parse_variants,
)
from .tracefile import check_trace_path

MODEL_ONLY = ("model", "attn", "mode", "prompt_len", "new_tokens", "warmup")
SCENARIO_ONLY = ("heads", "seq", "head_dim")
DEFAULT_OUT = "trace.json.gz"


class OneLineUsageError(click.UsageError):
    """A usage error shown as a single `Error: ...` line, without the usage text."""

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", file=file, err=file is None)


class CaptureCommand(click.Command):
    """A click command whose usage errors, its own and click's, are one line each."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as error:
            raise OneLineUsageError(" ".join(error.format_message().split())) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CaptureError as error:
            raise OneLineUsageError(str(error)) from None


def _preset_help() -> str:
    return "; ".join(f"{name}: {spec['description']}" for name, spec in PRESETS.items())


@click.command(
    "capture",
    cls=CaptureCommand,
    context_settings={"max_content_width": 100},
    epilog="Each trace carries a top-level 'tracekit_capture' object describing the run. See docs/capture.md.",
)
@click.option(
    "--model",
    default=None,
    metavar="PRESET|DIR",
    help=f"Built-in preset or local model directory (read with local_files_only; a directory "
    f"with config.json but no weights gets random weights). [default: {DEFAULT_PRESET}] "
    f"Presets: {_preset_help()}.",
)
@click.option(
    "--attn",
    type=click.Choice(ATTN_IMPLEMENTATIONS),
    default=None,
    help="Attention implementation to load the model with. [default: sdpa]",
)
@click.option(
    "--dtype",
    type=click.Choice(list(DTYPES)),
    default=None,
    help="Model/tensor dtype. [default: bf16 on a GPU that has it (compute capability 8.0+), else fp16; "
    "fp32 on cpu]",
)
@click.option(
    "--device",
    type=click.Choice(DEVICES),
    default="auto",
    show_default=True,
    help="Where to run; auto picks cuda when torch sees a GPU.",
)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default=None,
    help="Profile model.generate (prefill + decode steps) or one plain forward. [default: generate]",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=None,
    help="Batch size. [default: 1; attention-variants: 4 on GPU, 1 on CPU]",
)
@click.option(
    "--prompt-len",
    type=click.IntRange(min=1),
    default=None,
    help="Prompt length in tokens (random ids). [default: 128]",
)
@click.option(
    "--new-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="Tokens to generate; generation never stops early. [default: 16]",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for weights and inputs.")
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=None,
    help="Unprofiled warm-up runs before the profiler's own warm-up step and the profiled step. [default: 1]",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Profiled repeats of the workload per trace (one profiler step each), so the spread of "
    "timings can be reported.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Pin torch's CPU threads (torch.set_num_threads); CPU timings are only comparable with "
    "threads pinned. [default: torch's own]",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Trace file to write, .json.gz or .json. [default: trace.json.gz]",
)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder for a sweep: one trace per variant (<model>-<variant>.json.gz; the scenario: "
    "<variant>.json.gz) plus index.json listing them.",
)
@click.option(
    "--variants",
    default=None,
    metavar="LIST",
    help=f"Comma-separated variants for --out-dir. Model sweep: attention implementations "
    f"({', '.join(ATTN_IMPLEMENTATIONS)}) [default: --attn]. Attention-variants scenario: "
    f"{', '.join(SCENARIO_VARIANTS)} [default: all].",
)
@click.option(
    "--scenario",
    type=click.Choice(SCENARIOS),
    default=None,
    help="Instead of a model, run a scenario: attention-variants profiles one causal attention "
    "forward per variant (needs --out-dir).",
)
@click.option(
    "--heads",
    type=click.IntRange(min=1),
    default=None,
    help="attention-variants: heads. [default: 32 on GPU, 4 on CPU]",
)
@click.option(
    "--seq",
    type=click.IntRange(min=1),
    default=None,
    help="attention-variants: sequence length. [default: 4096 on GPU (batch, then seq, shrunk to fit "
    "half the free GPU memory), 256 on CPU]",
)
@click.option(
    "--head-dim",
    type=click.IntRange(min=1),
    default=None,
    help="attention-variants: head dimension. [default: 64]",
)
@click.option(
    "--record-shapes/--no-record-shapes",
    default=True,
    show_default=True,
    help="Record operator input shapes.",
)
@click.option("--with-stack", is_flag=True, help="Record Python stacks (bigger traces, more overhead).")
@click.option("--with-modules", is_flag=True, help="Record the module hierarchy of each op.")
@click.option("--profile-memory", is_flag=True, help="Record allocator events (memory timeline).")
def capture_command(**options: Any) -> None:
    """Record a torch.profiler trace of transformer inference.

    By default builds the tiny-llama preset (random weights, no download), warms up, then
    profiles one model.generate call under torch.profiler and writes a gzipped Chrome/Kineto
    trace with 'prefill', 'decode#<i>' and 'attention#<layer>' ranges. Analyse it anywhere
    with 'tracekit info TRACE' or 'tracekit report TRACE -o report.html'.
    """
    if options["scenario"] is not None:
        _run_scenario(options)
    else:
        _run_model(options)


def _run_model(options: dict[str, Any]) -> None:
    _reject(options, SCENARIO_ONLY, "applies only to --scenario attention-variants")
    if options["out"] and options["out_dir"]:
        raise CaptureError("give --out or --out-dir, not both")
    if options["variants"] and not options["out_dir"]:
        raise CaptureError("--variants needs --out-dir")
    if options["variants"] and options["attn"]:
        raise CaptureError("give --attn or --variants, not both")
    settings = _settings(options)
    model_source(settings.model)
    check_trace_path(options["out"] or DEFAULT_OUT)
    variants = parse_variants(
        options["variants"] or settings.attn, ATTN_IMPLEMENTATIONS, "attention implementation"
    )
    _require(("torch", "transformers"))
    _quiet_transformers()
    from .workload import capture_model, run_sweep

    if options["out_dir"]:
        run_sweep(settings, options["out_dir"], variants, report=click.echo, progress=_progress)
    else:
        capture_model(settings, options["out"] or DEFAULT_OUT, report=click.echo, progress=_progress)


def _run_scenario(options: dict[str, Any]) -> None:
    _reject(options, MODEL_ONLY, "does not apply to --scenario attention-variants")
    if options["out"] or not options["out_dir"]:
        raise CaptureError("--scenario attention-variants writes several traces: give --out-dir, not --out")
    variants = None
    if options["variants"]:
        variants = parse_variants(options["variants"], SCENARIO_VARIANTS, "attention variant")
    _require(("torch",))
    from .scenarios import run_attention_variants

    run_attention_variants(
        options["out_dir"],
        variants,
        device=options["device"],
        dtype=options["dtype"],
        batch=options["batch"],
        heads=options["heads"],
        seq=options["seq"],
        head_dim=options["head_dim"],
        seed=options["seed"],
        repeats=options["repeats"],
        threads=options["threads"],
        profiler_options=_profiler_options(options),
        report=click.echo,
        progress=_progress,
    )
    click.echo(f"wrote {options['out_dir']}/index.json")


def _settings(options: dict[str, Any]) -> CaptureSettings:
    given = {key: options[key] for key in (*MODEL_ONLY, "batch") if options[key] is not None}
    return CaptureSettings(
        **given,
        dtype=options["dtype"],
        device=options["device"],
        seed=options["seed"],
        repeats=options["repeats"],
        threads=options["threads"],
        **_profiler_options(options),
    )


def _progress(line: str) -> None:
    """A progress line on stderr, so stdout keeps only what was written."""
    click.echo(line, err=True)


def _profiler_options(options: dict[str, Any]) -> dict[str, bool]:
    keys = ("record_shapes", "with_stack", "with_modules", "profile_memory")
    return {key: bool(options[key]) for key in keys}


def _reject(options: dict[str, Any], names: tuple[str, ...], why: str) -> None:
    for name in names:
        if options[name] is not None:
            raise CaptureError(f"--{name.replace('_', '-')} {why}")


def _require(packages: tuple[str, ...]) -> None:
    message = available(packages)
    if message:
        raise CaptureError(message)


def _quiet_transformers() -> None:
    """Keep transformers' generation-config chatter about random models off the terminal."""
    from transformers.utils import logging

    logging.set_verbosity_error()
