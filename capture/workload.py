"""Model captures: warm-up, then `repeats` profiled `generate` calls (or forwards), written as a trace.

`capture_model` makes one trace; `run_sweep` makes one per attention implementation plus
an `index.json` listing them.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .annotate import ANNOTATION_NAMES, annotate
from .metadata import attn_implementation, base_metadata
from .models import load_model, model_summary
from .presets import model_source
from .runtime import (
    check_attn_available,
    dtype_name,
    resolve_device,
    resolve_dtype,
    set_threads,
    synchronize,
)
from .session import make_profiler
from .settings import CaptureSettings
from .tracefile import check_trace_path, write_json, write_trace

INDEX_NAME = "index.json"
Report = Callable[[str], None]


def capture_model(
    settings: CaptureSettings, out: str | Path, report: Report | None = None, progress: Report | None = None
) -> dict[str, Any]:
    """Capture one trace of `settings` into `out`; returns its index entry (path as given).

    `progress` gets one line per warm-up and profiled step (the CLI prints them on stderr).
    """
    out = check_trace_path(out)
    device = resolve_device(settings.device)
    set_threads(settings.threads)
    metadata = _profile_model(settings, device, out, progress or (lambda _line: None))
    _free_memory(device)
    entry = _index_entry(settings, metadata, str(out))
    if report:
        report(
            f"wrote {out} ({settings.attn} -> {entry['attn_implementation']}, {entry['dtype']}, {entry['device']})"
        )
    return entry


def _profile_model(settings: CaptureSettings, device: torch.device, out: Path, progress: Report) -> dict[str, Any]:
    """Load the model, run warm-up and the profiled steps, write the trace; return its metadata."""
    dtype = resolve_dtype(settings.dtype, device)
    model = load_model(settings.model, settings.attn, dtype, device, settings.seed)
    metadata = _metadata(settings, model, device, dtype)
    schedule = {"wait": settings.warmup, "warmup": 1, "active": settings.repeats}
    metadata["profiler"] = {"schedule": schedule}
    run_once = _workload(model, settings, device)
    with annotate(model):
        profiler = make_profiler(
            metadata,
            device,
            settings.record_shapes,
            settings.with_stack,
            settings.with_modules,
            settings.profile_memory,
            schedule=torch.profiler.schedule(**schedule, repeat=1),
        )
        with profiler:
            for step in range(sum(schedule.values())):
                progress(_step_line(settings.attn, step, schedule))
                run_once()
                synchronize(device)
                profiler.step()
    write_trace(profiler, out)
    return metadata


def _step_line(variant: str, step: int, schedule: dict[str, int]) -> str:
    """`sdpa: warm-up 1/2` or `sdpa: repeat 2/3`; the first compiled flex call says it compiles."""
    unprofiled = schedule["wait"] + schedule["warmup"]
    if step < unprofiled:
        line = f"{variant}: warm-up {step + 1}/{unprofiled}"
        if step == 0 and variant == "flex_attention":
            line += " (torch.compile of flex_attention: minutes on a CPU)"
        return line
    return f"{variant}: repeat {step - unprofiled + 1}/{schedule['active']}"


def run_sweep(
    settings: CaptureSettings,
    out_dir: str | Path,
    variants: list[str],
    report: Report | None = None,
    progress: Report | None = None,
) -> list[dict[str, Any]]:
    """One trace per attention implementation in `variants`, plus `index.json`, in `out_dir`.

    Traces are named `<model>-<variant>.json.gz` (model: preset or directory name).

    Every variant is checked before the first capture starts. The index is rewritten
    after each trace, so an interrupted sweep still leaves a valid one.
    """
    out_dir = Path(out_dir)
    model_source(settings.model)
    device = resolve_device(settings.device)
    for variant in variants:
        check_attn_available(variant, device)
    entries: list[dict[str, Any]] = []
    for variant in variants:
        name = f"{_file_stem(settings.model)}-{variant}.json.gz"
        entry = capture_model(settings.with_attn(variant), out_dir / name, report, progress)
        entries.append({**entry, "path": name})
        write_json(out_dir / INDEX_NAME, entries)
    if report:
        report(f"wrote {out_dir / INDEX_NAME} ({len(entries)} traces)")
    return entries


def _file_stem(model: str) -> str:
    """File-name-safe model id: the preset name or the model directory's name."""
    name = model if model_source(model) == "preset" else Path(model).resolve().name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"


def make_inputs(model: Any, settings: CaptureSettings, device: torch.device) -> dict[str, torch.Tensor]:
    """Seeded random prompt ids (avoiding ids 0..2, the special tokens of the presets)."""
    vocab = model.config.get_text_config().vocab_size
    generator = torch.Generator().manual_seed(settings.seed)
    low = 3 if vocab > 3 else 0
    ids = torch.randint(low, vocab, (settings.batch, settings.prompt_len), generator=generator)
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}


def _workload(model: Any, settings: CaptureSettings, device: torch.device) -> Callable[[], Any]:
    inputs = make_inputs(model, settings, device)
    if settings.mode == "forward":

        def forward() -> Any:
            with torch.no_grad():
                return model(**inputs, use_cache=False)

        return forward

    def generate() -> Any:
        return model.generate(
            **inputs,
            max_new_tokens=settings.new_tokens,
            min_new_tokens=settings.new_tokens,
            do_sample=False,
            use_cache=True,
            pad_token_id=_pad_token_id(model),
        )

    return generate


def _pad_token_id(model: Any) -> int:
    config = model.generation_config
    for value in (config.pad_token_id, config.eos_token_id, model.config.get_text_config().pad_token_id):
        if isinstance(value, list) and value:
            return int(value[0])
        if isinstance(value, int):
            return value
    return 0


def _metadata(
    settings: CaptureSettings, model: Any, device: torch.device, dtype: torch.dtype
) -> dict[str, Any]:
    return {
        **base_metadata("model", device),
        "model": model_summary(settings.model, model),
        "attn_implementation": attn_implementation(model),
        "attn_implementation_requested": settings.attn,
        "dtype": dtype_name(dtype),
        "mode": settings.mode,
        "shapes": {
            "batch": settings.batch,
            "prompt_len": settings.prompt_len,
            "new_tokens": settings.new_tokens,
        },
        "seed": settings.seed,
        "warmup": settings.warmup,
        "repeats": settings.repeats,
        "annotations": ANNOTATION_NAMES,
    }


def _index_entry(settings: CaptureSettings, metadata: dict[str, Any], path: str) -> dict[str, Any]:
    return {
        "variant": settings.attn,
        "attn_implementation": metadata["attn_implementation"],
        "attn_implementation_requested": settings.attn,
        "path": path,
        "model": metadata["model"]["id"],
        "dtype": metadata["dtype"],
        "device": metadata["device"],
        "mode": settings.mode,
        "shapes": metadata["shapes"],
        "status": "ok",
    }


def _free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
