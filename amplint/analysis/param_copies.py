"""Casts that copy a module parameter, where the copy is what gets trained (AMP305).

`param.to(torch.float32)` of a float16 parameter returns a new tensor; rebinding a name to
it leaves the module holding the old parameter:

    for param in text_encoder.get_input_embeddings().parameters():
        param = param.to(torch.float32)      # a copy the model never uses
        param.requires_grad = True           # ... made trainable
    optimizer = torch.optim.AdamW([...param...])

Two shapes are recognised, each reported at the cast:

- *rebind*: a name that holds a module parameter (a loop over `.parameters()` /
  `.named_parameters()`, or a name bound to `x.weight`, `x.bias` or `nn.Parameter(...)`)
  is rebound to a dtype cast of itself, and a later statement of the same block makes
  the copy trainable (`param.requires_grad = True`, `param.requires_grad_()`) or hands
  it to an optimizer (in the constructor's arguments, or appended to a list that is);
- *replace*: a module attribute is replaced by `nn.Parameter(<cast of that attribute>)`
  after the optimizer was built from the old one: in a `forward` (or a `self.` helper the
  forward calls: every forward makes a new parameter), or in a function after an
  optimizer construction of the same block (espnet's hubert `cast_mask_emb`).

`param.data = param.data.to(...)` changes the parameter in place and is the correct
spelling: its target is `.data`, neither shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.bindings import call_arg
from amplint.analysis.grad_norms import loop_sources
from amplint.analysis.names import dotted
from amplint.analysis.walk import walk

_FIXED_DTYPE_METHODS = frozenset({"float", "half", "bfloat16", "double"})
_PARAMETER_ITERATORS = frozenset({"parameters", "named_parameters"})
_PARAMETER_ATTRS = frozenset({"weight", "bias"})
PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
# Calls on a tensor that hand back the same data under another name (`.data`, `.detach()`).
_SAME_DATA = frozenset({"detach", "data"})


@dataclass(frozen=True, eq=False)
class CastCopy:
    cast: cst.Call  # the cast (reported)
    target: str  # the name or attribute rebound: `param`, `self.encoder.mask_emb`
    shape: str  # "rebind" or "replace"
    why: str  # what trains the copy, or why the optimizer holds the old parameter


def cast_copies(model) -> list[CastCopy]:
    found = model.__dict__.get("_amplint_cast_copies")
    if found is None:
        finder = _BlockFinder(model)
        walk(model.module, finder)
        found = model.__dict__["_amplint_cast_copies"] = finder.found
    return found


def dtype_cast(expr: cst.BaseExpression | None, scope) -> cst.Call | None:
    """`x.float()`, `x.half()`, `x.to(torch.float32)`, `x.to(dtype=...)`, `x.type(torch.half)`:
    the call, when it converts to a known floating dtype (not a device move)."""
    if not isinstance(expr, cst.Call) or not isinstance(expr.func, cst.Attribute):
        return None
    name = expr.func.attr.value
    if name in _FIXED_DTYPE_METHODS and not expr.args:
        return expr
    if name in ("to", "type"):
        values = scope.model.bindings.values
        args = [a.value for a in expr.args if a.keyword is None]
        keyword = call_arg(expr, None, "dtype")
        for arg in ([keyword] if keyword is not None else []) + args[:2]:
            if values.dtypes(arg, scope):
                return expr
    return None


def cast_source(call: cst.Call) -> str | None:
    """What a cast copies: `param` of `param.data.to(...)` / `param.detach().float()`."""
    node = call.func.value
    while True:
        if isinstance(node, cst.Attribute) and node.attr.value in _SAME_DATA:
            node = node.value
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _SAME_DATA:
            node = node.func.value
        else:
            return dotted(node)


class _BlockFinder(cst.CSTVisitor):
    # NB: at module level, not inside a function: `walk` plans its dispatch once per class.
    def __init__(self, model) -> None:
        self.model = model
        self.scopes = [model.module_scope]
        self.found: list[CastCopy] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append(self.model.scope_of.get(node, self.scopes[-1]))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_Module(self, node: cst.Module) -> None:
        self._block(list(node.body))

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._block(list(node.body))

    def _block(self, statements: list[cst.CSTNode]) -> None:
        scope = self.scopes[-1]
        for i, statement in enumerate(statements):
            for assign in _assigns(statement):
                if len(assign.targets) != 1:
                    continue
                target = assign.targets[0].target
                if isinstance(target, cst.Name):
                    self._rebind(target.value, assign.value, statements[i + 1:], scope)
                elif isinstance(target, cst.Attribute) and dotted(target) is not None:
                    self._replace(dotted(target), assign.value, statements[:i], scope)

    # --- param = param.to(torch.float32), then trained -------------------------------------
    def _rebind(self, name: str, value: cst.BaseExpression, later: list, scope) -> None:
        cast = _outer_cast(value, scope)
        if cast is None or cast_source(cast) != name or not self._holds_parameter(name, value, scope):
            return
        why = _trains(name, later, scope)
        if why is not None:
            self.found.append(CastCopy(cast, name, "rebind", why))

    def _holds_parameter(self, name: str, value: cst.BaseExpression, scope) -> bool:
        for source in loop_sources(self.model).get((id(scope), name), ()):
            if _iterates_parameters(source, scope):
                return True
        for other in scope.assignments.get(name, []):
            if other is value:
                continue
            if isinstance(other, cst.Attribute) and other.attr.value in _PARAMETER_ATTRS:
                return True
            if isinstance(other, cst.Call) and self.model.qualify(other.func) in PARAMETER_CLASSES:
                return True
        return False

    # --- module.attr = nn.Parameter(module.attr.half()) after the optimizer exists ----------
    def _replace(self, target: str, value: cst.BaseExpression, earlier: list, scope) -> None:
        if not (isinstance(value, cst.Call) and self.model.qualify(value.func) in PARAMETER_CLASSES and value.args):
            return
        cast = _outer_cast(value.args[0].value, scope)
        if cast is None or cast_source(cast) != target:
            return
        why = self._runs_after_optimizer(scope, earlier)
        if why is not None:
            self.found.append(CastCopy(cast, target, "replace", why))

    def _runs_after_optimizer(self, scope, earlier: list) -> str | None:
        fn = scope.node if isinstance(scope.node, cst.FunctionDef) else None
        cls = scope.cls
        if fn is not None and cls is not None:
            if fn.name.value == "forward":
                return "in `forward`"
            forward = cls.methods.get("forward")
            if forward is not None and _calls_self_method(forward, fn.name.value):
                return f"in `{fn.name.value}()`, which `forward` calls"
        b = self.model.bindings
        for statement in earlier:
            for call in _calls(statement):
                if b.is_optimizer_constructor(call, scope):
                    return "after the optimizer was built"
        return None


def _outer_cast(value: cst.BaseExpression, scope) -> cst.Call | None:
    """The dtype cast of `value` (possibly followed by device moves: `.float().to(device)`)."""
    node = value
    while isinstance(node, cst.Call):
        cast = dtype_cast(node, scope)
        if cast is not None:
            return cast
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("to", "cuda", "cpu", "contiguous", "clone"):
            node = node.func.value
            continue
        return None
    return None


def _iterates_parameters(source: cst.BaseExpression, scope) -> bool:
    node = source
    if isinstance(node, cst.Call) and dotted(node.func) in ("enumerate", "list", "tuple") and node.args:
        node = node.args[-1].value
    if isinstance(node, (cst.Name, cst.Attribute)):
        values = scope.assignments.get(dotted(node) or "", [])
        return any(_iterates_parameters(v, scope) for v in values if v is not source)
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _PARAMETER_ITERATORS


def _trains(name: str, later: list, scope) -> str | None:
    """What, in the statements after the rebinding, makes the copy `name` trainable."""
    b = scope.model.bindings
    lists: set[str] = set()
    for statement in later:
        for assign in _assigns(statement):
            for t in assign.targets:
                if dotted(t.target) == f"{name}.requires_grad" and b.values.literal_bool(assign.value) is not False:
                    return f"`{name}.requires_grad = ...` makes the copy trainable"
            if dotted(assign.targets[0].target) == name:
                return None  # rebound again: what follows is about another tensor
        for call in _calls(statement):
            func = call.func
            if isinstance(func, cst.Attribute) and dotted(func.value) == name and func.attr.value == "requires_grad_":
                if b.values.literal_bool(call_arg(call, 0, "requires_grad")) is not False:
                    return f"`{name}.requires_grad_()` makes the copy trainable"
            if isinstance(func, cst.Attribute) and func.attr.value in ("append", "extend") and call.args and _mentions(call.args[0].value, name):
                if dotted(func.value) is not None:
                    lists.add(dotted(func.value))
            if b.is_optimizer_constructor(call, scope) and any(_mentions(a.value, name) or (dotted(a.value) in lists) for a in call.args):
                return "the optimizer is given the copy"
    if lists:
        for s in scope.model.calls:
            if b.is_optimizer_constructor(s.node, s.scope) and any(dotted(a.value) in lists for a in s.node.args):
                return "the optimizer is given the copy"
    return None


def _mentions(expr: cst.BaseExpression, name: str) -> bool:
    finder = _NameFinder(name)
    walk(expr, finder)
    return finder.found


class _NameFinder(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self.found = True


def _calls_self_method(fn: cst.FunctionDef, method: str) -> bool:
    self_name = fn.params.params[0].name.value if fn.params.params else None
    for call in _calls(fn.body):
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == method and isinstance(func.value, cst.Name) and func.value.value == self_name:
            return True
    return False


def _assigns(statement: cst.CSTNode) -> list[cst.Assign]:
    if isinstance(statement, cst.SimpleStatementLine):
        return [s for s in statement.body if isinstance(s, cst.Assign)]
    return []


class _CallCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    collector = _CallCollector()
    walk(node, collector)
    return collector.calls
