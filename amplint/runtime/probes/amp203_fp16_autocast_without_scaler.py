"""AMP203 probe: training under float16 autocast with no enabled GradScaler."""

from __future__ import annotations

import torch

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe

# GradScaler's default init_scale (what a scaler would have multiplied by), then lower scales, as
# its backoff would reach, for gradients that overflow at 65536.
_PROBE_SCALES = (2.0**16, 2.0**12, 2.0**8, 2.0**4, 2.0)
_MEASURED_BACKWARDS = 1  # two extra backward passes each; the first step says enough


class Fp16AutocastWithoutScalerProbe(Probe):
    """A backward after an enabled float16 autocast region entered with gradients on, on a tensor that no enabled scaler
    scaled, then an optimizer step: recorded at the autocast `with` (and the user frames that entered it: a
    project wrapper's own `with` matches too).

    Evidence of underflow proper: before the first such backward, the gradients of the same loss
    are computed again with `torch.autograd.grad` (same graph, `retain_graph=True`, nothing
    written to `.grad`): as is, and multiplied by 65536 (GradScaler's default scale).
    `underflow_share` is the share of gradient elements that are exactly zero as is but finite and
    non-zero when scaled: gradients float16 flushed to zero that a scaler would have kept.
    Elements zero both ways (a dead ReLU, a zero-initialised weight) are `structural_zero_share`,
    not underflow.  Overflow is measured on its own: where the scaled gradients overflow (inf/NaN,
    `overflow_share_at_scale`), a scaled element says nothing about underflow, so the scale is
    lowered (2**12, 2**8, 2**4, 2, as GradScaler's backoff would) until no element overflows, and
    the underflow is measured there (`probe_scale`).  The figures then add up:
    `zero_share_as_is` = `underflow_share` + `structural_zero_share`.  When even x2 overflows,
    underflow is not measured and `why_not` says so.  NB: not measured under torch.distributed
    (an extra backward through DDP would disturb its reducer) or when the loss is not a scalar;
    `zero_grad_share` is then the only figure and says so."""

    code = "AMP203"

    def install(self):
        self.fp16_site = None
        self.pending = None
        self.measured = 0
        self.underflow: dict | None = None
        yield self.on("autocast_enter", self._enter)
        yield self.on("backward", self._backward)
        yield self.on("opt_step_pre", self._step)

    def _enter(self, ctx):
        device, dtype, enabled, site = self.state.last_autocast
        # A region entered with gradients off (`with torch.no_grad(), autocast(...)`: validation,
        # generation) builds no graph, so no later backward can run through its float16 outputs.
        if enabled and dtype == torch.float16 and torch.is_grad_enabled():
            # The user frames too: a region entered inside the project's own wrapper (a
            # contextmanager, a helper) is found at the wrapper's `with` as well as at its autocast.
            self.fp16_site = (device, site, user_stack(1))

    def _backward(self, api, tensors):
        if self.fp16_site is None:
            return
        if any(torch_state.scaler_enabled(s) for s in list(self.state.scalers)):
            return
        self.pending = self.fp16_site
        if self.measured < _MEASURED_BACKWARDS:
            self.measured += 1
            self.underflow = self._measure(tensors)

    def _params(self) -> list:
        seen, out = set(), []
        for opt in list(self.state.optimizers):
            for g in opt.param_groups:
                for p in g["params"]:
                    if p.requires_grad and id(p) not in seen:
                        seen.add(id(p))
                        out.append(p)
        return out

    def _measure(self, tensors) -> dict:
        loss = tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1 else tensors
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or loss.grad_fn is None:
            return {"underflow_measured": False, "why_not": "the backward is not of one scalar loss"}
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return {"underflow_measured": False, "why_not": "not measured under torch.distributed"}
        params = self._params()
        if not params:
            return {"underflow_measured": False, "why_not": "no optimizer built yet"}
        grad = getattr(torch.autograd.grad, "__amplint_original__", torch.autograd.grad)
        plain = grad(loss, params, retain_graph=True, allow_unused=True)
        pairs = [(a, p) for a, p in zip(plain, params) if a is not None]
        if not pairs:
            return {"underflow_measured": False, "why_not": "no parameter received a gradient"}
        with torch.no_grad():
            total = sum(a.numel() for a, _ in pairs)
            zero_as_is = sum(int((a == 0).sum()) for a, _ in pairs)
            bad_as_is = sum(int((~torch.isfinite(a)).sum()) for a, _ in pairs)
        out: dict = {"zero_share_as_is": round(zero_as_is / total, 4), "overflow_share_as_is": round(bad_as_is / total, 4)}
        overflowed: dict[str, float] = {}
        for scale in _PROBE_SCALES:
            scaled = grad(loss * scale, [p for _, p in pairs], retain_graph=True, allow_unused=True)
            with torch.no_grad():
                # elements finite as is that the scale pushed out of range (inf, or NaN from inf - inf)
                bad = sum(int((~torch.isfinite(b) & torch.isfinite(a)).sum()) for (a, _), b in zip(pairs, scaled) if b is not None)
                if bad:
                    overflowed[f"{scale:g}"] = round(bad / total, 4)
                    continue
                underflow = structural = 0
                for (a, _), b in zip(pairs, scaled):
                    zero = a == 0
                    b = torch.zeros_like(a) if b is None else b
                    underflow += int((zero & (b != 0) & torch.isfinite(b)).sum())
                    structural += int((zero & (b == 0)).sum())
            if overflowed:
                out["overflow_share_at_scale"] = overflowed
            out.update(underflow_measured=True, underflow_share=round(underflow / total, 4),
                       structural_zero_share=round(structural / total, 4), probe_scale=scale)
            return out
        out["overflow_share_at_scale"] = overflowed
        out.update(underflow_measured=False,
                   why_not=f"the gradients overflow float16 even multiplied by {_PROBE_SCALES[-1]:g}: underflow cannot be told from overflow")
        return out

    def _step(self, opt, in_scaler):
        if self.pending is None:
            return
        device, site, stack = self.pending
        self.pending = None
        zeros = total = 0
        for g in opt.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    zeros += int((p.grad == 0).sum())
                    total += p.grad.numel()
        ev = {"autocast_dtype": "float16", "device": device, "scaler": None,
              "zero_grad_share": round(zeros / total, 4) if total else None}
        ev.update(self.underflow or {"underflow_measured": False, "why_not": "the backward ran before any float16 region"})
        if not ev["underflow_measured"]:
            ev["zero_grad_share_note"] = "zeros of any cause (ReLU, zero-initialised weights): not a measure of underflow"
        self.sink.record_site(self.code, site, ev, stack=stack)


PROBE = Fp16AutocastWithoutScalerProbe
