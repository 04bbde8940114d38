"""Device, dtype and attention-backend checks, and the versions recorded in metadata."""

from __future__ import annotations

import importlib.util
import os
import platform
from typing import Any

import torch

from .errors import CaptureError
from .settings import DTYPES


def resolve_device(device: str) -> torch.device:
    """Turn auto/cuda/cpu into a torch device; cuda without a GPU is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise CaptureError("--device cuda asked for, but torch sees no CUDA GPU")
    return torch.device(device)


def resolve_dtype(dtype: str | None, device: torch.device, bf16_ok: bool | None = None) -> torch.dtype:
    """The torch dtype for bf16/fp16/fp32; None means bf16 on a GPU that has it (else fp16), fp32 on cpu.

    `bf16_ok` (whether the GPU supports bf16 natively) is asked of torch when not given;
    an explicit bf16 on a GPU without it is an error rather than a slow emulated capture.
    """
    if device.type == "cuda":
        if bf16_ok is None:
            bf16_ok = bool(torch.cuda.is_bf16_supported(including_emulation=False))
        if dtype is None:
            dtype = "bf16" if bf16_ok else "fp16"
        elif dtype == "bf16" and not bf16_ok:
            raise CaptureError(
                "--dtype bf16 asked for, but this GPU has no native bf16 (compute capability < 8.0): use fp16"
            )
    elif dtype is None:
        dtype = "fp32"
    return getattr(torch, DTYPES[dtype])


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> `bfloat16`."""
    return str(dtype).removeprefix("torch.")


def check_attn_available(attn: str, device: torch.device, props: Any = None) -> None:
    """Raise `CaptureError` when attention implementation `attn` cannot run here.

    `props` (the GPU's `get_device_properties`) is read from torch when not given.
    """
    if attn == "flash_attention_3":
        if device.type != "cuda":
            raise CaptureError("attention implementation 'flash_attention_3' needs a CUDA GPU")
        props = props if props is not None else torch.cuda.get_device_properties(device)
        if props.major < 9:
            raise CaptureError(
                f"attention implementation 'flash_attention_3' needs a Hopper GPU or newer (compute "
                f"capability 9.0+); {props.name} is {props.major}.{props.minor}"
            )
        if importlib.util.find_spec("flash_attn_interface") is None:
            raise CaptureError(
                "attention implementation 'flash_attention_3' is not available: the flash-attn-3 package "
                "(module flash_attn_interface, from flash-attention's hopper/ folder) is not installed"
            )
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


def host_info() -> dict[str, Any]:
    """CPU threads torch uses, the machine's CPU count and load: what CPU timings depend on."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not every platform has it
        load = None
    return {
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "loadavg": load,
    }


def set_threads(threads: int | None) -> None:
    """Pin torch's intra-op threads (None: leave torch's default)."""
    if threads is not None:
        if threads < 1:
            raise CaptureError("threads must be at least 1")
        torch.set_num_threads(threads)


def cuda_sync_config() -> Any:
    """The profiler's experimental config that records CUDA synchronisation events, or None
    where this torch has no such option (the trace's sync edges are then inferred)."""
    config = getattr(getattr(torch._C, "_profiler", None), "_ExperimentalConfig", None)
    if config is None:
        return None
    try:
        return config(enable_cuda_sync_events=True)
    except TypeError:
        return None


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
