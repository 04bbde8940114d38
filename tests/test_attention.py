"""Attention analysis: the HF article's variants rebuilt as GPU-shaped traces, then real traces.

The fixture traces follow DESIGN-NOTES §3 and the real H100 trace: CPU op trees as PyTorch
writes them (`aten::matmul` -> `aten::bmm`, `aten::masked_fill` -> `aten::clone` ->
`aten::copy_`, `aten::scaled_dot_product_attention` -> backend op), kernel names from real
traces, GPU times from the article (eager 1.955 ms, math 7.239 ms, efficient 277.9 µs /
117 µs CPU, flash 146.8 µs / 138 µs, cuDNN 186 µs / 214 µs via `cuLaunchKernelEx`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from builders import A100, TraceBuilder
from click.testing import CliRunner
from conftest import all_real_traces, real_trace

from tracekit.analysis.attention import analyze_attention
from tracekit.analysis.attention.compare import compare_attention, variant_label
from tracekit.cli.main import cli
from tracekit.model import TEXT
from tracekit.report.attention import attention_section

US = 1_000
GEMM_BF16 = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn"
SGEMM = "ampere_sgemm_128x64_nn"
MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, "
    "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
    "std::array<char*, 3ul> >(int, "
    "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"
)
MUL_F32 = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, "
    "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
    "std::array<char*, 2ul>)"
)
MASKED_FILL = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
    "masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::"
    "{lambda(c10::BFloat16, bool)#1}> >(int, at::native::masked_fill_kernel)"
)
SOFTMAX_BF16 = (
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 12, false, "
    "false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"
)
SOFTMAX_F32 = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
)
COPY = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
    "{lambda(float)#1}, std::array<char*, 2ul>, "
    "4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
    "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int)"
)
FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<bool>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<bool>, std::array<char*, 1ul>)"
)
TRIL = (
    "void at::native::triu_tril_kernel<bool, int, false, 4, false>("
    "at::cuda::detail::TensorInfo<bool, int>, long)"
)
WHERE = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
    "(anonymous namespace)::where_kernel_impl(at::TensorIterator&)::{lambda()#1}> >(int)"
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
)
ISNEGINF = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::isneginf_kernel_impl("
    "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int)"
)
ALL = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool, at::native::func_wrapper_t<bool, "
    "at::native::and_kernel_cuda(at::TensorIterator&)::{lambda(bool, bool)#1}>, unsigned int, bool, 4> >"
    "(at::native::ReduceOp)"
)
EFFICIENT = (
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
    "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"
)
FLASH = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
    "false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, "
    "false, true, false, false, false, true, false>(pytorch_flash::Flash_fwd_params)"
)
CUDNN = "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_kernel0_0"
FA_PACKAGE = (
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, "
    "false, true, true, false, false>(flash::Flash_fwd_params)"
)
CK_FMHA = (
    "fmha_fwd_hdim128_bf16_batch_b128x128x32x128x32x128_r4x1x1_w32x32x16_qr_async_vr_psddv"
    "_nlogits_nbias_nmask"
)

SHAPE = [4, 32, 4096, 64]
BF16 = "c10::BFloat16"


@dataclass(frozen=True)
class K:
    """A GPU activity an op launches (a kernel, or a memcpy when `memcpy`)."""

    name: str
    dur_ns: int
    api: str = "cudaLaunchKernel"
    memcpy: bool = False
    launch_ns: int = 4 * US
    smem: int = 0
    occupancy: float | None = None
    registers: int = 64


@dataclass(frozen=True)
class Op:
    """A CPU op: children, kernels it launches itself, args; `dur_ns` fixes its CPU time."""

    name: str
    children: tuple[Op, ...] = ()
    kernels: tuple[K, ...] = ()
    args: dict[str, Any] = field(default_factory=dict)
    dur_ns: int | None = None


class Emitter:
    """Writes op trees into a TraceBuilder: launches inside the ops, kernels queued on one stream."""

    def __init__(self, builder: TraceBuilder) -> None:
        self.b = builder
        self.gpu_ns = 0

    def emit(self, op: Op, t: int, *, cat: str = "cpu_op") -> int:
        ext = self.b.next_ext()
        start, t = t, t + 2 * US
        for k in op.kernels:
            t = self._launch(k, t, ext) + US
        for child in op.children:
            t = self.emit(child, t) + US
        end = t + US if op.dur_ns is None else max(t + US, start + op.dur_ns)
        self.b.op(op.name, start, end - start, cat=cat, ext=ext, args=op.args)
        return end

    def _launch(self, k: K, t: int, ext: int) -> int:
        gpu_start = max(self.gpu_ns + US, t + k.launch_ns + US)
        if k.memcpy:
            self.b.launch_copy(
                "DtoD (Device -> Device)",
                launch_ns=t,
                launch_dur_ns=k.launch_ns,
                start_ns=gpu_start,
                dur_ns=k.dur_ns,
                nbytes=4 * 32 * 4096 * 4096 * 2,
                ext=ext,
            )
        else:
            self.b.launch_kernel(
                k.name,
                launch_ns=t,
                launch_dur_ns=k.launch_ns,
                start_ns=gpu_start,
                dur_ns=k.dur_ns,
                ext=ext,
                api=k.api,
                shared_memory=k.smem,
                occupancy=k.occupancy,
                registers=k.registers,
                grid=(64, 32, 4),
            )
        self.gpu_ns = gpu_start + k.dur_ns
        return t + k.launch_ns

    def call(self, ops: list[Op], t: int, *, annotation: str | None = "attn_fwd") -> int:
        """The ops in sequence (inside an annotation, if given); returns when the next call may start."""
        start = t
        for op in ops:
            t = self.emit(op, t) + US
        if annotation:
            self.b.annotation(annotation, start - US, t - start + 2 * US)
        return max(t, self.gpu_ns) + 50 * US


def _dims(*shapes: list[int]) -> dict[str, Any]:
    return {
        "Input Dims": [list(s) for s in shapes],
        "Input type": [BF16] * len(shapes),
        "Concrete Inputs": [""] * len(shapes),
    }


def _matmul(kernels: tuple[K, ...], a: list[int], b: list[int], pre: tuple[Op, ...] = ()) -> Op:
    return Op(
        "aten::matmul",
        (
            Op("aten::expand"),
            Op("aten::reshape", pre),
            Op("aten::bmm", kernels=kernels),
            Op("aten::_unsafe_view"),
        ),
        args=_dims(a, b),
    )


def eager_ops(*, inplace: bool = False) -> list[Op]:
    """matmul, scale, masked_fill (out of place: clone + Memcpy), softmax, matmul: 6 GPU events.

    In place (`mul_`, `masked_fill_`): no clone, no Memcpy, 5 GPU events."""
    kt = [4, 32, 64, 4096]
    scores = [4, 32, 4096, 4096]
    if inplace:
        scale = Op("aten::mul_", kernels=(K(MUL, 150 * US),))
        mask = Op("aten::masked_fill_", kernels=(K(MASKED_FILL, 180 * US),))
    else:
        scale = Op("aten::mul", kernels=(K(MUL, 150 * US),))
        copy = Op(
            "aten::clone",
            (
                Op("aten::empty_like"),
                Op("aten::copy_", kernels=(K("Memcpy", 200 * US, memcpy=True, api="cudaMemcpyAsync"),)),
            ),
        )
        mask = Op("aten::masked_fill", (copy, Op("aten::masked_fill_", kernels=(K(MASKED_FILL, 180 * US),))))
    return [
        Op("aten::transpose"),
        _matmul((K(GEMM_BF16, 700 * US),), SHAPE, kt),
        scale,
        mask,
        Op("aten::softmax", (Op("aten::_softmax", kernels=(K(SOFTMAX_BF16, 300 * US),)),)),
        _matmul((K(GEMM_BF16, 425 * US),), scores, SHAPE),
    ]


def _to(dur_us: int) -> Op:
    return Op(
        "aten::to",
        (
            Op(
                "aten::_to_copy",
                (Op("aten::empty_strided"), Op("aten::copy_", kernels=(K(COPY, dur_us * US),))),
            ),
        ),
    )


def _sdpa_args() -> dict[str, Any]:
    return {
        "Input Dims": [SHAPE, SHAPE, SHAPE, [], [], [], [], []],
        "Input type": [BF16, BF16, BF16, "", "Scalar", "Scalar", "", "Scalar"],
        "Concrete Inputs": ["", "", "", "", "0.", "True", "", "False"],
    }


def math_ops() -> list[Op]:
    """SDPA math: FP32 upcast, mask rebuilt (ones -> tril, where), sgemm, _safe_softmax: 20 GPU events."""
    scalar = Op("aten::scalar_tensor", kernels=(K(FILL, 5 * US),))
    safe_softmax = Op(
        "aten::_safe_softmax",
        (
            Op("aten::softmax", (Op("aten::_softmax", kernels=(K(SOFTMAX_F32, 690 * US),)),)),
            Op("aten::isneginf", kernels=(K(ISNEGINF, 290 * US),)),
            Op("aten::all", (Op("aten::fill_", kernels=(K(FILL, 10 * US),)),), kernels=(K(ALL, 330 * US),)),
            Op("aten::where", kernels=(K(WHERE, 420 * US),)),
        ),
    )
    clone = Op("aten::clone", (Op("aten::copy_", kernels=(K(COPY, 190 * US),)),))
    inner = Op(
        "aten::_scaled_dot_product_attention_math",
        (
            _to(110),
            _to(110),
            _to(110),
            Op("aten::mul", (Op("aten::mul", kernels=(K(MUL_F32, 100 * US),)),)),
            Op("aten::ones", (Op("aten::empty"), Op("aten::fill_", kernels=(K(FILL, 25 * US),)))),
            Op("aten::tril", kernels=(K(TRIL, 35 * US),)),
            scalar,
            Op(
                "aten::where",
                (
                    Op("aten::scalar_tensor", kernels=(K(FILL, 5 * US),)),
                    Op("aten::where", kernels=(K(WHERE, 140 * US),)),
                ),
            ),
            Op("aten::transpose"),
            Op("aten::mul", (Op("aten::mul", kernels=(K(MUL_F32, 100 * US),)),)),
            _matmul((K(SGEMM, 2600 * US),), SHAPE, [4, 32, 64, 4096], pre=(clone,)),
            Op("aten::add_", kernels=(K(ADD, 380 * US),)),
            safe_softmax,
            _matmul((K(SGEMM, 1400 * US),), [4, 32, 4096, 4096], SHAPE),
            _to(189),
        ),
    )
    return [Op("aten::scaled_dot_product_attention", (inner,), args=_sdpa_args())]


def fused_ops(backend_op: str, inner: str | None, kernel: K, cpu_ns: int) -> list[Op]:
    leaf = Op(inner, kernels=(kernel,)) if inner else None
    body = Op(
        backend_op,
        tuple(x for x in (Op("aten::transpose"), leaf, Op("aten::transpose")) if x) if leaf else (),
        kernels=() if leaf else (kernel,),
    )
    return [Op("aten::scaled_dot_product_attention", (body,), args=_sdpa_args(), dur_ns=cpu_ns)]


VARIANTS: dict[str, tuple[Any, str, str | None]] = {
    "eager": (lambda: eager_ops(), "eager", None),
    "eager-inplace": (lambda: eager_ops(inplace=True), "eager", None),
    "sdpa-math": (math_ops, "sdpa", "MATH"),
    "sdpa-efficient": (
        lambda: fused_ops(
            "aten::_scaled_dot_product_efficient_attention",
            "aten::_efficient_attention_forward",
            K(EFFICIENT, 277_900),
            117 * US,
        ),
        "sdpa",
        "EFFICIENT_ATTENTION",
    ),
    "sdpa-flash": (
        lambda: fused_ops(
            "aten::_scaled_dot_product_flash_attention",
            "aten::_flash_attention_forward",
            K(FLASH, 146_800, smem=49152, occupancy=13.0, registers=255),
            138 * US,
        ),
        "sdpa",
        "FLASH_ATTENTION",
    ),
    "sdpa-cudnn": (
        lambda: fused_ops(
            "aten::_scaled_dot_product_cudnn_attention",
            None,
            K(CUDNN, 186 * US, api="cuLaunchKernelEx", smem=98304, occupancy=0.0, registers=128),
            214 * US,
        ),
        "sdpa",
        "CUDNN_ATTENTION",
    ),
}
ARTICLE_KERNELS = {
    "eager": 6,
    "eager-inplace": 5,
    "sdpa-math": 20,
    "sdpa-efficient": 1,
    "sdpa-flash": 1,
    "sdpa-cudnn": 1,
}
ARTICLE_BACKENDS = {
    "eager": "eager",
    "eager-inplace": "eager",
    "sdpa-math": "sdpa_math",
    "sdpa-efficient": "sdpa_efficient",
    "sdpa-flash": "sdpa_flash",
    "sdpa-cudnn": "sdpa_cudnn",
}


def write_variant(
    directory: Path, variant: str, *, calls: int = 3, sdpa_backend: str | None = "same"
) -> Path:
    make, impl, pinned = VARIANTS[variant]
    meta = {
        "scenario": "attention-variants",
        "variant": variant,
        "attn_implementation": impl,
        "sdpa_backend": pinned if sdpa_backend == "same" else sdpa_backend,
        "dtype": "bfloat16",
        "device": "cuda",
    }
    b = TraceBuilder(devices=[A100], extra_top={"tracekit_capture": meta})
    em = Emitter(b)
    t = 1_000 * US
    for _ in range(calls):
        t = em.call(make(), t)
    return b.write(directory / f"{variant}.json.gz")


@pytest.fixture(scope="module")
def variants_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("variants")
    index = [{"variant": v, "path": write_variant(directory, v).name, "status": "ok"} for v in VARIANTS]
    (directory / "index.json").write_text(json.dumps(index))
    return directory


@pytest.fixture(scope="module")
def traces(variants_dir: Path) -> dict[str, Any]:
    import tracekit

    return {v: tracekit.load(variants_dir / f"{v}.json.gz") for v in VARIANTS}


@pytest.fixture(scope="module")
def results(traces: dict[str, Any]) -> dict[str, Any]:
    return {v: analyze_attention(t) for v, t in traces.items()}


@pytest.fixture(scope="module")
def found(traces: dict[str, Any], results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v: _findings(traces[v], results[v]) for v in VARIANTS}


# -- the article's table -------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_article_kernel_counts_and_backends_per_call(results, variant: str) -> None:
    r = results[variant]
    assert r.call_count == 3
    assert r.calls["evidence"].to_list() == ["range"] * 3
    assert r.calls["gpu_events"].to_list() == [ARTICLE_KERNELS[variant]] * 3
    assert r.calls["backend"].to_list() == [ARTICLE_BACKENDS[variant]] * 3
    assert r.backend == ARTICLE_BACKENDS[variant] and r.warnings == ()


def test_eager_call_stages_and_hidden_memcpy(results) -> None:
    eager, inplace = (
        results["eager"].calls.row(0, named=True),
        results["eager-inplace"].calls.row(0, named=True),
    )
    assert (eager["stage_gemm"], eager["stage_scale"], eager["stage_mask"], eager["stage_softmax"]) == (
        2,
        1,
        2,
        1,
    )
    assert eager["memcpys"] == 1 and eager["masked_fill_copies"] == 1 and eager["kernels"] == 5
    assert inplace["memcpys"] == 0 and inplace["masked_fill_copies"] == 0
    assert eager["gpu_ns"] == 1_955 * US and inplace["gpu_ns"] == 1_755 * US
    assert (
        eager["softmax"] == "_softmax"
        and eager["gemm_precision"] == "bf16"
        and eager["gemm_tensor_cores"] is True
    )
    assert eager["classes"] == "elementwise×2, gemm×2, memcpy×1, softmax×1"
    assert (eager["q_len"], eager["head_dim"], eager["dtype"]) == (4096, 64, "bf16")


def test_math_call_fp32_sgemm_mask_rebuilt_safe_softmax(results) -> None:
    row = results["sdpa-math"].calls.row(0, named=True)
    assert row["gpu_ns"] == 7_239 * US
    assert row["gemm_simt"] == 2 and row["gemm_tensor_cores"] is False and row["gemm_precision"] == "fp32"
    assert row["mask_build_ops"] == 2 and row["softmax"] == "_safe_softmax"
    assert row["stage_copy"] == 4 and row["stage_softmax"] == 5  # three upcasts + downcast; _safe_softmax's 5
    assert (row["dtype"], row["is_causal"], row["attn_mask"], row["dropout_p"]) == ("bf16", True, False, 0.0)


def test_cudnn_cpu_above_gpu_and_launch_api(results) -> None:
    row = results["sdpa-cudnn"].calls.row(0, named=True)
    assert row["cpu_ns"] == 214 * US and row["gpu_ns"] == 186 * US
    assert row["launch_apis"] == "cuLaunchKernelEx" and row["launches"] == 1
    flash = results["sdpa-flash"].calls.row(0, named=True)
    assert (flash["cpu_ns"], flash["gpu_ns"], flash["softmax"]) == (138 * US, 146_800, "fused")
    assert results["sdpa-efficient"].calls.row(0, named=True)["cpu_ns"] == 117 * US


def test_share_and_summaries(results) -> None:
    r = results["sdpa-flash"]
    assert r.gpu_share == pytest.approx(1.0) and r.gpu_total_ns == 3 * 146_800
    assert r.by_phase["phase"].to_list() == ["prefill"] and r.calls["phase_source"][0] == "shape"
    assert r.median("gpu_events") == 1.0 and r.by_layer.is_empty() and r.calls_per_layer is None
    occ = r.occupancy.row(0, named=True)
    assert occ["kineto_occupancy_pct"] == 13.0 and occ["theoretical_occupancy"] > 0


def test_comparison_reproduces_the_article(results) -> None:
    comp = compare_attention([(v, results[v]) for v in VARIANTS])
    rows = {r["variant"]: r for r in comp.rows.iter_rows(named=True)}
    assert comp.basis == "gpu" and comp.baseline == "eager"
    assert {v: rows[v]["kernels_median"] for v in VARIANTS} == {
        v: float(n) for v, n in ARTICLE_KERNELS.items()
    }
    assert 1 / rows["sdpa-math"]["speedup"] == pytest.approx(7_239 / 1_955)  # 3.7x slower
    assert (
        "FP32 sgemm" in rows["sdpa-math"]["notes"] and "mask rebuilt per call" in rows["sdpa-math"]["notes"]
    )
    assert "hidden memcpy" in rows["eager"]["notes"] and "hidden memcpy" not in rows["eager-inplace"]["notes"]
    assert "CPU time above GPU time" in rows["sdpa-cudnn"]["notes"]
    assert "CPU time above GPU time" not in rows["sdpa-flash"]["notes"]
    assert any(n.startswith("Kineto 0 % occupancy") for n in rows["sdpa-cudnn"]["notes"])
    assert max(rows, key=lambda v: rows[v]["speedup"]) == "sdpa-flash"


# -- findings --------------------------------------------------------------------------------


def _findings(trace, result=None) -> dict[str, Any]:
    """The registered attention rules alone, as `tracekit attention` runs them, by rule id."""
    from tracekit.findings import run_findings
    from tracekit.findings.rules.attention import RULE_IDS

    ran = run_findings(trace, rules=list(RULE_IDS), seed={"attention": result or analyze_attention(trace)})
    assert not ran.errors
    return {f.rule: f for f in ran.findings}


def test_findings_per_variant(found) -> None:
    assert set(found["eager"]) == {"attention_eager_fusable", "attention_hidden_copy"}
    assert set(found["eager-inplace"]) == {"attention_eager_fusable"}
    assert set(found["sdpa-math"]) == {
        "attention_math_backend",
        "attention_fp32_gemm",
        "attention_mask_rebuilt",
    }
    assert set(found["sdpa-efficient"]) == set() and set(found["sdpa-flash"]) == set()
    assert set(found["sdpa-cudnn"]) == {"attention_cpu_overhead", "attention_occupancy_misleading"}


def test_finding_details(found) -> None:
    eager = found["eager"]
    assert "6 → 1" in eager["attention_eager_fusable"].title
    assert eager["attention_hidden_copy"].time_lost_ns == 3 * 200 * US
    assert eager["attention_eager_fusable"].time_lost_ns == 3 * (150 + 200 + 180 + 300) * US
    assert "5 → 1" in found["eager-inplace"]["attention_eager_fusable"].title
    math = found["sdpa-math"]
    assert "sdpa_kernel(SDPBackend.MATH)" in math["attention_math_backend"].advice
    assert "20 kernels" in math["attention_math_backend"].title
    assert math["attention_fp32_gemm"].title.startswith("FP32 upcast")
    assert math["attention_fp32_gemm"].time_lost_ns == 3 * (110 * 3 + 189) * US
    cudnn = found["sdpa-cudnn"]
    assert cudnn["attention_cpu_overhead"].time_lost_ns == 3 * 28 * US
    assert cudnn["attention_cpu_overhead"].severity == "low"  # host time: never above low
    assert [e.note.split(":")[0] for e in cudnn["attention_cpu_overhead"].evidence] == ["sdpa_cudnn"] * 3
    occupancy = cudnn["attention_occupancy_misleading"]
    assert occupancy.time_lost_ns == 0 and occupancy.severity == "info"
    assert occupancy.evidence and all("cudnn" in e.name.lower() for e in occupancy.evidence)


def test_rules_registered_with_the_findings_engine(variants_dir: Path) -> None:
    import tracekit
    from tracekit.findings import RULES, run_findings

    assert {"attention_eager_fusable", "attention_math_backend", "attention_cpu_overhead"} <= set(RULES)
    found = run_findings(tracekit.load(variants_dir / "sdpa-math.json.gz"))
    assert not found.errors
    math = next(f for f in found.findings if f.rule == "attention_math_backend")
    assert len(math.evidence) == 3 and all(e.eid is not None for e in math.evidence)
    assert math.evidence[0].note == "sdpa_math: 20 GPU events, 7.24 ms of GPU time"  # 7,239 µs
    clean = {c.rule for c in run_findings(tracekit.load(variants_dir / "sdpa-flash.json.gz")).clean}
    assert {"attention_eager_fusable", "attention_math_backend", "attention_cpu_overhead"} <= clean


def test_math_reasons_from_inputs(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[A100])
    em = Emitter(b)
    ops = math_ops()
    args = {
        **_sdpa_args(),
        "Input Dims": [SHAPE, SHAPE, SHAPE, [4, 1, 4096, 4096], [], [], [], []],
        "Input type": ["float", "float", "float", "float", "Scalar", "Scalar", "", "Scalar"],
        "Concrete Inputs": ["", "", "", "", "0.1", "False", "", "False"],
    }
    em.call([Op(ops[0].name, ops[0].children, args=args)], 1_000 * US)
    advice = _findings(b.load(tmp_path))["attention_math_backend"].advice
    assert "inputs are fp32" in advice and "attn_mask" in advice
    assert "dropout_p > 0" in advice and "pinned" not in advice


def test_backend_mismatch_warns(tmp_path: Path) -> None:
    import tracekit

    path = write_variant(tmp_path, "sdpa-math", calls=1, sdpa_backend="FLASH_ATTENTION")
    trace = tracekit.load(path)
    r = analyze_attention(trace)
    assert r.warnings and "sdpa_math" in r.warnings[0] and "FLASH_ATTENTION" in r.warnings[0]
    assert "attention_backend_mismatch" in _findings(trace, r)


# -- evidence other than ranges ------------------------------------------------------------------


def _load(b: TraceBuilder, tmp_path: Path):
    return analyze_attention(b.load(tmp_path))


def test_module_evidence_and_layers(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[A100])
    em = Emitter(b)
    t = 1_000 * US
    for layer in range(3):
        ops = [
            Op("aten::linear", kernels=(K(GEMM_BF16, 50 * US),)),
            *fused_ops(
                "aten::_scaled_dot_product_flash_attention",
                "aten::_flash_attention_forward",
                K(FLASH, 100 * US),
                60 * US,
            ),
            Op("aten::linear", kernels=(K(GEMM_BF16, 40 * US),)),
        ]
        start = t
        t = em.call(ops, t, annotation=None)
        b.op(f"nn.Module: LlamaAttention_{layer}", start - US, t - start - 40 * US, cat="python_function")
    r = _load(b, tmp_path)
    assert r.calls["evidence"].to_list() == ["module"] * 3 and r.calls["layer"].to_list() == [0, 1, 2]
    assert r.calls["gpu_events"].to_list() == [1] * 3 and r.calls["range_gpu_events"].to_list() == [3] * 3
    assert r.layers == 3 and r.calls_per_layer == 1.0
    assert r.gpu_share == pytest.approx(100 / 190) and r.range_gpu_share == pytest.approx(1.0)


def test_eager_pattern_without_ranges_and_mlp_negative(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[A100])
    em = Emitter(b)
    t = em.call(eager_ops(), 1_000 * US, annotation=None)
    mlp = [
        Op("aten::linear", (Op("aten::matmul", (Op("aten::mm", kernels=(K(GEMM_BF16, 30 * US),)),)),)),
        Op("aten::silu", kernels=(K(MUL, 5 * US),)),
        Op("aten::mul", kernels=(K(MUL, 5 * US),)),
        Op("aten::softmax", kernels=(K(SOFTMAX_BF16, 5 * US),)),
        Op("aten::linear", (Op("aten::matmul", (Op("aten::mm", kernels=(K(GEMM_BF16, 30 * US),)),)),)),
    ]
    em.call(mlp, t, annotation=None)
    r = _load(b, tmp_path)
    assert r.call_count == 1 and r.calls["evidence"][0] == "eager_pattern" and r.calls["gpu_events"][0] == 6


def test_decode_phases_and_launch_bound(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[A100])
    em = Emitter(b)
    t = 1_000 * US

    def step(name: str, q_len: int, kernel_ns: int, cpu_ns: int) -> None:
        nonlocal t
        start = t
        for layer in range(2):
            args = {
                **_sdpa_args(),
                "Input Dims": [[1, 32, q_len, 64], [1, 32, 128, 64], [1, 32, 128, 64], [], [], [], [], []],
            }
            ops = fused_ops(
                "aten::_scaled_dot_product_flash_attention",
                "aten::_flash_attention_forward",
                K(FLASH, kernel_ns),
                cpu_ns,
            )
            t = em.call(
                [Op(ops[0].name, ops[0].children, args=args, dur_ns=cpu_ns)],
                t,
                annotation=f"attention#{layer}",
            )
        b.annotation(name, start - 2 * US, t - start)

    step("prefill", 128, 300 * US, 60 * US)
    for i in range(3):
        step(f"decode#{i}", 1, 8 * US, 60 * US)
    trace = b.load(tmp_path)
    r = analyze_attention(trace)
    phases = {row["phase"]: row for row in r.by_phase.iter_rows(named=True)}
    assert (
        phases["decode"]["calls"] == 6 and phases["decode"]["steps"] == 3 and phases["prefill"]["calls"] == 2
    )
    assert set(r.calls["phase_source"]) == {"range"} and r.calls_per_layer == 4.0
    found = _findings(trace, r)
    f = found["attention_decode_launch_bound"]
    assert f.time_lost_ns == 6 * (60 - 8) * US and "CUDA graph" in f.advice
    assert "attention_cpu_overhead" not in found  # prefill: 60 µs CPU under 300 µs GPU


@pytest.mark.parametrize(
    ("ops", "backend", "evidence"),
    [
        (
            [Op("flash_attn::_flash_attn_forward", kernels=(K(FA_PACKAGE, 90 * US),))],
            "flash_attn",
            "external_op",
        ),
        (
            [Op("aiter::mha_fwd", kernels=(K("aiter::fmha_fwd_hd128_bf16_causal", 90 * US),))],
            "aiter",
            "external_op",
        ),
        ([Op("flex_attention", kernels=(K("triton_tem_fused_0", 90 * US),))], "flex", "flex_op"),
    ],
)
def test_library_backends(tmp_path: Path, ops: list[Op], backend: str, evidence: str) -> None:
    b = TraceBuilder(devices=[A100])
    Emitter(b).call(ops, 1_000 * US, annotation=None)
    r = _load(b, tmp_path)
    assert r.calls["backend"].to_list() == [backend] and r.calls["evidence"].to_list() == [evidence]


def _module_call(core: Op, module: str = "nn.Module: Attention_0") -> TraceBuilder:
    """`module` around qkv_proj (linear -> addmm GEMM, 50 us), `core` and o_proj (linear ->
    addmm GEMM, 40 us): the shape of a vLLM attention layer or a model's own attention."""
    b = TraceBuilder(devices=[A100])
    em = Emitter(b)
    proj = lambda us: Op("aten::linear", (Op("aten::addmm", kernels=(K(GEMM_BF16, us * US),)),))  # noqa: E731
    start = 1_000 * US
    end = em.call([proj(50), core, proj(40)], start, annotation=None)
    b.op(module, start - US, end - start - 40 * US, cat="python_function")
    return b


