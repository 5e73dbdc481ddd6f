"""AMP103 probe: a plain backward whose gradients scaler.step then divides by the scale."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe

_MAX_NODES = 64  # how far up the graph to look for a scale() output (scaled / accum, etc.)
_MAX_LEAF_WALK = 100_000  # how far to look for the parameters a plain backward writes to


class BackwardNotScaledProbe(Probe):
    """A backward on a tensor that does not descend from a `scaler.scale(...)` output, in an
    iteration where an enabled scaler then steps: the gradients were never multiplied by the
    scale, and scaler.step divides them by it.  Evidence: scale, the backward API.

    A plain backward whose gradients the script clears (`zero_grad()` of the optimizer or a
    module holding every parameter it wrote to) before the scaler steps is dropped: its
    gradients never reach the step (an estimate before training: Fisher, a gradient norm).
    So is one that wrote only to tensors the stepped optimizer does not hold (the input
    perturbation whose `.grad` virtual adversarial training reads).
    When its parameters cannot be told (a very large graph), it is kept.

    A scaler that never scaled anything holds no scale: torch's step raises there (`_scale is
    None`), so the evidence says `step_raises` instead of a division by the scale."""

    code = "AMP103"

    def install(self):
        self.pending: list = []
        yield self.on("backward", self._backward)
        yield self.on("scaler_step_pre", self._step)
        yield self.on("update_post", lambda s: self.pending.clear())
        yield self.on("zero_grad", self._zero_grad)

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
        self.pending.append((api, user_stack(1), _leaf_ids(tensors)))

    def _zero_grad(self, owner, params):
        if not self.pending:
            return
        cleared = {id(p) for p in params}
        kept = []
        for api, stack, leaves in self.pending:
            if leaves is not None:
                leaves = leaves - cleared
                if not leaves:
                    continue  # every gradient it wrote is gone before any step
            kept.append((api, stack, leaves))
        self.pending = kept

    def _step(self, scaler, opt):
        if not self.pending or not torch_state.scaler_enabled(scaler):
            return
        scale = torch_state.scale_value(scaler)
        if scale is None:
            # Nothing was ever scaled in the run, so the scaler holds no scale yet: torch's step
            # asserts `_scale is not None` and raises before dividing anything (the bug stops the
            # run on a GPU too).  Still this backward's finding, but no division to report.
            ev = {"scale": None, "scaled_by": 1.0, "scale_never_set": True, "step_raises": True}
        else:
            ev = {"scale": scale, "scaled_by": 1.0, "divided_by": scale}
        stepped = _param_ids(opt)
        for api, stack, leaves in self.pending:
            if leaves is not None and stepped is not None and not (leaves & stepped):
                continue  # it wrote only to tensors this optimizer does not step (VAT's `d.grad`)
            self.sink.record_site(self.code, stack[0] if stack else None, {"backward": api, **ev}, stack=stack)
        self.pending.clear()


def _leaf_ids(tensors) -> set[int] | None:
    """ids of the leaf tensors (parameters) a backward from `tensors` accumulates into, or None
    when the graph is too large to walk."""
    roots = [t for t in (tensors if isinstance(tensors, (list, tuple)) else (tensors,)) if hasattr(t, "grad_fn")]
    out: set[int] = {id(t) for t in roots if t.grad_fn is None and getattr(t, "requires_grad", False)}
    todo = [t.grad_fn for t in roots if t.grad_fn is not None]
    seen: dict[int, object] = {}  # NB: the nodes themselves, so no id is reused during the walk
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen[id(fn)] = fn
        if len(seen) > _MAX_LEAF_WALK:
            return None
        var = getattr(fn, "variable", None)
        if var is not None:
            out.add(id(var))
        todo.extend(nf for nf, _ in getattr(fn, "next_functions", ()) if nf is not None)
    return out


PROBE = BackwardNotScaledProbe


def _param_ids(opt) -> set[int] | None:
    """The ids of the parameters `opt` steps; None when they cannot be read."""
    try:
        return {id(p) for group in opt.param_groups for p in group["params"]}
    except Exception:  # NB: a wrapper without param_groups: judge as before
        return None
