"""AMP209 fp16-on-bf16-checkpoint."""

from __future__ import annotations

from amplint.analysis.bf16_loads import fp16_runs
from amplint.rules._base import Rule


class Fp16OnBf16Checkpoint(Rule):
    """
    ## What it does
    Flags float16 mixed precision that runs a model whose weights the same module loads
    in bfloat16 (`from_pretrained(..., torch_dtype=torch.bfloat16)`, or `dtype=`):

    - `TrainingArguments(fp16=True)` given to the transformers `Trainer` (or a subclass)
      that trains that model;
    - `Accelerator(mixed_precision="fp16")` whose `prepare(...)` takes it;
    - a `torch.autocast` region whose dtype is float16 (cuda's default included) in
      which the model is called, in the function that loaded it (or anywhere, for a
      module-level model).

    The diagnostic points at the float16 setting (the arguments' call, the
    `Accelerator(...)`, the autocast `with`), with the load as a related location.

    Not flagged: a load whose dtype may be another (`torch.bfloat16 if args.bf16 else
    torch.float16`: one option usually switches the autocast dtype too); float16 decided
    at run time (`fp16=not is_bfloat16_supported()`, an option); bfloat16 autocast; a
    checkpoint loaded without a dtype (its `config.json` may say bfloat16, but amplint
    does not read checkpoints that are not in the repository).

    Hunted in public code: fine-tuning scripts that load Llama-3 with
    `torch_dtype=torch.bfloat16` and pass `TrainingArguments(fp16=True)` to `Trainer`
    (Regrant-Dev/AI_Trainer, train.py); the failure is reported in
    ymcui/Chinese-LLaMA-Alpaca#534 and explained in pytorch/pytorch#99640 ("bf16-pretrained
    models most of the time can't operate in the fp16 numerical range").

    ## Why is this bad?
    Loading the weights in bfloat16 says the checkpoint lives in bfloat16's range, which
    is float32's. Its activations and gradients routinely exceed float16's largest value
    (65,504): under float16 autocast the forward overflows to inf, the GradScaler skips
    the step and halves its scale again and again ("loss scale already at minimum"), or
    the loss is NaN from the first steps. The weights being bfloat16 also gives the
    optimizer bfloat16 master weights (AMP301). Mixed precision in bfloat16 keeps the
    range and needs no loss scaling.

    ## Example
    ```python
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    model = AutoModelForCausalLM.from_pretrained("meta-llama/Meta-Llama-3-8B", torch_dtype=torch.bfloat16)
    args = TrainingArguments(output_dir="out", fp16=True)
    Trainer(model=model, args=args, train_dataset=dataset).train()
    ```

    Use instead:
    ```python
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    model = AutoModelForCausalLM.from_pretrained("meta-llama/Meta-Llama-3-8B", torch_dtype=torch.bfloat16)
    args = TrainingArguments(output_dir="out", bf16=True)
    Trainer(model=model, args=args, train_dataset=dataset).train()
    ```

    ## Fix safety
    No fix: bfloat16 needs a GPU that supports it (Ampere or newer); on an older one the
    choice is float32, which is the author's to make.
    """

    code = "AMP209"
    name = "fp16-on-bf16-checkpoint"
    message = "float16 mixed precision ({how}) runs `{model}`, whose weights are loaded in bfloat16; use bfloat16 mixed precision"
    # Pre-filter: the model is loaded by `from_pretrained` with a bfloat16 dtype (the dtype
    # may be a constant of an imported module) and float16 is asked for in the file.
    requires_any = ("from_pretrained",)
    and_requires_any = (("bfloat16", "bf16"), ("trainingarguments", "accelerator", "autocast"))
    imported_tokens = (1,)

    def check(self) -> None:
        for run in fp16_runs(self.model):
            load = run.load
            self.report(
                run.node,
                model=load.target,
                how=run.how,
                related=((self.model, load.call, f"the weights are loaded in bfloat16 (`{load.keyword}=`)"),),
            )