THD = [4096, 32, 128]  # (tokens, heads, head dim): a packed variable-length batch
BSHD = [2, 2048, 32, 128]


@pytest.mark.parametrize(
    ("core", "module", "backend", "shape"),
    [
        (Op("vllm::unified_attention_with_output", kernels=(K(FA_PACKAGE, 90 * US),),
            args=_dims(THD, THD, THD)),
         "nn.Module: Attention_0", "flash_attn", (None, 32, None, 128)),
        (Op("FlashAttnFunc", kernels=(K(FA_PACKAGE, 90 * US),), args=_dims(BSHD, BSHD, BSHD)),
         "nn.Module: LlamaAttention_0", "flash_attn", (2, 32, 2048, 128)),
    ],
)
def test_serving_and_autograd_attention_ops_are_the_core(
    tmp_path: Path, core: Op, module: str, backend: str, shape: tuple
) -> None:
    """One call; its attention work is the core op's one flash kernel (90 us), never the
    module's two projection GEMMs (50 + 40 us), which stay in the whole-call figures."""
    trace = _module_call(core, module).load(tmp_path)
    r = analyze_attention(trace)
    assert r.call_count == 1
    call = r.calls.row(0, named=True)
    assert (call["kernels"], call["attention_kernels"], call["gemm_kernels"]) == (1, 1, 0)
    assert call["gpu_ns"] == 90 * US and r.attention_gpu_ns == 90 * US
    assert call["core_kind"] == "external" and call["root_op"] == core.name and call["backend"] == backend
    assert (call["range_gpu_events"], call["range_gpu_ns"]) == (3, 180 * US)
    assert (call["batch"], call["heads"], call["q_len"], call["head_dim"]) == shape
    assert r.warnings == ()
    inside = r.events.filter(pl.col("in_scope"))
    assert inside["kernel_class"].to_list() == ["attention"]
    assert "Attention kernels: 90 µs" in "\n".join(attention_section(r)["paragraphs"])


