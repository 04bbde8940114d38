"""The `attention-variants` scenario: one causal attention forward per implementation.

Each variant computes causal attention on random q, k, v of shape
batch x heads x seq x head_dim, under `torch.no_grad`, each call inside
`record_function("attn_fwd")`, profiled with schedule wait 1 / warmup 1 / active `repeats`
(default 3), so the trace holds `repeats` `attn_fwd` ranges, one per profiler step. Variants:

- `eager`: matmul, scale, out-of-place `masked_fill`, `softmax`, matmul;
- `eager-inplace`: the same with in-place `mul_` and `masked_fill_`;
- `sdpa-math`, `sdpa-efficient`, `sdpa-flash`, `sdpa-cudnn`:
  `scaled_dot_product_attention(is_causal=True)` pinned to one backend with `sdpa_kernel`.

A backend the device or torch build lacks is skipped: the index records it with
`status: "skipped"`, `path: null` and the reason in `note`.

On a GPU the default shape (4 x 32 x 4096 x 64) is shrunk, batch first, then sequence, until
the eager variant's score tensors fit in half of the GPU's free memory (`fit_shape`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import record_function

from .errors import CaptureError
from .metadata import base_metadata
from .runtime import dtype_name, resolve_device, resolve_dtype, set_threads, synchronize
from .session import make_profiler
from .settings import SCENARIO_VARIANTS as VARIANTS
from .tracefile import write_json, write_trace

SCENARIO = "attention-variants"
INDEX_NAME = "index.json"
SCHEDULE = {"wait": 1, "warmup": 1, "active": 3}
MIN_GPU_SEQ = 512
# eager attention holds about this many batch x heads x seq x seq score tensors at its peak
# (scores, scaled, masked, softmax), counted at 4 bytes an element (softmax may upcast)
SCORE_COPIES = 4
SDPA_BACKENDS = {
    "sdpa-math": "MATH",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
}
GPU_SHAPE = {"batch": 4, "heads": 32, "seq": 4096, "head_dim": 64}
CPU_SHAPE = {"batch": 1, "heads": 4, "seq": 256, "head_dim": 64}
Report = Callable[[str], None]


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Causal attention written out: matmul, scale, masked_fill, softmax, matmul."""
    scores = torch.matmul(q, k.transpose(-2, -1))
    scores = scores * (1.0 / math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def inplace_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`naive_attention` with the scale and the mask applied in place."""
    scores = torch.matmul(q, k.transpose(-2, -1))
    scores.mul_(1.0 / math.sqrt(q.shape[-1]))
    scores.masked_fill_(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def variant_call(variant: str, tensors: dict[str, torch.Tensor]) -> Callable[[], torch.Tensor]:
    """A no-argument callable running one attention forward of `variant`."""
    q, k, v, mask = tensors["q"], tensors["k"], tensors["v"], tensors["mask"]
    if variant == "eager":
        return lambda: naive_attention(q, k, v, mask)
    if variant == "eager-inplace":
        return lambda: inplace_attention(q, k, v, mask)
    backend = getattr(SDPBackend, SDPA_BACKENDS[variant], None)

    def sdpa() -> torch.Tensor:
        if backend is None:
            raise RuntimeError(f"torch {torch.__version__} has no SDPBackend.{SDPA_BACKENDS[variant]}")
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return sdpa


def peak_bytes(shape: dict[str, int], element_bytes: int) -> int:
    """Estimated peak memory of the eager variant: the score copies plus q, k, v and output."""
    scores = shape["batch"] * shape["heads"] * shape["seq"] ** 2 * 4 * SCORE_COPIES
    return scores + 4 * shape["batch"] * shape["heads"] * shape["seq"] * shape["head_dim"] * element_bytes


def fit_shape(shape: dict[str, int], free_bytes: int, element_bytes: int, fixed: set[str]) -> dict[str, int]:
    """`shape` with batch halved, then seq halved (not below 512), until `peak_bytes` fits in
    half of `free_bytes`; options the user gave (`fixed`) are never changed."""
    shape = dict(shape)
    budget = free_bytes // 2
    for key, floor in (("batch", 1), ("seq", MIN_GPU_SEQ)):
        while key not in fixed and shape[key] // 2 >= floor and peak_bytes(shape, element_bytes) > budget:
            shape[key] //= 2
    return shape


def resolve_shape(
    device: torch.device, *, free_bytes: int | None = None, element_bytes: int = 2, **given: int | None
) -> dict[str, int]:
    """Shape options with device defaults filled in (GPU: 4x32x4096x64 sized to the free memory,
    `torch.cuda.mem_get_info` unless `free_bytes` is given; CPU: 1x4x256x64)."""
    defaults = GPU_SHAPE if device.type == "cuda" else CPU_SHAPE
    shape = {key: given.get(key) or value for key, value in defaults.items()}
    if device.type == "cuda":
        if free_bytes is None:
            free_bytes = torch.cuda.mem_get_info(device)[0]
        shape = fit_shape(shape, free_bytes, element_bytes, {key for key, value in given.items() if value})
    for key, value in shape.items():
        if value < 1:
            raise CaptureError(f"{key.replace('_', '-')} must be at least 1")
    return shape


def make_tensors(
    shape: dict[str, int], device: torch.device, dtype: torch.dtype, seed: int
) -> dict[str, torch.Tensor]:
    """Seeded random q, k, v and the boolean causal mask (True above the diagonal)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    size = (shape["batch"], shape["heads"], shape["seq"], shape["head_dim"])
    tensors = {name: torch.randn(size, generator=generator, device=device, dtype=dtype) for name in "qkv"}
    ones = torch.ones(shape["seq"], shape["seq"], dtype=torch.bool, device=device)
    tensors["mask"] = torch.triu(ones, diagonal=1)
    return tensors


def unavailable_reason(call: Callable[[], torch.Tensor], device: torch.device) -> str | None:
    """Run `call` once (also a warm-up); return why it cannot run here, or None."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.no_grad():
                call()
            synchronize(device)
        except RuntimeError as error:
            reasons = [str(error).strip().splitlines()[0]]
            reasons += [str(w.message).strip().splitlines()[0] for w in caught]
            return "; ".join(dict.fromkeys(reasons))[:500]
    return None


def capture_variant(
    variant: str,
    call: Callable[[], torch.Tensor],
    out: Path,
    metadata: dict[str, Any],
    device: torch.device,
    profiler_options: dict[str, bool],
    repeats: int = 3,
    progress: Report | None = None,
) -> None:
    """Profile `call` with the scenario schedule (`repeats` active steps) and write the trace to `out`."""
    schedule = {**SCHEDULE, "active": repeats}
    metadata["profiler"] = {"schedule": schedule}
    profiler = make_profiler(
        metadata, device, **profiler_options, schedule=torch.profiler.schedule(**schedule, repeat=1)
    )
    unprofiled = schedule["wait"] + schedule["warmup"]
    with torch.no_grad(), profiler:
        for step in range(sum(schedule.values())):
            if progress and step >= unprofiled:
                progress(f"{variant}: repeat {step - unprofiled + 1}/{repeats}")
            with record_function("attn_fwd"):
                call()
            synchronize(device)
            profiler.step()
    write_trace(profiler, out)


def run_attention_variants(
    out_dir: str | Path,
    variants: list[str] | None = None,
    *,
    device: str = "auto",
    dtype: str | None = None,
    batch: int | None = None,
    heads: int | None = None,
    seq: int | None = None,
    head_dim: int | None = None,
    seed: int = 0,
    repeats: int = 3,
    threads: int | None = None,
    profiler_options: dict[str, bool] | None = None,
    report: Report | None = None,
    progress: Report | None = None,
) -> list[dict[str, Any]]:
    """Write one trace per variant (default: all) and `index.json` into `out_dir`.

    `profiler_options` takes record_shapes, with_stack, with_modules, profile_memory;
    `threads` pins torch's CPU threads; `progress` gets a line per variant and repeat.
    Returns the index entries, skipped variants included.
    """
    if repeats < 1:
        raise CaptureError("repeats must be at least 1")
    for variant in variants or []:
        if variant not in VARIANTS:
            raise CaptureError(f"unknown attention variant {variant!r} (choose from: {', '.join(VARIANTS)})")
    out_dir = Path(out_dir)
    run_device = resolve_device(device)
    set_threads(threads)
    run_dtype = resolve_dtype(dtype, run_device)
    shape = resolve_shape(
        run_device, element_bytes=run_dtype.itemsize, batch=batch, heads=heads, seq=seq, head_dim=head_dim
    )
    tensors = make_tensors(shape, run_device, run_dtype, seed)
    entries: list[dict[str, Any]] = []
    for variant in variants or list(VARIANTS):
        entry = _entry(variant, run_device, run_dtype, shape)
        call = variant_call(variant, tensors)
        if progress:
            progress(f"{variant}: checking the backend runs ({_shape_text(shape)}, {entry['dtype']})")
        reason = unavailable_reason(call, run_device)
        if reason is not None:
            entry["note"] = (
                f"{entry['sdpa_backend'] or variant} cannot run on {run_device.type} with {entry['dtype']}: {reason}"
            )
        else:
            metadata = {**base_metadata(SCENARIO, run_device), **_trace_fields(entry, seed, repeats)}
            capture_variant(
                variant,
                call,
                out_dir / f"{variant}.json.gz",
                metadata,
                run_device,
                profiler_options or {},
                repeats,
                progress,
            )
            entry.update(path=f"{variant}.json.gz", status="ok")
        entries.append(entry)
        write_json(out_dir / INDEX_NAME, entries)
        if report:
            report(
                f"{variant}: "
                + (f"wrote {out_dir / entry['path']}" if entry["path"] else f"skipped ({entry['note']})")
            )
    return entries


def _entry(variant: str, device: torch.device, dtype: torch.dtype, shape: dict[str, int]) -> dict[str, Any]:
    return {
        "variant": variant,
        "attn_implementation": "sdpa" if variant in SDPA_BACKENDS else "eager",
        "sdpa_backend": SDPA_BACKENDS.get(variant),
        "path": None,
        "model": SCENARIO,
        "dtype": dtype_name(dtype),
        "device": device.type,
        "shapes": shape,
        "status": "skipped",
        "note": None,
    }


def _shape_text(shape: dict[str, int]) -> str:
    return "x".join(str(shape[key]) for key in ("batch", "heads", "seq", "head_dim"))


def _trace_fields(entry: dict[str, Any], seed: int, repeats: int) -> dict[str, Any]:
    return {
        "scenario": SCENARIO,
        "variant": entry["variant"],
        "attn_implementation": entry["attn_implementation"],
        "sdpa_backend": entry["sdpa_backend"],
        "dtype": entry["dtype"],
        "shapes": entry["shapes"],
        "causal": True,
        "seed": seed,
        "repeats": repeats,
        "annotations": {"attn_fwd": f"one attention forward; {repeats} per trace, one per profiler step"},
    }
