"""AMP103 probe: a plain backward whose gradients scaler.step then divides by the scale."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe

_MAX_NODES = 64  # how far up the graph to look for a scale() output (scaled / accum, etc.)


class BackwardNotScaledProbe(Probe):
    """A backward on a tensor that does not descend from a `scaler.scale(...)` output, in an
    iteration where an enabled scaler then steps: the gradients were never multiplied by the
    scale, and scaler.step divides them by it.  Evidence: scale, the backward API."""

    code = "AMP103"

    def install(self):
        self.pending: list = []
        yield self.on("backward", self._backward)
        yield self.on("scaler_step_pre", self._step)
        yield self.on("update_post", lambda s: self.pending.clear())

    def _from_scale(self, tensors) -> bool:
        roots = [t for t in (tensors if isinstance(tensors, (list, tuple)) else (tensors,)) if hasattr(t, "grad_fn")]
        seen, todo = 0, [t.grad_fn for t in roots if t.grad_fn is not None]
        fns = self.state.scale_grad_fns
        while todo and seen < _MAX_NODES:
            fn = todo.pop()
            seen += 1
            if fns.get(id(fn)) is fn:
                return True
            todo.extend(nf for nf, _ in getattr(fn, "next_functions", ()) if nf is not None)
        return False

    def _backward(self, api, tensors):
        if not self.state.enabled_scalers() or self._from_scale(tensors):
            return
        self.pending.append((api, user_stack(1)))

    def _step(self, scaler, opt):
        if not self.pending or not torch_state.scaler_enabled(scaler):
            return
        scale = torch_state.scale_value(scaler)
        for api, stack in self.pending:
            self.sink.record_site(self.code, stack[0] if stack else None, {"backward": api, "scale": scale, "scaled_by": 1.0, "divided_by": scale}, stack=stack)
        self.pending.clear()


PROBE = BackwardNotScaledProbe
