"""AMP115 double-loss-scaling."""

from __future__ import annotations

from amplint.analysis.frameworks import scaling_framework_for
from amplint.rules._base import Rule


class DoubleLossScaling(Rule):
    """
    ## What it does
    Flags a hand-made `GradScaler` (`torch.amp.GradScaler`, `torch.cuda.amp.GradScaler`)
    that scales a loss which a framework configured in the same module already scales in
    float16:

    - `Accelerator(mixed_precision="fp16")` (or the old `fp16=True`) whose
      `accelerator.backward(...)` is given the scaler's scaled loss, or whose `prepare`d
      optimizer the scaler steps or unscales;
    - a `LightningModule` that builds and uses its own scaler (in `training_step`, through
      `manual_backward`) while the module's Lightning `Trainer` runs with
      `precision="16-mixed"` (or `16`, `"16"`);
    - a subclass of transformers' `Trainer` that builds its own scaler and scales by hand in
      `training_step` while `TrainingArguments(fp16=True)`.

    The diagnostic points at the scaler's construction and names the framework and the
    setting (a related location points at it).

    Not flagged: the framework configured for bfloat16 (`"bf16"`, `"bf16-mixed"`,
    `bf16=True`), full precision (`"no"`, `"32-true"`, `32`) or true half precision
    (`"16-true"`, which has no scaler); a value decided at run time (an option that may be
    `"no"` or `"bf16"` as well as `"fp16"`); a scaler literally disabled (`enabled=False`)
    or never used to scale; a transformers `Trainer` subclass that uses the Trainer's own
    `self.scaler` (the one older transformers built for `fp16=True`).

    Hunted in public code (the code search, before writing the rule): the framework side
    is common on its own (an Accelerate script with
    `Accelerator(mixed_precision=args.mixed_precision)` that `prepare`s its optimizer and
    calls `accelerator.backward(loss)`; transformers and Lightning trainers configured
    for fp16), and so are project trainers that keep a `GradScaler` beside a class of
    their own named `Trainer` (not transformers': not flagged, the framework must be
    imported). The search found no public script with both scalers in one file; the
    shapes here follow the reports issue 29 cites (Lightning-AI/pytorch-lightning#5140,
    huggingface/accelerate#439).

    ## Why is this bad?
    The framework already multiplies the loss by its own scale and unscales, checks and
    steps through its own scaler. A second scaler multiplies the loss again (the
    gradients carry both scales, so they overflow sooner and every overflow skips a step
    of both scalers), or unscales gradients the other scaler scaled (`scaler.step` on a
    prepared optimizer divides by one scale, and the prepared optimizer's step by the
    other), so the update is off by a factor of the scale. Nothing raises; the loss
    curve just looks worse than in float32.

    ## Example
    ```python
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer = accelerator.prepare(model, optimizer)
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        loss = model(x).mean()
        accelerator.backward(scaler.scale(loss))
        scaler.step(optimizer)
        scaler.update()
    ```

    Use instead:
    ```python
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in loader:
        loss = model(x).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    ```

    ## Fix safety
    No fix: which of the two scalers to keep (and whether the autocast the framework
    enters is wanted too) is the author's choice.
    """

    code = "AMP115"
    name = "double-loss-scaling"
    message = "This `GradScaler` scales a loss that {framework} already scales in float16 (`{setting}`): the loss is scaled twice"
    # Pre-filter: the scaler is built in the file (the finding is at its construction), and so
    # is the framework's configuration (Accelerator / a Lightning Trainer / TrainingArguments).
    requires_any = ("gradscaler",)
    and_requires_any = (("accelerate", "lightning", "trainingarguments"),)

    def check(self) -> None:
        for construction in self.model.bindings.scaler_constructions:
            config = scaling_framework_for(construction, self.model)
            if config is None:
                continue
            self.report(
                construction.call,
                framework=config.framework,
                setting=config.setting,
                related=((self.model, config.call, f"{config.framework} is configured for float16 here"),),
            )
