"""AMP107 probe: scaler.update / unscale_ on micro-batches that do not step."""

from __future__ import annotations

from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe


class UpdatePerMicrobatchProbe(Probe):
    """An update with no scaler.step since the previous update (and the unscale_ calls of such an
    iteration) confirm: the scale moves per micro-batch while the optimizer steps per N.
    Evidence: updates and steps so far."""

    code = "AMP107"

    def install(self):
        self.steps_since: dict[int, int] = {}
        self.unscales: dict[int, list] = {}
        self.updates: dict[int, int] = {}
        self.steps: dict[int, int] = {}
        yield self.on("scaler_step_pre", self._step)
        # A plain optimizer.step() also steps this iteration (that is AMP104's business, not ours).
        yield self.on("opt_step_pre", lambda opt, in_scaler: None if in_scaler else self._plain_step())
        yield self.on("unscale_pre", self._unscale)
        yield self.on("update_pre", self._update)

    def _step(self, scaler, opt):
        k = id(scaler)
        self.steps_since[k] = self.steps_since.get(k, 0) + 1
        self.steps[k] = self.steps.get(k, 0) + 1
        self.unscales.pop(k, None)

    def _plain_step(self):
        for k in list(self.steps_since) + [id(s) for s in list(self.state.scalers)]:
            self.steps_since[k] = self.steps_since.get(k, 0) + 1

    def _unscale(self, scaler, opt):
        self.unscales.setdefault(id(scaler), []).append(user_stack(1))

    def _update(self, scaler):
        k = id(scaler)
        self.updates[k] = self.updates.get(k, 0) + 1
        if self.steps_since.get(k, 0) == 0:
            ev = {"updates": self.updates[k], "scaler_steps": self.steps.get(k, 0), "stepped_this_iteration": False}
            self.sink.record_here(self.code, ev, update=True)
            for stack in self.unscales.get(k, []):
                self.sink.record_site(self.code, stack[0] if stack else None, ev, stack=stack, update=True)
        self.steps_since[k] = 0
        self.unscales.pop(k, None)


PROBE = UpdatePerMicrobatchProbe
