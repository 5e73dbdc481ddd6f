"""AMP207 fp16-and-bf16-enabled."""

from __future__ import annotations

from amplint.analysis.frameworks import precision_conflicts
from amplint.rules._base import Rule


class Fp16AndBf16Enabled(Rule):
    """
    ## What it does
    Flags a precision configuration that enables float16 and bfloat16 at once, by literals:

    - `TrainingArguments(fp16=True, bf16=True)` (also through `**kwargs` of a dict literal);
    - a DeepSpeed config whose `fp16` and `bf16` (or `bfloat16`) sections are both
      `"enabled": true`, given to `deepspeed.initialize(config=...)` or to
      `TrainingArguments(deepspeed=...)` as a dict literal (or a name assigned one and never
      changed in place), or as a JSON file named by a literal path (`"ds_config.json"`,
      `json.load(open("ds_config.json"))`), read next to the file or at the project root;
    - `TrainingArguments(fp16=True, deepspeed=...)` whose DeepSpeed config enables bf16 (or
      the other way round).

    The diagnostic points at the call that receives the configuration and names both
    settings.

    Not flagged: one of the two given by a value decided at run time
    (`fp16=not is_bfloat16_supported(), bf16=is_bfloat16_supported()`, an option) or
    `"auto"` (which transformers fills in from the arguments); an fp16 section with
    `"loss_scale": 0` and no `initial_scale_power` (dynamic loss scaling from the default
    power: a valid fp16 config); Lightning's `Trainer(precision="16-mixed",
    strategy="deepspeed_stage_2")` (Lightning writes the DeepSpeed precision itself); a
    config that the code changes after building it (`cfg["bf16"]["enabled"] = False`,
    `cfg.update(...)`, or hands to a function that may).

    Hunted in public code: DeepSpeed configs written as dicts and passed to
    `deepspeed.initialize(config=config)` with `"fp16": {"enabled": True}`
    (Supreeth04/ResNet50-ImageNet-1k, deepspeed_train.py), module-level DeepSpeed dicts
    with `"loss_scale": 0` and `"initial_scale_power": 16` (IDEA-Research/hana,
    config/deepspeed.py), and fine-tuning argument dicts that choose at run time
    (`"fp16": not is_bfloat16_supported(), "bf16": is_bfloat16_supported()`), which must
    stay silent. The checks that make both-on fatal are in transformers'
    `TrainingArguments` and DeepSpeed's config model (quoted below).

    ## Why is this bad?
    float16 and bfloat16 are alternatives: a run computes in one of them. Recent
    transformers raise at start-up when both are set ("At most one of fp16 and bf16 can be
    True"), and DeepSpeed refuses a config that enables both ("bf16 and fp16 modes cannot
    be simultaneously enabled"); older versions silently pick one, so the run may train
    in float16 without the loss scaling the author meant to drop, or in bfloat16 with a
    loss scaler configured for nothing. Either way the configuration does not say what runs.

    ## Example
    ```python
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir="out", fp16=True, bf16=True)
    ```

    Use instead:
    ```python
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir="out", bf16=True)
    ```

    ## Fix safety
    No fix: which precision the run should use (bf16 needs Ampere or newer) is the author's
    choice.
    """

    code = "AMP207"
    name = "fp16-and-bf16-enabled"
    message = "{consumer} enables both float16 ({fp16}) and bfloat16 ({bf16}); enable one"
    # Pre-filter: the configuration is received in the file (`TrainingArguments(...)`,
    # `deepspeed.initialize(...)`), and a bf16 setting or a JSON config is named: in the file,
    # or in a module it imports a `**kwargs` dict or a setting from.
    requires_any = ("trainingarguments", "deepspeed")
    and_requires_any = (("bf16", "bfloat16", ".json"),)
    imported_tokens = (1,)

    def check(self) -> None:
        for conflict in precision_conflicts(self.model):
            self.report(
                conflict.call,
                consumer=conflict.consumer,
                fp16=conflict.fp16,
                bf16=conflict.bf16,
                related=tuple((self.model, node, "the DeepSpeed config is built here") for node in conflict.related),
            )
