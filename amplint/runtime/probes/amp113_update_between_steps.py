"""AMP113 probe: an update after which the same scaler steps an optimizer it had not stepped in
the window that update closed."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe


class UpdateBetweenStepsProbe(Probe):
    """Per enabled scaler, the optimizers `scaler.step` stepped since the previous update.  At
    `update()` the window closes and the update's stack is kept; a `scaler.step(opt)` after it
    on an optimizer the closed window did not step records that update: it ran between the
    steps of two of the scaler's optimizers.  Evidence: the optimizers stepped before the update
    and the one stepped after it, the scale before and after the update.

    NB: optimizers stepped in alternate iterations (a GAN that trains one network per batch)
    give the same sequence at run time; the probe confirms a static AMP113 finding at the
    update and reports nothing alone (probes.CONFIRMS_ONLY)."""

    code = "AMP113"

    def install(self):
        self.stepped: dict[int, list[str]] = {}
        self.stepped_ids: dict[int, set[int]] = {}
        self.closed: dict[int, tuple] = {}
        self.scale_before: dict[int, float | None] = {}
        yield self.on("scaler_step_pre", self._step)
        yield self.on("update_pre", self._update_pre)
        yield self.on("update_post", self._update_post)

    def _step(self, scaler, opt) -> None:
        if not torch_state.scaler_enabled(scaler):
            return
        k = id(scaler)
        closed = self.closed.pop(k, None)
        if closed is not None:
            stack, ids, names, before, after = closed
            if id(opt) not in ids:
                evidence = {"stepped_before_update": names, "stepped_after_update": type(opt).__name__,
                            "scale_before_update": before, "scale_after_update": after}
                self.sink.record_site(self.code, stack[0] if stack else None, evidence, stack=stack)
        self.stepped.setdefault(k, []).append(type(opt).__name__)
        self.stepped_ids.setdefault(k, set()).add(id(opt))

    def _update_pre(self, scaler) -> None:
        if torch_state.scaler_enabled(scaler):
            self.scale_before[id(scaler)] = torch_state.scale_value(scaler)

    def _update_post(self, scaler) -> None:
        if not torch_state.scaler_enabled(scaler):
            return
        k = id(scaler)
        ids = self.stepped_ids.pop(k, set())
        names = self.stepped.pop(k, [])
        if ids:
            self.closed[k] = (user_stack(1), ids, names, self.scale_before.pop(k, None), torch_state.scale_value(scaler))
        else:
            self.closed.pop(k, None)


PROBE = UpdateBetweenStepsProbe
