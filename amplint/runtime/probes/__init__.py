"""Probes, one per rule code, with the same stem as the rule they confirm.

ALL_PROBES is explicit (greppable, like `amplint/rules/__init__.py`).  AMP9xx are runtime-only.
"""

from __future__ import annotations

import importlib

_MODULES = (
    "amp101_clip_before_unscale",
    "amp102_step_without_update",
    "amp103_backward_not_scaled",
    "amp104_step_bypasses_scaler",
    "amp105_scaler_in_loop",
    "amp106_scaler_not_checkpointed",
    "amp107_update_per_microbatch",
    "amp108_unscale_twice",
    "amp109_unscale_step_mismatch",
    "amp110_scaler_state_not_in_state_dict",
    "amp112_norm_of_scaled_gradients",
    "amp201_backward_inside_autocast",
    "amp202_step_inside_autocast",
    "amp203_fp16_autocast_without_scaler",
    "amp204_scaler_with_bf16",
    "amp206_scaler_without_autocast",
    "amp301_manual_half_model",
    "amp303_default_dtype_half",
    "amp304_fp16_eps_underflow",
    "amp305_trains_a_cast_copy",
    "amp401_deprecated_cuda_amp",
    "amp902_skipped_steps",
    "amp903_lost_updates",
)
NAN_GUARD = "amp901_first_nonfinite"


def probe_classes(nan_guard: bool = False) -> list[type]:
    """The Probe classes to install (AMP901 only with --nan-guard: it hooks every module)."""
    out = []
    for name in _MODULES + ((NAN_GUARD,) if nan_guard else ()):
        try:
            mod = importlib.import_module(f"amplint.runtime.probes.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"amplint.runtime.probes.{name}":
                continue
            raise
        out.append(mod.PROBE)
    return out


def probed_codes() -> set[str]:
    return {cls.code for cls in probe_classes(nan_guard=True)}