def test_call_without_a_core_keeps_only_its_attention_kernels(tmp_path: Path) -> None:
    """A module whose attention op is unknown to tracekit: its scope is the module, but only
    the attention-class kernel (the flash kernel) is attention work; the GEMMs are not."""
    trace = _module_call(Op("mylib::fused_thing", kernels=(K(FA_PACKAGE, 90 * US),))).load(tmp_path)
    r = analyze_attention(trace)
    call = r.calls.row(0, named=True)
    assert call["core_kind"] == "none" and call["evidence"] == "module"
    assert (call["kernels"], call["attention_kernels"], call["gemm_kernels"]) == (1, 1, 0)
    assert call["gpu_ns"] == 90 * US
    assert call["range_gpu_ns"] == 180 * US


def test_projection_leak_check_finds_a_gemm_counted_as_attention(tmp_path: Path) -> None:
    """The invariant check itself: an in-scope GEMM under a linear outside any core is found."""
    from tracekit.analysis.attention import calls as ac
    from tracekit.analysis.links import cpu_ops

    trace = _module_call(Op("mylib::fused_thing", kernels=(K(FA_PACKAGE, 90 * US),))).load(tmp_path)
    r = analyze_attention(trace)
    assert ac.projection_leaks(r.events, cpu_ops(trace), r.calls).is_empty()
    forced = r.events.with_columns(in_scope=pl.lit(True))  # the old module-wide scope
    leaks = ac.projection_leaks(forced, cpu_ops(trace), r.calls)
    assert leaks["projection_op"].to_list() == ["aten::linear", "aten::linear"] and leaks.height == 2


