"""AMP206 probe: an enabled GradScaler scales a loss in a run with no reduced precision."""

from __future__ import annotations

import weakref

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


class ScalerWithoutAutocastProbe(Probe):
    """At the first `scale()` of each enabled scaler: no enabled float16/bfloat16 autocast region
    was entered so far (nor is one active), and no optimizer holds float16/bfloat16 parameters.
    Recorded at the GradScaler construction.  Evidence: what was looked at, the loss dtype."""

    code = "AMP206"

    def install(self):
        self.reduced_autocast = False
        self.checked: weakref.WeakSet = weakref.WeakSet()
        yield self.on("autocast_enter", self._enter)
        yield self.on("scale", self._scale)

    def _enter(self, ctx):
        device, dtype, enabled, site = self.state.last_autocast
        if enabled and dtype in torch_state.LOW_PRECISION:
            self.reduced_autocast = True

    def _scale(self, scaler, outputs, result):
        if scaler in self.checked or not torch_state.scaler_enabled(scaler):
            return
        self.checked.add(scaler)
        if self.reduced_autocast or torch_state.autocast_state():
            return
        low = sum(
            1
            for opt in list(self.state.optimizers)
            for g in opt.param_groups
            for p in g["params"]
            if p.dtype in torch_state.LOW_PRECISION
        )
        if low:
            return
        dtype = getattr(outputs, "dtype", None)
        evidence = {
            "autocast_entered": False,
            "low_precision_params": 0,
            "loss_dtype": torch_state.dtype_name(dtype) if dtype is not None else None,
            "scale": torch_state.scale_value(scaler),
        }
        self.sink.record_site(self.code, self.state.site.get(id(scaler)), evidence)


PROBE = ScalerWithoutAutocastProbe
