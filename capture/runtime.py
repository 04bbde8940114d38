"""Device, dtype and attention-backend checks, and the versions recorded in metadata."""

from __future__ import annotations

import importlib.util
import platform

import torch

from capture.errors import CaptureError
from capture.settings import DTYPES


def resolve_device(device: str) -> torch.device:
    """Turn auto/cuda/cpu into a torch device; cuda without a GPU is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise CaptureError("--device cuda asked for, but torch sees no CUDA GPU")
    return torch.device(device)


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """Return the torch dtype for bf16/fp16/fp32; None means bf16 on cuda, fp32 on cpu."""
    if dtype is None:
        dtype = "bf16" if device.type == "cuda" else "fp32"
    return getattr(torch, DTYPES[dtype])


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> `bfloat16`."""
    return str(dtype).removeprefix("torch.")


def check_attn_available(attn: str, device: torch.device) -> None:
    """Raise `CaptureError` when attention implementation `attn` cannot run here."""
    if attn == "flash_attention_2":
        if device.type != "cuda":
            raise CaptureError("attention implementation 'flash_attention_2' needs a CUDA GPU")
        if importlib.util.find_spec("flash_attn") is None:
            raise CaptureError(
                "attention implementation 'flash_attention_2' is not available: "
                "the flash-attn package is not installed (pip install flash-attn)"
            )
    if attn == "flex_attention":
        from transformers.utils import is_torch_flex_attn_available

        if not is_torch_flex_attn_available():
            raise CaptureError(
                f"attention implementation 'flex_attention' is not available with torch {torch.__version__}"
            )


def versions() -> dict[str, str | None]:
    """Python, torch, transformers, CUDA/cuDNN/HIP versions (None where absent)."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": _package_version("transformers"),
        "cuda": torch.version.cuda,
        "cudnn": str(cudnn) if cudnn else None,
        "hip": getattr(torch.version, "hip", None),
    }


def gpu_info(device: torch.device | None = None) -> dict[str, object] | None:
    """Name, compute capability and memory of the GPU used, or None on a CPU run."""
    if not torch.cuda.is_available() or (device is not None and device.type != "cuda"):
        return None
    index = device.index if device is not None and device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "count": torch.cuda.device_count(),
    }


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so each profiler step holds its own kernels."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
