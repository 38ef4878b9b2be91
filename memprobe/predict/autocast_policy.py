"""The CUDA autocast policy: which ops CUDA autocasts and how (ATen/autocast_mode.h's op lists).

fakecuda.CudaBehaviour registers kernels that apply it to CPU-device fake tensors, so that autocast there casts
as it does on CUDA.
"""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten

# The AT_FORALL_* lists of ATen/autocast_mode.h, of torch 2.11 and 2.13.
# An op is given its policy only where the installed torch registers it for AutocastCUDA, so entries of one
# release only (rms_norm: 2.13; the Dimname overloads: 2.11) do nothing on the other.
# tests/test_torch_facts.py compares these lists with the installed torch's header.
LOWER_PRECISION_FP = (
    "_convolution.deprecated",
    "_convolution",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_tbc",
    "conv_transpose1d",
    "conv_transpose2d.input",
    "conv_transpose3d.input",
    "convolution",
    "prelu",
    "addmm",
    "addmv",
    "addr",
    "matmul",
    "einsum",
    "mm",
    "mv",
    "linalg_vecdot",
    "linear",
    "addbmm",
    "baddbmm",
    "bmm",
    "chain_matmul",
    "linalg_multi_dot",
    "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell",
    "lstm_cell",
    "gru_cell",
    "rnn_tanh_cell",
    "rnn_relu_cell",
    "_scaled_dot_product_flash_attention",
    "scaled_dot_product_attention",
    # autocast_mode.cpp registers these two for CUDA besides the list
    "cudnn_convolution",
    "cudnn_convolution_transpose",
)
FP32 = (
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow.Tensor_Scalar",
    "pow.Tensor_Tensor",
    "pow.Scalar",
    "softplus",
    "layer_norm",
    "native_layer_norm",
    "rms_norm",
    "group_norm",
    "frobenius_norm.dim",
    "nuclear_norm",
    "nuclear_norm.dim",
    "cosine_similarity",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "nll_loss",
    "nll_loss2d",
    "hinge_embedding_loss",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "margin_ranking_loss",
    "multilabel_margin_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "binary_cross_entropy_with_logits",
    "dist",
    "pdist",
    "cdist",
    "renorm",
    "logsumexp",
    "upsample_nearest1d",
    "_upsample_nearest_exact1d",
    "upsample_nearest2d",
    "_upsample_nearest_exact2d",
    "upsample_nearest3d",
    "_upsample_nearest_exact3d",
    "upsample_linear1d",
    "upsample_bilinear2d",
    "_upsample_bilinear2d_aa",
    "upsample_trilinear3d",
    "upsample_bicubic2d",
    "_upsample_bicubic2d_aa",
)
FP32_SET_OPT_DTYPE = (
    "prod",
    "prod.dim_int",
    "softmax.int",
    "log_softmax.int",
    "cumprod",
    "cumsum",
    "linalg_vector_norm",
    "linalg_matrix_norm",
    "linalg_matrix_norm.str_ord",
    "sum",
    "sum.dim_IntList",
    "prod.dim_Dimname",
    "softmax.Dimname",
    "log_softmax.Dimname",
    "cumprod.dimname",
    "cumsum.dimname",
    "sum.dim_DimnameList",  # torch 2.11
)
FP32_APPEND_DTYPE = {
    "norm.Scalar": "ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "names_ScalarOpt_dim_dtype",
}  # the last: torch 2.11
PROMOTE = (
    "addcdiv",
    "addcmul",
    "atan2",
    "bilinear",
    "cross",
    "dot",
    "vdot",
    "grid_sampler",
    "index_put",
    "tensordot",
    "scatter_add",
)
BANNED = ("binary_cross_entropy",)


def policies() -> dict[str, str]:
    """Op name ("op" or "op.overload") -> its CUDA autocast policy: lower, fp32, fp32_set_opt_dtype,
    fp32_append_dtype, promote or banned."""
    table = {name: "lower" for name in LOWER_PRECISION_FP}
    table.update({name: "fp32" for name in FP32})
    table.update({name: "fp32_set_opt_dtype" for name in FP32_SET_OPT_DTYPE})
    table.update({name: "fp32_append_dtype" for name in FP32_APPEND_DTYPE})
    table.update({name: "promote" for name in PROMOTE})
    table.update({name: "banned" for name in BANNED})
    return table


def op_overload(name: str):
    """The aten OpOverload named "op" or "op.overload" (the default overload for a bare name)."""
    base, _, overload = name.partition(".")
    return getattr(getattr(aten, base), overload or "default")


def eligible(t: Any) -> bool:
    """Whether autocast casts `t`: a floating-point tensor other than fp64."""
    # is_eligible in autocast_mode.h, with our CPU-device fake tensors standing in for CUDA ones.
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
