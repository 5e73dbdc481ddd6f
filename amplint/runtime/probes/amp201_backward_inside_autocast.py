"""AMP201 probe: backward() called while autocast is enabled."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


class BackwardInsideAutocastProbe(Probe):
    """At the backward call (Tensor.backward, torch.autograd.backward/grad), autocast is enabled
    for some device.  NB: checked at the call site, not in autograd hooks, because checkpointing
    and custom_bwd legitimately re-enter autocast inside backward."""

    code = "AMP201"

    def install(self):
        yield self.on("backward", self._check)

    def _check(self, api, tensors):
        state = torch_state.autocast_state()
        if state:
            self.sink.record_here(self.code, {"api": api, "autocast": state})


PROBE = BackwardInsideAutocastProbe
