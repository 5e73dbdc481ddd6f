"""AMP114 scaled-autograd-grad."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.bindings import call_arg
from amplint.analysis.grad_norms import _divisions, contains_call, is_loss_scale, loop_sources
from amplint.analysis.names import dotted
from amplint.analysis.scaler_protocol import protocol
from amplint.analysis.values import value_branches
from amplint.analysis.walk import walk
from amplint.prefilter import Attr, Word
from amplint.rules._base import Rule

AUTOGRAD_GRAD = frozenset({"torch.autograd.grad"})
_MAX_DEPTH = 3


class ScaledAutogradGrad(Rule):
    """
    ## What it does
    Flags `torch.autograd.grad(...)` of a loss scaled by a `GradScaler`
    (`scaler.scale(loss)`, or a name assigned one) whose results are used without being
    divided by the scale: no `grads / scaler.get_scale()`, `g * inv_scale` with
    `inv_scale = 1. / scaler.get_scale()`, or `.div(...)` by it, on the gradients or on
    anything computed from them in the same function. The diagnostic points at the
    `autograd.grad` call.

    Not flagged: gradients divided by the scale (as in PyTorch's AMP example "Gradient
    penalty"); gradients stored into `.grad` (`p.grad = g`), which `scaler.step` unscales
    with the rest; gradients the function returns as they are (the caller unscales
    them); a call whose result is not used.

    ## Why is this bad?
    `scaler.unscale_` and `scaler.step` unscale the `.grad` of the optimizer's
    parameters only. `torch.autograd.grad` returns its gradients to the caller, and of a
    scaled loss they are multiplied by the scale (65536 at the start). A gradient
    penalty (R1, WGAN-GP, a Jacobian norm) built from them is the scale (or its square)
    times too strong: it dominates the loss or overflows in float16, and the scaler then
    backs off and skips steps. Nothing raises.

    ## Example
    ```python
    for x in loader:
        x.requires_grad_(True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).mean()
        grads = torch.autograd.grad(scaler.scale(loss), x, create_graph=True)[0]
        with torch.autocast("cuda", dtype=torch.float16):
            penalty = grads.pow(2).sum()
            loss = loss + 10.0 * penalty
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    Use instead:
    ```python
    for x in loader:
        x.requires_grad_(True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).mean()
        scaled = torch.autograd.grad(scaler.scale(loss), x, create_graph=True)[0]
        grads = scaled * (1.0 / scaler.get_scale())
        with torch.autocast("cuda", dtype=torch.float16):
            penalty = grads.pow(2).sum()
            loss = loss + 10.0 * penalty
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    No fix: where the division belongs (on the gradients, or on a penalty that is a
    square of them) depends on what is built from them.

    ## Runtime confirmation
    `amplint verify` records a `torch.autograd.grad` call whose outputs are a tensor the
    enabled scaler's `scale()` returned, with the scale it multiplied them by, at the
    line of the call. It confirms a static finding there and reports nothing alone:
    whether the code divides the results afterwards is not seen.
    """

    code = "AMP114"
    name = "scaled-autograd-grad"
    message = "`{call}` returns gradients multiplied by the loss scale, and they are used without dividing by `{scaler}.get_scale()`"
    # Pre-filter: the loss is scaled by `x.scale(...)` and differentiated by
    # `torch.autograd.grad` (`from torch.autograd import grad` names "autograd" too).
    requires_any = (Attr("scale"),)
    and_requires_any = ((Word("autograd"),),)

    def check(self) -> None:
        proto = protocol(self.model)
        code = self.model.module.code_for_node
        for site in self.model.calls:
            call = site.node
            if self.model.qualify(call.func) not in AUTOGRAD_GRAD:
                continue
            scope = site.scope
            scaler = self._scaler_of(call_arg(call, 0, "outputs"), scope, 0)
            if scaler is None or proto.scaler_disabled(self.model.bindings.key(scaler, scope)):
                continue
            if _discarded(call, scope) or _unscaled_or_returned(call, scope, self.model):
                continue
            self.report(call, call=f"{code(call.func)}(...)", scaler=dotted(scaler) or "scaler")

    def _scaler_of(self, expr: cst.BaseExpression | None, scope, depth: int) -> cst.BaseExpression | None:
        """The scaler when `expr` is `scaler.scale(x)`, a sum or list of such, or a name assigned one."""
        if expr is None or depth > _MAX_DEPTH:
            return None
        for branch in value_branches(expr):
            if isinstance(branch, cst.Call) and isinstance(branch.func, cst.Attribute) and branch.func.attr.value == "scale":
                if self.model.bindings.is_scaler(branch.func.value, scope):
                    return branch.func.value
            parts: list[cst.BaseExpression] = []
            if isinstance(branch, cst.BinaryOperation):
                parts = [branch.left, branch.right]
            elif isinstance(branch, (cst.List, cst.Tuple)):
                parts = [el.value for el in branch.elements]
            elif isinstance(branch, cst.Name):
                parts = [value for value, _ in self.model.bindings.values.assigned(branch, scope)]
            for part in parts:
                found = self._scaler_of(part, scope, depth + 1)
                if found is not None:
                    return found
        return None


def _unscaled_or_returned(call: cst.Call, scope, model) -> bool:
    """The gradients `call` returns, or a value computed from them in its function, are
    divided by the loss scale; or the function returns them as they are."""
    names = _derived_names(call, scope, model)
    body = scope.node.body if isinstance(scope.node, cst.FunctionDef) else scope.node
    assignments = _Assignments(scope.node)
    walk(body, assignments)
    # Stored into `.grad` (`p.grad = g`): `scaler.step` unscales them with the rest.
    for value in assignments.grad_stores:
        if contains_call(value, call) or (_names(value) & names):
            return True
    for dividend, divisor in _divisions(scope):
        if not _is_scale(divisor, scope):
            continue
        if contains_call(dividend, call) or (_names(dividend) & names):
            return True
    # Names bound to the results themselves (`grads = autograd.grad(...)[0]`), not to
    # something computed from them: a function that returns those leaves them to its caller.
    direct = {n for targets, value in assignments.pairs if _unsubscripted(value) is call for n in targets}
    returns = _Returns(scope.node)
    walk(body, returns)
    for value in returns.values:
        inner = _unsubscripted(value)
        if inner is call or (isinstance(inner, cst.Name) and inner.value in direct):
            return True
    return False


def _is_scale(expr: cst.BaseExpression, scope) -> bool:
    """The loss scale, or the loss scale plus an epsilon (`scaler.get_scale() + 1e-8`)."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        return is_loss_scale(expr.left, scope) or is_loss_scale(expr.right, scope)
    return is_loss_scale(expr, scope)


def _unsubscripted(expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    return expr


def _discarded(call: cst.Call, scope) -> bool:
    """The call is a statement of its own: its gradients are not used at all."""
    body = scope.node.body if isinstance(scope.node, cst.FunctionDef) else scope.node
    finder = _Statements(scope.node, call)
    walk(body, finder)
    return finder.found


class _Statements(cst.CSTVisitor):
    def __init__(self, root, call: cst.Call) -> None:
        self.root = root
        self.call = call
        self.found = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_Expr(self, node: cst.Expr) -> None:
        if node.value is self.call:
            self.found = True


def _derived_names(call: cst.Call, scope, model) -> set[str]:
    """Local names bound to the call's results, or to values computed from them (in
    assignments and `for` / comprehension targets), to a fixed point."""
    body = scope.node.body if isinstance(scope.node, cst.FunctionDef) else scope.node
    finder = _Assignments(scope.node)
    walk(body, finder)
    loops = [(name, sources) for (sid, name), sources in loop_sources(model).items() if sid == id(scope)]
    names: set[str] = set()
    for targets, value in finder.pairs:
        if contains_call(value, call):
            names |= targets
    changed = bool(names)
    while changed:
        changed = False
        for targets, value in finder.pairs:
            if not targets <= names and _names(value) & names:
                names |= targets
                changed = True
        for name, sources in loops:
            if name not in names and any(_names(s) & names for s in sources):
                names.add(name)
                changed = True
    return names


def _names(expr: cst.CSTNode) -> set[str]:
    finder = _NameFinder()
    walk(expr, finder)
    return finder.names


class _NameFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(node.value, self)  # `grads.pow` names `grads`, not `pow`
        return False


class _Assignments(cst.CSTVisitor):
    """(target names, value) of the assignments of one scope's own body."""

    def __init__(self, root) -> None:
        self.root = root
        self.pairs: list[tuple[frozenset[str], cst.BaseExpression]] = []
        self.grad_stores: list[cst.BaseExpression] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self.pairs.append((frozenset(_target_names(t.target)), node.value))
            if isinstance(t.target, cst.Attribute) and t.target.attr.value == "grad":
                self.grad_stores.append(node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.pairs.append((frozenset(_target_names(node.target)), node.value))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.pairs.append((frozenset(_target_names(node.target)), node.value))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.pairs.append((frozenset(_target_names(node.target)), node.value))


class _Returns(cst.CSTVisitor):
    def __init__(self, root) -> None:
        self.root = root
        self.values: list[cst.BaseExpression] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is None:
            return
        values = [el.value for el in node.value.elements] if isinstance(node.value, cst.Tuple) else [node.value]
        self.values.extend(values)


def _target_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        out: set[str] = set()
        for el in target.elements:
            out |= _target_names(el.value)
        return out
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    if isinstance(target, cst.Attribute):
        return {dotted(target)} - {None}
    return set()