def test_vendor_kernels_named_from_kernels(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[A100])
    em = Emitter(b)
    t = em.call([Op("aten::empty", kernels=(K(CK_FMHA, 90 * US),))], 1_000 * US, annotation="attention#0")
    em.call(
        [Op("aten::_scaled_dot_product_flash_attention", kernels=(K(CK_FMHA, 90 * US),))],
        t,
        annotation="attention#1",
    )
    r = _load(b, tmp_path)
    assert r.calls["backend"].to_list() == ["ck", "sdpa_flash"]
    assert r.calls["kernel_backend"].to_list() == ["ck", "ck"]
    assert r.calls["backend_source"].to_list() == ["kernels", "ops+kernels"]


def test_empty_trace_gives_typed_empty_result(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[A100])
    b.op("aten::add", 0, 10 * US)
    trace = b.load(tmp_path)
    r = analyze_attention(trace)
    assert r.call_count == 0 and r.backend is None and _findings(trace, r) == {}
    assert attention_section(r)["paragraphs"][0].startswith("No attention call")
    assert r.to_dict()["calls"] == 0


def test_no_call_with_gpu_work_keeps_every_frame_typed_and_the_orphans(tmp_path: Path, results) -> None:
    """Without a call the per-call steps run on no rows: the frames keep the schemas a trace
    with calls gives, and attention kernels outside any call still count as orphans."""
    b = TraceBuilder(devices=[A100])
    em = Emitter(b)
    mlp = [
        Op("aten::linear", (Op("aten::matmul", (Op("aten::mm", kernels=(K(GEMM_BF16, 30 * US),)),)),)),
        Op("aten::silu", kernels=(K(MUL, 5 * US),)),
        Op("aten::add", kernels=(K(FLASH, 7 * US),)),  # an attention kernel under no attention op
    ]
    em.call(mlp, 1_000 * US, annotation=None)
    r = _load(b, tmp_path)
    assert r.call_count == 0 and r.calls.is_empty() and r.events.is_empty()
    assert (r.orphan_kernels, r.orphan_ns, r.attention_kernel_ns) == (1, 7 * US, 7 * US)
    assert r.gpu_total_ns == 42 * US and r.attention_gpu_ns == 0
    full = results["sdpa-flash"]
    assert r.calls.schema == full.calls.schema and r.events.schema == full.events.schema
    assert r.by_layer.schema == full.by_layer.schema and r.by_phase.schema == full.by_phase.schema


