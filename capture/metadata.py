"""The JSON object written under the trace's top-level `tracekit_capture` key.

It records how the trace was made: tool, versions, GPU, command line, model and shapes.
It never holds environment variables or anything else that could be a secret.
"""

from __future__ import annotations

import datetime
import os
import sys
from typing import Any

import torch

from .runtime import gpu_info, host_info, versions

METADATA_KEY = "tracekit_capture"
SCHEMA_VERSION = 1
CONFIG_KEYS = (
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
)


def base_metadata(kind: str, device: torch.device | None) -> dict[str, Any]:
    """Fields every capture carries: schema, kind, versions, GPU, host (threads, CPU count,
    load average), command line, time."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "tracekit capture",
        "kind": kind,
        "device": device.type if device is not None else None,
        "versions": versions(),
        "gpu": gpu_info(device),
        "host": host_info(),
        "command": command_line(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def describe_model(model: Any, model_id: str | None = None) -> dict[str, Any]:
    """Class, size, weights origin and config summary of a Hugging Face model."""
    config = getattr(model, "config", None)
    return {
        "id": model_id or getattr(config, "_name_or_path", None) or type(model).__name__,
        "architecture": type(model).__name__,
        "weights": getattr(model, "_capture_weights", "pretrained"),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "config": {key: _plain(getattr(config, key, None)) for key in CONFIG_KEYS},
    }


def attn_implementation(model: Any) -> str | None:
    """The attention implementation the model really uses (`config._attn_implementation`)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


def command_line() -> list[str]:
    """`sys.argv` with the program reduced to its base name (`python -m X` kept as such)."""
    if not sys.argv:
        return []
    original = getattr(sys, "orig_argv", [])
    if sys.argv[0].endswith("__main__.py") and "-m" in original[:-1]:
        return ["python", "-m", original[original.index("-m") + 1], *sys.argv[1:]]
    return [os.path.basename(sys.argv[0]), *sys.argv[1:]]


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
