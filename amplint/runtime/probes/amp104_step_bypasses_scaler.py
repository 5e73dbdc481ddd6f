"""AMP104 probe: optimizer.step() called directly while a scaler owns its gradients."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


class StepBypassesScalerProbe(Probe):
    """Optimizer step pre-hook outside scaler.step: if an enabled scaler scaled since its last
    update and its stage for this optimizer is READY, the step uses still-scaled gradients; if it
    is STEPPED, the optimizer steps twice.  Evidence: stage, scale, optimizer."""

    code = "AMP104"

    def install(self):
        yield self.on("opt_step_pre", self._pre)

    def _pre(self, opt, in_scaler_step):
        if in_scaler_step:
            return
        for scaler in self.state.enabled_scalers():
            if not self.state.scaled_since_update.get(id(scaler)):
                continue
            stage = torch_state.scaler_stage(scaler, opt)
            if stage in ("READY", "STEPPED"):
                ev = {"stage": stage, "scale": torch_state.scale_value(scaler), "optimizer": type(opt).__name__,
                      "problem": "gradients still scaled" if stage == "READY" else "optimizer stepped twice"}
                self.sink.record_here(self.code, ev)
                return


PROBE = StepBypassesScalerProbe