def test_section_is_plain_strings(results, found) -> None:
    section = attention_section(results["sdpa-math"], list(found["sdpa-math"].values()))
    assert section["title"] == "Attention" and section["tables"]
    for t in section["tables"]:
        assert all(isinstance(c, str) for row in t["rows"] for c in row)
        assert all(len(row) == len(t["headers"]) for row in t["rows"])
    json.dumps(section)
    assert any(f["id"] == "attention_math_backend" for f in section["findings"])


# -- CLI -----------------------------------------------------------------------------------------


def test_cli_compares_an_index(variants_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["attention", str(variants_dir / "index.json")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:3] == ["variant", "backend", "calls"]
    math = next(line for line in lines if line.startswith("sdpa-math"))
    assert " 20 " in math and "0.27×" in math and "FP32 sgemm" in math


def test_cli_json_and_file_list(variants_dir: Path) -> None:
    paths = [str(variants_dir / f"{v}.json.gz") for v in ("sdpa-flash", "sdpa-cudnn")]
    result = CliRunner().invoke(cli, ["attention", "--json", *paths])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["variant"] for r in data["rows"]] == ["sdpa-flash", "sdpa-cudnn"]
    assert data["rows"][1]["speedup"] == pytest.approx(146_800 / 186_000)
    assert {f["rule"] for f in data["findings"]["sdpa-cudnn"]} >= {"attention_cpu_overhead"}


