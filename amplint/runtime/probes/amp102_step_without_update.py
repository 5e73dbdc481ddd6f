"""AMP102 probe: scaler.step without scaler.update."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe


class StepWithoutUpdateProbe(Probe):
    """Counts scaler.step and scaler.update per scaler.  A step while the optimizer is already
    STEPPED (torch raises right after), or a run whose scaler stepped but never updated, confirms."""

    code = "AMP102"

    def install(self):
        self.steps: dict[int, int] = {}
        self.updates: dict[int, int] = {}
        self.sites: dict[int, list] = {}
        yield self.on("scaler_step_pre", self._step)
        yield self.on("update_post", self._update)

    def _step(self, scaler, opt):
        if not torch_state.scaler_enabled(scaler):
            return
        k = id(scaler)
        self.steps[k] = self.steps.get(k, 0) + 1
        stack = user_stack(1)
        if stack and len(self.sites.setdefault(k, [])) < 4 and stack[0] not in [s[0] for s in self.sites[k]]:
            self.sites[k].append(stack)
        if torch_state.scaler_stage(scaler, opt) == "STEPPED":
            self.sink.record_site(self.code, stack[0] if stack else None, {"scaler_steps": self.steps[k], "updates": self.updates.get(k, 0), "stage": "STEPPED"}, stack=stack)

    def _update(self, scaler):
        self.updates[id(scaler)] = self.updates.get(id(scaler), 0) + 1

    def finish(self):
        for k, n in self.steps.items():
            if n and not self.updates.get(k):
                for stack in self.sites.get(k, []):
                    self.sink.record_site(self.code, stack[0], {"scaler_steps": n, "updates": 0}, stack=stack, update=True)


PROBE = StepWithoutUpdateProbe
