"""Autocast and GradScaler on "cuda" run on the CPU, and the script's autocast questions agree.

- `torch.autocast("cuda")` (and `torch.cuda.amp.autocast`) enters CPU autocast; with no dtype it
  keeps CUDA's default, float16 (CPU autocast would otherwise default to bfloat16);
- `GradScaler("cuda")` (the default device, and `torch.cuda.amp.GradScaler`) scales on the CPU;
- `torch.is_autocast_enabled("cuda")`, the no-argument form (which means CUDA),
  `torch.get_autocast_dtype("cuda")`, `torch.get_autocast_gpu_dtype()` and the setters answer for the
  CPU autocast state the emulated region really set, so `custom_fwd`/`custom_bwd` and
  `torch.utils.checkpoint` carry the region into recomputation as they would on a GPU.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterator

import torch

from amplint.runtime import torch_state
from amplint.runtime.emulation.devices import is_cuda
from amplint.runtime.patching import Patch, wrap


def _scaler_init(signature: inspect.Signature) -> Callable[[Callable], Callable]:
    def make(original: Callable) -> Callable:
        def init(self, *args, **kwargs):
            bound = signature.bind_partial(self, *args, **kwargs)
            if is_cuda(bound.arguments.get("device", "cuda")):
                bound.arguments["device"] = "cpu"
            return original(*bound.args, **bound.kwargs)

        return init

    return make


def _autocast_init(original: Callable) -> Callable:
    def init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type == "cuda":
            device_type = "cpu"
            dtype = torch.float16 if dtype is None else dtype  # CUDA autocast's default
        return original(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    return init


def _device_type(device_type: Any = "cuda") -> Any:
    return "cpu" if device_type == "cuda" else device_type


def install() -> Iterator[Any]:
    scaler = torch_state.BaseGradScaler
    yield wrap(scaler, "__init__", _scaler_init(inspect.signature(scaler.__init__)))
    yield wrap(torch.amp.autocast_mode.autocast, "__init__", _autocast_init)

    is_enabled, get_dtype = torch_state.is_autocast_enabled, torch_state.get_autocast_dtype
    set_enabled, set_dtype = torch.set_autocast_enabled, torch.set_autocast_dtype
    yield Patch(torch, "is_autocast_enabled", lambda device_type="cuda": is_enabled(_device_type(device_type)))
    yield Patch(torch, "get_autocast_dtype", lambda device_type: get_dtype(_device_type(device_type)))
    yield Patch(torch, "set_autocast_enabled", lambda *a: set_enabled(*_setter_args(a)))
    yield Patch(torch, "set_autocast_dtype", lambda device_type, dtype: set_dtype(_device_type(device_type), dtype))
    if hasattr(torch, "get_autocast_gpu_dtype"):
        yield Patch(torch, "get_autocast_gpu_dtype", lambda: get_dtype("cpu"))


def _setter_args(args: tuple) -> tuple:
    """`set_autocast_enabled(enabled)` (legacy: CUDA) or `set_autocast_enabled(device_type, enabled)`."""
    return ("cpu", args[0]) if len(args) == 1 else (_device_type(args[0]), *args[1:])
