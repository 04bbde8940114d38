"""The kernel taxonomy: real names from the shared traces, documented modern names,
properties of the classifier, the per-kernel tables, and every real trace."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import polars as pl
import pytest
from conftest import all_real_traces, real_trace
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit
from tracekit.analysis.taxonomy import (
    ARCH_EXTRACTS, ATTENTION_BACKEND_RULES, ATTENTION_BACKENDS, CLASS_RULES, CLASS_TABLE_SCHEMA,
    CLASSIFICATION_SCHEMA, KERNEL_CLASSES, KERNEL_TABLE_SCHEMA, LAYOUT_EXTRACTS, LIBRARIES,
    LIBRARY_RULES, PRECISION_RULES, PRECISIONS, TENSOR_CORE_RULES, TILE_EXTRACTS, class_table,
    classify_name, classify_names, kernel_table, tensor_core_share,
)
from tracekit.model import GPU_SCHEMA

DOC = Path(__file__).resolve().parents[1] / "docs" / "kernel-taxonomy.md"
# Largest share of kernel time a real trace may leave in class `other`. Measured: 0.020 %
# (sampled_128rank_job: aten's repeat_interleave `compute_cuda_kernel`), 0 % elsewhere.
MAX_OTHER_SHARE = 0.005


# (name, kernel_class, library, precision, tensor_cores): every name verbatim from a trace in
# ../shared/traces (H100 Qwen, A100 DDP/DLRM/AlexNet, V100 DLRM/ResNet, MI250, ResNet50 2021).
REAL_CASES = [
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_s"
        "egment_k_off_kernel__5x_cublas",
        "gemm", "cublas", "bf16", True,
    ),
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, "
        "128, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, "
        "128, 4, cutlass::bfloat16_t> >, false, true, false, false, false, true, "
        "false>(pytorch_flash::Flash_fwd_params)",
        "attention", "flash_attn", "bf16", True,
    ),
    (
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align1>(cutlass_80_te"
        "nsorop_s1688gemm_256x128_32x3_nt_align1::Params)",
        "gemm", "cutlass", "tf32", True,
    ),
    (
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_"
        "128x32_8x5_nn_align1::Params)",
        "gemm", "cutlass", "fp32", False,
    ),
    ("volta_sgemm_128x64_nn", "gemm", "cublas", "fp32", False),
    ("ampere_sgemm_128x64_nn", "gemm", "cublas", "fp32", False),
    (
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, "
        "false, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
        "float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
        "float>, float, float)",
        "gemm", "cublas", "fp32", False,
    ),
    (
        "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float "
        "const>, cublasGemvTensorStridedBatched<float> "
        ">(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
        "float>)",
        "gemm", "cublas", "fp32", False,
    ),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     "communication", "nccl", "fp32", False),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "communication", "nccl", "int8", False),
    (
        "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_AS"
        "EM1_CLR1_CADS0_EPS0_GRVWA1_GRVWB1_GSUAMB_ISA90a_IU1_K1_LBSPPA0_LBSPPB0_LBSPPM0_LPA0_LPB0"
        "_LPM0_LRVW1_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS2_NLCA1_NLCB1_O"
        "NLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO1_SRVW0_SSO0_SVW1_TLDS0_USFGROn1_VSn1_VWA1_VWB1_WSGRA0_W"
        "SGRB0_WS64_WG64_4_1",
        "gemm", "tensile", "fp32", True,
    ),
    (
        "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_AS"
        "EM1_CLR1_CADS0_EPS0_GRVWA2_GRVWB2_GSUAMB_ISA90a_IU1_K1_LBSPPA128_LBSPPB128_LBSPPM0_LPA8_"
        "LPB8_LPM0_LRVW4_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS2_NLCA1_NLC"
        "B1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO1_SRVW0_SSO0_SVW1_TLDS1_USFGROn1_VSn1_VWA1_VWB1_WSGR"
        "A1_WSGRB1_WS64_WG64_4_1",
        "gemm", "tensile", "fp32", True,
    ),
    (
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x"
        "16_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn_infer",
        "conv", "cudnn", "tf32", True,
    ),
    (
        "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, "
        "true>(int, int, int, float const*, int, float*, float const*, kernel_conv_params, "
        "unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)",
        "conv", "cudnn", "fp32", False,
    ),
    (
        "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int,"
        " float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, "
        "float, int, int, int, int)",
        "conv", "cudnn", "fp32", False,
    ),
    (
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float "
        "const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, int, "
        "unsigned long long, int, float, int, int, int)",
        "conv", "cudnn", "fp32", False,
    ),
    ("cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
     "conv", "cudnn", "fp32", False),
    (
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_128x128_32x4"
        "_nhwc_align4>(cutlass_tensorop_s1688fprop_optimized_tf32_128x128_32x4_nhwc_align4::Param"
        "s)",
        "conv", "cudnn", "tf32", True,
    ),
    (
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, "
        "false>(float*, float const*, int, int, int, bool const*, int, bool)",
        "softmax", "pytorch_aten", "fp32", False,
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, "
        "float, float const*, float const*, float const*, float*, float*, float*)",
        "normalization", "pytorch_aten", "fp32", False,
    ),
    (
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, "
        "float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, "
        "float*, float*, float*, float*, float, float)",
        "normalization", "cudnn", "fp32", False,
    ),
    (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
        "namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous "
        "namespace)::OpaqueType<2u>*, at::native::(anonymous "
        "namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>,"
        " unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned "
        "int, 4u>, int, unsigned int)",
        "copy", "pytorch_aten", None, False,
    ),
    (
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
        "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>,"
        " at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
        "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned"
        " int, long)",
        "embedding", "pytorch_aten", "bf16", False,
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
        "namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() "
        "const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, "
        "2ul> >(int, at::native::(anonymous "
        "namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() "
        "const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, "
        "2ul>)",
        "elementwise", "pytorch_aten", "bf16", False,
    ),
    (
        "void at::native::elementwise_kernel<128, 4, "
        "at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, "
        "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > "
        ">(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
        "c10::BFloat16, at::native::binary_internal::MulFunctor<float> > "
        "const&)::{lambda(int)#1}>(int, "
        "at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, "
        "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > "
        ">(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
        "c10::BFloat16, at::native::binary_internal::MulFunctor<float> > "
        "const&)::{lambda(int)#1})",
        "elementwise", "pytorch_aten", "bf16", False,
    ),
    (
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::Ten"
        "sorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() "
        "const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned"
        " int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
        "at::native::memory::StoreWithCast<1> >(int, "
        "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()()"
        " const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, "
        "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
        "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)",
        "copy", "pytorch_aten", "fp32", False,
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> "
        ">(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned "
        "int, float, 4>)",
        "reduction", "pytorch_aten", "fp32", False,
    ),
    (
        "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, "
        "int>::Policy800, false, long, int, int, int>(int*, int*, int*, int const*, long*, long "
        "const*, int*, int const*, int, int, int)",
        "sort_scan", "cub", None, False,
    ),
    (
        "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float "
        "const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, "
        "long*)",
        "pooling", "pytorch_aten", "fp32", False,
    ),
    ("triton__0d1d2d3d", "triton", "triton", None, None),
    (
        "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, "
        "false, long, 2ul, 32ul>(at::GenericPackedTensorAccessor<c10::Half, 1ul, "
        "at::RestrictPtrTraits, long>, at::GenericPackedTensorAccessor<c10::Half, 1ul, "
        "at::RestrictPtrTraits, long>, at::GenericPackedTensorAccessor<c10::Half, 2ul, "
        "at::RestrictPtrTraits, long>, at::GenericPackedTensorAccessor<int, 1ul, "
        "at::RestrictPtrTraits, int>, at::GenericPackedTensorAccessor<long, 1ul, "
        "at::RestrictPtrTraits, int>, at::GenericPackedTensorAccessor<int, 1ul, "
        "at::RestrictPtrTraits, int>, fbgemm_gpu::FixedDivisor, "
        "at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>, "
        "at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>, long, "
        "at::GenericPackedTensorAccessor<int, 1ul, at::RestrictPtrTraits, int>, "
        "at::GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, long>)",
        "embedding", "fbgemm", "fp16", False,
    ),
    (
        "void at::native::index_elementwise_kernel<128, 4, "
        "at::native::gpu_index_kernel<at::native::index_put_kernel_impl<at::native::OpaqueType<4>"
        " >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char*,"
        " long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, "
        "at::native::index_put_kernel_impl<at::native::OpaqueType<4> >(at::TensorIterator&, "
        "c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char*, long)#1} "
        "const&)::{lambda(int)#1}>(int, "
        "at::native::gpu_index_kernel<at::native::index_put_kernel_impl<at::native::OpaqueType<4>"
        " >(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char*,"
        " long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, "
        "at::native::index_put_kernel_impl<at::native::OpaqueType<4> >(at::TensorIterator&, "
        "c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char*, long)#1} "
        "const&)::{lambda(int)#1})",
        "indexing", "pytorch_aten", None, False,
    ),
    (
        "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, "
        "float*, cublasLtEpilogue_t, int, float*, long, void*, long, long, long, float*, long, "
        "int*)",
        "gemm", "cublas", "fp32", False,
    ),
    (
        "void splitKreduce_kernel<float, float, float, float, true, false, "
        "false>(cublasSplitKParams<float>, float const*, float const*, float*, float const*, "
        "float const*, float const*, float const*, float*, void*, long, float*, int*)",
        "gemm", "cublas", "fp32", False,
    ),
    ("ampere_gcgemm_64x64_nt", "gemm", "cublas", "fp32", False),
    (
        "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int, int,"
        " int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)",
        "conv", "cudnn", "fp32", False,
    ),
    (
        "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, "
        "float, float, float, float, adamMode_t, float, int, int>(int, int volatile*, "
        "TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, float, float, "
        "adamMode_t, float, int, int)",
        "elementwise", "apex", "fp32", False,
    ),
    (
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
        "(cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)",
        "copy", "cudnn", "fp32", False,
    ),
    ("Memcpy HtoD (Pinned -> Device)", "memcpy", "runtime", None, False),
    ("Memset (Device)", "memset", "runtime", None, False),
]


# Names in the documented forms of libraries the shared traces do not exercise:
# (name, {attribute: expected}).
DOCUMENTED_CASES = [
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
     "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
     dict(kernel_class="attention", library="cutlass", precision="bf16", tensor_cores=True,
          attention_backend="efficient", arch="sm80", tile="64x64")),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
     dict(kernel_class="attention", library="cudnn", precision="fp16", tensor_cores=True,
          attention_backend="cudnn", arch="sm90", tile="64x64x64")),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
     "cutlass::half_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::half_t> >, false, true, false, "
     "false, true, false, false, false>(flash::Flash_fwd_params)",
     dict(kernel_class="attention", library="flash_attn", precision="fp16", tensor_cores=True,
          attention_backend="flash", tile="64x128")),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
     "flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
     "cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float, "
     "cutlass::arch::Sm90, true, false> > > >(flash::FlashAttnFwdSm90::Params)",
     dict(kernel_class="attention", library="flash_attn", precision="bf16", tensor_cores=True,
          attention_backend="flash3")),
    ("triton_tem_fused_flex_attention_0",
     dict(kernel_class="attention", library="triton", attention_backend="flex")),
    ("void vllm::paged_attention_v1_kernel<unsigned short, unsigned short, 128, 16, 128>(...)",
     dict(kernel_class="attention", attention_backend=None)),
    ("triton_poi_fused_add_mul_0", dict(kernel_class="elementwise", library="triton")),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
     dict(kernel_class="reduction", library="triton")),
    ("triton_per_fused__softmax_0", dict(kernel_class="softmax", library="triton")),
    ("triton_per_fused_native_layer_norm_0", dict(kernel_class="normalization", library="triton")),
    ("triton_tem_fused_mm_0", dict(kernel_class="gemm", library="triton", tensor_cores=None)),
    ("triton_tem_fused_convolution_0", dict(kernel_class="conv", library="triton")),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     dict(kernel_class="communication", library="nccl", tensor_cores=False)),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     dict(kernel_class="communication", library="nccl", precision="bf16")),
    ("rcclGenericKernel<1, false>(ncclDevComm*)", dict(kernel_class="communication", library="rccl")),
    # HTA counted every `hip...` kernel as communication; a name prefix says nothing about NCCL.
    ("void hip_fill_kernel<float>(float*, float, unsigned long)",
     dict(kernel_class="elementwise", library="unknown")),
    ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB1_GRVW8_ISA90a_IU1_K1",
     dict(kernel_class="gemm", library="tensile", precision="fp16", tensor_cores=True,
          layout="tn", tile="128x128x32", arch="gfx90a")),
    ("Cijk_Ailk_Bljk_BBS_BH_MT64x64x16_MI16x16x16x1_SN_ISA942_K1",
     dict(kernel_class="gemm", precision="bf16", tensor_cores=True, layout="nn", arch="gfx942")),
    ("Cijk_Alik_Bjlk_SB_MT64x64x8_SE_K1",
     dict(kernel_class="gemm", precision="fp32", tensor_cores=False, layout="tt")),
    ("__amd_rocclr_copyBuffer", dict(kernel_class="copy", library="rocclr")),
    ("__amd_rocclr_fillBufferAligned", dict(kernel_class="memset", library="rocclr")),
    ("void ck::kernel_gemm_xdl_cshuffle_v1<ck::GridwiseGemm_k0mk1_k0nk1_mn_xdl_cshuffle_v1<"
     "ck::half_t, float> >(ck::half_t const*)",
     dict(kernel_class="gemm", library="ck", precision="fp16", tensor_cores=True)),
    ("kernel_batched_gemm_xdlops_v2r3", dict(kernel_class="gemm", library="ck", tensor_cores=True)),
    ("turing_h1688gemm_128x128_ldg8_relu_nn",
     dict(kernel_class="gemm", library="cublas", precision="fp16", tensor_cores=True, arch="sm75",
          layout="nn", tile="128x128")),
    ("volta_h884gemm_64x64_ldg8_nn",
     dict(kernel_class="gemm", precision="fp16", tensor_cores=True, arch="sm70")),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
     dict(kernel_class="gemm", library="cublas", precision="bf16", tensor_cores=True, layout="tn")),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x2x1_ffma_aligna4_"
     "alignc4_execute_kernel__5x_cublas",
     dict(kernel_class="gemm", library="cublas", precision="fp32", tensor_cores=False)),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_warpsize2x2x1_"
     "tensor16x8x8_execute_kernel__5x_cublas",
     dict(kernel_class="gemm", precision="tf32", tensor_cores=True)),
    ("sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize128x128x64_stage3_warpsize2x2x1_tensor16x8x32_"
     "execute_kernel__5x_cublas",
     dict(kernel_class="gemm", precision="int8", tensor_cores=True)),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_"
     "execute_segment_k_off_kernel__5x_cublas",
     dict(kernel_class="gemm", precision="fp8", tensor_cores=True, arch="sm90")),
    ("void cutlass::Kernel<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>("
     "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)",
     dict(kernel_class="gemm", library="cutlass", precision="bf16", tensor_cores=True,
          tile="32x32x128")),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
     "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
     dict(kernel_class="conv", library="cudnn", precision="bf16", tensor_cores=True)),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
     dict(kernel_class="softmax", library="pytorch_aten", precision="fp32")),
    ("void cuApplyRMSNorm<c10::BFloat16, float, c10::BFloat16>(c10::BFloat16*, float*, "
     "c10::BFloat16 const*, int, int, float, c10::BFloat16 const*)",
     dict(kernel_class="normalization", library="apex", precision="bf16")),
    ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>"
     "(long const*, float const*, float*, int, long, int)",
     dict(kernel_class="embedding", library="pytorch_aten")),
]


# Hopper/Blackwell GEMMs and communication beyond NCCL: (name, {attribute: expected}). Each name is
# verbatim from the public trace or profile named above it, or (where said) written from the
# kernel's declaration in the source named; "public profile" = a kernel summary in a public
# repository that code search found without recording its path.
MODERN_CASES = [
    # cuBLAS nvjet: a vLLM Llama-3.1-8B bf16 decode profile on H100 (public profile; the same
    # family in SemiAnalysisAI/InferenceX#863 and Dao-AILab/quack#157); tst = bf16 operands and
    # output, fp32 compute; _TNT = A transposed, B not, then C
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT",
     dict(kernel_class="gemm", library="cublas", precision="bf16", tensor_cores=True, tile="128x256x64",
          layout="tn", arch=None)),
    # cuBLAS 13.1 on B200 (sm_100) split-K GEMMs (public profiles: a cuBLAS-version comparison
    # and a B200 SGLang kernel table)
    ("nvjet_sm100_hsh_64x8_64x16_1x1_h_bz_splitK_NNT",
     dict(kernel_class="gemm", library="cublas", precision="fp16", tensor_cores=True, arch="sm100",
          layout="nn", tile="64x8x64")),
    ("nvjet_sm100_tst_64x8_64x16_2x4_h_bz_splitK_TNT",
     dict(kernel_class="gemm", library="cublas", precision="bf16", tensor_cores=True, arch="sm100")),
    # fp8 `_scaled_mm` on H100 (public profile, an nsys kernel summary): qq = fp8 operands
    ("nvjet_qqtst_128x256_128x6_2x1_2cta_v_bz_TNT",
     dict(kernel_class="gemm", library="cublas", precision="fp8", tensor_cores=True)),
    # CUTLASS 3.x procedural names (NVIDIA/cutlass media/docs/cpp/profiler.md; this instance picked
    # by Inductor's CUTLASS backend on H100); _tnt_ = layouts of A, B, C
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_2x1x1_0_tnt_align8"
     "_warpspecialized_cooperative_epi_tma",
     dict(kernel_class="gemm", library="cutlass", precision="bf16", tensor_cores=True, arch="sm90",
          layout="tn", tile="128x128x64")),
    # Inductor's CUTLASS backend on B200: pytorch/pytorch#172263 prints the generated
    # `cutlass3x_sm100_..._1sm_device_type`; the kernel is the instance name without `_device_type`
    ("cutlass3x_sm100_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_0x0x1_0_tnn_align8_1sm",
     dict(kernel_class="gemm", library="cutlass", precision="bf16", tensor_cores=True, arch="sm100",
          layout="tn")),
    # trtllm-gen batched GEMMs (NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/trtllmGenKernels/
    # batchedGemm/trtllmGen_bmm_export/KernelMetaInfo.h lists the cubins; these two names as a
    # B200 SGLang fp8 MoE profile and a FlashInfer cubin listing print them):
    # bmm_<out>_<A><B>_<acc>_t<MxNxK>
    ("bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s8_et64x8_m64x8x32_c1x1x1_rM_TN_transOut_noShfl_dsFp8_schedS_bN"
     "_tma_tmaSf_rgTma_clmp_lbW2_dynB_sm100f",
     dict(kernel_class="gemm", library="trtllm_gen", precision="fp8", tensor_cores=True, arch="sm100",
          tile="128x8x128", layout="tn")),
    ("bmm_Bfloat16_E2m1E2m1_Fp32_t128x16x256_s6_et128x16_m128x16x64_cga1x1x1_16dp256b_TN_transOut"
     "_schedP2x1x2x3_bN_clmp_dynBatch_sm100f",
     dict(kernel_class="gemm", library="trtllm_gen", precision="fp4", tensor_cores=True, arch="sm100")),
    # DeepEP in DeepSeek's own V3 training trace (deepseek-ai/profile-data @4496024 : train.json)
    ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool const*, "
     "int4 const*, float const*, int4 const*, int4 const*, int const*, int const*, "
     "dpsk::ep::internode::SourceMeta const*, int const*, int const*, int const*, int, int, int, int, void*, "
     "int, int, void**, int, int, int, int, int*)",
     dict(kernel_class="communication", library="deep_ep", precision="bf16", tensor_cores=False)),
    ("void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int, int const*, int const*, "
     "int*, void*, void**, int**, int, int, int, int*, bool, int)",
     dict(kernel_class="communication", library="deep_ep", precision=None, tensor_cores=False)),
    ("void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int, int const*, int*, int const*, "
     "int*, int, bool const*, int, int, int, int, int, int, int, int*, int*, int*, int*, void*, void**, int**, "
     "int, int, int*, int)",
     dict(kernel_class="communication", library="deep_ep", tensor_cores=False)),
    # ... and its token-count kernel, which moves nothing between ranks
    ("void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, "
     "int)", dict(kernel_class="other", library="deep_ep")),
    # DeepEP on GitHub (deepseek-ai/DeepEP csrc/kernels/intranode.cu), as a B200 SGLang profile
    # prints it (public profile)
    ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int const*, int*, int, int, int, "
     "bool const*, int*, int*, int, int, void**, int**, int)",
     dict(kernel_class="communication", library="deep_ep", tensor_cores=False)),
    ("void deep_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int, int**, int)",
     dict(kernel_class="communication", library="deep_ep")),
    # TensorRT-LLM's custom all-reduce, written from its declaration (NVIDIA/TensorRT-LLM
    # cpp/tensorrt_llm/kernels/customAllReduceKernels.cu: `oneShotAllReduceKernel<T, RANKS_PER_NODE,
    # COPY_INPUT, PUSH_MODE>(AllReduceParams)`)
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8, true, false>"
     "(tensorrt_llm::kernels::AllReduceParams)",
     dict(kernel_class="communication", precision="bf16", tensor_cores=False)),
    # other kernels of the DeepSeek trace above: casts to/from fp8, SwiGLU, RoPE
    ("void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>(__nv_bfloat16 "
     "const*, int, unsigned char*, float*, int, int, int, int, bool, float, __nv_fp8_interpretation_t)",
     dict(kernel_class="elementwise", precision="fp8", tensor_cores=False)),
    ("void cuda::cast_back_impl<__nv_fp8x2_e4m3>(void const*, void*, float const*, int, int, int, int)",
     dict(kernel_class="elementwise", precision="fp8")),
    ("void cuda::swiglu_forward_backward_with_weight_impl<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
     "__nv_bfloat16*, __nv_bfloat16 const*, __nv_bfloat16 const*, int const*, float const*, int, int)",
     dict(kernel_class="elementwise", precision="bf16")),
    ("rotary_kernel", dict(kernel_class="elementwise")),
]
# Already communication before: vLLM/SGLang's one-shot all-reduce (vllm-project/vllm
# csrc/custom_all_reduce.cuh; this instance verbatim from a public SGLang profile) and PyTorch's
# symmetric-memory multicast all-reduce, written from its declaration (pytorch/pytorch
# torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu: `multimem_all_reduce_kernel<T,
# alignment>` in an anonymous namespace).
COMMUNICATION_NAMES = [
    "void sglang::cross_device_reduce_1stage<__half, 8>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, "
    "__half*, int, int)",
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, "
    "unsigned int**, unsigned long, unsigned long)",
    *[name for name, want in MODERN_CASES if want["kernel_class"] == "communication"],
]


@pytest.mark.parametrize(("name", "expected"), MODERN_CASES, ids=lambda v: v[:40] if isinstance(v, str) else None)
def test_modern_kernel_names(name, expected):
    got = classify_name(name)
    assert {k: got[k] for k in expected} == expected


def test_is_communication_is_the_class():
    from tracekit.analysis.taxonomy import communication_names
    names = [*COMMUNICATION_NAMES, GEMM, "void cdpsk::ep::CUB_DeviceScanKernel"]
    assert communication_names(names) == sorted(COMMUNICATION_NAMES)


@pytest.mark.parametrize(
    ("name", "kernel_class", "library", "precision", "tensor_cores"), REAL_CASES,
    ids=lambda v: v[:40] if isinstance(v, str) else None,
)
def test_real_kernel_names(name, kernel_class, library, precision, tensor_cores):
    got = classify_name(name)
    assert (got["kernel_class"], got["library"], got["precision"], got["tensor_cores"]) == (
        kernel_class, library, precision, tensor_cores)


@pytest.mark.parametrize(
    ("name", "expected"), DOCUMENTED_CASES, ids=lambda v: v[:40] if isinstance(v, str) else None
)
def test_documented_kernel_names(name, expected):
    got = classify_name(name)
    assert {k: got[k] for k in expected} == expected


def test_fingerprint_tokens_of_the_h100_gemm():
    got = classify_name(REAL_CASES[0][0])
    assert (got["tile"], got["arch"], got["layout"]) == ("128x128x64", "sm90", "tn")


def test_s1688_inside_tensorop_is_tf32_on_a100():
    got = classify_name("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>("
                        "cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4::Params)")
    assert (got["precision"], got["tensor_cores"], got["tile"], got["layout"]) == (
        "tf32", True, "64x64x16", "nn")
    # with an explicit element type the same MMA shape is fp16 (Turing)
    assert classify_name("cutlass_75_tensorop_s1688gemm_f16_256x128_32x2_nt_align8")["precision"] == "fp16"


def test_fbgemm_is_not_a_gemm():
    got = classify_name("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, "
                        "int const*, int*)")
    assert (got["kernel_class"], got["library"]) == ("copy", "fbgemm")


# -- properties -----------------------------------------------------------------------------

_TOKENS = [
    "void", "at::native::", "sm80", "sm90", "xmma", "gemm", "sgemm", "tensorop", "s1688", "bf16",
    "fp16", "float", "double", "nccl", "hip", "triton", "poi", "red", "tem", "mm", "flash", "fmha",
    "softmax", "layer_norm", "copy", "Cijk", "Ailk", "Bljk", "MI16x16x1", "128x64", "tn", "nt",
    "reduce", "scan", "Memcpy", "Memset", "<", ">", "(", ")", "cudnn", "conv", "flex", "", "ffma",
]
_names = st.one_of(
    st.text(max_size=40),
    st.lists(st.sampled_from(_TOKENS), max_size=8).map("_".join),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(_names, max_size=12))
def test_every_name_gets_one_class_from_the_allowed_sets(names):
    got = classify_names(names)
    assert got.schema == pl.Schema(CLASSIFICATION_SCHEMA)
    assert got["name"].to_list() == sorted(set(names))
    assert set(got["kernel_class"]) <= set(KERNEL_CLASSES)
    assert set(got["library"]) <= set(LIBRARIES)
    assert set(got["precision"].drop_nulls()) <= set(PRECISIONS)
    assert set(got["attention_backend"].drop_nulls()) <= set(ATTENTION_BACKENDS)
    assert got.filter(pl.col("attention_backend").is_not_null())["kernel_class"].to_list() == [
        "attention"] * got["attention_backend"].is_not_null().sum()


@settings(max_examples=30, deadline=None)
@given(st.lists(_names, min_size=1, max_size=10).flatmap(
    lambda xs: st.tuples(st.just(xs), st.permutations(xs))))
def test_classification_is_deterministic_and_independent_of_order(pair):
    names, shuffled = pair
    first = classify_names(names)
    assert first.equals(classify_names(shuffled))
    assert first.equals(classify_names(names))
    # a name's row does not depend on the other names in the batch
    assert classify_name(names[0]) == first.filter(pl.col("name") == names[0]).row(0, named=True)


def test_nulls_and_series_input():
    got = classify_names(pl.Series(["b", None, "a", "b"]))
    assert got["name"].to_list() == ["a", "b"]
    assert classify_names([]).schema == pl.Schema(CLASSIFICATION_SCHEMA)


def test_every_rule_compiles_and_is_documented():
    doc = DOC.read_text()
    for rule in (*CLASS_RULES, *LIBRARY_RULES, *PRECISION_RULES, *TENSOR_CORE_RULES,
                 *ATTENTION_BACKEND_RULES):
        re.compile(rule.pattern)
        assert f"`{rule.pattern}`" in doc, rule.pattern
    for ex in (*TILE_EXTRACTS, *LAYOUT_EXTRACTS, *ARCH_EXTRACTS):
        re.compile(ex.pattern)
        assert f"`{ex.pattern}`" in doc, ex.pattern
    for cls in KERNEL_CLASSES:
        assert f"`{cls}`" in doc, cls


# -- tables -----------------------------------------------------------------------------------

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_kernel__5x_cublas"
SGEMM = "ampere_sgemm_128x64_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"


def gpu_frame(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    """A `gpu` frame from (cat, name, dur_ns) rows; other columns null."""
    data = [dict(eid=i, cat=cat, name=name, device=0, stream=7, ts_ns=i * 1000, dur_ns=dur,
                 end_ns=i * 1000 + dur) for i, (cat, name, dur) in enumerate(rows)]
    return pl.DataFrame(data, schema=GPU_SCHEMA)


def test_kernel_table_statistics():
    gpu = gpu_frame([
        ("kernel", GEMM, 100), ("kernel", GEMM, 300), ("kernel", ADD, 50),
        ("kernel", ADD, 50), ("kernel", ADD, 50), ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 999),
        ("kernel", SGEMM, 450),
    ])
    table = kernel_table(gpu)
    assert table.schema == pl.Schema(KERNEL_TABLE_SCHEMA)
    assert table["name"].to_list() == [SGEMM, GEMM, ADD]
    gemm = table.row(1, named=True)
    assert gemm == dict(
        name=GEMM, kernel_class="gemm", library="cublas", precision="bf16", tensor_cores=True,
        count=2, total_ns=400, mean_ns=200.0, median_ns=200.0, min_ns=100, max_ns=300,
        std_ns=100.0, cv=0.5, share=400 / 1000,
    )
    add = table.row(2, named=True)
    assert (add["kernel_class"], add["std_ns"], add["cv"], add["share"]) == (
        "elementwise", 0.0, 0.0, 0.15)
    single = table.row(0, named=True)
    assert (single["count"], single["cv"], single["std_ns"]) == (1, 0.0, 0.0)


def test_old_capitalised_kernel_category_counts():
    table = kernel_table(gpu_frame([("Kernel", SGEMM, 10)]))
    assert table["count"].to_list() == [1]


def test_tables_of_an_empty_frame_are_empty_and_typed():
    empty = pl.DataFrame(schema=GPU_SCHEMA)
    assert kernel_table(empty).schema == pl.Schema(KERNEL_TABLE_SCHEMA)
    assert kernel_table(empty).is_empty()
    assert class_table(empty).schema == pl.Schema(CLASS_TABLE_SCHEMA)
    assert tensor_core_share(empty) is None


def test_class_table_and_memory_option():
    gpu = gpu_frame([("kernel", GEMM, 300), ("kernel", ADD, 100),
                     ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 600)])
    kernels_only = class_table(gpu)
    assert kernels_only.rows() == [("gemm", 1, 300, 0.75), ("elementwise", 1, 100, 0.25)]
    with_memory = class_table(gpu, include_memory=True)
    assert with_memory.rows() == [("memcpy", 1, 600, 0.6), ("gemm", 1, 300, 0.3),
                                  ("elementwise", 1, 100, 0.1)]


def test_tensor_core_share():
    gpu = gpu_frame([("kernel", GEMM, 300), ("kernel", SGEMM, 100), ("kernel", ADD, 1000)])
    assert tensor_core_share(gpu) == pytest.approx(0.75)
    assert tensor_core_share(gpu_frame([("kernel", ADD, 10)])) is None


# -- real traces ------------------------------------------------------------------------------

@functools.cache
def _load(path: Path) -> tracekit.Trace:
    return tracekit.load(path)


@pytest.mark.real
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: p.name)
def test_little_kernel_time_is_left_unclassified(path):
    table = class_table(_load(path).gpu)
    assert set(table["kernel_class"]) <= set(KERNEL_CLASSES)
    other = table.filter(pl.col("kernel_class") == "other")["share"].sum()
    assert other <= MAX_OTHER_SHARE


@pytest.mark.real
def test_h100_qwen_trace():
    gpu = _load(real_trace("h100_qwen15_05b_hf_inference.json.gz")).gpu
    table = kernel_table(gpu).join(classify_names(gpu["name"]).select("name", "attention_backend"),
                                   on="name")
    flash = table.filter(pl.col("name").str.contains("pytorch_flash::flash_fwd_kernel"))
    flash = flash.row(0, named=True)
    assert (flash["kernel_class"], flash["attention_backend"], flash["precision"],
            flash["tensor_cores"]) == ("attention", "flash", "bf16", True)
    gemms = table.filter(pl.col("name").str.starts_with("sm90_xmma_gemm"))
    assert gemms.height >= 1
    assert set(gemms["kernel_class"]) == {"gemm"}
    assert gemms["tensor_cores"].all() and set(gemms["precision"]) == {"bf16"}
    assert table["share"].sum() == pytest.approx(1.0)
    assert tensor_core_share(gpu) > 0.99
