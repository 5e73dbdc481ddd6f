"""AMP111 probe: a norm of gradients already unscaled, taken in a window where the user's code
also reads the loss scale."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.probes.amp112_norm_of_scaled_gradients import NormOfScaledGradientsProbe, _tensors, _value


class ScaleDividedAfterUnscaleProbe(NormOfScaledGradientsProbe):
    """At a norm the user's code takes (`p.grad.norm()`, `torch.norm`, `get_total_norm`, ...) of
    gradients that an enabled scaler holds UNSCALED or STEPPED (already divided by the scale), in
    an unscaled window (from `unscale_` or `scaler.step` to the next backward or `update`) in
    which the user's code also reads `scaler.get_scale()`, before or after the norm.  Evidence:
    the scale, the optimizer and its stage, the norm seen.

    NB: the probe sees that the scale was read next to the norm, not the division itself; it
    confirms a static AMP111 finding and reports nothing alone (probes.CONFIRMS_ONLY)."""

    code = "AMP111"

    def install(self):
        yield self.on("grad_norm", self._norm)
        yield self.on("get_scale", self._scale_read)
        for event in ("backward", "unscale_pre", "update_post", "opt_step_post"):
            yield self.on(event, self._forget)
        for event in ("backward", "update_post"):
            yield self.on(event, self._window_ends)
        self._owners = None
        self._pending = []
        self._divided = False

    def _scale_read(self, scaler, result) -> None:
        if torch_state.scaler_enabled(scaler):
            self._divided = True

    def _norm(self, name, first, result) -> None:
        hit = self._unscaled_owner(_tensors(first))
        if hit is not None:
            scaler, opt, stage = hit
            evidence = {"norm": name, "scale": torch_state.scale_value(scaler), "optimizer": type(opt).__name__,
                        "stage": stage, "norm_seen": _value(result)}
            self._pending.append((evidence, self._stack()))

    def _unscaled_owner(self, tensors):
        scalers = [s for s in self.state.enabled_scalers()]
        if not scalers or not tensors:
            return None
        owners = self._gradient_owners()
        found = {owners.get((t.untyped_storage().data_ptr(), t.numel())) for t in tensors if t.numel()}
        for opt in found - {None}:
            for scaler in scalers:
                stage = torch_state.scaler_stage(scaler, opt)
                if stage in ("UNSCALED", "STEPPED"):
                    return scaler, opt, stage
        return None

    def _window_ends(self, *args) -> None:
        pending, self._pending = self._pending, []
        if self._divided:
            for evidence, stack in pending:
                self.sink.record_site(self.code, stack[0] if stack else None, evidence, stack=stack)
        self._divided = False


PROBE = ScaleDividedAfterUnscaleProbe
