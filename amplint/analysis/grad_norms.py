"""Which calls measure gradients, and which library calls unscale them first.

A gradient norm is worth knowing about when it runs on the gradients a scaled backward
left behind: until `scaler.unscale_(optimizer)` (or the library's own unscale) every
`.grad` is the true gradient times the loss scale, and so is any norm of them.  The
step graphs (amplint/analysis/steps.py) mark such calls as `Kind.GRAD_NORM` events:

- `p.grad.norm()`, `p.grad.data.norm(2)`, `g.norm()` for a `g` drawn from gradients;
- `torch.norm(...)`, `torch.linalg.vector_norm(...)`, `torch._foreach_norm(...)`,
  `torch.nn.utils.get_total_norm(...)` of gradients (the argument mentions `.grad`,
  directly or through the names it is built from: `grads = [p.grad for p in params]`);
- Lightning's `grad_norm(module, norm_type)`, which measures `.grad` by definition.

`clip_grad_norm_(params, max_norm=float("inf"))` clips nothing and is only a way of
measuring: `measures_only` tells it apart (a CLIP event, read as a norm by AMP112 and
left alone by AMP101).

A library that manages loss scaling (HF Accelerate, Lightning Fabric) unscales inside
`accelerator.clip_grad_norm_(...)`, `accelerator.unscale_gradients()` and
`fabric.clip_gradients(...)`: `managed_unscale` names those calls, which the graphs mark
`Kind.MANAGED_UNSCALE` (after them a norm is of true gradients).
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.walk import walk

# Functions that take a norm of the tensors they are given.
NORM_FUNCTIONS = frozenset(
    {
        "torch.norm",
        "torch.functional.norm",
        "torch.linalg.norm",
        "torch.linalg.vector_norm",
        "torch.linalg.matrix_norm",
        "torch._foreach_norm",
        "torch.nn.utils.get_total_norm",
        "torch.nn.utils.clip_grad.get_total_norm",
        "torch.nn.utils.clip_grad._get_total_norm",
    }
)
# Functions that measure `.grad` of a module's parameters whatever they are given.
GRAD_NORM_FUNCTIONS = frozenset(
    {
        "pytorch_lightning.utilities.grad_norm",
        "pytorch_lightning.utilities.grads.grad_norm",
        "lightning.pytorch.utilities.grad_norm",
        "lightning.pytorch.utilities.grads.grad_norm",
        "lightning.fabric.utilities.grad_norm",
    }
)
# Methods of a tensor that take its norm.
_NORM_METHODS = frozenset({"norm"})
# The spellings of infinity a `max_norm=` is written with.
_INFINITY = frozenset({"math.inf", "torch.inf", "numpy.inf", "np.inf", "cmath.inf"})
# Library calls that unscale the gradients of a managed backward before they measure or clip.
_MANAGED_UNSCALE_METHODS = frozenset({"clip_grad_norm_", "clip_grad_value_", "unscale_gradients", "clip_gradients"})
_MANAGED_OWNERS = ("accelerator", "fabric")
# How many assignments a name is followed back to find the gradients it holds.
_MAX_DEPTH = 3


def is_grad_norm(call: cst.Call, qual: str | None, scope) -> bool:
    """`call` (written in `scope`) takes a norm of gradients."""
    func = call.func
    if qual in GRAD_NORM_FUNCTIONS:
        return True
    if qual in NORM_FUNCTIONS:
        return any(mentions_grad(a.value, scope) for a in call.args if not a.keyword or a.keyword.value in ("input", "x", "tensors", "self"))
    if isinstance(func, cst.Attribute) and func.attr.value in _NORM_METHODS and qual is None:
        return mentions_grad(func.value, scope)
    return False


def managed_unscale(call: cst.Call) -> bool:
    """`accelerator.clip_grad_norm_(...)`, `accelerator.unscale_gradients()`,
    `fabric.clip_gradients(...)`: the library unscales the gradients first."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value not in _MANAGED_UNSCALE_METHODS:
        return False
    receiver = (dotted(func.value) or "").lower()
    return any(w in receiver for w in _MANAGED_OWNERS)


def measures_only(call: cst.Call, model) -> bool:
    """`clip_grad_norm_(params, max_norm=float("inf"))`: a norm, no clipping."""
    from amplint.analysis.syntax import call_arg

    name = (dotted(call.func) or "").rsplit(".", 1)[-1]
    if not name.startswith("clip_grad_norm"):
        return False
    return is_infinite(call_arg(call, 1, "max_norm"), model)


def clips_nothing(clip) -> bool:
    """A clip event whose threshold is infinite: it scales every gradient by 1.

    `clip_grad_norm_(params, float("inf"))`, `clip_grad_value_(params, math.inf)`, also
    when the threshold is a parameter of the helper the clip is written in (never
    reassigned there) and the call that reached the helper passes infinity, directly or
    through its own caller's parameter: HF Trainer measures with
    `self._mixed_mesh_grad_norm(model, float("inf"))`, whose body clips with `max_norm`.
    """
    from amplint.analysis.syntax import argument_for, call_arg

    call, scope = clip.node, clip.scope
    threshold = call_arg(call, 1, "max_norm") or call_arg(call, 1, "clip_value")
    for through, caller in reversed(clip.through):
        if is_infinite(threshold, scope.model):
            return True
        if not isinstance(threshold, cst.Name) or threshold.value not in scope.params or threshold.value in scope.assignments:
            return False
        threshold, scope = argument_for(through, scope, threshold.value), caller
    return is_infinite(threshold, scope.model)


