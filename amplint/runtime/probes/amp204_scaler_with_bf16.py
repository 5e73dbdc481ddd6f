"""AMP204 probe: an enabled GradScaler scaling a loss computed under bfloat16 autocast."""

from __future__ import annotations

import torch

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


class ScalerWithBf16Probe(Probe):
    """At scale(): the last autocast region entered was enabled bfloat16 (or scale() itself runs
    inside one).  Recorded at the GradScaler construction.  bf16 has fp32's exponent range: the
    scaler only adds work (and bf16 grads fail to unscale on CUDA)."""

    code = "AMP204"

    def install(self):
        yield self.on("scale", self._scale)

    def _scale(self, scaler, outputs, result):
        if not torch_state.scaler_enabled(scaler):
            return
        state = torch_state.autocast_state()
        last = self.state.last_autocast
        bf16 = "bfloat16" in state.values() or (last is not None and last[2] and last[1] == torch.bfloat16)
        if bf16:
            site = self.state.site.get(id(scaler))
            self.sink.record_site(self.code, site, {"autocast_dtype": "bfloat16", "scale": torch_state.scale_value(scaler)},
                                  stack=self.state.stack.get(id(scaler)))


PROBE = ScalerWithBf16Probe
