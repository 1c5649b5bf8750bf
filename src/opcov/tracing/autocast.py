"""An autocast policy for the stand-in accelerator, so ``--autocast`` traces cast ops as a device would.

Core torch registers no AutocastPrivateUse1 policy (each out-of-tree backend brings its own:
torch_tpu does), and the CPU policy only applies to CPU tensors. The stand-in therefore uses
CUDA's published policy (aten/src/ATen/autocast_mode.cpp): the matmul/conv family runs in the
autocast dtype, the precision-sensitive ops below in float32, and the ``promote`` ops in the
widest input dtype. Casts are real ``_to_copy`` calls, recorded like the device's own. Each op
set traced this way says so in ``provenance.notes``; a backend whose policy differs needs a
re-trace with its own policy, which the verdict cannot infer.
"""

from __future__ import annotations

LOWER = (
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_tbc",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "convolution",
    "_convolution",
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
    "scaled_dot_product_attention",
    "_efficient_attention_forward",
)
FLOAT32 = (
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
    "pow",
    "softplus",
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "frobenius_norm",
    "nuclear_norm",
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
    "softmax",
    "log_softmax",
    "cumsum",
    "cumprod",
    "prod",
    "sum",
    "norm",
    "linalg_vector_norm",
    "linalg_matrix_norm",
    "cross_entropy_loss",
    "upsample_nearest1d",
    "upsample_nearest2d",
    "upsample_nearest3d",
    "upsample_bilinear2d",
    "upsample_linear1d",
    "upsample_trilinear3d",
    "upsample_bicubic2d",
)
PROMOTE = (
    "addcdiv",
    "addcmul",
    "atan2",
    "bilinear",
    "cross",
    "dot",
    "grid_sampler",
    "index_put",
    "scatter_add",
    "tensordot",
    "stack",
    "cat",
    "index_copy",
)
KEY = "AutocastPrivateUse1"


def register(torch, device_type: str):
    """Register the policy's kernels on AutocastPrivateUse1; returns the Library (keep it alive)."""
    import torch.utils._pytree as pytree

    lib = torch.library.Library("aten", "IMPL")
    exclude = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

    def casting(op, rule):
        def kernel(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(exclude):
                tensors = [t for t in pytree.tree_leaves((args, kwargs)) if _castable(torch, t, device_type)]
                if rule == "lower":
                    want = torch.get_autocast_dtype(device_type)
                elif rule == "float32":
                    want = torch.float32
                else:  # promote: the widest floating dtype among the inputs
                    want = max((t.dtype for t in tensors), key=lambda d: torch.finfo(d).bits, default=None)
                if want is not None:
                    args, kwargs = pytree.tree_map(
                        lambda t: t.to(want) if _castable(torch, t, device_type) and t.dtype != want else t,
                        (args, kwargs),
                    )
                return op(*args, **kwargs)

        return kernel

    for names, rule in ((LOWER, "lower"), (FLOAT32, "float32"), (PROMOTE, "promote")):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                op = getattr(packet, overload)
                schema = op._schema
                if any(a.is_out for a in schema.arguments) or not any(
                    "Tensor" in str(a.type) for a in schema.arguments
                ):
                    continue  # out= variants and scalar-only overloads are not cast
                lib.impl(f"{name}.{overload}" if overload != "default" else name, casting(op, rule), KEY)
    return lib


def _castable(torch, t, device_type) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and t.is_floating_point()
        and t.device.type == device_type
        and t.dtype in (torch.float32, torch.float16, torch.bfloat16)
    )  # float64 is never cast, as on CUDA
