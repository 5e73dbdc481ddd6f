"""Typed tables of the torch API surface the model recognises.

Data, not logic: adding a new alias of an existing concept is a one-line change here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from amplint.prefilter import STRING_ESCAPE, Word

SCALER_CONSTRUCTORS = frozenset(
    {
        "torch.amp.GradScaler",
        "torch.amp.grad_scaler.GradScaler",
        "torch.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.cpu.amp.grad_scaler.GradScaler",
    }
)
SHARDED_SCALER_CONSTRUCTORS = frozenset(
    {
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
        "torch.distributed.fsdp.ShardedGradScaler",
        "fairscale.optim.grad_scaler.ShardedGradScaler",
    }
)

AUTOCAST_CONTEXTS = frozenset(
    {
        "torch.autocast",
        "torch.amp.autocast",
        "torch.amp.autocast_mode.autocast",
        "torch.cuda.amp.autocast",
        "torch.cuda.amp.autocast_mode.autocast",
        "torch.cpu.amp.autocast",
        "torch.cpu.amp.autocast_mode.autocast",
    }
)
# Device each legacy autocast implies (the modern ones take it as their first argument).
AUTOCAST_IMPLIED_DEVICE = {
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
}
# Autocast's default dtype per device when none is given (torch.get_autocast_dtype).
AUTOCAST_DEFAULT_DTYPE = {"cuda": "float16", "cpu": "bfloat16", "xpu": "bfloat16", "mps": "float16"}

CLIP_FUNCTIONS = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grad_norm",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_value_",
        "torch.nn.utils.clip_grad.clip_grad_norm",
        "torch.nn.utils.clip_grads_with_norm_",
        "torch.nn.utils.clip_grad._clip_grads_with_norm_",
    }
)
# Method names that clip the receiver's gradients (FSDP's `model.clip_grad_norm_`).
CLIP_METHODS = frozenset({"clip_grad_norm_", "clip_grad_value_"})

AUTOGRAD_BACKWARD = frozenset({"torch.autograd.backward"})

# Reduced-precision dtypes, by the spellings code uses for them.
HALF_DTYPES = {
    "torch.float16": "float16",
    "torch.half": "float16",
    "torch.bfloat16": "bfloat16",
}
FULL_DTYPES = {"torch.float32": "float32", "torch.float": "float32", "torch.float64": "float64", "torch.double": "float64"}
DTYPE_STRINGS = {
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "32": "float32",
}
# Module methods that convert every parameter to a reduced precision.
HALF_CAST_METHODS = {"half": "float16", "bfloat16": "bfloat16"}
# Pre-filter tokens: every spelling of a reduced dtype above (a qualified name's last part,
# a dtype string with its quotes, a cast method) contains one of these, or hides in a
# string escape (tests/test_prefilter.py checks the tables against them).
# `half` only as a whole word (`torch.half`, `.half()`, `"half"`): `rotate_half` and
# `half_dim`, in every other model file, are neither.
REDUCED_DTYPE_TOKENS = ("float16", "fp16", "bf16", Word("half"), '"16"', "'16'", STRING_ESCAPE)
# (`float16` then a lookbehind: a pattern that starts with one scans 30 times slower)
FLOAT16_NOT_BFLOAT16 = re.compile(r"float16(?<!bfloat16)")
FP16_DTYPE_TOKENS = (FLOAT16_NOT_BFLOAT16, "fp16", Word("half"), '"16"', "'16'", STRING_ESCAPE)

OPTIMIZER_PACKAGES = ("torch.optim.", "apex.optimizers.", "bitsandbytes.optim.", "transformers.optimization.", "timm.optim.")
NOT_OPTIMIZERS = ("torch.optim.lr_scheduler", "torch.optim.swa_utils")


@dataclass(frozen=True)
class Deprecation:
    """A deprecated AMP symbol and the modern spelling a fix writes."""

    old: str
    new: str
    # How the device moves into the call: an inserted first positional argument, or a keyword.
    device_argument: str | None
    device: str
    # The first torch with the modern spelling as a fix writes it: `torch.autocast(device)`
    # 1.10, `torch.amp.GradScaler(device)` 2.3, `torch.amp.custom_fwd(device_type=)` 2.4.
    new_since: tuple[int, int] = (1, 10)


DEPRECATIONS: dict[str, Deprecation] = {
    d.old: d
    for d in (
        Deprecation("torch.cuda.amp.autocast", "torch.autocast", "positional", "cuda"),
        Deprecation("torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "positional", "cuda", (2, 3)),
        Deprecation("torch.cuda.amp.custom_fwd", "torch.amp.custom_fwd", "device_type", "cuda", (2, 4)),
        Deprecation("torch.cuda.amp.custom_bwd", "torch.amp.custom_bwd", "device_type", "cuda", (2, 4)),
        Deprecation("torch.cpu.amp.autocast", "torch.autocast", "positional", "cpu"),
        Deprecation("torch.cpu.amp.GradScaler", "torch.amp.GradScaler", "positional", "cpu", (2, 3)),
        Deprecation("torch.cuda.amp.autocast_mode.autocast", "torch.autocast", "positional", "cuda"),
        Deprecation("torch.cuda.amp.grad_scaler.GradScaler", "torch.amp.GradScaler", "positional", "cuda", (2, 3)),
        Deprecation("torch.cpu.amp.autocast_mode.autocast", "torch.autocast", "positional", "cpu"),
        Deprecation("torch.cpu.amp.grad_scaler.GradScaler", "torch.amp.GradScaler", "positional", "cpu", (2, 3)),
    )
}


# Contexts (and decorators) under which no gradient is recorded: code run there is
# evaluation, not training, whatever autocast it enters.
NO_GRAD_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad",
                              "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode"})

# The same names imported from `torch.amp` (the import rewrite of `from torch.cuda.amp import X`):
# torch.amp.autocast exists since 1.13, the others since their own table entry.
TORCH_AMP_NAME_SINCE = {"autocast": (1, 13), "GradScaler": (2, 3), "custom_fwd": (2, 4), "custom_bwd": (2, 4)}
# The modern spellings, as qualified names: a branch that uses one of them is the modern
# half of a version-gated fallback (analysis/version_gates.py).
MODERN_AMP = frozenset(
    {d.new for d in DEPRECATIONS.values()}
    | {"torch.amp", "torch.amp.autocast", "torch.amp.autocast_mode.autocast", "torch.amp.grad_scaler.GradScaler",
       "torch.GradScaler", "torch.amp.autocast_mode.custom_fwd", "torch.amp.autocast_mode.custom_bwd"}
)
# Global autocast defaults: `torch.autocast(device)` reads them where the legacy classes
# passed float16/bfloat16 and cache_enabled=True explicitly.
AUTOCAST_DEFAULT_SETTERS = frozenset(
    {"torch.set_autocast_dtype", "torch.set_autocast_gpu_dtype", "torch.set_autocast_cpu_dtype",
     "torch.set_autocast_cache_enabled"}
)

# Ops whose dtype autocast decides (its float16 list and its float32 list): a custom
# autograd Function that runs them sees autocast in its forward but not in its backward.
# Spelled as the last part of the qualified name (torch.matmul, F.linear) or as a method.
AUTOCAST_SENSITIVE_OPS = frozenset(
    {"matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "addr", "chain_matmul", "einsum", "linear",
     "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
     "scaled_dot_product_attention", "softmax", "log_softmax", "layer_norm", "group_norm", "batch_norm",
     "cross_entropy", "nll_loss", "mse_loss", "cosine_similarity", "cdist", "pdist", "cumprod", "cumsum", "erfinv",
     "exp", "expm1", "log", "log10", "log2", "log1p", "pow", "reciprocal", "rsqrt", "sinh", "tan", "acos", "asin",
     "cosh", "norm", "renorm", "dist", "logsumexp", "gelu", "silu"}
)
# Those of autocast's lower-precision (float16 / bfloat16) list, which autocast casts *down*
# (einsum runs through bmm): under autocast they compute in the low dtype, outside it in
# whatever dtypes their operands have, and mixed operands raise.  The others above are of
# its float32 list: autocast only ever casts their inputs up.
AUTOCAST_LOWER_PRECISION_OPS = frozenset(
    {"matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "addr", "chain_matmul", "einsum", "linear",
     "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
     "scaled_dot_product_attention"}
)
# Autocast's whole float32 list (torch.amp docs, "ops that can autocast to float32"): those of
# AUTOCAST_SENSITIVE_OPS and the reductions and losses it leaves out (`x.sum()`, `prod`,
# `softplus`, `kl_div` ...).  The `**` operator and `number / tensor` are on it too.
AUTOCAST_FLOAT32_OPS = (AUTOCAST_SENSITIVE_OPS - AUTOCAST_LOWER_PRECISION_OPS) | frozenset(
    {"sum", "prod", "softmin", "softplus", "normalize", "kl_div", "l1_loss", "smooth_l1_loss",
     "binary_cross_entropy_with_logits", "cosine_embedding_loss", "hinge_embedding_loss", "margin_ranking_loss",
     "multilabel_margin_loss", "multi_margin_loss", "poisson_nll_loss", "soft_margin_loss", "triplet_margin_loss"}
)


# Module methods that return the module itself, so `m.to(...).eval()` is still `m`.
MODULE_RETURNING = frozenset(
    {"to", "cuda", "cpu", "xpu", "npu", "eval", "train", "requires_grad_", "half", "bfloat16", "float", "double", "to_empty"}
)
