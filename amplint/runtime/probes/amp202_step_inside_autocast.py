"""AMP202 probe: optimizer / scaler step while autocast is enabled."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


class StepInsideAutocastProbe(Probe):
    """Autocast enabled at scaler.step or in the optimizer step pre-hook."""

    code = "AMP202"

    def install(self):
        yield self.on("scaler_step_pre", lambda scaler, opt: self._check("scaler.step", opt))
        yield self.on("opt_step_pre", lambda opt, in_scaler: None if in_scaler else self._check("optimizer.step", opt))

    def _check(self, api, opt):
        state = torch_state.autocast_state()
        if state:
            self.sink.record_here(self.code, {"api": api, "optimizer": type(opt).__name__, "autocast": state})


PROBE = StepInsideAutocastProbe
