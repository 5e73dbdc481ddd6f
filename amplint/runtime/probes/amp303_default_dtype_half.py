"""AMP303 probe: the default dtype is float16/bfloat16 at the first optimizer step, or the
optimizer steps parameters that were created while it was."""

from __future__ import annotations

import torch
from torch.nn.modules.module import register_module_parameter_registration_hook

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe


class DefaultDtypeHalfProbe(Probe):
    """Records where set_default_dtype chose a low precision and which parameters were
    registered while that choice held.  At the first optimizer step, a low default dtype
    confirms every such site; otherwise a site is confirmed when the optimizer holds
    parameters created under it (a scoped `with set_default_dtype(torch.bfloat16):` around
    the model's construction, restored before training).  A site whose modules never reach
    an optimizer (a frozen teacher) is not confirmed.  Evidence: the default dtype, the
    parameter dtypes, how many of the optimizer's parameters the site created."""

    code = "AMP303"

    def install(self):
        self.sites: list = []
        self.active: int | None = None  # index into `sites` while its low dtype is in effect
        self.born: dict[int, int] = {}  # id(parameter) -> index of the site it was created under
        self.done = False
        yield self.on("set_default_dtype", self._set)
        yield self.on("opt_step_pre", self._step)
        yield register_module_parameter_registration_hook(self._registered)

    def _set(self, dtype):
        if dtype in torch_state.LOW_PRECISION:
            self.sites.append(user_stack(1))
            self.active = len(self.sites) - 1
        else:
            self.active = None

    def _registered(self, module, name, param):
        if self.active is not None and param is not None and param.dtype in torch_state.LOW_PRECISION:
            self.born.setdefault(id(param), self.active)
        # NB: returns None: the parameter is registered unchanged.

    def _step(self, opt, in_scaler):
        if self.done:
            return
        self.done = True
        params = [p for g in opt.param_groups for p in g["params"]]
        dtypes = sorted({torch_state.dtype_name(p.dtype) for p in params})
        default = torch.get_default_dtype()
        if default in torch_state.LOW_PRECISION:
            for stack in self.sites or [user_stack(1)]:
                self._record(stack, default, dtypes, None)
            return
        created: dict[int, int] = {}
        for p in params:
            site = self.born.get(id(p))
            if site is not None and p.dtype in torch_state.LOW_PRECISION:
                created[site] = created.get(site, 0) + 1
        for site, count in sorted(created.items()):
            self._record(self.sites[site], default, dtypes, count)

    def _record(self, stack, default, dtypes, created):
        evidence = {"default_dtype": torch_state.dtype_name(default), "param_dtypes": dtypes}
        if created is not None:
            evidence["params_created_under_it"] = created
        self.sink.record_site(self.code, stack[0] if stack else None, evidence, stack=stack)


PROBE = DefaultDtypeHalfProbe
