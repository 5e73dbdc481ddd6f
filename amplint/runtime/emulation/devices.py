"""Where tensors, modules and checkpoints land under CPU emulation: every CUDA device is the CPU.

A "CUDA device" is anything torch would read as one: `"cuda"`, `"cuda:1"`, `torch.device("cuda", 1)`,
and a bare index (`.to(local_rank)`, `device=0`), which torch reads as "the accelerator" and which
on a CPU-only build fails with "Cannot access accelerator device when none is available".

Covered: torch's factories (`torch.zeros(..., device=...)` and the others in `FACTORIES`),
`Tensor.new_*`, `Tensor.to/.cuda/.pin_memory/.record_stream`, `Module.to/.cuda`, `torch.Generator`,
`DataLoader(pin_memory=True)` (built without pinning: there is no device to pin for, and torch
would warn about it on every loader),
and `torch.load(map_location=...)` (a CUDA location, a dict of them, a callable, or None all load
onto the CPU: a checkpoint written on a GPU box loads here too).

NB: plain patches, not a TorchFunctionMode: with a mode on the stack, entering autocast imports
torch._dynamo and every torch call pays the mode (measured: a fixture went from 2 s to over a minute).
NB: `torch.device(0)` itself cannot be emulated: `torch.device` is a C type that cannot be
subclassed or replaced without breaking pickling, so a bare index is mapped where it is *used*.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from amplint.runtime.patching import Patch, wrap

# Factories that take a `device=`; each is wrapped while emulation is on.
FACTORIES = (
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
    "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
    "rand_like", "randn_like", "randint_like", "empty_strided", "normal", "scalar_tensor",
    "tril_indices", "triu_indices", "sparse_coo_tensor", "asarray",
)
TENSOR_NEW = ("new_tensor", "new_zeros", "new_ones", "new_empty", "new_full")


def is_cuda(device: Any) -> bool:
    """True for anything torch would place on CUDA (a bare index included)."""
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return device >= 0
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return False


def on_cpu(device: Any) -> Any:
    return "cpu" if is_cuda(device) else device


def _kw_device(kwargs: dict) -> dict:
    if is_cuda(kwargs.get("device")):
        kwargs["device"] = "cpu"
    return kwargs


def _device_kw(original: Callable) -> Callable:
    def call(*args, **kwargs):
        return original(*args, **_kw_device(kwargs))

    return call


def _to(original: Callable) -> Callable:
    """`Tensor.to` / `Module.to`: positional devices (a string, a device, an index) and `device=`."""

    def to(self, *args, **kwargs):
        return original(self, *(on_cpu(a) for a in args), **_kw_device(kwargs))

    return to


def _stay(original: Callable) -> Callable:
    """`.cuda(...)` / `.pin_memory(...)`: the object is already where it will stay."""

    def stay(self, *args, **kwargs):
        return self

    return stay


def _map_location(location: Any) -> Any:
    """What `torch.load` gets instead of `location` (see the module docstring)."""
    if isinstance(location, dict):
        return {k: on_cpu(v) for k, v in location.items()}
    if location is None or callable(location) or is_cuda(location):
        return "cpu"
    return location


def _load(original: Callable) -> Callable:
    def load(f, map_location=None, *args, **kwargs):
        return original(f, _map_location(map_location), *args, **kwargs)

    return load


def _record_stream(original: Callable) -> Callable:
    from amplint.runtime.emulation.cuda_api import EmulatedStream

    def record_stream(self, stream):
        if isinstance(stream, EmulatedStream):
            return None  # CPU work is synchronous: nothing to keep alive for another stream
        return original(self, stream)

    return record_stream


_Generator = torch.Generator


class _GeneratorType(type(_Generator)):
    # NB: while patched, `torch.Generator` names this class; generators made before (torch's
    # default generator) must still pass `isinstance(g, torch.Generator)`.
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _Generator)


class EmulatedGenerator(_Generator, metaclass=_GeneratorType):
    """`torch.Generator(device="cuda")` gives a CPU generator (it is still a `torch.Generator`)."""

    def __new__(cls, device: Any = "cpu") -> "EmulatedGenerator":
        return super().__new__(cls, device=on_cpu(device))


def _dataloader_init(original: Callable) -> Callable:
    import inspect

    signature = inspect.signature(original)

    def init(self, *args, **kwargs):
        bound = signature.bind_partial(self, *args, **kwargs)
        if bound.arguments.get("pin_memory"):
            bound.arguments["pin_memory"] = False
        return original(*bound.args, **bound.kwargs)

    return init


def install() -> Iterator[Any]:
    """Yield one handle per patch (see the module docstring for what is covered)."""
    for name in FACTORIES:
        if hasattr(torch, name):
            yield wrap(torch, name, _device_kw)
    for name in TENSOR_NEW:
        yield wrap(torch.Tensor, name, _device_kw)
    yield wrap(torch.Tensor, "to", _to)
    yield wrap(torch.Tensor, "cuda", _stay)
    yield wrap(torch.Tensor, "pin_memory", _stay)
    yield wrap(torch.Tensor, "record_stream", _record_stream)
    yield wrap(torch.nn.Module, "to", _to)
    yield wrap(torch.nn.Module, "cuda", _stay)
    yield Patch(torch, "Generator", EmulatedGenerator)
    yield wrap(torch.utils.data.DataLoader, "__init__", _dataloader_init)
    import torch.serialization as serialization

    yield wrap(torch, "load", _load)
    if serialization.load is not torch.load:
        yield wrap(serialization, "load", _load)
