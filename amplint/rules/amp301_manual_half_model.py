"""AMP301 manual-half-model."""

from __future__ import annotations

import re

from amplint.analysis.casts import TRAINING_TOKENS
from amplint.analysis.torch_api import REDUCED_DTYPE_TOKENS
from amplint.rules._base import Rule


_MODULE_TO_DTYPE = re.compile(
    r"^[ \t]*(?:\w+[ \t]*=[ \t]*)?(?:\w+_)?(?:model|net|network|module|encoder|decoder|unet|vae|transformer|backbone)[ \t]*"
    r"\.to\([^)\n]*dtype",
    re.M,
)


_MODULE_CAST_LINE = re.compile(
    r"^[ \t]*(?:\w+[ \t]*=[ \t]*)?(?:\w+_)?(?:model|net|network|module|encoder|decoder|unet|vae|transformer|backbone)[ \t]*"
    r"\.(?:half\(\)|bfloat16\(\)|to\([^)\n]*(?:dtype|float16|half)|apply\(\w*(?:fp16|half|bf16|bfloat16|low_precision)\w*\))",
    re.M,
)


class ManualHalfModel(Rule):
    """
    ## What it does
    Flags `.half()`, `.bfloat16()`, `.to(torch.float16)` / `.to(dtype=...)` with a
    dtype that can be float16 or bfloat16, and `from_pretrained(...,
    torch_dtype=torch.float16)` on a module whose parameters reach an optimizer,
    also `p.data = p.data.to(torch.bfloat16)` over `module.named_parameters()`
    (not under `if not p.requires_grad`: frozen parameters only). An optimizer is
    reached directly, through a project factory (also a factory class looked up by
    name, `dynamic_import_optimizer(args.opt).from_args(model.parameters(), args)`),
    or through another package's trainer: a module handed to `transformers.Trainer`
    (or trl's and sentence-transformers' trainers), and in a subclass of one (also
    through the project's own base classes) `self.model`, the model passed to
    `super().__init__(model=...)` and what an `unwrap...` helper yields for them.

    A cast may be a function handed to `model.apply(fn)` that casts the weights of each
    layer (OpenAI CLIP's `convert_weights`: `l.weight.data = l.weight.data.half()`), and
    the optimizer may take parameter groups appended in a loop over
    `model.named_parameters()` (a weight-decay split).

    The cast module is followed as an object, along its paths: `model.cuda().bfloat16()`
    casts `model`, `for m in (text_encoder, text_encoder_2): m.to(weight_dtype)` each
    encoder; a module cast in a helper that returns it or is handed it (`def make_net():
    net.half(); return net`) is reported when a caller, in this module or one that
    imports it, trains it, and a dtype handed to a function is what its callers pass
    (`build_model(device, model_dtype)` with the dtype chosen from an option). Not
    reported: a cast whose condition excludes the one under which the module's
    parameters join the optimizer (`if not args.train_text_encoder:
    text_encoder.to(weight_dtype)`, trained only `if args.train_text_encoder`), a cast
    once the function's training statements are over (`model.to(save_dtype)` before
    saving), a cast of an object built after the optimizer (a copy re-loaded for a
    validation pipeline), a module frozen on every path that casts it (`if not
    train_unet: unet.to(weight_dtype)` beside `unet.requires_grad_(train_unet)`, or a
    cast beside `requires_grad_(False)`, with nothing unfreezing it or a part of it), and
    a module whose name is bound to another model before the optimizer is built (a base
    cast only to lend its weights to a new one), nor the `from_pretrained` of a configuration, a tokenizer
    or a processor (`AutoConfig.from_pretrained(..., torch_dtype="float16")` records a
    dtype and casts no weights).

    ## Why is this bad?
    Converting the whole model is not mixed precision: the optimizer then holds
    fp16/bf16 weights and state. Updates smaller than half a unit in the last place
    of the weight vanish (lr * grad is often 1e-4 of the weight), Adam's `eps=1e-8`
    rounds to zero in fp16, and the loss plateaus early or turns NaN. Mixed precision
    keeps fp32 master weights and runs the forward pass under `torch.autocast`.
    Frozen low-precision parts (no parameter reaches an optimizer) are fine and are
    not reported. If pure low-precision training is intended (with a
    Kahan-summation or stochastic-rounding optimizer, say), suppress with
    `# noqa: AMP301`.

    ## Example
    ```python
    model = Net().half()
    optimizer = torch.optim.AdamW(model.parameters())
    ```

    Use instead:
    ```python
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters())
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
    ```

    ## Runtime confirmation
    `amplint verify` inspects the optimizer's parameters at its first step and
    reports the share of updates lost (gradient != 0 but the parameter unchanged).
    """

    code = "AMP301"
    name = "manual-half-model"
    message = "`{target}` is cast to {dtype} with `{spelling}` and then trained: the optimizer holds {dtype} weights"
    # Pre-filter: a reduced dtype is spelled (REDUCED_DTYPE_TOKENS); the module must reach an
    # optimizer: OPTIMIZER_PACKAGES, a `create_optimizer`-like helper, an optimizer class
    # looked up by a call, or a trainer that builds one (casts.TRAINING_TOKENS).
    # ... or a module moved to a dtype handed in (`def build_model(device, model_dtype):
    # model.to(device, dtype=model_dtype)`, chosen from an option by the module that calls
    # it).  Not any "dtype": most model files spell one, and parsing them all is slow.
    requires_any = (*REDUCED_DTYPE_TOKENS, _MODULE_TO_DTYPE)
    # ... or casts a module-like name as a statement of its own (a model helper, `def
    # make_net(): net.half(); return net`, trained by its callers in modules that import
    # it: the optimizer may be spelled there only).  Not `importer_tokens`: every model
    # file would be read for the optimizer some script of the project builds.
    and_requires_any = ((*TRAINING_TOKENS, _MODULE_CAST_LINE),)

    def check(self) -> None:
        casts = self.model.casts
        trained: dict[int, list] = {}  # one finding per cast call (`for m in (a, b): m.half()`)
        for cast in casts.module_casts:
            if casts.is_trained(cast):
                trained.setdefault(id(cast.call), []).append(cast)
        for group in trained.values():
            cast = group[0]
            dtype = "float16" if "float16" in cast.dtypes else "bfloat16"
            trainer = casts.trainer_of(cast)
            notes = (trainer,) if trainer is not None else ()
            target = "`, `".join(dict.fromkeys(c.target_text for c in group))
            self.report(cast.call, target=target, dtype=dtype, spelling=cast.spelling, notes=notes)
