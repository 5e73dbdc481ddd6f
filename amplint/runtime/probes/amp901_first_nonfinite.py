"""AMP901 (runtime only, --nan-guard): where the first NaN/Inf of a step appears, and why.

Forward: a global module forward hook keeps, per module call, four flags on the device (output
finite, output holds an inf, output holds a NaN, inputs finite), without a sync.  The origin is the
first call whose inputs were finite and whose output was not; a call that only passed on a
non-finite input is not an origin.

Backward: when a backward starts (verify's `backward` event) the autograd graph of the tensors it
differentiates is walked once and a hook put on each node; the hook keeps the same flags for the
gradients that enter the node and those it produces.  The origin is the first node (in the order
autograd ran them) that turned finite gradients into non-finite ones; its module is the innermost
module whose forward output the walk passed on the way from the loss to that node.  A backward of
a loss scaled by an enabled GradScaler is not watched: non-finite scaled gradients are what
GradScaler's skipped step handles (AMP902 reports a scale that keeps collapsing).

All flags are read once per optimizer step (and at the end of the run), one sync for the step,
as before: this is what the anomaly mode of autograd does without its per-op cost.
"""

from __future__ import annotations

import torch
from torch.nn.modules.module import register_module_forward_hook

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe

# A graph bigger than this is watched only up to this many nodes (the first ones from the loss);
# verify runs a few steps, and a Python hook per node is the probe's cost.
MAX_NODES = 50_000

# Autograd nodes whose non-finite gradient at finite inputs is a pole, not a range overflow:
# d/dx log(x) = 1/x, d/dx sqrt(x) = 1/(2 sqrt(x)), d/dx (a/b) = -a/b^2, pow with a negative exponent.
_POLE_NODES = ("Log", "Div", "Sqrt", "Rsqrt", "Reciprocal", "Pow", "Atan2", "Xlogy", "Digamma", "Polygamma")


def _tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _floating(value) -> list:
    return [t.detach() for t in _tensors(value) if t is not None and t.is_floating_point()]


def _first_tensor(out):
    found = _tensors(out)
    return found[0] if found else None


def _flags(outs: list, ins: list) -> torch.Tensor | None:
    """[output finite, output has an inf, output has a NaN, inputs finite], on the device."""
    if not outs:
        return None
    finite = torch.stack([torch.isfinite(t).all() for t in outs]).all()
    has_inf = torch.stack([torch.isinf(t).any() for t in outs]).any()
    has_nan = torch.stack([torch.isnan(t).any() for t in outs]).any()
    ins_finite = torch.stack([torch.isfinite(t).all() for t in ins]).all() if ins else finite.new_ones(())
    return torch.stack([finite, has_inf, has_nan, ins_finite.to(finite.device)])


def forward_cause(dtype, has_inf: bool, inputs_finite: bool) -> str:
    """What most likely made a module's output non-finite (reported as a hint, not a proof)."""
    if not inputs_finite:
        return "a non-finite input from outside any module (the data, or a function between modules)"
    if has_inf:
        if dtype == torch.float16:
            return "overflow: a value beyond float16's 65,504 from finite inputs"
        return "an infinity from finite inputs: a division by zero or log(0) (or an overflow of its dtype)"
    return "a NaN from finite inputs: 0/0, inf - inf, or sqrt/log of a negative number"


def backward_cause(node_name: str, dtype, has_inf: bool) -> str:
    if has_inf:
        if node_name.startswith(_POLE_NODES):
            return f"an infinite gradient from finite ones in {node_name}: its derivative has a pole (log(0), x/0, sqrt(0))"
        if dtype == torch.float16:
            return "overflow: a gradient beyond float16's 65,504 from finite ones"
        return "an infinite gradient from finite ones: a division by zero or an overflow of its dtype"
    return f"a NaN gradient from finite ones in {node_name}: 0/0, inf * 0, or a derivative undefined there"


