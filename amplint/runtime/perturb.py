"""compare's noise run: fp32 again, with bf16-sized rounding noise on every gradient.

How far a correct mixed-precision run may drift from fp32 depends on the training itself: a
stable one keeps rounding-sized differences rounding-sized; a noisy one (a high learning rate,
small batches) amplifies them until the curves differ by as much as the mini-batch noise.  The
noise run measures exactly that amplification: it is the fp32 reference again, except that before
every optimizer step each gradient tensor g gets g + 2**-8 * rms(g) * N(0, 1) elementwise, 2**-8
being bfloat16's rounding unit.  Additive and scaled by the tensor's RMS, not by each element,
because that is what rounding in a reduced-precision matmul does: the error of a sum is relative
to the size of its terms, so elements near zero (terms that cancelled) get large relative errors,
and Adam-style optimizers turn those into full-sized updates.  (A purely multiplicative nudge was
tried first: it left a noisy correct script's bf16 run 20x outside the envelope it predicted.)
Weights, data, initialisation and the script's seeds are untouched (the draws come from a
generator of their own), so a run that strays from fp32 by much more than this one does has a
problem beyond ordinary rounding: overflow, underflow, lost updates, a broken scaler protocol.

Extension entry point `install` (with `fp32_mode:install` and `loss_capture:install`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

RELATIVE = 2.0**-8


class GradientNoise:
    """Before each optimizer step, add RELATIVE * rms(g) * N(0, 1) to every gradient g, elementwise."""

    def __init__(self, relative: float = RELATIVE, seed: int = 0) -> None:
        self.relative = relative
        self.generator = torch.Generator().manual_seed(seed)
        self._hook = register_optimizer_step_pre_hook(self._pre)

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is not None and g.is_floating_point() and not g.is_sparse:
                        noise = torch.randn(g.shape, generator=self.generator, dtype=torch.float32).to(g.device)
                        rms = g.detach().float().pow(2).mean().sqrt()
                        g.add_((self.relative * rms * noise).to(g.dtype))

    def remove(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


def install(sink: Any = None) -> GradientNoise:
    return GradientNoise()
