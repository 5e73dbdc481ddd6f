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
    from amplint.analysis.bindings import call_arg

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
    from amplint.analysis.bindings import call_arg
    from amplint.analysis.scaler_protocol import argument_for

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
