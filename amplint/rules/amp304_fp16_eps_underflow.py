"""AMP304 fp16-eps-underflow."""

from __future__ import annotations

from amplint.analysis.bindings import call_arg
from amplint.analysis.names import dotted
from amplint.analysis.precision import number_of
from amplint.analysis.casts import OPTIMIZER_LOOKUP_TOKENS
from amplint.analysis.torch_api import FP16_DTYPE_TOKENS
from amplint.analysis.scaler_protocol import protocol
from amplint.rules._base import Rule

# Smallest positive float16 (subnormal) is 2**-24, about 5.96e-8; anything below rounds to 0.
FP16_TINY = 2.0**-24

# Optimizer -> (default eps, position of eps among the positional parameters).
EPS_DEFAULTS = {
    "Adam": (1e-8, 3),
    "AdamW": (1e-8, 3),
    "Adamax": (1e-8, 3),
    "NAdam": (1e-8, 3),
    "RAdam": (1e-8, 3),
    "SparseAdam": (1e-8, 3),
    "RMSprop": (1e-8, 3),
    "Adagrad": (1e-10, 5),
}


class Fp16EpsUnderflow(Rule):
    """
    ## What it does
    Flags the construction of an optimizer whose `eps` is below float16's smallest
    positive value (about 6e-8), including the defaults of `torch.optim.Adam`,
    `AdamW`, `Adamax`, `NAdam`, `RAdam`, `RMSprop` (1e-8) and `Adagrad` (1e-10),
    when it receives the parameters of a module cast to float16 (`.half()`,
    `.to(torch.float16)`, `from_pretrained(torch_dtype=torch.float16)`, or a dtype
    option that can be float16).

    ## Why is this bad?
    With float16 parameters the optimizer state is float16 too, and `eps` is added in
    float16: 1e-8 rounds to exactly 0. Adam's update `m / (sqrt(v) + eps)` then
    divides by zero wherever `v` underflowed, and the weights turn inf/NaN after a few
    steps. bfloat16 represents 1e-8 and is not reported. Keep float32 master weights
    and run the forward pass under autocast; if pure float16 training is intended,
    pass an `eps` float16 can hold, such as `eps=1e-4`.

    ## Example
    ```python
    model = Net().half()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    ```

    Use instead:
    ```python
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    ```

    ## Runtime confirmation
    `amplint verify` checks at the first step whether `eps` rounds to 0 in the
    parameters' dtype and whether the step produced non-finite weights.
    """

    code = "AMP304"
    name = "fp16-eps-underflow"
    message = "`{optimizer}` eps={eps:g} is 0 in float16, and it updates float16 parameters of `{target}`"
    # float16 (not bfloat16) is spelled (FP16_DTYPE_TOKENS); an optimizer is built.
    requires_any = FP16_DTYPE_TOKENS
    and_requires_any = (OPTIMIZER_LOOKUP_TOKENS,)

    def check(self) -> None:
        model = self.model
        casts = model.casts
        # NB: a module frozen wherever it is cast has no update for eps to spoil
        fp16_casts = [c for c in casts.module_casts if "float16" in c.dtypes and not casts._upcast_after(c)
                      and (c.trainable or not casts.frozen_where_cast(c))]
        if not fp16_casts:
            return
        proto = protocol(model)
        for call, keys in casts.optimizer_inputs:
            scope = casts.scope_of_optimizer.get(id(call))
            factory = casts.factory_construction(call, scope) if scope is not None else None
            # `get_std_opt(params, ...)`: the eps is the one the factory passes its optimizer.
            found = self._eps(*factory) if factory is not None else self._eps(call, scope)
            if found is None:
                continue
            name, eps = found
            for cast in fp16_casts:
                if proto.exclusive_calls(cast.call, call):
                    continue  # `if args.fp16: model.half(); Adam(eps=1e-4) else: Adam(...)`
                if any(k == cast.key or cast.key.startswith(k + ".") or k.startswith(cast.key + ".") for k in keys):
                    self.report(call, optimizer=name or "optimizer", eps=eps, target=cast.target_text, **self._evidence(call, factory))
                    break

    def _evidence(self, call, factory) -> dict:
        """Where a factory builds the optimizer: a located note when it is another module."""
        if factory is None:
            return {}
        inner, scope = factory
        what = f"via {dotted(call.func) or 'the factory'}"
        if scope.model is not self.model:
            return {"related": ((scope.model, inner, what),)}
        return {"notes": (what,)}

    def _eps(self, call, scope) -> tuple[str, float] | None:
        """(optimizer name, the eps it uses below float16's reach): a literal argument, else
        the default of the class (of any class a name may hold); None when the eps is fine
        or unknown."""
        model = scope.model if scope is not None and scope.model is not None else self.model
        classes = [q.rsplit(".", 1)[-1] for q in model.bindings.optimizer_classes(call, scope)]
        if not classes:
            qual = model.qualify(call.func) or ""
            classes = [qual.rsplit(".", 1)[-1]] if qual else []
        for name in classes or [""]:
            default, position = EPS_DEFAULTS.get(name, (None, None))
            expr = call_arg(call, position, "eps")
            eps = number_of(expr) if expr is not None else (default if model.bindings.is_optimizer_constructor(call, scope) else None)
            if eps is not None and eps < FP16_TINY:
                return name, eps
        return None
