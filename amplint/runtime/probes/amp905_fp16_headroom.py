"""AMP905 (runtime only): activations within 10x of float16's largest value, measured early."""

from __future__ import annotations

import torch
from torch.nn.modules.module import register_module_forward_hook

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_site
from amplint.runtime.probes._base import Probe

FP16_MAX = 65504.0
FP16_SMALLEST_NORMAL = 6.103515625e-05
HEADROOM_LIMIT = 10.0  # below this factor a spike or a longer run overflows float16
MEASURED_STEPS = 3  # optimizer steps measured (the first ones; the hooks do nothing after)
REPORTED_MODULES = 3


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for o in out:
            if isinstance(o, torch.Tensor):
                yield o
    elif isinstance(out, dict):
        for o in out.values():
            if isinstance(o, torch.Tensor):
                yield o


class Fp16HeadroomProbe(Probe):
    """For the first optimizer steps, a global forward hook keeps, per module, the largest
    |activation| of its outputs, and a hook on each output tensor the largest |gradient| that
    flows back into it, both on the device (no sync); the gradients of a step are divided by
    that step's loss scale (read once per step).  At the end, one sync: a module whose
    activations come within 10x of 65,504 is reported (in a float16 run, or a float32 run that
    could switch to it: not in a bfloat16 run, whose range is float32's), with the gradient
    magnitudes beside, and bf16 suggested.  Modules under torch.jit and plain functions are
    not seen; the hook fires when a module returns, so a nested module's output is counted for
    it and for each module around it that returns it."""

    code = "AMP905"

    def install(self):
        self.steps = 0
        self.modules: dict[int, dict] = {}  # id(module) -> {"module", "act", "grads": [(step, max)], "site"}
        self.scales: dict[int, object] = {}  # step -> the loss scale (tensor) it stepped with
        self.dtypes: set[str] = set()
        self.root = None
        yield register_module_forward_hook(self._forward)
        yield self.on("opt_step_post", self._optimizer_step)
        yield self.on("scaler_step_pre", self._scaler_step)

    @property
    def measuring(self) -> bool:
        return self.steps < MEASURED_STEPS

    def _forward(self, module, inputs, output):
        if not self.measuring:
            return None
        self.root = module  # the outermost module returns last
        for t in _tensors(output):
            if not t.is_floating_point() or t.numel() == 0:
                continue
            self.dtypes.add(torch_state.dtype_name(t.dtype))
            entry = self.modules.get(id(module))
            if entry is None:
                entry = self.modules[id(module)] = {"module": module, "act": None, "grads": [], "site": user_site(1)}
            peak = t.detach().abs().amax().float()
            entry["act"] = peak if entry["act"] is None else torch.maximum(entry["act"], peak)
            if t.requires_grad:
                step = self.steps
                t.register_hook(lambda g, e=entry, s=step: self._gradient(e, s, g))
        return None  # NB: a non-None return would replace the module's output

    def _gradient(self, entry, step, grad):
        if grad is not None and grad.numel():
            entry["grads"].append((step, grad.detach().abs().amax().float()))
        return None

    def _scaler_step(self, scaler, optimizer):
        if self.measuring and torch_state.scaler_enabled(scaler):
            scale = getattr(scaler, "_scale", None)
            if scale is not None:
                self.scales[self.steps] = scale.detach().clone()

    def _optimizer_step(self, optimizer, in_scaler_step):
        self.steps += 1

    def finish(self):
        if not self.modules or ("bfloat16" in self.dtypes and "float16" not in self.dtypes):
            return  # nothing measured, or a bfloat16 run: float32's range
        entries = [e for e in self.modules.values() if e["act"] is not None]
        acts = torch.stack([e["act"].cpu() for e in entries]).tolist()  # the one sync
        tight = sorted(
            ((a, e) for a, e in zip(acts, entries) if a == a and a * HEADROOM_LIMIT >= FP16_MAX),
            key=lambda pair: -pair[0],
        )
        if not tight:
            return
        worst = []
        for act, entry in tight[:REPORTED_MODULES]:
            grads = [float(g.cpu()) / float(self.scales[s].cpu()) if s in self.scales else float(g.cpu())
                     for s, g in entry["grads"]]
            finite = [g for g in grads if g == g and g not in (float("inf"), float("-inf"))]
            worst.append({
                "module": self._path(entry["module"], self.root),
                "module_type": type(entry["module"]).__name__,
                "max_activation": act,
                "headroom": (FP16_MAX / act) if act else None,
                "max_gradient": max(finite) if finite else None,
                "gradient_below_fp16_normal": bool(finite) and max(finite) < FP16_SMALLEST_NORMAL,
            })
        first = worst[0]
        run = "float16" if "float16" in self.dtypes else "float32"
        over = first["headroom"] is not None and first["headroom"] < 1
        summary = (f"activations of `{first['module']}` reach {first['max_activation']:,.0f}"
                   + (" (beyond float16's 65,504: they overflow)" if over
                      else f", {first['headroom']:.1f}x below float16's largest value (65,504)")
                   + f" in the first {min(self.steps, MEASURED_STEPS) or 1} step(s)"
                   + ("" if run == "float16" else " of this float32 run")
                   + "; bfloat16 has float32's range")
        self.sink.record_site(self.code, first_site(tight), {
            "run_dtype": run,
            "steps_measured": min(self.steps, MEASURED_STEPS),
            "modules": worst,
            "tight_modules": len(tight),
            "summary": summary,
        })

    @staticmethod
    def _path(module, root) -> str:
        """`Model.blocks.3.mlp` (from the outermost module called), else the class name."""
        if root is not None:
            for name, m in root.named_modules():
                if m is module:
                    return f"{type(root).__name__}.{name}" if name else type(root).__name__
        return type(module).__name__


def first_site(tight):
    """The user's line that ran the worst module's forward (its call, or the model's)."""
    for _, entry in tight:
        if entry["site"] is not None:
            return entry["site"]
    return None


PROBE = Fp16HeadroomProbe
