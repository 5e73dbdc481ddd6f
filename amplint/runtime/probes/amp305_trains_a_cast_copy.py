"""AMP305 probe: an optimizer holds a cast copy of a parameter (or the parameter a copy replaced)
that no module's forward pass uses."""

from __future__ import annotations

import sys
import weakref

import torch

from amplint.runtime.attribution import is_user_file, user_stack
from amplint.runtime.patching import wrap
from amplint.runtime.probes._base import Probe

_CASTS = ("to", "float", "half", "bfloat16", "double", "type")


class TrainsACastCopyProbe(Probe):
    """Records where the user's code casts an `nn.Parameter` to another dtype (the source and the
    copy, by identity), and which parameters the modules hold after their forward passes.  At an
    optimizer's first steps, a parameter it holds that is such a source or copy and that no module
    ran with confirms the cast site.  Evidence: the optimizer, how many such parameters, dtypes."""

    code = "AMP305"

    def install(self):
        self.casts: dict[int, tuple] = {}  # id(tensor) -> (weakref, stack, "source" | "copy", dtypes)
        self.seen: set[int] = set()
        self.steps: dict[int, int] = {}
        for name in _CASTS:
            yield wrap(torch.Tensor, name, self._maker)
        yield torch.nn.modules.module.register_module_forward_hook(self._forward)
        yield self.on("opt_step_pre", self._step)

    def _maker(self, orig):
        probe = self

        def cast(tensor, *args, **kwargs):
            result = orig(tensor, *args, **kwargs)
            try:
                if (isinstance(tensor, torch.nn.Parameter) and isinstance(result, torch.Tensor)
                        and result.dtype != tensor.dtype and is_user_file(sys._getframe(2).f_code.co_filename)
                        and len(probe.casts) < 10_000):
                    stack = user_stack(1)
                    dtypes = (str(tensor.dtype).replace("torch.", ""), str(result.dtype).replace("torch.", ""))
                    probe.casts[id(tensor)] = (weakref.ref(tensor), stack, "source", dtypes)
                    probe.casts[id(result)] = (weakref.ref(result), stack, "copy", dtypes)
            except Exception as exc:  # noqa: BLE001 - never break the user's code
                probe.sink.error(probe.code, exc)
            return result

        return cast

    def _forward(self, module, args, output):
        if self.casts:  # NB: nothing to confirm until a parameter was cast
            self.seen.update(id(p) for p in module._parameters.values() if p is not None)

    def _step(self, opt, in_scaler_step):
        if not self.casts or self.steps.get(id(opt), 0) >= 3:
            return
        self.steps[id(opt)] = self.steps.get(id(opt), 0) + 1
        if not self.seen:
            return  # no forward pass seen yet: cannot tell
        stray: dict = {}
        for group in opt.param_groups:
            for p in group["params"]:
                hit = self.casts.get(id(p))
                if hit is None or hit[0]() is not p or id(p) in self.seen:
                    continue
                _, stack, kind, dtypes = hit
                key = tuple(stack[0].as_list()) if stack else None
                entry = stray.setdefault(key, {"stack": stack, "params": 0, "kind": kind, "dtypes": dtypes})
                entry["params"] += 1
        for entry in stray.values():
            stack = entry["stack"]
            what = "a cast copy no module uses" if entry["kind"] == "copy" else "the parameter a cast copy replaced"
            self.sink.record_site(
                self.code, stack[0] if stack else None,
                {"optimizer": type(opt).__name__, "stray_params": entry["params"], "holds": what,
                 "cast": f"{entry['dtypes'][0]} -> {entry['dtypes'][1]}"},
                stack=stack,
            )


PROBE = TrainsACastCopyProbe