def is_infinite(expr: cst.BaseExpression | None, model) -> bool:
    """`float("inf")`, `math.inf`, `torch.inf`, `np.inf` (also imported as `inf`)."""
    if expr is None:
        return False
    if isinstance(expr, cst.Call) and dotted(expr.func) == "float" and len(expr.args) == 1:
        arg = expr.args[0].value
        value = arg.evaluated_value if isinstance(arg, cst.SimpleString) else None
        return isinstance(value, str) and value.strip().lower() in ("inf", "+inf", "infinity")
    return (model.qualify(expr) or dotted(expr) or "") in _INFINITY


def mentions_grad(expr: cst.BaseExpression | None, scope, depth: int = 0) -> bool:
    """The expression reads a `.grad`, itself or through the names it is built from
    (assignments of the scope, loop and comprehension variables)."""
    if expr is None or depth > _MAX_DEPTH:
        return False
    finder = _GradFinder()
    walk(expr, finder)
    if finder.found:
        return True
    model = scope.model
    sources = loop_sources(model)
    for name in finder.names:
        for value in _values_of(name, scope, sources):
            if value is not expr and mentions_grad(value, scope, depth + 1):
                return True
    return False


def _values_of(name: str, scope, sources) -> list[cst.BaseExpression]:
    out: list[cst.BaseExpression] = []
    s = scope
    while s is not None:
        out.extend(sources.get((id(s), name), ()))
        if name in s.assignments:
            out.extend(s.assignments[name])
            break
        if s.binds(name):
            break
        s = s.parent
    return out


class _GradFinder(cst.CSTVisitor):
    """`X.grad` anywhere in an expression, and the plain names it uses."""

    def __init__(self) -> None:
        self.found = False
        self.names: list[str] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        # NB: `torch.autograd.grad(...)` returns gradients of whatever it is given (the AMP
        # gradient-penalty recipe unscales them by hand): not the `.grad` of a backward.
        if node.attr.value == "grad" and not (dotted(node) or "").endswith("autograd.grad"):
            self.found = True
        return not self.found

    def visit_Name(self, node: cst.Name) -> None:
        if node.value not in self.names:
            self.names.append(node.value)

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def loop_sources(model) -> dict[tuple[int, str], list[cst.BaseExpression]]:
    """(id(scope), name) -> what `for name in <iter>` (statement or comprehension) iterates
    over, for every loop of the module; built once per model."""
    found = model.__dict__.get("_amplint_loop_sources")
    if found is None:
        collector = _LoopCollector(model)
        walk(model.module, collector)
        found = model.__dict__["_amplint_loop_sources"] = collector.sources
    return found


class _LoopCollector(cst.CSTVisitor):
    # NB: at module level, not inside a function: `walk` plans its dispatch once per class.
    def __init__(self, model) -> None:
        self.model = model
        self.scopes = [model.module_scope]
        self.sources: dict[tuple[int, str], list[cst.BaseExpression]] = {}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append(self.model.scope_of.get(node, self.scopes[-1]))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def _bind(self, target: cst.BaseExpression, source: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self.sources.setdefault((id(self.scopes[-1]), target.value), []).append(source)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._bind(el.value, source)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target, node.iter)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bind(node.target, node.iter)


# --- a norm divided by the loss scale ---------------------------------------------------------
# Where a scaler's current scale is read: `scaler.get_scale()`, and the attributes libraries
# keep it in (`scaler._scale`, DeepSpeed's and apex's `optimizer.cur_scale` / `loss_scale`).
_SCALE_METHODS = frozenset({"get_scale"})
_SCALE_ATTRIBUTES = frozenset({"_scale", "cur_scale", "loss_scale"})
_DIVIDING_METHODS = frozenset({"div", "div_", "true_divide", "true_divide_"})


def divided_by_scale(event) -> bool:
    """The norm a GRAD_NORM (or measuring CLIP) event takes is divided by the loss scale.

    Two places say so: the helper the norm is written in divides by the scale (`def
    grad_norm(params, scale): ... return total ** 0.5 / scale`, handed
    `scale=scaler.get_scale()` by the call that reached it), or the statement that calls
    it, or a later one of the same function, divides what it returned
    (`norm = get_total_norm(grads) / scaler.get_scale()`, `norm /= scaler.get_scale()`,
    `norm * (1.0 / scaler.get_scale())`).  Before `unscale_` that division gives the true
    norm (AMP112 has nothing to say); after it, the gradients were already divided once
    (AMP111)."""
    if event.through and _divides_by_scale(event.scope, event.through):
        return True
    outer = event.through[0][1] if event.through else event.scope
    return _divides_value_by_scale(outer, event.anchor, ())


