"""The kinds of event a training step is made of (backward, unscale_, clip, step, ...).

Apart from the step graphs (`steps`), because the analyses that classify a call for them
(`checkpoints`: a save is `Kind.SAVE`) are below the graphs: `steps` asks them, they name
the kinds.  `steps.Kind` is the same class (the rules import it from there).
"""

from __future__ import annotations

import enum


class Kind(enum.Enum):
    BACKWARD = "backward"
    UNSCALE = "unscale_"
    CLIP = "clip"
    SCALER_STEP = "scaler.step"
    OPT_STEP = "optimizer.step"
    UPDATE = "update"
    ZERO_GRAD = "zero_grad"
    SCALER_NEW = "GradScaler()"
    SAVE = "save"
    LOAD = "load_state_dict"  # `x.load_state_dict(...)`: restoring state (scaler or optimizer role set)
    # A norm of gradients (`p.grad.norm()`, `get_total_norm(grads)`; amplint/analysis/grad_norms.py).
    GRAD_NORM = "grad norm"
    # A library call that unscales a managed backward's gradients (`accelerator.clip_grad_norm_`).
    MANAGED_UNSCALE = "managed unscale"
