"""AMP108 probe: a second unscale_ of one optimizer before update."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


class UnscaleTwiceProbe(Probe):
    """Before unscale_: the stage is already UNSCALED (torch raises right after) or STEPPED."""

    code = "AMP108"

    def install(self):
        yield self.on("unscale_pre", self._pre)

    def _pre(self, scaler, opt):
        stage = torch_state.scaler_stage(scaler, opt)
        if stage in ("UNSCALED", "STEPPED") and torch_state.scaler_enabled(scaler):
            self.sink.record_here(self.code, {"stage_before": stage, "optimizer": type(opt).__name__})


PROBE = UnscaleTwiceProbe
