"""AMP303 default-dtype-half."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.bindings import call_arg
from amplint.analysis.casts import OPTIMIZER_TOKENS
from amplint.analysis.default_dtype import builds_only_frozen_modules, creates_parameters, default_dtype_sets
from amplint.analysis.steps import Kind
from amplint.analysis.torch_api import REDUCED_DTYPE_TOKENS
from amplint.prefilter import Attr, CodeWord, Use
from amplint.rules._base import Rule

_SET_DEFAULT_DTYPE = "torch.set_default_dtype"
_SET_DEFAULT_TENSOR_TYPE = "torch.set_default_tensor_type"
_HALF_TENSOR_TYPES = {
    "torch.HalfTensor": "float16",
    "torch.cuda.HalfTensor": "float16",
    "torch.BFloat16Tensor": "bfloat16",
    "torch.cuda.BFloat16Tensor": "bfloat16",
}
_TRAINING_KINDS = (Kind.BACKWARD, Kind.OPT_STEP, Kind.SCALER_STEP)


class DefaultDtypeHalf(Rule):
    """
    ## What it does
    Flags `torch.set_default_dtype(torch.float16 / torch.bfloat16)` (also through a
    variable or option that can hold those dtypes) and
    `torch.set_default_tensor_type(torch.cuda.HalfTensor)` in a module that trains
    (it calls backward, steps an optimizer or builds one).

    A project helper that passes
    its parameter on to `torch.set_default_dtype` (a `with set_default_dtype(dtype):`
    context manager, also in another module) counts as the call, with the dtype it is
    given: a value of a dtype map, or what a `get_dtype(cfg.dtype)` function returns.
    A `with` block that builds only modules its function freezes (`.eval()`,
    `requires_grad_(False)`: a teacher or reference model) is not reported, nor one that
    creates no parameter: it only calls methods of modules built before it (recomputing
    RoPE caches or buffers after sharding, `m.to_empty(...)`, an init in place), read in
    the project, also in other modules, when their class is known.

    ## Why is this bad?
    Every floating-point tensor and parameter created afterwards is half precision:
    the model's weights, the optimizer's state, `torch.zeros` accumulators and loss
    buffers. That is pure low-precision training, not mixed precision: small updates
    vanish, Adam's `eps=1e-8` is 0 in float16, and running sums lose their low bits.
    Inference-only code that sets the default dtype is not reported.

    ## Example
    ```python
    torch.set_default_dtype(torch.float16)
    model = Net()
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
    `amplint verify` reads `torch.get_default_dtype()` at the first optimizer step, and
    counts the optimizer's parameters that were created while the reported call's low
    default dtype was in effect (a context manager restores it before training).
    """

    code = "AMP303"
    name = "default-dtype-half"
    message = "`{call}` makes every new tensor and parameter {dtype} in training code"
    # Pre-filter: `set_default_dtype` / `set_default_tensor_type` in code; a reduced dtype
    # (or a `HalfTensor` type name); training: an optimizer (casts.py), an unmanaged
    # backward (as in AMP201) or a `.step`.
    requires_any = (CodeWord("set_default_dtype"), CodeWord("set_default_tensor_type"))
    and_requires_any = ((*REDUCED_DTYPE_TOKENS, "halftensor"), (*OPTIMIZER_TOKENS, Use("backward"), Attr("step")))
    # The call and the dtype may come from the project: a helper that passes its parameter
    # to `set_default_dtype` (amplint/analysis/default_dtype.py), a dtype map or a
    # `get_dtype` function of another module.  Training is judged in the file itself.
    imported_tokens = (0, 1)

    def check(self) -> None:
        model = self.model
        found = []
        for site in default_dtype_sets(model):
            dtypes = model.bindings.values.dtypes(site.dtype, site.scope) or frozenset()
            half = sorted(dtypes & {"float16", "bfloat16"})
            if half and creates_parameters(site) and not builds_only_frozen_modules(site):
                found.append((site.call, site.spelling, " or ".join(half), site))
        for site in model.calls:
            if model.qualify(site.node.func) == _SET_DEFAULT_TENSOR_TYPE:
                half = self._tensor_type(call_arg(site.node, 0, "t"))
                if half:
                    found.append((site.node, _SET_DEFAULT_TENSOR_TYPE, " or ".join(half), None))
        if not found or not self._trains():
            return
        for call, spelling, dtype, site in found:
            related = notes = ()
            if site is not None and site.sink is not None:
                via = f"via {site.helper.qualname}"
                if site.sink.model is not model:
                    related = ((site.sink.model, site.sink.call, via),)
                else:
                    notes = (via,)
            self.report(call, call=spelling, dtype=dtype, related=related, notes=notes)

    def _tensor_type(self, expr: cst.BaseExpression | None) -> list[str]:
        if expr is None:
            return []
        qual = self.model.qualify(expr)
        if qual is None and isinstance(expr, cst.SimpleString):
            qual = expr.evaluated_value if isinstance(expr.evaluated_value, str) else None
        dtype = _HALF_TENSOR_TYPES.get(qual or "")
        return [dtype] if dtype else []

    def _trains(self) -> bool:
        model = self.model
        if any(model.bindings.is_optimizer_constructor(site.node) for site in model.calls):
            return True
        return any(e.kind in _TRAINING_KINDS and not e.managed for e in model.steps.all_events())
