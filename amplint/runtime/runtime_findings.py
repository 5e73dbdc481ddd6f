"""The documentation of verify's runtime-only findings (AMP9xx): what `amplint explain AMP901` prints.

They are not rules (nothing in the source shows them, `check` never reports them), so they are not
in the rule registry; their pages (`rules/AMP901.md` ...) are generated from here like the rules'
pages (amplint/docs.py).  No torch here: `amplint explain` must not import it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeFinding:
    code: str
    name: str
    doc: str

    def page(self) -> str:
        return f"# {self.code} {self.name}\n\n*runtime only: found by `amplint verify`, never by `check`*\n\n{inspect.cleandoc(self.doc)}\n"


FIRST_NONFINITE = RuntimeFinding("AMP901", "first-nonfinite-module", """
    ## What it does
    With `amplint verify --nan-guard`, names where the first NaN or Inf of a run appeared, in the
    forward or in the backward, and the likely cause:

    - forward: the first module whose inputs were finite and whose output was not: its path in
      the model (`GPT.transformer.h.3.mlp.c_fc`), its class, its output dtype;
    - backward (when the forward was finite): the first autograd node that turned finite
      gradients into non-finite ones (`SqrtBackward0`), and the module whose forward ran it;
    - the cause: an overflow (an inf from finite values in float16, beyond 65,504), a pole
      (log(0), x/0, sqrt(0): an inf from finite values, or a derivative at such a point), or an
      invalid operation (a NaN from finite values: 0/0, inf - inf, sqrt of a negative), and the
      optimizer step it happened at.

    ## Why is this bad?
    A NaN spreads: one step later every weight is NaN and the loss curve just stops. Where it
    started is the useful fact, and it is usually a reduced-precision range problem: a float16
    activation above 65504 (T5's feed-forward in fp16 is the classic), an `exp` or a division
    without a guard, a bf16-pretrained model run in fp16.

    ## How verify finds it
    A global forward hook keeps four flags per module call on the device (output finite, holds
    an inf, holds a NaN, inputs finite), with no sync. When a backward starts, the autograd graph
    of its loss is walked once and each node gets a hook that keeps the same flags for the
    gradients it receives and produces. The flags are read once per optimizer step: one sync per
    step, where autograd's anomaly mode checks every op. Hooks fire as modules return, so of
    nested modules the innermost is named; an op between modules is named by the module whose
    forward ran it. `torch.jit` modules and plain functions are not seen in the forward (what they
    break shows as a module's non-finite input). The backward of a loss scaled by an enabled
    GradScaler is not watched: GradScaler skips those steps itself, and AMP902 reports a scale
    that keeps falling. The cause is a reading of the flags and the node, not a proof.

    ## What to do
    Look at the named module's inputs and output range in that dtype: run it in float32 (autocast
    off for that module), clamp or rescale, or use bfloat16, whose range is float32's; for a
    pole, guard the argument (`clamp_min(eps)`, `x.sqrt()` only where `x > 0`). Under
    `--device cpu` CPU autocast keeps softmax, layer_norm, exp and sum in reduced precision where
    CUDA uses float32, so a NaN seen in emulation may not happen on the GPU.

    To accept it at that line: `# noqa: AMP901`.
""")

SKIPPED_STEPS = RuntimeFinding("AMP902", "skipped-steps", """
    ## What it does
    Reports a GradScaler whose loss scale fell below 1, or that skipped at least 3 optimizer steps
    and at least half of the steps after its calibration, with the scale history.

    ## Why is this bad?
    GradScaler skips a step when the scaled gradients overflow and halves the scale. A few skips at
    the start are normal: the scale comes down from `init_scale` to a value that fits (calibration,
    not counted). Skipping half of the steps after that means half the batches train nothing, and a
    scale below 1 means the gradients overflow even unscaled: the model itself produces values out
    of float16's range. GradScaler's own docstring says a bf16-pretrained model is often the cause.

    ## How verify finds it
    The global optimizer step hook does not fire when GradScaler skips, so skipped steps are counted
    without a device sync; the scale after each update is kept as a device tensor and read once at
    the end.

    ## What to do
    Find where the overflow starts (`amplint verify --nan-guard`, AMP901), run that part in float32
    or bfloat16, or check the learning rate. To accept it: `# noqa: AMP902` on the GradScaler line.
""")

LOST_UPDATES = RuntimeFinding("AMP903", "lost-updates", """
    ## What it does
    For the first few steps of an optimizer holding float16 or bfloat16 parameters, measures the
    share of elements whose gradient was non-zero but whose value did not change in the step: the
    update was lost to rounding.

    ## Why is this bad?
    Near 60 float16 values are 1/32 apart; an SGD update of 0.01 rounds back to the same value, so
    the weight never moves while the loss says training runs. This is why mixed precision keeps
    float32 master weights (Micikevicius et al., 2018) and why `model.half()` training stalls.

    ## How verify finds it
    A copy of the low-precision parameters before the step, compared after it, for a few steps.
    When every low-precision parameter of that optimizer was cast by hand at a line `check`
    reported (AMP301, confirmed), the loss is that finding's `lost_update_share`, not a finding
    of its own.

    ## What to do
    Keep the parameters in float32 and use autocast (AMP301's fix); or keep float32 master weights
    in the optimizer. To accept it: `# noqa: AMP903` on the optimizer line.
""")

ADVANCED_ON_SKIPPED_STEP = RuntimeFinding("AMP904", "advanced-on-skipped-step", """
    ## What it does
    Reports an LR scheduler that stepped, or an `AveragedModel` (EMA, SWA) that updated, after
    GradScaler skipped the optimizer's step and before its next real one: how many times, at
    the line that stepped it, and how many more while the scale was calibrating.

    ## Why is this bad?
    GradScaler skips `optimizer.step()` when the scaled gradients hold inf/NaN; the weights do not
    move, but `scheduler.step()` on the next line advances the schedule as if they had
    (pytorch/pytorch#55585): a warm-up or a one-cycle schedule runs ahead of the training, and an
    EMA averages weights that did not change. A few skips while the scale comes down from
    `init_scale` are expected in every fp16 run (PyTorch warns "Detected call of
    `lr_scheduler.step()` before `optimizer.step()`" then): they are counted apart and make no
    finding alone. Skips after that mean the schedule and the weights drift apart.

    ## How verify finds it
    The global optimizer step hook does not fire on a skipped step; torch's scheduler classes'
    `step` and `AveragedModel.update_parameters` are wrapped, and an advance between a skip and
    that optimizer's next applied step is counted (once per skipped step and scheduler). A Python
    step counter (`global_step += 1`) is not seen.

    ## What to do
    Step the scheduler only when the optimizer stepped: compare the scale before and after
    `scaler.update()` (it decreases exactly when the step was skipped), or use a framework that
    does this for you (Lightning, Accelerate's `optimizer.step_was_skipped`). To accept it:
    `# noqa: AMP904` on the scheduler's line.
""")

FP16_HEADROOM = RuntimeFinding("AMP905", "fp16-headroom", """
    ## What it does
    Measures, in the first optimizer steps, the largest |activation| each module outputs and the
    largest |gradient| that flows back into it (divided by the loss scale), and reports the
    modules whose activations come within 10x of float16's largest value (65,504), worst first,
    with their gradients beside and whether those are below float16's smallest normal
    (6.1e-5). In a float16 run, and in a float32 run (as advice before switching); not in a
    bfloat16 run, whose range is float32's.

    ## Why is this bad?
    GradScaler protects the gradients, not the forward: an activation beyond 65,504 is inf in
    float16, and the loss is NaN from there on. A model whose activations sit a few times below
    that limit in the first steps overflows later, when the weights grow or a batch is unusual,
    and the loss scale collapses step after step while every skipped step looks like a
    gradient problem. Said early, the remedy is cheap.

    ## How verify finds it
    A global forward hook (on for the first 3 optimizer steps, then doing nothing) keeps one
    running maximum per module on the device, and a hook on each output tensor the gradient's;
    one sync at the end reads them all. Modules under torch.jit and plain functions are not
    seen; an output returned by nested modules counts for each of them.

    ## What to do
    Train in bfloat16 (`torch.autocast(device, dtype=torch.bfloat16)`, no GradScaler needed),
    or keep the reported modules in float32 (`torch.autocast(device, enabled=False)` around
    them, with `.float()` inputs), or normalise before them (a pre-norm, a smaller init). To
    accept it: `# noqa: AMP905` on the reported line.
""")

ALL = (FIRST_NONFINITE, SKIPPED_STEPS, LOST_UPDATES, ADVANCED_ON_SKIPPED_STEP, FP16_HEADROOM)
BY_CODE = {f.code: f for f in ALL}
BY_NAME = {f.name: f for f in ALL}


def lookup(key: str) -> RuntimeFinding | None:
    """The runtime finding named by its code (any case) or name, else None."""
    return BY_CODE.get(key.upper()) or BY_NAME.get(key)
