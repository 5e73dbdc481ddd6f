"""AMP502 unguarded-log-sqrt-div."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.bindings import call_arg
from amplint.analysis.names import dotted
from amplint.analysis.precision import may_run_fp16, number_of, precision_of
from amplint.analysis.reaching import dominating_value
from amplint.rules._base import Rule

_SINGULAR = {"log": "log", "log2": "log", "log10": "log", "sqrt": "sqrt", "rsqrt": "sqrt"}
_SINGULAR_QUALS = {f"torch.{n}": op for n, op in _SINGULAR.items()}
# Reductions that can be 0 and so make a zero denominator.
_ZERO_PRONE = frozenset({"sum", "norm", "std", "var", "sqrt", "vector_norm"})
# Calls whose result is bounded away from 0 (or that say the author thought about it).
_GUARDS = frozenset({"clamp", "clamp_", "clamp_min", "clamp_min_", "clip", "clip_", "maximum", "max", "fmax", "softplus", "exp", "add", "add_"})
# Calls whose every element is > 0: a sum of them is no zero.
_POSITIVE = frozenset({"exp", "softmax", "sigmoid", "softplus"})


class UnguardedLogSqrtDiv(Rule):
    """
    ## What it does
    Flags `torch.log` / `.log()` (also `log2`, `log10`), `torch.sqrt` / `.sqrt()` /
    `rsqrt`, and a division by a reduction that can be zero (`x / x.norm()`,
    `a / mask.sum()`), whose argument or denominator has no guard (no `clamp`,
    `clamp_min`, `maximum`, no `+ eps`), in code that runs under float16 autocast: a
    statement inside such a region, or a loss function or class (its name says
    `loss`) in a module that enters float16 autocast. Opt-in: many such calls are
    fine because their inputs are positive by construction.

    ## Why is this bad?
    In float16 small positive values underflow to 0 (below 6e-8) and sigmoid or
    exp outputs saturate at 0 and 1 much earlier than in float32. `log(0)` is -inf,
    `sqrt` has an infinite gradient at 0 and `x / 0` is inf; one such element makes
    the loss NaN, and GradScaler then skips steps forever or the scale collapses.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        p = torch.sigmoid(model(x))
        loss = -(y * torch.log(p)).mean()
    ```

    Use instead:
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        p = torch.sigmoid(model(x))
        loss = -(y * torch.log(p.clamp_min(1e-4))).mean()
        # better still: F.binary_cross_entropy_with_logits(model(x), y)
    ```

    ## Runtime confirmation
    `amplint verify --nan-guard` names the first op whose output is inf/NaN.
    """

    code = "AMP502"
    one_per_reference = True  # each reference (each operation) is its own finding
    name = "unguarded-log-sqrt-div"
    message = "`{expr}` has no clamp or eps and can produce inf/NaN in float16"
    default_enabled = False
    requires_any = ("log", "sqrt", "/")
    and_requires_any = (("autocast",),)

    def check(self) -> None:
        model = self.model
        self._judging: set = set()
        self.precision = precision_of(model)
        self.fp16_autocast = any(may_run_fp16(info) for _, _, info in self.precision.autocast_sites)
        if not self.fp16_autocast:
            return
        for site in model.calls:
            call = site.node
            qual = model.qualify(call.func)
            arg = None
            if qual in _SINGULAR_QUALS:
                arg = call_arg(call, 0, "input")
            elif qual is None and isinstance(call.func, cst.Attribute) and call.func.attr.value in _SINGULAR and not call.args:
                if dotted(call.func.value) in ("math", "np", "numpy"):
                    continue
                arg = call.func.value
            else:
                continue
            if arg is None or self._guarded(arg, site.scope) or not self._in_fp16_loss(call, site.scope):
                continue
            self.report(call, expr=model.module.code_for_node(call))
        for div in self.precision.divisions:
            right = div.right
            scope = self.precision.scope_of(div)
            if not self._zero_prone(right) or self._guarded(right, scope) or not self._in_fp16_loss(div, scope):
                continue
            self.report(div, expr=model.module.code_for_node(div))

    def _in_fp16_loss(self, node: cst.CSTNode, scope) -> bool:
        region = self.precision.active(node)
        if region is not None:
            return may_run_fp16(region.info)
        if self.precision.regions_of(node):
            return False  # autocast(enabled=False)
        names = [getattr(getattr(scope, "node", None), "name", None)]
        if scope.cls is not None:
            names.append(scope.cls.node.name)
        return any(n is not None and "loss" in n.value.lower() for n in names)

    @staticmethod
    def _zero_prone(expr: cst.BaseExpression) -> bool:
        while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("float", "to", "type_as"):
            expr = expr.func.value
        if not isinstance(expr, cst.Call):
            return False
        name = (dotted(expr.func) or (expr.func.attr.value if isinstance(expr.func, cst.Attribute) else "")).split(".")[-1]
        return name in _ZERO_PRONE

    def _guarded(self, expr: cst.BaseExpression, scope, depth: int = 0) -> bool:
        """A literal, an addition (`x + eps`), a clamp/max, a sum of strictly positive
        terms, or a name assigned from one."""
        if number_of(expr) is not None or isinstance(expr, (cst.Integer, cst.Float)):
            return True
        summed = _summed(expr)
        if summed is not None and self._positive(summed, scope, depth):
            return True
        found = False

        class V(cst.CSTVisitor):
            def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
                nonlocal found
                if isinstance(node.operator, cst.Add):
                    found = True

            def visit_Call(self, node: cst.Call) -> None:
                nonlocal found
                name = node.func.attr.value if isinstance(node.func, cst.Attribute) else (dotted(node.func) or "")
                if name.split(".")[-1] in _GUARDS:
                    found = True

        expr.visit(V())
        if found:
            return True
        if depth < 2 and isinstance(expr, (cst.Name, cst.Attribute)):
            assigned = self.model.bindings.values.assigned(expr, scope)
            return bool(assigned) and all(self._guarded(v, s, depth + 1) for v, s in assigned)
        return False

    def _positive(self, expr: cst.BaseExpression, scope, depth: int = 0) -> bool:
        """Every element is > 0: `exp`/`softmax`/`sigmoid` of anything, a positive literal over
        a guarded denominator (`1 / (counts + eps)`: NeMo's class weights), a name assigned
        only from those, or such a tensor divided by a guarded denominator."""
        if isinstance(expr, cst.Call):
            name = expr.func.attr.value if isinstance(expr.func, cst.Attribute) else (dotted(expr.func) or "")
            return name.split(".")[-1] in _POSITIVE
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Divide):
            left = number_of(expr.left) if not isinstance(expr.left, cst.Integer) else float(expr.left.value)
            numerator = (left is not None and left > 0) or self._positive(expr.left, scope, depth)
            return numerator and self._guarded(expr.right, scope, depth + 1)
        if depth < 3 and isinstance(expr, (cst.Name, cst.Attribute)):
            # NB: `w = w / w.sum()` after `w = 1 / (n + eps)`: while a name is being judged its
            # own reassignments keep what its other assignments give (a greatest fixpoint)
            key = (id(scope), dotted(expr))
            if key in self._judging:
                return True
            reaching = dominating_value(scope.node, expr, key[1]) if key[1] in scope.assignments else None
            if reaching is not None:  # the one value the name holds here (NeMo's default of zeros is earlier)
                return self._positive(reaching, scope, depth + 1)
            assigned = self.model.bindings.values.assigned(expr, scope)
            self._judging.add(key)
            try:
                return bool(assigned) and all(self._positive(v, s, depth + 1) for v, s in assigned)
            finally:
                self._judging.discard(key)
        return False


def _summed(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x` of `x.sum(...)` / `torch.sum(x, ...)`, else None."""
    if not isinstance(expr, cst.Call):
        return None
    if isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "sum" and dotted(expr.func.value) != "torch":
        return expr.func.value
    if dotted(expr.func) == "torch.sum" and expr.args:
        return expr.args[0].value
    return None
