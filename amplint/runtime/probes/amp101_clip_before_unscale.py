"""AMP101 probe: clipping while the owning optimizer's gradients are still scaled."""

from __future__ import annotations

import math

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


class ClipBeforeUnscaleProbe(Probe):
    """At each clip call: for every enabled scaler that scaled since its last update, and every
    optimizer holding a clipped parameter, the scaler's stage for that optimizer.  READY means the
    gradients are still multiplied by the scale, unless another optimizer holding them (the inner
    optimizer of a wrapper) was unscaled: GradScaler divides the gradients, not an optimizer.  Evidence: stage, scale, the norm clip measured,
    norm/scale (the true norm) and max_norm."""

    code = "AMP101"

    def install(self):
        yield self.on("clip_pre", self._pre)
        yield self.on("clip_post", self._post)
        self._pending = None

    def _scaled_owner(self, params):
        ids = {id(p) for p in params}
        scaling = [s for s in self.state.enabled_scalers() if self.state.scaled_since_update.get(id(s))]
        owners = [o for o in list(self.state.optimizers) if any(id(p) in ids for g in o.param_groups for p in g["params"])]
        if len(scaling) > 1 and owners and all(
                any(torch_state.scaler_stage(s, o) in ("UNSCALED", "STEPPED") for s in scaling) for o in owners):
            # A GAN with a scaler per network: G's loss flows through D, but D's gradients were
            # zeroed and D's own scaler unscaled them before this clip (hostile pass 25).  Every
            # optimizer of the clipped parameters: a clip over both models, one unscaled, is
            # still a clip of scaled gradients (hostile pass 26).
            return None
        if len(scaling) > 1:
            # A scaler per model: only the one whose scaled loss reached these parameters
            # scaled their gradients (the other one's READY stage for this optimizer says
            # nothing; hostile pass 23 confirmed AMP101 on correct code that way).  Where none
            # is seen to reach them (a scaled gradient handed on by `x.backward(x_d.grad)` at a
            # detached stage boundary), each stays a suspect (hostile pass 26).
            reaching = [s for s in scaling
                        if (reached := self.state.scaled_parameters(s)) is None or reached & ids]
            scaling = reaching or scaling
        for scaler in scaling:
            if not owners:
                continue
            stages = [(opt, torch_state.scaler_stage(scaler, opt)) for opt in owners]
            if any(stage in ("UNSCALED", "STEPPED") for _, stage in stages):
                # Unscaled through an optimizer that holds these parameters: a wrapper around it
                # (fairseq's AMPOptimizer) shows READY for the same, already unscaled, gradients.
                continue
            for opt, stage in stages:
                if stage == "READY":
                    return scaler, opt, stage
        return None

    def _pre(self, name, params, args, kwargs):
        max_norm = args[0] if args else kwargs.get("max_norm")
        if name == "clip_grad_norm_" and max_norm is not None and math.isinf(float(max_norm)):
            self._pending = None
            return  # `max_norm=inf` clips nothing: a norm of scaled gradients is AMP112's
        hit = self._scaled_owner(params)
        if hit is None:
            self._pending = None
            return
        scaler, opt, stage = hit
        scale = torch_state.scale_value(scaler)
        if scale is None or scale == 1.0:
            self._pending = None
            return
        if name == "clip_grad_norm_" and max_norm is not None and float(max_norm) >= scale:
            # A threshold in scaled space (`max_norm * scaler.get_scale()`, mmf's clip helper):
            # the scaled norm and the threshold grow alike, so it clips as after unscale_
            # (the static rule's `_threshold_scaled_alike`).
            self._pending = None
            return
        self._pending = (scaler, opt, stage, scale)

    def _post(self, name, params, args, kwargs, result):
        if self._pending is None:
            return
        scaler, opt, stage, scale = self._pending
        self._pending = None
        ev = {"clip": f"torch.nn.utils.{name}", "stage": stage, "scale": scale, "optimizer": type(opt).__name__}
        if name == "clip_grad_norm_":
            max_norm = args[0] if args else kwargs.get("max_norm")
            norm = float(result) if result is not None else None
            ev.update(norm_at_clip=norm, norm_unscaled=None if norm is None else norm / scale, max_norm=float(max_norm) if max_norm is not None else None)
        else:
            clip_value = args[0] if args else kwargs.get("clip_value")
            ev.update(clip_value=float(clip_value) if clip_value is not None else None, clip_value_unscaled_equivalent=None if clip_value is None else float(clip_value) / scale)
        rec = self.sink.record_here(self.code, ev)
        old, new = rec["evidence"].get("norm_at_clip"), ev.get("norm_at_clip")
        if old is not None and not math.isfinite(old) and new is not None and math.isfinite(new):
            rec["evidence"].update(ev)  # the first clips often see inf/NaN (calibration skips): keep a finite one


PROBE = ClipBeforeUnscaleProbe