def _function_body(scope) -> cst.CSTNode:
    return scope.node.body if isinstance(scope.node, cst.FunctionDef) else scope.node


def _divisions(scope) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(dividend, divisor) of every division written in a scope's own body (nested
    functions excluded): `a / b`, `a /= b`, `a.div(b)`, `torch.div(a, b)`, and `a * (1 / b)`."""
    memo = scope.__dict__.get("_amplint_divisions")
    if memo is None:
        finder = _DivisionFinder(scope.node)
        walk(_function_body(scope), finder)
        memo = list(finder.found)
        for left, right in finder.products:  # `norm * inv_scale`, `inv_scale = 1.0 / scale`
            for factor, other in ((right, left), (left, right)):
                inverse = _inverse_of(factor) or _inverse_of_name(factor, scope)
                if inverse is not None:
                    memo.append((other, inverse))
        scope.__dict__["_amplint_divisions"] = memo
    return memo


def _inverse_of_name(expr: cst.BaseExpression, scope) -> cst.BaseExpression | None:
    if isinstance(expr, cst.Name):
        for value in scope.assignments.get(expr.value, []):
            inverse = _inverse_of(value)
            if inverse is not None:
                return inverse
    return None


class _DivisionFinder(cst.CSTVisitor):
    def __init__(self, root) -> None:
        self.root = root
        self.found: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
        self.products: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Divide):
            self.found.append((node.left, node.right))
        elif isinstance(node.operator, cst.Multiply):
            self.products.append((node.left, node.right))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, cst.DivideAssign):
            self.found.append((node.target, node.value))
        elif isinstance(node.operator, cst.MultiplyAssign):
            self.products.append((node.target, node.value))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _DIVIDING_METHODS and node.args:
            if dotted(func.value) in ("torch",) and len(node.args) >= 2:
                self.found.append((node.args[0].value, node.args[1].value))
            else:
                self.found.append((func.value, node.args[0].value))


def _inverse_of(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`b` of `1 / b` (or `1.0 / b`, `b.reciprocal()`), else None."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Divide):
        left = expr.left
        if isinstance(left, (cst.Integer, cst.Float)) and float(left.value) == 1.0:
            return expr.right
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "reciprocal":
        return expr.func.value
    return None


def _divides_by_scale(scope, through) -> bool:
    """Some division in `scope` (a helper reached through `through`) is by the loss scale."""
    return any(is_loss_scale(divisor, scope, through) for _, divisor in _divisions(scope))


def _divides_value_by_scale(scope, call: cst.Call, through) -> bool:
    """`call`'s result is divided by the loss scale in `scope`: in the division itself, or
    through a name assigned from it (`norm = f(...)`, then `norm / scale`)."""
    names = {name for name, values in scope.assignments.items() if "." not in name
             and any(contains_call(v, call) for v in values)}
    for dividend, divisor in _divisions(scope):
        if not is_loss_scale(divisor, scope, through):
            continue
        if contains_call(dividend, call) or (names and _names_in(dividend) & names):
            return True
    return False


def is_loss_scale(expr: cst.BaseExpression | None, scope, through=(), depth: int = 0) -> bool:
    """`expr` is the scaler's current loss scale: `scaler.get_scale()`, `scaler._scale`, a
    name assigned one in the scope, or a parameter the calls that reached the scope passed one."""
    from amplint.analysis.syntax import argument_for

    if expr is None or depth > _MAX_DEPTH:
        return False
    while isinstance(expr, cst.Call) and dotted(expr.func) in ("float", "int") and expr.args:
        expr = expr.args[0].value  # `float(scaler.get_scale())`
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        return expr.func.attr.value in _SCALE_METHODS or (
            expr.func.attr.value == "item" and is_loss_scale(expr.func.value, scope, through, depth + 1))
    if isinstance(expr, cst.Attribute):
        return expr.attr.value in _SCALE_ATTRIBUTES
    if not isinstance(expr, cst.Name):
        return False
    name = expr.value
    values = scope.assignments.get(name, [])
    if any(is_loss_scale(v, scope, through, depth + 1) for v in values):
        return True
    if name in scope.params and not values and through:
        call, caller = through[-1]
        return is_loss_scale(argument_for(call, scope, name), caller, through[:-1], depth + 1)
    return False


def contains_call(tree: cst.CSTNode, node: cst.Call) -> bool:
    """The call `node` is inside `tree` (by identity)."""
    finder = _NodeFinder(node)
    walk(tree, finder)
    return finder.found


class _NodeFinder(cst.CSTVisitor):
    """Is the call `target` inside a tree (by identity)?"""

    def __init__(self, target: cst.Call) -> None:
        self.target = target
        self.found = False

    def visit_Call(self, node: cst.Call) -> bool:
        if node is self.target:
            self.found = True
        return not self.found


def _names_in(expr: cst.BaseExpression) -> set[str]:
    finder = _GradFinder()
    walk(expr, finder)
    return set(finder.names)
