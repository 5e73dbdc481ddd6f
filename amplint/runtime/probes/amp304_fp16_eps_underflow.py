"""AMP304 probe: an optimizer eps that rounds to zero in its parameters' dtype."""

from __future__ import annotations

import weakref

import torch

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


class Fp16EpsUnderflowProbe(Probe):
    """At an optimizer's first step: a param group with `eps` whose value is 0 once cast to the
    dtype of its (low-precision) parameters.  Recorded at the optimizer construction; the evidence
    also says whether a parameter was non-finite after that step."""

    code = "AMP304"

    def install(self):
        self.checked: weakref.WeakSet = weakref.WeakSet()
        self.pending: dict[int, dict] = {}
        yield self.on("opt_step_pre", self._pre)
        yield self.on("opt_step_post", self._post)

    def _pre(self, opt, in_scaler):
        if opt in self.checked:
            return
        self.checked.add(opt)
        for g in opt.param_groups:
            eps = g.get("eps")
            if not isinstance(eps, float):
                continue
            for dtype in {p.dtype for p in g["params"]} & set(torch_state.LOW_PRECISION):
                if float(torch.tensor(eps, dtype=dtype)) == 0.0:
                    self.pending[id(opt)] = {"eps": eps, "param_dtype": torch_state.dtype_name(dtype), "eps_in_param_dtype": 0.0, "optimizer": type(opt).__name__}

    def _post(self, opt, in_scaler):
        ev = self.pending.pop(id(opt), None)
        if ev is None:
            return
        ev["nonfinite_after_step"] = any(not bool(torch.isfinite(p).all()) for g in opt.param_groups for p in g["params"])
        self.sink.record_site(self.code, self.state.site.get(id(opt)), ev, stack=self.state.stack.get(id(opt)))


PROBE = Fp16EpsUnderflowProbe
