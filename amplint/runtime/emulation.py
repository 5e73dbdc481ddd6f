"""CPU emulation of a CUDA script (`--device cpu`): "cuda" lands on the CPU.

- autocast / GradScaler device "cuda" become "cpu" (autocast keeps CUDA's default dtype, float16,
  because CPU autocast would otherwise default to bfloat16);
- `.cuda()`, `.to("cuda")`, `device="cuda"` (torch factories, `Tensor.new_*`, `torch.device("cuda")`
  objects) stay on the CPU;
- `torch.cuda.is_available()` is True (so `"cuda" if torch.cuda.is_available() else "cpu"` takes the
  CUDA path), `torch.cuda.synchronize/set_device/...` are no-ops, memory queries return 0, and a
  "nccl" process group becomes "gloo".

NB: this is an emulation.  CPU autocast casts differently from CUDA autocast (softmax, log_softmax,
layer_norm, exp, sum, cumsum, norm, pow stay in reduced precision on CPU; they run in float32 on
CUDA), bf16 gradients unscale on CPU but not on CUDA, and TF32/Tensor Core questions have no
answer here.  Reports say "CPU emulation".
"""

from __future__ import annotations

import inspect

import torch

from amplint.runtime import torch_state
from amplint.runtime.patching import Patch, wrap

NOTES = (
    "CPU emulation of a CUDA run: CPU autocast keeps softmax, log_softmax, layer_norm, exp, sum, "
    "cumsum, norm and pow in reduced precision where CUDA runs them in float32, so NaN/Inf seen here "
    "may not occur on a GPU (and the other way round); bf16 gradients unscale on CPU but not on CUDA."
)


def _is_cuda(d) -> bool:
    if isinstance(d, str):
        return d == "cuda" or d.startswith("cuda:")
    if isinstance(d, torch.device):
        return d.type == "cuda"
    return False


def _cpu(d):
    return "cpu" if _is_cuda(d) else d


# Factories and methods that take a `device=`; each is wrapped while emulation is on.
_FACTORIES = (
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
    "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
    "rand_like", "randn_like", "randint_like", "empty_strided", "normal", "scalar_tensor",
)
_TENSOR_NEW = ("new_tensor", "new_zeros", "new_ones", "new_empty", "new_full")


def _device_kw(orig):
    def call(*a, **kw):
        d = kw.get("device")
        if d is not None and _is_cuda(d):
            kw["device"] = "cpu"
        return orig(*a, **kw)

    return call


def _tensor_to(orig):
    def to(self, *a, **kw):
        if a:
            a = tuple(_cpu(x) for x in a)
        d = kw.get("device")
        if d is not None and _is_cuda(d):
            kw["device"] = "cpu"
        return orig(self, *a, **kw)

    return to


def install():
    S = torch_state.BaseGradScaler
    sig = inspect.signature(S.__init__)

    def w_scaler(orig):
        def init(self, *a, **kw):
            bound = sig.bind_partial(self, *a, **kw)
            if _is_cuda(bound.arguments.get("device", "cuda")):
                bound.arguments["device"] = "cpu"
            return orig(*bound.args, **bound.kwargs)

        return init

    yield wrap(S, "__init__", w_scaler)

    def w_autocast(orig):
        def init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
            if device_type == "cuda":
                device_type = "cpu"
                dtype = torch.float16 if dtype is None else dtype  # CUDA autocast's default
            return orig(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

        return init

    yield wrap(torch.amp.autocast_mode.autocast, "__init__", w_autocast)

    yield wrap(torch.nn.Module, "cuda", lambda orig: (lambda self, device=None: self))
    # The machine looks like a CUDA machine, so `"cuda" if torch.cuda.is_available() else "cpu"`
    # takes the CUDA path the script was written for (and that path lands on the CPU).
    yield Patch(torch.cuda, "is_available", lambda: True)
    yield Patch(torch.cuda, "device_count", lambda: 1)
    yield Patch(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    yield Patch(torch.cuda, "get_device_name", lambda *a, **k: "CPU (amplint emulation)")
    yield Patch(torch.cuda, "get_device_capability", lambda *a, **k: (8, 0))
    for name in ("synchronize", "set_device", "empty_cache", "reset_peak_memory_stats", "manual_seed", "manual_seed_all"):
        yield Patch(torch.cuda, name, lambda *a, **k: None)
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        yield Patch(torch.cuda, name, lambda *a, **k: 0)
    yield Patch(torch.cuda, "current_device", lambda: 0)

    import torch.distributed as dist

    if dist.is_available():

        def w_pg(orig):
            def init_process_group(backend=None, *a, **kw):
                if isinstance(backend, str) and "nccl" in backend:
                    backend = "gloo"
                return orig(backend, *a, **kw)

            return init_process_group

        yield wrap(dist, "init_process_group", w_pg)

    # NB: plain patches, not a TorchFunctionMode: with a mode on the stack, entering autocast
    # imports torch._dynamo and every torch call pays the mode (measured: a fixture went from 2 s
    # to over a minute).
    for name in _FACTORIES:
        if hasattr(torch, name):
            yield wrap(torch, name, _device_kw)
    for name in _TENSOR_NEW:
        yield wrap(torch.Tensor, name, _device_kw)
    yield wrap(torch.Tensor, "to", _tensor_to)
    yield wrap(torch.Tensor, "cuda", lambda orig: (lambda self, *a, **k: self))
    yield wrap(torch.Tensor, "pin_memory", lambda orig: (lambda self, *a, **k: self))