def test_cli_findings_are_the_registered_rules(variants_dir: Path) -> None:
    """One findings mechanism: `tracekit attention --json` lists what `tracekit findings`
    finds for the attention rules, severity and time lost included."""
    import tracekit
    from tracekit.findings import run_findings

    path = variants_dir / "sdpa-math.json.gz"
    result = CliRunner().invoke(cli, ["attention", "--json", str(path), "--no-cache"])
    assert result.exit_code == 0, result.output
    shown = [(f["rule"], f["severity"], f["time_lost_ns"]) for f in json.loads(result.output)["findings"]]
    every = run_findings(tracekit.load(path)).findings
    assert shown == [(f.rule, f.severity, f.time_lost_ns) for f in every if f.rule.startswith("attention_")
                     and f.rule != "attention_below_backend"]
    assert {r for r, _, _ in shown} == {"attention_math_backend", "attention_fp32_gemm", "attention_mask_rebuilt"}


def test_cli_single_trace(variants_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["attention", str(variants_dir / "eager.json.gz")])
    assert result.exit_code == 0, result.output
    assert "Backend that ran: eager (3)" in result.output and "Findings" in result.output


def test_cli_cache_and_size_options(variants_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    from tracekit.cli.main import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    paths = [str(variants_dir / f"{v}.json.gz") for v in ("sdpa-flash", "sdpa-cudnn")]
    assert CliRunner().invoke(cli, ["attention", "--no-cache", *paths]).exit_code == 0
    assert not (tmp_path / "xdg").exists()
    assert CliRunner().invoke(cli, ["attention", "--cache", *paths]).exit_code == 0
    assert len([p for p in (tmp_path / "xdg" / "tracekit").iterdir() if p.name != "templates"]) == 2
    capsys.readouterr()
    assert main(["attention", "--no-cache", "--max-bytes", "1K", *paths]) == 2
    assert "more than 1,024 bytes (limit)" in capsys.readouterr().err


def test_variant_label_falls_back_to_file_name(tmp_path: Path) -> None:
    b = TraceBuilder(devices=[A100])
    b.op("aten::add", 0, 10 * US)
    trace = b.load(tmp_path, "my-run.pt.trace.json.gz")
    assert variant_label(trace) == "my-run"


# -- real traces -----------------------------------------------------------------------------------


@pytest.mark.real
def test_real_h100_qwen_flash() -> None:
    import tracekit

    trace = tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz"))
    r = analyze_attention(trace)
    assert r.call_count == 24 and r.layers == 24 and r.calls_per_layer == 1.0
    assert r.backend == "sdpa_flash" and set(r.calls["evidence"]) == {"module"}
    assert set(r.calls["kernel_backend"]) == {"flash"} and r.calls["gpu_events"].to_list() == [1] * 24
    assert r.calls["dtype"].unique().to_list() == ["bf16"] and r.calls["q_len"].unique().to_list() == [559]
    assert 0.04 < r.gpu_share < 0.08  # 2.72 ms of 45.6 ms summed GPU work
    assert r.orphan_kernels == 10  # flash kernels launched before the profiled step
    from tracekit.analysis.attention import critical_path_share
    from tracekit.analysis.critical_path import critical_path

    path = critical_path(trace)
    on_path = critical_path_share(r, path)
    assert 0.02 < on_path["share"] < 0.1 and on_path["gpu_ns"] > on_path["host_ns"] > 0
    assert on_path == _path_share_by_text(r, path)
    assert attention_section(r, path_share=on_path)["paragraphs"][-1].startswith("On the critical path: ")


# -- CPU captures (torch) --------------------------------------------------------------------------


@pytest.mark.slow
def test_cpu_capture_eager_vs_sdpa(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tracekit.capture.cli import capture_command

    out = CliRunner().invoke(
        capture_command,
        [
            "--out-dir",
            str(tmp_path),
            "--variants",
            "eager,sdpa",
            "--device",
            "cpu",
            "--prompt-len",
            "16",
            "--new-tokens",
            "3",
            "--warmup",
            "0",
            "--repeats",
            "1",
        ],
    )
    assert out.exit_code == 0, out.output
    result = CliRunner().invoke(cli, ["attention", "--json", str(tmp_path / "index.json")])
    assert result.exit_code == 0, result.output
    rows = {r["variant"]: r for r in json.loads(result.output)["rows"]}
    assert rows["eager"]["backend"] == "eager"
    assert rows["sdpa"]["backend"] in ("sdpa_cpu_flash", "sdpa_math")
    assert rows["eager"]["calls"] == rows["sdpa"]["calls"] == 6  # 2 layers x (prefill + 2 decode steps)
    text = CliRunner().invoke(cli, ["attention", str(tmp_path / "index.json")])
    assert text.exit_code == 0 and "CPU time against eager" in text.output
    import tracekit

    r = analyze_attention(tracekit.load(tmp_path / "tiny-llama-sdpa.json.gz"))
    assert set(r.calls["phase"]) == {"prefill", "decode"} and r.calls_per_layer == 3.0
    assert pl.Series(r.calls["evidence"]).unique().to_list() == ["range"]


def _path_share_by_text(result, path) -> dict[str, Any]:
    """`critical_path_share` read row by row from the path's lanes as text: the reference of
    the distinct-lane lookups."""
    from tracekit.analysis.attention.find import assign

    segs = path.segments.with_columns(pl.col("lane").cast(pl.String))
    scope = {e for e, inside in zip(result.events["eid"], result.events["in_scope"]) if inside}
    gpu_ns = sum(d for lane, e, d in segs.select("lane", "eid", "dur_ns").iter_rows()
                 if lane and lane.startswith("gpu:") and e in scope)
    rows = [(s, d, *lane.split(":", 2)[1:]) for s, d, lane in segs.select("start_ns", "dur_ns", "lane").iter_rows()
            if lane and lane.startswith("cpu:")]
    host = pl.DataFrame(rows, schema={"start_ns": pl.Int64, "dur_ns": pl.Int64, "pid": TEXT, "tid": TEXT},
                        orient="row")  # (the trace's dtype of pid and tid)
    host = assign(host, result.calls, at="start_ns", span_start="scope_ts_ns", span_end="scope_end_ns")
    host_ns = int(host.filter(pl.col("call_id").is_not_null())["dur_ns"].sum() or 0)
    window = int(path.window_ns)
    return {"window_ns": window, "attention_ns": gpu_ns + host_ns, "gpu_ns": gpu_ns, "host_ns": host_ns,
            "share": (gpu_ns + host_ns) / window if window else None}


def _op_regions_row_by_row(ops: pl.DataFrame, trace: Any) -> pl.DataFrame:
    """`attention.find.op_regions` with its patterns run on every row: the reference of the
    distinct-name lookup."""
    from tracekit.analysis.attention import find as af

    rows = ops.with_columns(_kind=af.core_kind(pl.col("name"))).filter(pl.col("_kind").is_not_null())
    flex_py = trace.ops.filter((pl.col("cat") == "python_function") & pl.col("name").str.contains(af.FLEX_PY_RE))
    parts = [af._regions(rows, pl.col("_kind"))] + ([af._regions(flex_py, "flex")] if flex_py.height else [])
    return pl.concat(parts)


def test_op_regions_look_names_up_as_every_row_would(tmp_path: Path) -> None:
    from tracekit.analysis.attention.find import op_regions
    from tracekit.analysis.links import cpu_ops

    b = TraceBuilder(devices=[A100])
    names = ["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention", "aten::add",
             "aten::_scaled_dot_product_flash_attention_backward", "flash_attn::_flash_attn_forward",
             "flex_attention", "FlexAttentionBackward", "xformers::efficient_attention_forward_cutlass",
             "aten::mm", "aten::scaled_dot_product_attention"]
    for i, name in enumerate(names * 3):
        b.op(name, i * 100 * US, 50 * US, tid=1 + i % 2)
    b.op("flex_attention.py(120): flex_attention", 5_000 * US, 10 * US, cat="python_function")
    trace = b.load(tmp_path)
    ops = cpu_ops(trace)
    found = op_regions(ops, trace)
    assert found.equals(_op_regions_row_by_row(ops, trace))
    assert found["kind"].value_counts(sort=True).rows() == [("sdpa", 9), ("external", 6), ("flex", 4)]


@pytest.mark.real
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: p.name)
def test_real_op_regions_look_names_up_as_every_row_would(path: Path) -> None:
    from test_graph import load_cached

    from tracekit.analysis.attention.find import op_regions
    from tracekit.analysis.links import cpu_ops

    trace = load_cached(path)
    ops = cpu_ops(trace)
    assert op_regions(ops, trace).equals(_op_regions_row_by_row(ops, trace))


@pytest.mark.real
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: p.name)
def test_real_attention_work_is_attention_kernels_or_a_core(path: Path) -> None:
    """On every shared trace: a call's attention work (its in-scope GPU events) is its core's
    (SDPA, library, serving, autograd op or the eager pattern) or, without a core, only
    kernels of class attention; and no GEMM of a linear/addmm/mm outside a core is in it."""
    from test_graph import load_cached

    from tracekit.analysis.attention import calls as ac
    from tracekit.analysis.links import cpu_ops

    trace = load_cached(path)
    r = analyze_attention(trace)
    inside = r.events.filter(pl.col("in_scope")).join(r.calls.select("call_id", "core_kind"), on="call_id")
    assert (inside.filter(pl.col("core_kind") == "none")["kernel_class"] == "attention").all()
    assert (r.calls["attention_kernels"] <= r.calls["kernels"]).all()
    assert ac.projection_leaks(r.events, cpu_ops(trace), r.calls).is_empty() and r.warnings == ()


@pytest.mark.real
def test_real_sglang_core_is_the_aiter_op() -> None:
    """SGLang on MI300X: 36 Qwen3Attention modules, each with qkv/o projections (hipBLASLt
    GEMMs), RMSNorm, rotary and the KV-cache store; the attention work is the CK prefill
    kernel under `aiter::mha_batch_prefill`: 36 kernels, 20,075.158 us (recounted from
    the raw JSON), q (15360 tokens, 32 heads, 128), k/v 8 heads."""
    import tracekit

    r = analyze_attention(tracekit.load(real_trace("mi300x_sglang_qwen3_8b_prefill_decode.json.gz")))
    assert r.call_count == 36 and set(r.calls["root_op"]) == {"aiter::mha_batch_prefill"}
    assert r.calls["kernels"].to_list() == [1] * 36 and r.calls["gemm_kernels"].sum() == 0
    assert r.attention_gpu_ns == 20_075_158
    assert set(r.calls["heads"]) == {32} and set(r.calls["kv_heads"]) == {8}
    assert r.calls["q_len"].null_count() == 36
    assert set(r.calls["phase"]) == {"prefill"} and set(r.calls["phase_source"]) == {"op name"}
