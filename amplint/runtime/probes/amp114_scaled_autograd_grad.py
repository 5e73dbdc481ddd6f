"""AMP114 probe: torch.autograd.grad of a tensor that an enabled scaler's scale() returned."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe

_MAX_NODES = 64  # how far up the graph to look for a scale() output (`scaler.scale(loss).sum()`)


class ScaledAutogradGradProbe(Probe):
    """At `torch.autograd.grad(outputs, ...)` while an enabled scaler exists: the outputs descend
    from a `scaler.scale(...)` result, so the gradients it returns are multiplied by the scale.
    Evidence: the scale (the factor the gradients carry), the API.

    NB: the probe sees that the gradients are scaled, not whether the code divides them
    afterwards; it confirms a static AMP114 finding at the call and reports nothing alone
    (probes.CONFIRMS_ONLY)."""

    code = "AMP114"

    def install(self):
        yield self.on("backward", self._backward)

    def _backward(self, api, tensors) -> None:
        if api != "torch.autograd.grad":
            return
        scalers = self.state.enabled_scalers()
        if not scalers or not self._from_scale(tensors):
            return
        scale = torch_state.scale_value(scalers[0])
        stack = user_stack(1)
        self.sink.record_site(self.code, stack[0] if stack else None, {"api": api, "scale": scale}, stack=stack)

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


PROBE = ScaledAutogradGradProbe
