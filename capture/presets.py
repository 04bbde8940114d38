"""Built-in model presets: Llama configs with random weights, never fetched from a hub.

Each preset is a plain dict of `LlamaConfig` keyword arguments, so this module needs no
torch or transformers to be listed (the CLI's help names them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import CaptureError

# Token ids 0..2 are reserved for pad/bos/eos in every preset; prompts use ids >= 3.
SPECIAL_TOKENS: dict[str, int] = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}

PRESETS: dict[str, dict[str, Any]] = {
    "tiny-llama": {
        "description": "2 layers, hidden 64, 4 heads (2 KV heads); runs in milliseconds on a CPU",
        "config": {
            "vocab_size": 512,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
        },
    },
    "llama-8x1024": {
        "description": "8 layers, hidden 1024, 16 heads (8 KV heads), vocab 32000; for GPU captures",
        "config": {
            "vocab_size": 32000,
            "hidden_size": 1024,
            "intermediate_size": 2816,
            "num_hidden_layers": 8,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "max_position_embeddings": 8192,
        },
    },
}

DEFAULT_PRESET = "tiny-llama"


def preset_config_kwargs(name: str) -> dict[str, Any]:
    """Return the full `LlamaConfig` keyword arguments of preset `name`."""
    return {**PRESETS[name]["config"], **SPECIAL_TOKENS}


def model_source(model: str) -> str:
    """Return "preset" or "local" for `--model`, or raise a one-line `CaptureError`."""
    if model in PRESETS:
        return "preset"
    path = Path(model)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise CaptureError(f"model directory {model!r} has no config.json")
        return "local"
    if path.exists():
        raise CaptureError(f"--model {model!r} is a file; give a preset or a model directory")
    if os.sep in model or "/" in model or model.startswith((".", "~")):
        raise CaptureError(f"model directory not found: {model!r} (capture never downloads from a hub)")
    raise CaptureError(
        f"unknown model preset {model!r} (presets: {', '.join(PRESETS)}; or give a local model directory)"
    )
