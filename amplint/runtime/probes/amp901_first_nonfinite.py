"""AMP901 (runtime only, --nan-guard): the first module whose forward output is NaN/Inf."""

from __future__ import annotations

import torch
from torch.nn.modules.module import register_module_forward_hook

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (list, tuple)):
        for o in out:
            if isinstance(o, torch.Tensor):
                return o
    if isinstance(out, dict):
        for o in out.values():
            if isinstance(o, torch.Tensor):
                return o
    return None


class FirstNonfiniteProbe(Probe):
    """A global forward hook keeps one "all finite?" flag per module call on the device (no sync);
    once per optimizer step (and at the end) the flags are read with one sync.  The first flagged
    call names the module: its path from the outermost module called, its class, its output dtype.
    NB: hooks fire when a module returns, so of nested modules the innermost is flagged first;
    modules under torch.jit and plain functions are not seen."""

    code = "AMP901"

    def install(self):
        self.flags: list = []
        self.calls: list = []
        self.found = False
        yield register_module_forward_hook(self._hook)
        yield self.on("opt_step_pre", lambda opt, in_scaler: None if in_scaler else self._check())
        yield self.on("scaler_step_pre", lambda scaler, opt: self._check())

    def _hook(self, module, inputs, output):
        if self.found:
            return None
        t = _first_tensor(output)
        if t is None or not t.is_floating_point():
            return None
        self.flags.append(torch.isfinite(t.detach()).all())
        self.calls.append((module, t.dtype))
        return None  # NB: a non-None return would replace the module's output

    def _check(self):
        if self.found or not self.flags:
            return
        flags, calls = self.flags, self.calls
        self.flags, self.calls = [], []
        ok = torch.stack(flags)
        if bool(ok.all()):  # the one sync per step
            return
        idx = int((~ok).nonzero()[0])
        module, dtype = calls[idx]
        root = calls[-1][0]
        path = type(root).__name__
        for name, m in root.named_modules():
            if m is module:
                path = f"{type(root).__name__}.{name}" if name else path
                break
        else:
            path = type(module).__name__
        self.found = True
        self.sink.record_here(
            self.code,
            {"step": self.sink.step, "module": path, "module_type": type(module).__name__, "dtype": torch_state.dtype_name(dtype)},
        )

    def finish(self):
        self._check()


PROBE = FirstNonfiniteProbe
