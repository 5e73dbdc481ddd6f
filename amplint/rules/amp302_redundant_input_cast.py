"""AMP302 redundant-input-cast."""

from __future__ import annotations

import re

import libcst as cst

from amplint.analysis.bindings import call_arg
from amplint.analysis.names import dotted
from amplint.analysis.precision import precision_of
from amplint.analysis.torch_api import HALF_CAST_METHODS, MODULE_RETURNING, REDUCED_DTYPE_TOKENS
from amplint.rules._base import Rule


class RedundantInputCast(Rule):
    """
    ## What it does
    Flags `.half()`, `.bfloat16()` and `.to(torch.float16)` / `.to(dtype=...)` casts to
    the dtype of the enclosing, possibly enabled, autocast region, written inside that
    region. Casts of modules (`model.half()`, which AMP301 covers) are not reported.
    Opt-in: a cast is sometimes wanted for an op autocast does not cover.

    ## Why is this bad?
    Autocast already casts the inputs of every op on its lower-precision list to the
    region's dtype, and keeps the ops on its float32 list (softmax, norms, losses) in
    float32. A manual cast forces those numerically sensitive ops to run on already
    rounded inputs, costs an extra copy, and ties the code to one dtype, so switching
    the region to bfloat16 or disabling it leaves stray float16 tensors behind.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x.half())
    ```

    Use instead:
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    ```

    ## Fix safety
    No fix. Removing the cast changes what the code does whenever the input is not
    float32, and its dtype cannot be known statically: autocast does not cast float64
    or integer inputs (`model(x64)` then raises a dtype mismatch where `model(x64.half())`
    ran), `y = x.to(torch.float16)` is a copy that in-place ops on `y` (`y.mul_(0)`)
    would then make on `x`, and ops autocast does not cover run in the input's dtype.
    """

    code = "AMP302"
    name = "redundant-input-cast"
    message = "`{cast}` inside a {dtype} autocast region is redundant"
    default_enabled = False
    requires_any = REDUCED_DTYPE_TOKENS
    and_requires_any = (("autocast",),)

    def check(self) -> None:
        model = self.model
        precision = precision_of(model)
        # the call each call is a direct argument of: `m(x.half())` -> `m(...)`
        consumers = {id(a.value): (site.node, site.scope) for site in model.calls for a in site.node.args}
        for site in model.calls:
            call = site.node
            func = call.func
            if not isinstance(func, cst.Attribute):
                continue
            region = precision.active(call)
            if region is None or region.info.dtypes is None or region.info.managed:
                continue
            name = func.attr.value
            if name in HALF_CAST_METHODS and not call.args:
                dtype = HALF_CAST_METHODS[name]
            elif name == "to":
                dtype_expr = call_arg(call, None, "dtype")
                positional = [a for a in call.args if a.keyword is None and not a.star]
                if dtype_expr is None and len(positional) == 1:
                    dtype_expr = positional[0].value
                dtypes = model.bindings.values.dtypes(dtype_expr, site.scope) if dtype_expr is not None else None
                if not dtypes or len(dtypes) != 1:
                    continue
                dtype = next(iter(dtypes))
                if dtype not in HALF_CAST_METHODS.values():
                    # `autocast(device, torch.float32)` around `x.to(torch.float32)` (diffusers'
                    # RoPE): where autocast does not take float32 it is disabled, and the cast
                    # is what keeps the op in float32.
                    continue
            else:
                continue
            if dtype not in region.info.dtypes or self._is_module(func.value, site.scope):
                continue
            if id(call) in consumers and self._runs_in_input_dtype(*consumers[id(call)]):
                continue  # `FrozenBatchNorm2d(C)(x.half())`: no autocast op casts there
            self.report(call, cast=model.module.code_for_node(call), dtype=dtype)

    def _runs_in_input_dtype(self, consumer: cst.Call, scope) -> bool:
        """The cast goes straight into a module autocast leaves alone, which computes in its
        input's dtype (a norm, pooling, dropout or activation layer built in this module):
        the cast decides that dtype, it is not redundant."""
        func = consumer.func
        built = [func] if isinstance(func, cst.Call) else [v for v, _ in self.model.bindings.values.assigned(func, scope)]
        for value in built:
            while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                   and value.func.attr.value in MODULE_RETURNING and isinstance(value.func.value, cst.Call)):
                value = value.func.value  # `FrozenBatchNorm2d(C).cuda()`
            if isinstance(value, cst.Call):
                name = (dotted(value.func) or "").rsplit(".", 1)[-1]
                if _INPUT_DTYPE_LAYERS.search(name):
                    return True
        return False

    def _is_module(self, receiver: cst.BaseExpression, scope) -> bool:
        """`self.half()` and names an optimizer trains are modules, not inputs."""
        text = dotted(receiver)
        if text is None:
            return False
        if scope.self_name is not None and text == scope.self_name:
            return True
        key = self.model.bindings.key(receiver, scope)
        return any(key in keys for _, keys in self.model.casts.optimizer_inputs)


# Layers whose forward autocast does not cast: they compute in their input's dtype.
_INPUT_DTYPE_LAYERS = re.compile(r"Norm|BN\d?d?$|Pool|Dropout|ReLU|GELU|SiLU|Sigmoid|Tanh|Identity")
