"""benchmarks/profile_step.py sorts GPU kernels into kinds by name; the order of its patterns matters."""

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "profile_step", Path(__file__).parents[1] / "benchmarks" / "profile_step.py"
)
profile_step = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(profile_step)


@pytest.mark.parametrize(
    "kernel, kind",
    [
        # names seen on the H100 (torch 2.11, cuDNN 9.19)
        (
            "void cudnn::batchnorm_bwtr_nhwc_semiPersist<__half, float, __half, 512, 16, 3, 4, 1, 0, true, 2>",
            "normalization",
        ),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64", "attention"),
        ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", "convolution"),
        ("nvjet_sm90_hsh_128x192_64x5_2x1_v_bz_coopB_bias_TNN", "gemm"),
        (
            "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<float, float, false>",
            "normalization",
        ),
        ("void at::native::(anonymous namespace)::max_pool_backward_nhwc<c10::Half, float>", "copy / layout / pooling"),
        (
            "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::Half>>",
            "element-wise / reduction",
        ),
        ("Memcpy DtoD (Device -> Device)", "copy / layout / pooling"),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
        ("dgrad2d_c1_k1_nhwc_specialized", "depthwise convolution"),
        ("void cudnn::fusion::compute_dot_do_o_specialized<false, 64>(void const*, void const*)", "attention"),
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u>",
            "normalization",
        ),
        (
            "void cudnn::engines_precompiled::nchwToNhwcKernel<__half, __half, float, false, true, (cudnnKernelDataType_t)0>",
            "copy / layout / pooling",
        ),
        ("something_unheard_of", "other"),
    ],
)
def test_kernel_kinds(kernel, kind):
    assert profile_step.kind_of(kernel) == kind
