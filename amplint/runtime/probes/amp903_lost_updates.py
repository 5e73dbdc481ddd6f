"""AMP903 (runtime only): updates lost in low-precision weights (grad != 0, weight unchanged)."""

from __future__ import annotations

import torch

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe

_MEASURED_STEPS = 3  # snapshots cost a copy of the low-precision weights; a few steps suffice


class LostUpdatesProbe(Probe):
    """For the first few steps of an optimizer holding float16/bfloat16 parameters: snapshot them
    before the step; after it, the share of elements with a non-zero gradient whose value did not
    change is the share of updates lost to rounding.  Publishes `lost_updates(opt, share, explained)`:
    a subscriber that traced every low-precision parameter to a cast it recorded (AMP301) appends
    that observation's [code, file, line] to `explained`, kept as `explained_by`; correlate.py then
    reports the loss as that confirmed finding's evidence, not as a runtime finding of its own."""

    code = "AMP903"

    def install(self):
        self.measured: dict[int, int] = {}
        self.snap: dict[int, list] = {}
        self.totals: dict[int, list] = {}
        yield self.on("opt_step_pre", self._pre)
        yield self.on("opt_step_post", self._post)

    def _pre(self, opt, in_scaler):
        if self.measured.get(id(opt), 0) >= _MEASURED_STEPS:
            return
        pairs = [
            (p, p.detach().clone())
            for g in opt.param_groups
            for p in g["params"]
            if p.dtype in torch_state.LOW_PRECISION and p.grad is not None
        ]
        if pairs:
            self.snap[id(opt)] = pairs

    def _post(self, opt, in_scaler):
        pairs = self.snap.pop(id(opt), None)
        if not pairs:
            return
        self.measured[id(opt)] = self.measured.get(id(opt), 0) + 1
        moved = lost = 0
        dtypes = set()
        with torch.no_grad():
            for p, before in pairs:
                if p.grad is None:
                    continue
                nz = p.grad != 0
                moved += int(nz.sum())
                lost += int((nz & (p == before)).sum())
                dtypes.add(torch_state.dtype_name(p.dtype))
        tot = self.totals.setdefault(id(opt), [0, 0])
        tot[0] += lost
        tot[1] += moved
        if not tot[1]:
            return
        share = round(tot[0] / tot[1], 4)
        explained: list = []  # [code, file, line] of the observations that cast these parameters (AMP301)
        self.bus.emit("lost_updates", opt, share, explained)
        if tot[0]:
            ev = {"optimizer": type(opt).__name__, "param_dtypes": sorted(dtypes), "lost_update_share": share, "measured_steps": self.measured[id(opt)], "elements_with_grad": tot[1]}
            if explained:
                ev["explained_by"] = explained
            self.sink.record_site(self.code, self.state.site.get(id(opt)), ev, update=True)


PROBE = LostUpdatesProbe
