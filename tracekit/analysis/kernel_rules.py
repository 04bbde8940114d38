"""The kernel taxonomy's tables: the classes, libraries and precisions it knows, and the
ordered rules that read them from a kernel's name (`taxonomy` evaluates them).

Each rule is a Rust regex (the syntax Polars uses); for an attribute the first rule that
matches wins. `docs/kernel-taxonomy.md` explains every token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KERNEL_CLASSES: tuple[str, ...] = (
    "gemm", "conv", "attention", "softmax", "normalization", "elementwise", "reduction",
    "pooling", "embedding", "indexing", "copy", "sort_scan", "communication", "memcpy",
    "memset", "triton", "other",
)
LIBRARIES: tuple[str, ...] = (
    "runtime", "rocclr", "nccl", "rccl", "deep_ep", "flash_attn", "triton", "cudnn", "cublas",
    "cutlass", "trtllm_gen", "tensile", "ck", "cub", "fbgemm", "apex", "pytorch_aten", "unknown",
)
PRECISIONS: tuple[str, ...] = ("fp4", "fp8", "int8", "bf16", "fp16", "tf32", "fp32", "fp64")
ATTENTION_BACKENDS: tuple[str, ...] = ("flash", "flash3", "efficient", "cudnn", "flex", "ck")
# Classes whose kernels never run on tensor cores: their `tensor_cores` is False.
NO_MMA_CLASSES: tuple[str, ...] = (
    "elementwise", "reduction", "pooling", "softmax", "normalization", "embedding", "indexing",
    "copy", "sort_scan", "communication", "memcpy", "memset",
)
TILED_CLASSES: tuple[str, ...] = ("gemm", "conv", "attention")


@dataclass(frozen=True)
class Rule:
    """`value` applies when `pattern` (Rust regex syntax, as Polars uses) matches the name."""

    value: Any
    pattern: str
    notes: str = ""


@dataclass(frozen=True)
class Extract:
    """Capture group 1 of `pattern`, rewritten by `sub` (regex, replacement), prefixed."""

    pattern: str
    prefix: str = ""
    sub: tuple[str, str] | None = None
    notes: str = ""


_TRITON = r"^(?:void )?triton_"
# cuBLAS's Hopper/Blackwell GEMMs: `nvjet_[sm100_]<types>_<tile>_..._<ops>`; the type letters
# (q = fp8, t = bf16, h = fp16, s = fp32) are operands, compute, output
_NVJET = r"^(?:void )?nvjet_(?:sm\d+_)?"
# trtllm-gen batched GEMMs (TensorRT-LLM, FlashInfer): `bmm_<out>_<a><b>_<acc>_t<MxNxK>...`
_TRTLLM_BMM = r"^bmm_[A-Z][A-Za-z0-9]*_[A-Z][A-Za-z0-9]*_[A-Z][A-Za-z0-9]*_t\d+x\d+x\d+"
_BMM_OPERANDS = r"^bmm_[A-Za-z0-9]+_"
# DeepEP's expert-parallel collectives (`deep_ep::` on GitHub, `dpsk::ep::` in DeepSeek's own
# traces); its `get_dispatch_layout` only counts tokens, and `cdpsk::ep::` is CUB
_DEEP_EP = r"(?:^|[^a-z])(?:deep_ep|dpsk::ep)::(?:[a-z_]+::)*"

CLASS_RULES: tuple[Rule, ...] = (
    Rule("memcpy", r"(?i)^memcpy", "Kineto gpu_memcpy activity names"),
    Rule("memset", r"(?i)^memset|__amd_rocclr_fill", "gpu_memset activities; ROCm fill kernels"),
    Rule("communication",
         r"(?i)nccl|rccl|msccl|nvshmem|cross_device_reduce|custom_?all_?reduce|(?:one|two)_?shot_?all_?reduce"
         r"|(?:^|[^a-z])all_?(?:reduce|gather|to_?all)_|(?:^|[^a-z])reduce_?scatter"
         r"|" + _DEEP_EP + r"(?:dispatch|combine|notify|cached_notify|barrier|clean_)",
         "collectives: NCCL/RCCL, NVSHMEM, DeepEP dispatch/combine, custom and symmetric-memory "
         "all-reduce; a `hip` prefix alone is NOT communication"),
    Rule("attention",
         r"(?i)flash_fwd|flash_bwd|flash::|pytorch_flash|flashattn|flash_attn|fmha|mem_eff"
         r"|efficient_attention|attentionkernel|attentionbackwardkernel|sdpa|attention|flex_decoding"
         r"|(?:^|_)attn_(?:fwd|bwd)|mha_(?:fwd|bwd)",
         "fused attention kernels (FA2/FA3, mem-efficient, cuDNN SDPA, flex, CK)"),
    Rule("conv", _TRITON + r"tem_\w*conv", "Inductor conv template"),
    Rule("gemm", _TRITON + r"tem_\w*mm", "Inductor mm/addmm/bmm template"),
    Rule("softmax", _TRITON + r"\w*softmax", "Inductor fused softmax"),
    Rule("normalization", _TRITON + r"\w*(?:layer_norm|rms_norm|group_norm|batch_norm)",
         "Inductor fused norm"),
    Rule("elementwise", _TRITON + r"(?:poi|for)_", "Inductor pointwise / foreach kernel"),
    Rule("reduction", _TRITON + r"(?:red|per)_", "Inductor (persistent) reduction"),
    Rule("triton", _TRITON, "Triton kernel whose name does not say what it does"),
    Rule("softmax", r"(?i)softmax", "softmax_warp_*, cunn_SoftMax*; not fused into attention"),
    Rule("normalization",
         r"(?i)layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|rowwisemoments"
         r"|gammabeta|cudnn::bn_|bn_fw_|bn_bw_|(?:^|[^a-z])ln_(?:fwd|bwd)|cuapply(?:layer|rms)norm"
         r"|cucomputegradinput|cucomputepartgradgammabeta",
         "aten/apex/TE layer & RMS norm, cuDNN batch norm"),
    Rule("conv",
         r"(?i)convolution|convolve|conv[123]d|_conv_|depthwise|fprop|dgrad|wgrad|scudnn"
         r"|cudnn::cnn::|cutlass_cudnn|winograd|fft2d_|im2col|col2im|cask_cudnn|implicit_?gemm",
         "cuDNN engines, implicit-GEMM conv, Winograd, FFT conv and their helpers"),
    Rule("gemm", r"(?i)gemm|gemv|^cijk_|cublas|matmul|epilogue::impl|magma_|" + _NVJET + "|" + _TRTLLM_BMM,
         "BLAS kernels, cuBLAS `nvjet_`, trtllm-gen `bmm_`, cuBLAS/cuBLASLt helpers (split-K reduce, epilogue)"),
    Rule("embedding",
         r"(?i)embedding|indexselect|bounds_check_indices|linearize_index",
         "nn.Embedding (index_select), FBGEMM TBE"),
    Rule("indexing",
         r"(?i)index_(?:elementwise|select|put|copy|add|fill|kernel)|indexing_|indexfunc"
         r"|scatter|gather|masked_select|masked_scatter|(?:^|[^a-z])(?:take|put)_kernel",
         "gather/scatter/index/index_put"),
    Rule("copy",
         r"(?i)copy|catarray|nchwtonhwc|nhwctonchw|transpose|permute|to_dense|flip_kernel|roll_cuda",
         "data movement: direct_copy (casts, .contiguous()), cat, layout transforms"),
    Rule("sort_scan",
         r"(?i)sort|scan|topk|top_k|searchsorted|bucketize|unique|histogram|cumsum|cumprod"
         r"|radix|deviceselect|devicecompact|reducebykey|devicepartition|bitonic",
         "CUB/rocPRIM sort, scan, select; top-k"),
    Rule("pooling", r"(?i)(?:max|avg|average|adaptive|lp)_?pool|pool(?:ing)?_?[123]d",
         "max/avg/adaptive pooling"),
    Rule("reduction",
         r"(?i)reduce|reduction|classnllcriterion|nll_loss|cross_entropy|argmax|argmin|welford"
         r"|qparam|(?:^|[^a-z])(?:sum|mean|amax|amin|norm)_kernel",
         "reduce_kernel, cub DeviceReduce, losses"),
    Rule("elementwise",
         r"(?i)elementwise|fillfunctor|fill_kernel|multi_tensor_apply|foreach|dropout|distribution"
         r"|bernoulli|random|adam|adagrad|sgd|scalepackedtensor|quantize|_to_float|hfp8"
         r"|relu|gelu|silu|sigmoid|tanh|clamp|where_kernel|masked_fill|arange|range_(?:cuda_)?kernel"
         r"|swiglu|rotary|(?:^|[^a-z])(?:per_token_)?cast_(?:to|back)",
         "TensorIterator kernels, fills, optimizers, activations, RoPE, casts, (de)quantization"),
)

LIBRARY_RULES: tuple[Rule, ...] = (
    Rule("runtime", r"(?i)^mem(?:cpy|set)", "runtime copies/sets (not kernels)"),
    Rule("rocclr", r"__amd_rocclr", "ROCm runtime blit kernels"),
    Rule("rccl", r"(?i)rccl", "ROCm RCCL (it also names kernels ncclDevKernel_*)"),
    Rule("nccl", r"(?i)nccl|msccl", "NCCL collectives"),
    Rule("deep_ep", _DEEP_EP, "DeepEP expert-parallel dispatch/combine and their layout kernels"),
    Rule("flash_attn", r"(?i)pytorch_flash|flash::|flash_fwd|flash_bwd|flashattn|flash_attn",
         "FlashAttention 2/3 (package or PyTorch's vendored copy)"),
    Rule("triton", _TRITON + r"|(?i:flex_attention|flex_decoding)", "Triton (Inductor, flex)"),
    Rule("cudnn",
         r"(?i)cudnn|cask_|scudnn|implicit_convolve_sgemm|explicit_convolve_sgemm|wgrad_alg"
         r"|dgrad_engine|dgrad2d|fft2d_|winograd",
         "cuDNN and its internal CUTLASS/xmma/cask kernels"),
    Rule("cublas",
         r"(?i)cublas|^(?:void )?(?:maxwell|pascal|volta|turing|ampere|hopper|blackwell|sm\d+)_\w*gemm"
         r"|gemv|gemmsn|gemmk1|splitkreduce|epilogue::impl|magma_sgemm|sgemm_largek|gcgemm|" + _NVJET,
         "cuBLAS/cuBLASLt (names ending `_cublas`, arch-prefixed gemm, `nvjet_`, gemv, helpers)"),
    Rule("cutlass", r"(?i)cutlass", "CUTLASS instances (cuBLAS ships some; mem-efficient attention)"),
    Rule("trtllm_gen", _TRTLLM_BMM, "trtllm-gen batched GEMMs (TensorRT-LLM / FlashInfer MoE)"),
    Rule("tensile", r"^Cijk_", "Tensile GEMM (rocBLAS / hipBLASLt)"),
    Rule("ck", r"(?i)ck::|ck_tile::|kernel_batched_gemm|device_gemm_xdl|gridwise_gemm",
         "AMD Composable Kernel"),
    Rule("cub", r"(?i)cub::|rocprim::", "CUB / hipCUB / rocPRIM"),
    Rule("fbgemm",
         r"(?i)fbgemm|split_embedding|dense_embedding|bounds_check_indices|linearize_index"
         r"|permute_pooled_embs|recat_copy", "FBGEMM GPU (TBE, sparse ops)"),
    Rule("apex", r"^(?:void )?multi_tensor_apply_kernel<TensorListMetadata|cuApply|cuComputeGrad"
         r"|cuComputePartGrad", "NVIDIA Apex fused optimizers / norms"),
    Rule("pytorch_aten",
         r"at::|c10::|cunn_|\(anonymous namespace\)::(?:softmax_warp|elementwise_kernel_with_index"
         r"|indexing_backward)", "PyTorch ATen native kernels"),
)

_TENSILE_TYPE = r"^Cijk_[A-Za-z]+_[A-Za-z]+_"
PRECISION_RULES: tuple[Rule, ...] = (
    Rule("fp8", _TENSILE_TYPE + r"(?:F8|B8)", "Tensile data type code"),
    Rule("int8", _TENSILE_TYPE + r"(?:I8|4xi8)", "Tensile data type code"),
    Rule("fp16", _TENSILE_TYPE + r"H", "Tensile: HB, HHS, ..."),
    Rule("bf16", _TENSILE_TYPE + r"B", "Tensile: BBS, ..."),
    Rule("tf32", _TENSILE_TYPE + r"X", "Tensile: XS"),
    Rule("fp32", _TENSILE_TYPE + r"S", "Tensile: SB (S = single, B = beta)"),
    Rule("fp64", _TENSILE_TYPE + r"D", "Tensile: DB"),
    Rule("fp8", _NVJET + "qq", "nvjet: fp8 operands"),
    Rule("fp16", _NVJET + "h", "nvjet: fp16 operands (hsh, hss)"),
    Rule("bf16", _NVJET + "t", "nvjet: bf16 operands (tst)"),
    Rule("tf32", _NVJET + r"s\w*tf32", "nvjet: fp32 data on TF32 MMA"),
    Rule("fp32", _NVJET + "s", "nvjet: fp32"),
    Rule("fp4", _BMM_OPERANDS + r"(?:Mx)?E2m1", "trtllm-gen: the operands' type, after the output's"),
    Rule("fp8", _BMM_OPERANDS + r"(?:Mx)?E[45]m[23]", "trtllm-gen"),
    Rule("bf16", _BMM_OPERANDS + "Bfloat16", "trtllm-gen"),
    Rule("fp16", _BMM_OPERANDS + "Fp16", "trtllm-gen"),
    Rule("fp8", r"(?i)fp8|float8|e4m3|e5m2|f8f8|_f8_", ""),
    Rule("fp4", r"(?i)e2m1|nvfp4|mxfp4", "FP4 (NVFP4, MXFP4)"),
    Rule("int8", r"(?i)int8|i8i8|i8816|i16832|imma|igemm|_s8_|s8s8|u8u8", ""),
    Rule("bf16", r"(?i)bf16|bfloat16", ""),
    Rule("fp16", r"(?i)fp16|f16|half|h884|h1688|h16816|hgemm", "`bf16` already matched above"),
    Rule("tf32", r"(?i)tf32|xf32|_80_tensorop_s1688|tensorop_s1688(?:gemm|fprop|dgrad|wgrad)",
         "s1688 on A100 tensor ops with fp32 data = TF32 MMA"),
    Rule("fp64", r"(?i)dgemm|zgemm|fp64", ""),
    Rule("fp32", r"(?i)sgemm|scudnn|cgemm|fp32|f32|(?:\b|_)float\b",
         "fp32 data; `float` template argument"),
    Rule("fp64", r"(?i)(?:\b|_)double\b", "after fp32: double scalars ride along float kernels"),
)

TENSOR_CORE_RULES: tuple[Rule, ...] = (
    Rule(True, r"(?i)^cijk_.*_MI\d+x\d+x\d+", "Tensile MFMA instruction (matrix cores)"),
    Rule(False, r"(?i)^cijk_", "Tensile without MI = VALU"),
    Rule(False, r"(?i)ffma|hfma|simt", "FMA on CUDA cores"),
    Rule(True, _NVJET + r"(?:qq|t|h|s\w*tf32)|" + _TRTLLM_BMM,
         "nvjet and trtllm-gen GEMMs run on Hopper/Blackwell MMA (wgmma, tcgen05)"),
    Rule(True,
         r"(?i)tensorop|wmma|hmma|imma|xmma|gmma|warpgroup|mfma|xdl|tensor\d+x\d+x\d+|s16816|s161616"
         r"|h16816|h1688|s1688|h884|s884|i8816|i16832|_mma_",
         "MMA instruction families and shapes"),
    Rule(False,
         r"(?i)sgemm|dgemm|cgemm|gemv|gemmsn|gemmk1|scudnn|winograd|wgrad_alg|dgrad_engine"
         r"|convolve_sgemm|fft|splitkreduce|epilogue::impl|im2col|cublasdot|cublastranspose|magma_",
         "SIMT BLAS/conv kernels and GEMM helpers"),
)

ATTENTION_BACKEND_RULES: tuple[Rule, ...] = (
    Rule("flash3", r"(?i)flashattn\w*sm90|flash::.*sm90|flash3", "FlashAttention 3 (Hopper)"),
    Rule("cudnn", r"(?i)cudnn", "cuDNN SDPA (`cudnn_generated_fort_native_sdpa_*`)"),
    Rule("flex", r"(?i)flex", "FlexAttention (Triton template)"),
    Rule("efficient",
         r"(?i)fmha_cutlass|mem_?eff|efficient_attention|attentionkernel|attentionbackwardkernel",
         "memory-efficient attention (xformers CUTLASS fmha)"),
    Rule("ck", r"(?i)ck_tile|ck::", "Composable Kernel FMHA"),
    Rule("flash", r"(?i)flash", "FlashAttention 2 (pytorch_flash::, flash::)"),
)

TILE_EXTRACTS: tuple[Extract, ...] = (
    Extract(r"tilesize(\d+x\d+x\d+)", notes="xmma: tilesize128x128x64"),
    Extract(r"^bmm_[A-Za-z0-9_]*?_t(\d+x\d+x\d+)", notes="trtllm-gen: t128x8x128"),
    Extract(r"_MT(\d+x\d+x\d+)_", notes="Tensile macro tile"),
    Extract(r"_(\d+x\d+_\d+)x\d+_", sub=(r"^(\d+x\d+)_(\d+)$", "${1}x${2}"),
            notes="CUTLASS MxN_KxStages"),
    Extract(r"kernel_traits<\d+, (\d+, \d+)", sub=(", ", "x"), notes="FlashAttention kBlockM x kBlockN"),
    Extract(r"(?:^|_)(\d+x\d+(?:x\d+)?)(?:_|$)", notes="cuBLAS/cuDNN/fmha MxN"),
)
LAYOUT_EXTRACTS: tuple[Extract, ...] = (
    Extract(r"^Cijk_(Ailk_Bljk)", sub=(".*", "nn"), notes="Tensile: A(i,l) B(l,j)"),
    Extract(r"^Cijk_(Alik_Bljk)", sub=(".*", "tn")),
    Extract(r"^Cijk_(Ailk_Bjlk)", sub=(".*", "nt")),
    Extract(r"^Cijk_(Alik_Bjlk)", sub=(".*", "tt")),
    Extract(r"_(tn|nt|nn|tt)(?:_|$)", notes="cuBLAS/CUTLASS layout suffix"),
    Extract(_NVJET + r"\w*_([TN]{2})[TN]$", notes="nvjet: ops of A, B (then C): _TNT"),
    Extract(r"^bmm_\w*?_(TN|NT|NN|TT)_", notes="trtllm-gen: _TN_"),
    Extract(r"cutlass3x_\w*?_\d+_([tn]{2})[tn]_align", notes="CUTLASS 3: layouts of A, B, C (_tnt_align8)"),
)
ARCH_EXTRACTS: tuple[Extract, ...] = (
    Extract(r"(?i)(?:^|[^a-z])sm_?(\d{2,3})(?:[a-z]?(?:[^0-9a-z]|$))", prefix="sm"),
    Extract(r"cutlass_(\d{2,3})_", prefix="sm", notes="cutlass_80_tensorop_..."),
    Extract(r"ISA(\d{2,3}[a-z]?)_", prefix="gfx", notes="Tensile ISA90a"),
    Extract(r"(?i)gfx(\d{3,4}[a-z]?)", prefix="gfx"),
    Extract(r"(?i)(?:^|_)(maxwell)_", sub=(".*", "50"), prefix="sm"),
    Extract(r"(?i)(?:^|_)(pascal)_", sub=(".*", "60"), prefix="sm"),
    Extract(r"(?i)(?:^|_)(volta)_", sub=(".*", "70"), prefix="sm"),
    Extract(r"(?i)(?:^|_)(turing)_", sub=(".*", "75"), prefix="sm"),
    Extract(r"(?i)(?:^|_)(ampere)_", sub=(".*", "80"), prefix="sm"),
    Extract(r"(?i)(?:^|_)(hopper)_", sub=(".*", "90"), prefix="sm"),
)