class FirstNonfiniteProbe(Probe):
    """See the module docstring.  Hooks fire as modules return, so of nested modules the innermost
    is named first; modules under torch.jit and plain functions between modules are not seen in
    the forward (their non-finite output shows as a module's non-finite input)."""

    code = "AMP901"

    def install(self):
        self.found = False
        self._reset()
        yield register_module_forward_hook(self._hook)
        yield self.on("backward", self._backward)
        yield self.on("opt_step_pre", lambda opt, in_scaler: None if in_scaler else self._check())
        yield self.on("scaler_step_pre", lambda scaler, opt: self._check())

    def _reset(self) -> None:
        self.flags: list = []  # forward, one per module call
        self.calls: list = []  # (module, output dtype)
        # id(output.grad_fn) -> the modules that returned it, innermost first (a module returning
        # its last child's output shares its node), this step
        self.node_module: dict[int, list] = {}
        # id(input.grad_fn) -> the modules that node feeds: the walk leaves a module's subgraph there
        self.feeds: dict[int, list] = {}
        self.keep: list = []  # those grad_fns, so that their ids stay theirs until the check
        self.grad_flags: list = []  # backward, one per node run
        self.grad_calls: list = []  # (node name, module or None, gradient dtype)
        self.handles: list = []

    # --- forward ---------------------------------------------------------------------------
    def _hook(self, module, inputs, output):
        if self.found:
            return None
        outs = _floating(output)
        ins = _floating(inputs)
        flags = _flags(outs, ins)
        if flags is None:
            return None
        self.flags.append(flags)
        self.calls.append((module, outs[0].dtype))
        first = _first_tensor(output)
        grad_fn = getattr(first, "grad_fn", None)
        if grad_fn is not None:
            self.node_module.setdefault(id(grad_fn), []).append(module)
            self.keep.append(grad_fn)
        for t in _tensors(inputs):
            node = getattr(t, "grad_fn", None)
            if node is not None:
                self.feeds.setdefault(id(node), []).append(module)
                self.keep.append(node)
        return None  # NB: a non-None return would replace the module's output

    # --- backward --------------------------------------------------------------------------
    def _backward(self, api, tensors) -> None:
        if self.found:
            return
        for h in self.handles:  # a graph kept with retain_graph: its old hooks go
            h.remove()
        self.handles = []
        roots = [t.grad_fn for t in _tensors(tensors) if getattr(t, "grad_fn", None) is not None]
        scaled = getattr(self.state, "scale_grad_fns", {})
        if not roots or any(id(r) in scaled for r in roots):
            return  # nothing to differentiate, or GradScaler's own business (see the docstring)
        # Breadth first from the loss, carrying the modules the walk is inside (outermost first):
        # a node a module returned enters it, a node that made a module's input leaves it.
        seen: set[int] = set()
        queue = [(r, ()) for r in roots]
        while queue and len(seen) < MAX_NODES:
            node, inside = queue.pop(0)
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            fed = self.feeds.get(id(node), ())
            while inside and inside[-1] in fed:
                inside = inside[:-1]
            for m in reversed(self.node_module.get(id(node), ())):
                if m not in inside:
                    inside = (*inside, m)
            try:
                self.handles.append(node.register_hook(self._node_hook(type(node).__name__, inside[-1] if inside else None)))
            except RuntimeError:  # a node that takes no hooks
                pass
            queue.extend((child, inside) for child, _ in getattr(node, "next_functions", ()))

    def _node_hook(self, name: str, module):
        def hook(grad_inputs, grad_outputs):
            if self.found:
                return None
            produced = [g.detach() for g in grad_inputs if g is not None and g.is_floating_point()]
            flags = _flags(produced, [g.detach() for g in grad_outputs if g is not None and g.is_floating_point()])
            if flags is not None:
                self.grad_flags.append(flags)
                self.grad_calls.append((name, module, produced[0].dtype))
            return None

        return hook

    # --- the one sync per step -------------------------------------------------------------
    def _check(self):
        if self.found or not (self.flags or self.grad_flags):
            self._drop_step()
            return
        forward = self._origin(self.flags)
        if forward is not None:
            idx, has_inf, inputs_finite = forward
            module, dtype = self.calls[idx]
            self._report("forward", module, dtype, forward_cause(dtype, has_inf, inputs_finite))
        else:
            backward = self._origin(self.grad_flags)
            if backward is not None:
                idx, has_inf, _inputs_finite = backward
                name, module, dtype = self.grad_calls[idx]
                self._report("backward", module, dtype, backward_cause(name, dtype, has_inf), node=name)
        self._drop_step()

    def _drop_step(self) -> None:
        for h in self.handles:
            h.remove()
        self._reset()

    @staticmethod
    def _origin(flags: list):
        """(index, has inf, inputs finite) of the first non-finite output with finite inputs, or
        of the first non-finite output when every one had a non-finite input; None if all finite."""
        if not flags:
            return None
        table = torch.stack([f.to("cpu", non_blocking=False) if f.device.type != "cpu" else f for f in flags])
        if bool(table[:, 0].all()):
            return None
        bad = ~table[:, 0]
        origin = (bad & table[:, 3]).nonzero()
        idx = int(origin[0]) if len(origin) else int(bad.nonzero()[0])
        return idx, bool(table[idx, 1]), bool(table[idx, 3])

    def _report(self, where: str, module, dtype, cause: str, node: str | None = None) -> None:
        self.found = True
        evidence = {
            "step": self.sink.step,
            "pass": where,
            "module": self._path(module),
            "module_type": type(module).__name__ if module is not None else None,
            "dtype": torch_state.dtype_name(dtype),
            "cause": cause,
        }
        if node is not None:
            evidence["node"] = node
        self.sink.record_here(self.code, evidence)

    def _path(self, module) -> str | None:
        """Its path from the outermost module of the step that holds it: modules return after
        their children, so the last calls are the outer ones (a loss module called last holds
        nothing and is passed over)."""
        if module is None:
            return None
        tried: set[int] = set()
        for root, _dtype in reversed(self.calls):
            if id(root) in tried:
                continue
            tried.add(id(root))
            for name, m in root.named_modules():
                if m is module:
                    return f"{type(root).__name__}.{name}" if name else type(root).__name__
        return type(module).__name__

    def finish(self):
        self._check()


PROBE = FirstNonfiniteProbe
