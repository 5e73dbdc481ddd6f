"""AMP104 probe: optimizer.step() called directly while a scaler owns its gradients."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


class StepBypassesScalerProbe(Probe):
    """Optimizer step pre-hook outside scaler.step: if an enabled scaler scaled since its last
    update and its stage for this optimizer is READY, the step uses still-scaled gradients; if it
    is STEPPED, the optimizer steps twice.  Evidence: stage, scale, optimizer."""

    code = "AMP104"

    _PROBLEM = {
        "READY": "gradients still multiplied by the scale",
        "UNSCALED": "unscaled, but the inf/NaN check is bypassed: an overflowing step is applied",
        "STEPPED": "the optimizer steps twice in one iteration",
    }

    def install(self):
        self.scaler_stepped: dict[int, object] = {}  # id(opt) -> scaler that stepped it this iteration
        yield self.on("opt_step_pre", self._pre)
        yield self.on("scaler_step_post", lambda scaler, opt, ran: self.scaler_stepped.__setitem__(id(opt), scaler))
        yield self.on("scale", lambda scaler, outputs, result: self.scaler_stepped.clear())
        # A new backward (scaled or not) starts new gradients: e.g. an fp32 phase after AMP.
        yield self.on("backward", lambda api, tensors: self.scaler_stepped.clear())

    def _pre(self, opt, in_scaler_step):
        if in_scaler_step:
            return
        for scaler in self.state.enabled_scalers():
            if self.state.scaled_since_update.get(id(scaler)):
                stage = torch_state.scaler_stage(scaler, opt)
            elif self.scaler_stepped.get(id(opt)) is scaler:
                stage = "STEPPED"  # after update() the stage is reset, but this iteration already stepped
            else:
                continue
            ev = {"stage": stage, "scale": torch_state.scale_value(scaler), "optimizer": type(opt).__name__, "problem": self._PROBLEM[stage]}
            self.sink.record_here(self.code, ev)
            return


PROBE = StepBypassesScalerProbe
