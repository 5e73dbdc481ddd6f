"""Probes, one per rule code, with the same stem as the rule they confirm.

ALL_PROBES is explicit (greppable, like `amplint/rules/__init__.py`).  AMP9xx are runtime-only.
`probed_codes()` and `probe_needs()` import nothing (the code is the module's stem, a test checks
it), so verify's own process never imports torch.
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
    "amp111_scale_divided_after_unscale",
    "amp112_norm_of_scaled_gradients",
    "amp113_update_between_steps",
    "amp114_scaled_autograd_grad",
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
    "amp904_advanced_on_skipped_step",
    "amp905_fp16_headroom",
)
NAN_GUARD = "amp901_first_nonfinite"

# What must be on in the run for a probe to be able to see its problem at all: "scaler" (an
# enabled GradScaler), "autocast" (an enabled autocast region).  Without it, a line that ran is NOT
# CONFIRMED for that reason, not because it behaved (correlate.py).  Codes not listed need nothing.
NEEDS: dict[str, frozenset[str]] = {
    **{code: frozenset({"scaler"}) for code in ("AMP101", "AMP102", "AMP103", "AMP104", "AMP105", "AMP106", "AMP107", "AMP108")},
    **{code: frozenset({"autocast"}) for code in ("AMP201", "AMP202", "AMP203")},
    "AMP204": frozenset({"scaler", "autocast"}),
    "AMP111": frozenset({"scaler"}),
    "AMP113": frozenset({"scaler"}),
    "AMP114": frozenset({"scaler"}),
}
# Probes that see a necessary condition, not the defect itself (AMP111 sees the scale read after
# unscale_, not what it divides): they confirm a static finding at their line and report nothing alone.
# AMP113 sees an update between two optimizers' steps, which alternate iterations also give;
# AMP114 sees scaled gradients returned, not whether the code divides them afterwards.
CONFIRMS_ONLY = frozenset({"AMP111", "AMP113", "AMP114"})


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
    """Every code with a probe, from the module names alone (no import, no torch)."""
    return {name.split("_", 1)[0].upper() for name in _MODULES + (NAN_GUARD,)}


def probe_needs() -> dict[str, frozenset[str]]:
    """{code: what must be on in the run for its probe to see anything} (see NEEDS)."""
    return {code: NEEDS.get(code, frozenset()) for code in probed_codes()}
