"""AMP303 probe: the default dtype is float16/bfloat16 at the first optimizer step."""

from __future__ import annotations

import torch

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe


class DefaultDtypeHalfProbe(Probe):
    """Records where set_default_dtype chose a low precision; at the first optimizer step, a low
    default dtype confirms that site.  Evidence: the default dtype, parameter dtypes."""

    code = "AMP303"

    def install(self):
        self.sites: list = []
        self.done = False
        yield self.on("set_default_dtype", self._set)
        yield self.on("opt_step_pre", self._step)

    def _set(self, dtype):
        if dtype in torch_state.LOW_PRECISION:
            self.sites.append(user_stack(1))

    def _step(self, opt, in_scaler):
        if self.done:
            return
        self.done = True
        default = torch.get_default_dtype()
        if default not in torch_state.LOW_PRECISION:
            return
        dtypes = sorted({torch_state.dtype_name(p.dtype) for g in opt.param_groups for p in g["params"]})
        for stack in self.sites or [user_stack(1)]:
            self.sink.record_site(self.code, stack[0] if stack else None, {"default_dtype": torch_state.dtype_name(default), "param_dtypes": dtypes}, stack=stack)


PROBE = DefaultDtypeHalfProbe
