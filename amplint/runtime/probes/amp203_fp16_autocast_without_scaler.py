"""AMP203 probe: training under float16 autocast with no enabled GradScaler."""

from __future__ import annotations

import torch

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


class Fp16AutocastWithoutScalerProbe(Probe):
    """A backward after an enabled float16 autocast region, on a tensor that no enabled scaler
    scaled, then an optimizer step: recorded at the autocast `with`.  Evidence: dtype, device, and
    the share of gradient elements that are exactly zero at the step (fp16 underflow flushes small
    gradients to zero; some zeros are legitimate, e.g. ReLU)."""

    code = "AMP203"

    def install(self):
        self.fp16_site = None
        self.pending = None
        yield self.on("autocast_enter", self._enter)
        yield self.on("backward", self._backward)
        yield self.on("opt_step_pre", self._step)

    def _enter(self, ctx):
        device, dtype, enabled, site = self.state.last_autocast
        if enabled and dtype == torch.float16:
            self.fp16_site = (device, site)

    def _backward(self, api, tensors):
        if self.fp16_site is None:
            return
        if any(torch_state.scaler_enabled(s) for s in list(self.state.scalers)):
            return
        self.pending = self.fp16_site

    def _step(self, opt, in_scaler):
        if self.pending is None:
            return
        device, site = self.pending
        self.pending = None
        zeros = total = 0
        for g in opt.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    zeros += int((p.grad == 0).sum())
                    total += p.grad.numel()
        self.sink.record_site(
            self.code,
            site,
            {"autocast_dtype": "float16", "device": device, "scaler": None, "zero_grad_share": round(zeros / total, 4) if total else None},
        )


PROBE = Fp16AutocastWithoutScalerProbe
