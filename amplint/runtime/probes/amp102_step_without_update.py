"""AMP102 probe: scaler.step without scaler.update."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe


class StepWithoutUpdateProbe(Probe):
    """A scaler.step while the optimizer is already STEPPED (torch raises right after: the scaler
    stepped and was never updated), or a run whose scaler completed steps and was never updated,
    confirms.  Only completed steps count, and the end-of-run judgement is skipped when the run
    ended in an error or a signal: a step that raised (out of memory, a crash) or an iteration cut
    short before its update proves nothing."""

    code = "AMP102"

    def install(self):
        self.steps: dict[int, int] = {}
        self.updates: dict[int, int] = {}
        self.sites: dict[int, list] = {}
        self._stack: dict[int, list] = {}
        yield self.on("scaler_step_pre", self._pre)
        yield self.on("scaler_step_post", self._post)
        yield self.on("update_pre", self._update)  # the call counts even if torch then raises

    def _pre(self, scaler, opt):
        if not torch_state.scaler_enabled(scaler):
            return
        k = id(scaler)
        stack = self._stack[k] = user_stack(1)
        if torch_state.scaler_stage(scaler, opt) == "STEPPED":
            ev = {"scaler_steps": self.steps.get(k, 0), "updates": self.updates.get(k, 0), "stage": "STEPPED"}
            self.sink.record_site(self.code, stack[0] if stack else None, ev, stack=stack)

    def _post(self, scaler, opt, ran):
        if not torch_state.scaler_enabled(scaler):
            return
        k = id(scaler)
        self.steps[k] = self.steps.get(k, 0) + 1
        stack = self._stack.pop(k, None)
        sites = self.sites.setdefault(k, [])
        if stack and len(sites) < 4 and stack[0] not in [s[0] for s in sites]:
            sites.append(stack)

    def _update(self, scaler):
        self.updates[id(scaler)] = self.updates.get(id(scaler), 0) + 1

    def finish(self):
        if self.ended_abnormally:
            return
        for k, n in self.steps.items():
            if n and not self.updates.get(k):
                for stack in self.sites.get(k, []):
                    self.sink.record_site(self.code, stack[0], {"scaler_steps": n, "updates": 0}, stack=stack, update=True)


PROBE = StepWithoutUpdateProbe
