"""Category spellings across Kineto versions and vendors, mapped to one vocabulary."""

from __future__ import annotations

# Spellings seen across Kineto versions and vendors -> one vocabulary (modern Kineto names).
CATEGORY_MAP: dict[str, str] = {
    "Kernel": "kernel",
    "kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "gpu_memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "gpu_memset": "gpu_memset",
    "Runtime": "cuda_runtime",
    "cuda_runtime": "cuda_runtime",
    "hip_runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "cuda_driver": "cuda_driver",
    "hip_driver": "cuda_driver",
    "Operator": "cpu_op",
    "cpu_op": "cpu_op",
    "User annotation": "user_annotation",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "GPU user annotation": "gpu_user_annotation",
    "Python": "python_function",
    "python_function": "python_function",
    "cuda_sync": "cuda_sync",
    "Overhead": "overhead",
    "overhead": "overhead",
    "Trace": "trace",
    "cpu_instant_event": "cpu_instant_event",
    "async": "ac2g",
    "async_cpu_to_gpu": "ac2g",
    "ac2g": "ac2g",
    "fwdbwd": "fwdbwd",
    "fwd_bwd": "fwdbwd",
}

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
KINETO_CATS = ("cpu_op", "kernel", "cuda_runtime", "user_annotation", "python_function", "gpu_memcpy", "trace")


def normalise_category(cat: str) -> str:
    return CATEGORY_MAP.get(cat, cat)


# raw category -> the frame a complete event of it feeds (anything else: ops)
X_KIND: dict[str, str] = {
    **{raw: "gpu" for raw, cat in CATEGORY_MAP.items() if cat in GPU_CATS},
    **{raw: "runtime" for raw, cat in CATEGORY_MAP.items() if cat in RUNTIME_CATS},
    **{cat: "gpu" for cat in GPU_CATS},
    **{cat: "runtime" for cat in RUNTIME_CATS},
}
