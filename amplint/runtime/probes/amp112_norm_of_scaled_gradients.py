"""AMP112 probe: a gradient norm taken while the gradients are still multiplied by the scale."""

from __future__ import annotations

import math
import torch

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe

def _tensors(arg) -> list:
    if isinstance(arg, torch.Tensor):
        return [arg]
    if isinstance(arg, (list, tuple)):
        return [t for t in arg if isinstance(t, torch.Tensor)]
    return []


def _value(result) -> float | None:
    try:
        if isinstance(result, torch.Tensor) and result.numel() == 1:
            return float(result)
        if isinstance(result, (list, tuple)) and result and all(isinstance(t, torch.Tensor) for t in result):
            return float(torch.stack([t.float() for t in result]).norm())
    except Exception:  # noqa: BLE001
        return None
    return None


class NormOfScaledGradientsProbe(Probe):
    """At a norm call made by the user's code (`p.grad.norm()`, `torch.norm`, `vector_norm`,
    `_foreach_norm`, `get_total_norm`, and `clip_grad_norm_(max_norm=inf)`): some measured tensor
    is the `.grad` (or a view of it) of a parameter of an optimizer that an enabled scaler, which
    scaled since its last update, holds READY with a scale != 1.  Evidence: the norm seen, the
    scale, the norm after unscaling (norm / scale)."""

    code = "AMP112"

    def install(self):
        yield self.on("grad_norm", self._norm)
        yield self.on("clip_pre", self._clip_pre)
        yield self.on("clip_post", self._clip_post)
        # Which optimizer holds each gradient, rebuilt after anything that changes gradients.
        for event in ("backward", "unscale_pre", "update_post", "opt_step_post"):
            yield self.on(event, self._forget)
        # A norm of scaled gradients that the user divides by the scale is the true norm (the
        # static rule says so too): the norms of a scaled window are held until it ends, and
        # dropped if the user's code read `scaler.get_scale()` in it.
        yield self.on("get_scale", self._scale_read)
        for event in ("unscale_pre", "scaler_step_pre", "update_post", "opt_step_post"):
            yield self.on(event, self._window_ends)
        self._clip = None
        self._owners = None
        self._pending: list[tuple[dict, list]] = []
        self._divided = False

    def _scale_read(self, scaler, result) -> None:
        if self.state.scaled_since_update.get(id(scaler)):
            self._divided = True

    def _window_ends(self, *args) -> None:
        pending, self._pending = self._pending, []
        if not self._divided:
            for evidence, stack in pending:
                self._keep(evidence, stack)
        self._divided = False

    def finish(self) -> None:
        self._window_ends()

    def _forget(self, *args) -> None:
        self._owners = None

    def _gradient_owners(self) -> dict:
        if self._owners is None:
            self._owners = {
                (p.grad.untyped_storage().data_ptr(), p.grad.numel()): opt
                for opt in list(self.state.optimizers)
                for g in opt.param_groups
                for p in g["params"]
                if p.grad is not None and p.grad.numel()
            }
        return self._owners

    # --- which scaler holds these gradients still scaled? ----------------------------------
    def _scaled_owner(self, tensors):
        scalers = [s for s in self.state.enabled_scalers() if self.state.scaled_since_update.get(id(s))]
        if not scalers or not tensors:
            return None
        owners = self._gradient_owners()
        found = {owners.get((t.untyped_storage().data_ptr(), t.numel())) for t in tensors if t.numel()}
        for opt in found - {None}:
            for scaler in scalers:
                scale = torch_state.scale_value(scaler)
                if torch_state.scaler_stage(scaler, opt) == "READY" and scale not in (None, 1.0):
                    return scaler, opt, scale
        return None

    def _record(self, what: str, hit, result, skip: int) -> None:
        scaler, opt, scale = hit
        norm = _value(result)
        evidence = {"norm": what, "scale": scale, "optimizer": type(opt).__name__, "norm_seen": norm,
                    "norm_unscaled": None if norm is None else norm / scale}
        self._pending.append((evidence, self._stack()))

    @staticmethod
    def _stack() -> list:
        """The user's frames (the norm's line first); every frame above is amplint's or torch's."""
        return user_stack(1)

    def _keep(self, evidence: dict, stack: list) -> None:
        record = self.sink.record_site(self.code, stack[0] if stack else None, evidence, stack=stack)
        seen = record["evidence"].get("norm_seen")
        norm = evidence["norm_seen"]
        if seen is not None and not math.isfinite(seen) and norm is not None and math.isfinite(norm):
            record["evidence"].update(evidence)  # keep a finite measurement over a calibration overflow

    # --- the norm functions (interception.NORM_ENTRY_POINTS, called by the user's code) -----
    def _norm(self, name, first, result) -> None:
        if self.state.scaled_since_update and any(self.state.scaled_since_update.values()):
            hit = self._scaled_owner(_tensors(first))
            if hit is not None:
                self._record(name, hit, result, skip=1)

    # --- clip_grad_norm_(..., max_norm=inf): a measurement -------------------------------------
    def _clip_pre(self, name, params, args, kwargs):
        self._clip = None
        max_norm = args[0] if args else kwargs.get("max_norm")
        if name != "clip_grad_norm_" or max_norm is None or not math.isinf(float(max_norm)):
            return
        self._clip = self._scaled_owner([p.grad for p in params if p.grad is not None])

    def _clip_post(self, name, params, args, kwargs, result):
        hit, self._clip = self._clip, None
        if hit is not None:
            self._record("clip_grad_norm_(max_norm=inf)", hit, result, skip=1)


PROBE = NormOfScaledGradientsProbe
