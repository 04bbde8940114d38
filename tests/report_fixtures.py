"""Generated traces for the report tests: a small LLM-decode-shaped GPU trace, and a hostile one."""

from __future__ import annotations

from builders import TraceBuilder

HOSTILE = [
    "<script>alert('k')</script>",
    '"><img src=x onerror=alert(1)>',
    "</style><script>alert(2)</script>",
    "{{ 7*7 }}{% raw %}",
    "javascript:alert(3)",
    "](javascript:alert(4))",
    "| pipe | table |",
]
FAKE_TOKEN = "hf_FAKEfakeFAKEfakeFAKEfakeFAKEfakeFA"


def decode_trace(steps: int = 3, *, names: list[str] | None = None, extra_top: dict | None = None) -> TraceBuilder:
    """`steps` ProfilerSteps of: an op launching a GEMM, a short elementwise kernel after a
    launch gap, an attention kernel, and a blocking `aten::item` sync at the end of the step."""
    names = names or []
    b = TraceBuilder(extra_top=extra_top)
    t = 0
    for s in range(steps):
        step_len = 400_000 if s else 900_000  # a cold first step
        b.annotation(f"ProfilerStep#{s + 1}", t, step_len)
        ext = b.op(names[0] if names else "aten::mm", t + 1_000, 30_000)
        b.launch_kernel(names[1] if len(names) > 1 else "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
                        ext=ext, launch_ns=t + 2_000, launch_dur_ns=5_000, start_ns=t + 10_000, dur_ns=100_000)
        ext = b.op("aten::add", t + 150_000, 20_000)
        b.launch_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
                        ext=ext, launch_ns=t + 151_000, launch_dur_ns=4_000, start_ns=t + 156_000, dur_ns=5_000)
        ext = b.op("aten::_scaled_dot_product_flash_attention", t + 170_000, 20_000)
        b.launch_kernel("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>",
                        ext=ext, launch_ns=t + 171_000, launch_dur_ns=6_000, start_ns=t + 180_000, dur_ns=60_000,
                        shared_memory=98_304, registers=255, grid=(16, 32, 1), block=(128, 1, 1), occupancy=0)
        ext = b.op("aten::item", t + 250_000, 100_000)
        b.op("aten::_local_scalar_dense", t + 251_000, 98_000, ext=None)
        b.launch_copy("DtoH (Device -> Pinned)", launch_ns=t + 252_000, launch_dur_ns=90_000,
                      start_ns=t + 260_000, dur_ns=2_000, nbytes=4, ext=ext)
        b.runtime("cudaStreamSynchronize", t + 343_000, 6_000)
        t += step_len
    b.memory(1_000, 1 << 20, 1 << 30, 2 << 30)
    return b


def hostile_trace() -> TraceBuilder:
    evil = " ".join(HOSTILE)
    b = decode_trace(2, names=[f"aten::{evil}", f"kernel {evil}"],
                     extra_top={"metadata": {"note": evil, "env": {"HF_TOKEN": FAKE_TOKEN, "PATH": "/usr/bin"},
                                             "url": "https://user:s3cretpw@example.com/x"}})
    b.events.append({"ph": "M", "name": "thread_name", "pid": b.pid, "tid": b.tid, "args": {"name": evil}})
    return b
