"""Build or load the model to capture: a random-weight preset or a local directory.

Nothing here reaches a model hub: presets are built from configs, local directories are
read with `local_files_only=True`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .errors import CaptureError
from .presets import model_source, preset_config_kwargs
from .runtime import check_attn_available

WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")


def load_model(model: str, attn: str, dtype: torch.dtype, device: torch.device, seed: int) -> Any:
    """Build preset `model` or load local directory `model`, in eval mode on `device`."""
    source = model_source(model)
    check_attn_available(attn, device)
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            built = _build(model, source, attn, dtype)
    except (ValueError, ImportError, OSError) as error:
        raise CaptureError(
            f"cannot load model {model!r} with attention {attn!r}: {_first_line(error)}"
        ) from error
    return built.to(device=device).eval()


def model_summary(model: str, loaded: Any) -> dict[str, Any]:
    """The model part of the trace metadata for `--model` value `model`."""
    from .metadata import describe_model

    source = model_source(model)
    summary = describe_model(loaded, model if source == "preset" else Path(model).resolve().name)
    return {**summary, "source": source, "path": None if source == "preset" else str(model)}


def _build(model: str, source: str, attn: str, dtype: torch.dtype) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if source == "preset":
        built = LlamaForCausalLM._from_config(
            LlamaConfig(**preset_config_kwargs(model)), attn_implementation=attn, dtype=dtype
        )
        built._capture_weights = "random"
        return built
    if _has_weights(Path(model)):
        return AutoModelForCausalLM.from_pretrained(
            model, local_files_only=True, dtype=dtype, attn_implementation=attn
        )
    config = AutoConfig.from_pretrained(model, local_files_only=True)
    built = AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=dtype)
    built._capture_weights = "random"
    return built


def _has_weights(path: Path) -> bool:
    return any(next(path.glob(pattern), None) is not None for pattern in WEIGHT_FILES)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
