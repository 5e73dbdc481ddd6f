"""Every read of private torch state, behind one version check (STYLE.md 2.8).

GradScaler keeps its per-optimizer stage in `_per_optimizer_states`, a `defaultdict` keyed by
`id(optimizer)` (torch/amp/grad_scaler.py).  Read it with `.get`: indexing would insert an entry,
and an extra entry makes `GradScaler.__getstate__` refuse to pickle mid-iteration.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
import warnings

import torch

MIN_TORCH = (2, 4)  # torch.amp.GradScaler(device) and is_autocast_enabled(device) exist from 2.3/2.4


def torch_version() -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


SUPPORTED = torch_version() >= MIN_TORCH
if not SUPPORTED:  # pragma: no cover - CI pins 2.13
    warnings.warn(f"amplint verify needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}; found {torch.__version__}")

try:
    from torch.amp.grad_scaler import GradScaler as BaseGradScaler
    from torch.amp.grad_scaler import OptState
except ImportError:  # pragma: no cover - torch < 2.3
    from torch.cuda.amp.grad_scaler import GradScaler as BaseGradScaler  # type: ignore
    from torch.cuda.amp.grad_scaler import OptState  # type: ignore

AUTOCAST_DEVICES = ("cpu", "cuda")

# NB: captured at import, before CPU emulation makes the "cuda" questions answer for the CPU:
# probes must see what each device's autocast really is.
is_autocast_enabled = torch.is_autocast_enabled
get_autocast_dtype = torch.get_autocast_dtype
_cuda_is_available = torch.cuda.is_available


def cuda_really_available() -> bool:
    """Whether this process has a real CUDA device (emulation makes `torch.cuda.is_available` say yes)."""
    return bool(_cuda_is_available())


def scaler_stage(scaler, optimizer) -> str:
    """READY (grads still scaled), UNSCALED or STEPPED, for `optimizer` in the current iteration."""
    states = getattr(scaler, "_per_optimizer_states", None)
    st = states.get(id(optimizer)) if states is not None else None  # NB: .get, never [...]
    stage = st.get("stage", OptState.READY) if st else OptState.READY
    return getattr(stage, "name", str(stage))


def scaler_enabled(scaler) -> bool:
    try:
        return bool(scaler.is_enabled())
    except Exception:  # noqa: BLE001
        return bool(getattr(scaler, "_enabled", False))


def scale_tensor(scaler):
    """The live scale tensor (None before the first `scale()`); reading its value syncs."""
    return getattr(scaler, "_scale", None)


def scale_value(scaler) -> float | None:
    t = scale_tensor(scaler)
    return None if t is None else float(t)


def scaler_device(scaler) -> str:
    return str(getattr(scaler, "_device", "?"))


def found_inf(scaler, optimizer) -> bool | None:
    states = getattr(scaler, "_per_optimizer_states", None)
    st = states.get(id(optimizer)) if states is not None else None
    if not st or not st.get("found_inf_per_device"):
        return None
    return bool(sum(float(v) for v in st["found_inf_per_device"].values()))


def autocast_state() -> dict[str, str]:
    """{device: dtype} of every device whose autocast is enabled right now.

    NB: `torch.is_autocast_enabled()` without a device means CUDA only, so ask per device.
    """
    out = {}
    for dev in AUTOCAST_DEVICES:
        try:
            if is_autocast_enabled(dev):
                out[dev] = str(get_autocast_dtype(dev)).replace("torch.", "")
        except (RuntimeError, TypeError):
            continue
    return out


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


LOW_PRECISION = (torch.float16, torch.bfloat16)


def payload_holds(payload, ids: set[int], depth: int = 0) -> bool:
    """`payload` (what torch.save is given) is, or holds in its mappings, lists and tuples, an
    object whose id() is in `ids`: looked for by identity, 4 levels and 200 items a level deep."""
    if id(payload) in ids:
        return True
    if depth > 4:
        return False
    if isinstance(payload, Mapping):
        return any(payload_holds(v, ids, depth + 1) for v in list(payload.values())[:200])
    if isinstance(payload, (list, tuple)):
        return any(payload_holds(v, ids, depth + 1) for v in payload[:200])
    return False
