"""Built-in model presets: Llama configs with random weights, never fetched from a hub.

Each preset is a plain dict of `LlamaConfig` keyword arguments, so this module needs no
torch or transformers to be listed (the CLI's help names them).
"""

from __future__ import annotations

from typing import Any

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
