"""AMP109 probe: `scaler.step(x)` unscales gradients already unscaled through another object."""

from __future__ import annotations

import torch

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


def _param_ids(optimizer) -> set[int]:
    """The parameters an optimizer (or a wrapper with `param_groups`) holds."""
    try:
        return {id(p) for g in optimizer.param_groups for p in g["params"]}
    except Exception:  # noqa: BLE001 - a wrapper without param_groups: torch will raise itself
        return set()


def _grad_norm(params) -> float | None:
    grads = [p.grad.detach().float().norm() for p in params if p.grad is not None]
    if not grads:
        return None
    return float(torch.stack(grads).norm())


class UnscaleStepMismatchProbe(Probe):
    """At `scaler.step(x)`: the scaler's stage for `x` is READY, yet in this iteration the same
    scaler already unscaled another object `y` whose parameters overlap `x`'s.  GradScaler keys
    its state by object, so step unscales the same gradients again.  Evidence: the stage, both
    types, the scale, and the ratio of the gradient norm the optimizer's step sees to the norm
    after the first unscale (the applied update over the expected one: 1/scale)."""

    code = "AMP109"

    def install(self):
        self.unscaled: dict[int, list] = {}  # id(scaler) -> [(object, param ids)] since the last update
        self.pending = None  # (record, params, norm after the first unscale)
        yield self.on("unscale_pre", self._unscale)
        yield self.on("scaler_step_pre", self._step_pre)
        yield self.on("opt_step_pre", self._opt_step)
        yield self.on("scaler_step_post", lambda scaler, opt, ran: setattr(self, "pending", None))
        yield self.on("update_post", lambda scaler: self.unscaled.pop(id(scaler), None))

    def _unscale(self, scaler, optimizer):
        # NB: scaler.step's own unscale_ of the stepped object runs inside the step: not counted.
        if self.state.in_scaler_step or not torch_state.scaler_enabled(scaler):
            return
        self.unscaled.setdefault(id(scaler), []).append((optimizer, _param_ids(optimizer)))

    def _step_pre(self, scaler, optimizer):
        self.pending = None
        if not torch_state.scaler_enabled(scaler) or torch_state.scaler_stage(scaler, optimizer) != "READY":
            return
        mine = _param_ids(optimizer)
        for other, ids in self.unscaled.get(id(scaler), []):
            shared = mine & ids
            if other is optimizer or not shared:
                continue
            params = [p for g in optimizer.param_groups for p in g["params"] if id(p) in shared]
            evidence = {
                "stage": "READY",
                "stepped": type(optimizer).__name__,
                "unscaled_through": type(other).__name__,
                "shared_params": len(shared),
                "scale": torch_state.scale_value(scaler),
            }
            record = self.sink.record_here(self.code, evidence)
            self.pending = (record, params, _grad_norm(params))
            return

    def _opt_step(self, optimizer, in_scaler_step):
        if not in_scaler_step or self.pending is None:
            return
        record, params, before = self.pending
        self.pending = None
        now = _grad_norm(params)
        if before and now is not None and "applied_to_expected" not in record["evidence"]:
            record["evidence"]["applied_to_expected"] = now / before


PROBE = UnscaleStepMismatchProbe
