"""torch.distributed written for GPUs, on the CPU: NCCL becomes gloo, device ids are dropped.

- `init_process_group("nccl")` (or "cuda:nccl,cpu:gloo", or `backend=` in `new_group`) uses gloo;
  a CUDA `device_id=` is dropped (it binds NCCL to a device);
- `DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank)` is built
  without them: for a module on the CPU, DDP itself requires `device_ids=None`;
- `DataParallel(model)` runs the module directly (as it does on a machine with no GPU);
- `barrier(device_ids=[...])`, an NCCL-only argument, is dropped; `is_nccl_available()` is True.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from amplint.runtime.emulation.devices import is_cuda
from amplint.runtime.patching import Patch, wrap


def _backend(backend: Any) -> Any:
    return "gloo" if isinstance(backend, str) and "nccl" in backend.lower() else backend


def _init_process_group(original: Callable) -> Callable:
    def init_process_group(backend=None, *args, **kwargs):
        if is_cuda(kwargs.get("device_id")):
            kwargs.pop("device_id")
        return original(_backend(backend), *args, **kwargs)

    return init_process_group


def _new_group(original: Callable) -> Callable:
    def new_group(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = _backend(kwargs["backend"])
        return original(*args, **kwargs)

    return new_group


def _barrier(original: Callable) -> Callable:
    def barrier(*args, **kwargs):
        kwargs.pop("device_ids", None)
        return original(*args, **kwargs)

    return barrier


def _ddp_init(original: Callable) -> Callable:
    def init(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if device_ids is not None and all(is_cuda(d) for d in device_ids):
            device_ids = None
        if is_cuda(output_device):
            output_device = None
        return original(self, module, device_ids, output_device, *args, **kwargs)

    return init


def _dp_init(original: Callable) -> Callable:
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.device_ids = []  # NB: DataParallel.forward calls the module itself when this is empty

    return init


def install() -> Iterator[Any]:
    import torch.distributed as dist

    if dist.is_available():
        yield wrap(dist, "init_process_group", _init_process_group)
        yield wrap(dist, "new_group", _new_group)
        yield wrap(dist, "barrier", _barrier)
        yield Patch(dist, "is_nccl_available", lambda: True)
        yield wrap(torch.nn.parallel.DistributedDataParallel, "__init__", _ddp_init)
    yield wrap(torch.nn.DataParallel, "__init__", _dp_init)
