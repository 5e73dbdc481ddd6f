"""CPU emulation of a CUDA script (`--device cpu`): "cuda" lands on the CPU, the rest agrees.

One module per concern, each yielding removable handles:
- `devices`: tensors, modules, generators and checkpoints asked onto CUDA (a bare index too) stay
  on the CPU;
- `amp`: autocast and GradScaler on "cuda" run on the CPU, in float16 by default as on CUDA;
- `cuda_api`: `torch.cuda` / `torch.accelerator` answer as a CUDA machine with a device per local
  rank (streams, events, properties, memory queries included);
- `distributed`: NCCL becomes gloo, DDP's `device_ids` are dropped;
- `compile`: `torch.compile` runs eagerly.

What emulation cannot fake is listed in `LIMITS` (the README and verify's reasons quote it).
"""

from __future__ import annotations

from typing import Any, Iterator

NOTES = (
    "CPU emulation of a CUDA run: CPU autocast keeps softmax, log_softmax, layer_norm, exp, sum, "
    "cumsum, norm and pow in reduced precision where CUDA runs them in float32, so NaN/Inf seen here "
    "may not occur on a GPU (and the other way round); bf16 gradients unscale on CPU but not on CUDA; "
    "TF32 and Tensor Cores do not exist here; torch.compile runs eagerly."
)

# Said plainly: what a script can observe that emulation cannot change.
LIMITS = (
    "tensor.device.type and tensor.is_cuda stay 'cpu' (real CPU tensors cannot claim to be on CUDA), "
    "so a script that decides AMP from a tensor's device (`amp = x.device.type == 'cuda'`) turns AMP off",
    "torch.device(0) (a bare index made into a device) fails as on any CPU-only build; "
    "`.to(0)`, `device=0`, `.cuda(0)` and `device_ids=[0]` work",
    "CPU autocast's op list differs from CUDA's (softmax, layer_norm, exp, sum, norm, pow stay in "
    "reduced precision on the CPU)",
    "bf16 gradients unscale on the CPU but not on CUDA (pytorch#127176)",
    "TF32 (allow_tf32, set_float32_matmul_precision) and Tensor Cores have no CPU counterpart",
    "torch.compile runs eagerly; CUDA graphs and CUDA-only extension kernels are not emulated",
    "memory queries report 0 bytes allocated; speed says nothing about the GPU",
)


def install(log: dict[str, Any] | None = None) -> Iterator[Any]:
    """Yield every handle of the emulation; `log` collects what the report should mention."""
    from amplint.runtime.emulation import amp, compile, cuda_api, devices, distributed

    log = {} if log is None else log
    yield from amp.install()
    yield from devices.install()
    yield from cuda_api.install()
    yield from distributed.install()
    yield from compile.install(log)
