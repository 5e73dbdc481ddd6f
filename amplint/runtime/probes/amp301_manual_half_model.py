"""AMP301 probe: the optimizer holds float16/bfloat16 parameters of a module cast by hand."""

from __future__ import annotations

import weakref

import torch
from torch.nn.modules.module import register_module_parameter_registration_hook

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe


class ManualHalfModelProbe(Probe):
    """Remembers where each parameter was cast to low precision (.half(), .bfloat16(), .to(dtype),
    or `param.data = <low-precision tensor>`);
    at an optimizer's first step, and at its first step after any later cast (an evaluation
    helper's in-place `.half()` between epochs), low-precision parameters it holds confirm the
    cast site.
    Evidence: dtypes, the optimizer, how many parameters; the share of updates lost comes from the
    AMP903 probe's measurement (event `lost_updates`), and when every low-precision parameter of
    the optimizer was cast at a site recorded here, those sites are handed back to it (they explain
    the lost updates: AMP903 is then this finding's evidence, correlate.py).  A parameter never cast but created in
    low precision because the default dtype was (`with set_default_dtype(torch.bfloat16):`
    around the model's construction) is AMP303's finding, not this one's."""

    code = "AMP301"

    def install(self):
        self.cast_site: dict[int, tuple] = {}
        self.checked: weakref.WeakSet = weakref.WeakSet()
        self.confirmed: dict[int, list] = {}
        self.confirmed_sites: dict[int, set] = {}  # id(optimizer) -> cast sites already recorded
        self.all_cast: dict[int, bool] = {}  # id(optimizer) -> every low-precision parameter had a cast site
        self.by_default_dtype: set[int] = set()  # id(parameter) created low by the default dtype
        yield self.on("module_cast", self._cast)
        yield self.on("parameter_cast", self._parameter_cast)
        yield register_module_parameter_registration_hook(self._registered)
        yield self.on("opt_step_pre", self._step)
        yield self.bus.subscribe("lost_updates", self._lost)

    def _cast(self, module, dtype, how):
        stack = user_stack(1)
        for p in module.parameters():
            self.cast_site[id(p)] = (stack, torch_state.dtype_name(dtype), how)
        self.checked = weakref.WeakSet()  # a cast between steps (an eval helper's `.half()`): look again

    def _parameter_cast(self, param, dtype):
        self.cast_site[id(param)] = (user_stack(1), torch_state.dtype_name(dtype), "data")
        self.checked = weakref.WeakSet()

    def _registered(self, module, name, param):
        if param is not None and param.dtype in torch_state.LOW_PRECISION and torch.get_default_dtype() in torch_state.LOW_PRECISION:
            self.by_default_dtype.add(id(param))
        # NB: returns None: the parameter is registered unchanged.

    def _step(self, opt, in_scaler):
        if opt in self.checked:
            return
        self.checked.add(opt)
        found: dict = {}
        for g in opt.param_groups:
            for p in g["params"]:
                if p.dtype in torch_state.LOW_PRECISION:
                    hit = self.cast_site.get(id(p))
                    if hit is None and id(p) in self.by_default_dtype:
                        continue  # AMP303's: low because the default dtype was, never cast
                    key = tuple(hit[0][0].as_list()) if hit and hit[0] else None
                    entry = found.setdefault(key, {"stack": hit[0] if hit else [], "dtypes": set(), "params": 0, "how": hit[2] if hit else None})
                    entry["dtypes"].add(torch_state.dtype_name(p.dtype))
                    entry["params"] += 1
        # Every low-precision parameter of this optimizer traced to a cast: its lost updates
        # (AMP903's measurement) are this finding's evidence, not a finding of their own.
        self.all_cast[id(opt)] = bool(found) and None not in found
        seen_sites = self.confirmed_sites.setdefault(id(opt), set())
        for key, e in found.items():
            if key in seen_sites:
                continue  # confirmed at an earlier step
            seen_sites.add(key)
            stack = e["stack"]
            rec = self.sink.record_site(
                self.code,
                stack[0] if stack else None,
                {"optimizer": type(opt).__name__, "param_dtypes": sorted(e["dtypes"]), "low_precision_params": e["params"], "cast": e["how"]},
                stack=stack,
            )
            self.confirmed.setdefault(id(opt), []).append(rec)

    def _lost(self, opt, share, explained=None):
        recs = self.confirmed.get(id(opt), [])
        for rec in recs:
            rec["evidence"]["lost_update_share"] = share
        if explained is not None and recs and self.all_cast.get(id(opt)):
            explained.extend([self.code, rec["file"], rec["line"]] for rec in recs)


PROBE = ManualHalfModelProbe
