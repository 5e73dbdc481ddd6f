"""compare's noise run: fp32 again, with bf16-sized rounding noise on the forward and on every gradient.

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
The forward gets the same treatment: the output of every leaf module (one with no submodules: a
Linear, a Conv, a BatchNorm, an activation) is multiplied elementwise by 1 + 2**-8 * N(0, 1), the
relative error of storing an activation in bfloat16, which is what an autocast forward does at every
op.  Multiplicative here, not additive: an activation is one stored value, not a sum, and a zero (a
ReLU's) or a probability must keep its sign.  Without it the noise run's loss at step 0 equals
fp32's exactly and the first updates differ by one gradient perturbation only, while a mixed run
differs in every op of every forward: an envelope of ~0 over the first updates, so a correct script
whose early updates amplify rounding (a high learning rate, BatchNorm) read as DIVERGED.
2**-8 for fp16 runs too (fp16's unit is 2**-11): one noise run serves both, and the larger unit errs
towards allowing, never towards a false alarm.

Weights, data, initialisation and the script's seeds are untouched (the draws come from a
generator of their own), so a run that strays from fp32 by much more than this one does has a
problem beyond ordinary rounding: overflow, underflow, lost updates, a broken scaler protocol.

Extension entry point `install` (with `fp32_mode:install` and `loss_capture:install`, whose
`AMPLINT_REPLAY_SKIPS` makes the noise run skip the updates the mixed run's GradScaler skipped).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from amplint.runtime.fp32_mode import Handles

RELATIVE = 2.0**-8
NOISE_SEED_ENV = "AMPLINT_NOISE_SEED"  # compare's independent noise draws: each its own noise seed


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


class ForwardNoise:
    """Multiply every floating-point output of a leaf module by 1 + RELATIVE * N(0, 1), elementwise."""

    def __init__(self, relative: float = RELATIVE, seed: int = 1) -> None:
        self.relative = relative
        self.generator = torch.Generator().manual_seed(seed)
        self._hook = torch.nn.modules.module.register_module_forward_hook(self._post)

    def _nudge(self, out: Any) -> Any:
        if not (isinstance(out, torch.Tensor) and out.is_floating_point() and not out.is_sparse and out.numel()):
            return out
        noise = torch.randn(out.shape, generator=self.generator, dtype=torch.float32).to(out.device)
        # NB: out-of-place: the output may be a view of the input (Flatten, Identity) or the input
        # itself (ReLU(inplace=True)); multiplying in place would change what autograd saved.
        return out * (1 + self.relative * noise).to(out.dtype)

    def _post(self, module: torch.nn.Module, args: Any, output: Any) -> Any:
        if next(module.children(), None) is not None:
            return None  # a container: its leaves were nudged already
        if isinstance(output, torch.Tensor):
            return self._nudge(output)
        if type(output) is tuple:  # (out, state) of an RNN and the like; named tuples are left alone
            return tuple(self._nudge(o) for o in output)
        return None

    def remove(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


def install(sink: Any = None) -> Handles:
    """Extension entry point: gradient and forward noise, drawn from `$AMPLINT_NOISE_SEED` (default 0)."""
    draw = int(os.environ.get(NOISE_SEED_ENV) or 0)
    handles = Handles()
    handles.append(GradientNoise(seed=2 * draw))
    handles.append(ForwardNoise(seed=2 * draw + 1))
    return handles
