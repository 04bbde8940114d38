"""torch.profiler set-up shared by every capture, and `profile`, the user-facing context manager."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from .annotate import ANNOTATION_NAMES, annotate
from .metadata import METADATA_KEY, attn_implementation, base_metadata, describe_model
from .runtime import cuda_sync_config, dtype_name, synchronize
from .tracefile import check_trace_path, write_trace


def make_profiler(
    metadata: dict[str, Any],
    device: torch.device,
    record_shapes: bool = True,
    with_stack: bool = False,
    with_modules: bool = False,
    profile_memory: bool = False,
    **options: Any,
) -> torch.profiler.profile:
    """A `torch.profiler.profile` over the CPU (and CUDA on a GPU run) carrying `metadata`.

    `metadata` is preset, so Kineto writes it as the top-level `tracekit_capture` key of the
    exported trace. `options` (schedule, on_trace_ready) go to the profiler unchanged. On a GPU
    the CUDA synchronisation events are recorded where torch can, so waits are not inferred.
    """
    activities = [ProfilerActivity.CPU]
    sync_events = False
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
        config = cuda_sync_config() if "experimental_config" not in options else None
        if config is not None:
            options["experimental_config"] = config
            sync_events = True
    profiler = torch.profiler.profile(
        activities=activities,
        record_shapes=record_shapes,
        with_stack=with_stack,
        with_modules=with_modules,
        profile_memory=profile_memory,
        **options,
    )
    metadata["profiler"] = {
        "activities": [activity.name.lower() for activity in activities],
        "record_shapes": record_shapes,
        "with_stack": with_stack,
        "with_modules": with_modules,
        "profile_memory": profile_memory,
        "cuda_sync_events": sync_events,
        **metadata.get("profiler", {}),
    }
    profiler.preset_metadata_json(METADATA_KEY, json.dumps(metadata, default=str))
    return profiler


@contextlib.contextmanager
def profile(
    path: str | Path,
    metadata: dict[str, Any] | None = None,
    model: Any = None,
    *,
    device: str | torch.device | None = None,
    record_shapes: bool = True,
    with_stack: bool = False,
    with_modules: bool = False,
    profile_memory: bool = False,
) -> Iterator[torch.profiler.profile]:
    """Profile the body of a `with` block and write the trace to `path` (.json.gz or .json).

    With `model` (a Hugging Face model) the `prefill`, `decode#<i>` and `attention#<layer>`
    ranges are laid over it and its config goes into the metadata. `metadata` adds keys
    to the `tracekit_capture` object. Yields the running `torch.profiler.profile`. When
    the body raises, no trace is written.
    """
    check_trace_path(path)
    run_device = _device_of(model, device)
    meta = base_metadata("user", run_device)
    if model is not None:
        meta.update(_model_fields(model))
    meta.update(metadata or {})
    with annotate(model) if model is not None else contextlib.nullcontext():
        profiler = make_profiler(meta, run_device, record_shapes, with_stack, with_modules, profile_memory)
        with profiler:
            yield profiler
            synchronize(run_device)
    write_trace(profiler, path)


def _model_fields(model: Any) -> dict[str, Any]:
    first = next(model.parameters(), None)
    return {
        "model": describe_model(model),
        "attn_implementation": attn_implementation(model),
        "dtype": dtype_name(first.dtype) if first is not None else None,
        "annotations": ANNOTATION_NAMES,
    }


def _device_of(model: Any, device: str | torch.device | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    first = next(model.parameters(), None) if model is not None else None
    if first is not None:
        return first.device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
