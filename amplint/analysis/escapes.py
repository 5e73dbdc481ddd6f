"""Where an object a name holds may go: the uses of a dotted name that hand it elsewhere.

The GradScaler rules follow a scaler by its name (`scaler`, `self.scaler`).  That is
sound only while every use of the name is one the analysis reads: a method call
(`scaler.update()`), a test (`if scaler is not None:`), the name's own binding.  Any
other use lets the object escape, and its protocol may then run under another name:

    s = scaler                 # aliased: `s.update()` updates it
    hooks = [scaler.update]    # its bound method referenced, called later as `h()`
    box = Box(scaler)          # stored by a constructor (`self.sc = sc`), updated there
    return scaler              # handed to the caller

`Escapes(model).escapes(key)` says whether the object of a key (Bindings.key) escapes
in this module.  A call argument escapes unless the callee is a harmless builtin
(`print`, `isinstance`, ...) or a function of the project whose parameter does not
escape in turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.syntax import argument_for
from amplint.analysis.walk import child_fields

# Builtins that read an object without keeping it.
_HARMLESS_CALLS = frozenset({"print", "isinstance", "hasattr", "type", "id", "repr", "str", "bool", "len", "callable", "format"})
# The methods whose bound reference can run the GradScaler protocol out of sight
# (`hooks = [scaler.update]`, `step = scaler.step`).
_PROTOCOL_METHODS = frozenset({"update", "step", "unscale_", "scale", "load_state_dict", "__call__"})
# Statements whose names are not uses of an object (imports, global declarations).
_SKIP = (cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal)
_TEST_FIELDS = {(cst.If, "test"), (cst.While, "test"), (cst.IfExp, "test"), (cst.Assert, "test")}
_MAX_DEPTH = 3


@dataclass(frozen=True, eq=False)
class Use:
    node: cst.BaseExpression  # a Name or an Attribute chain
    scope: object
    # None: the use keeps the object here; "escape": it hands it on; a Call: it is an
    # argument of that call (decided when asked, by what the call runs).
    how: object


class Escapes:
    """The uses of every dotted name of a module, indexed by text; built on first use."""

    def __init__(self, model) -> None:
        self.model = model
        self._uses: dict[str, list[Use]] | None = None
        self._memo: dict[str, bool] = {}

    @property
    def uses(self) -> dict[str, list[Use]]:
        if self._uses is None:
            self._uses = {}
            self._collect(self.model.module, self.model.module_scope)
        return self._uses

    def escapes(self, key: str | None, depth: int = 0) -> bool:
        """Some use of the object of `key` in this module may hand it elsewhere."""
        if key is None:
            return True
        found = self._memo.get(key)
        if found is None:
            self._memo[key] = False  # NB: recursion through a cycle of calls adds nothing
            found = self._memo[key] = self._escapes(key, depth)
        return found

    def _escapes(self, key: str, depth: int) -> bool:
        b = self.model.bindings
        text = b.text_of(key)
        for use in self.uses.get(text or "", ()):
            if use.how is None or b.key(use.node, use.scope) != key:
                continue
            if use.how == "escape" or not self._harmless_argument(use, depth):
                return True
        return False

    def _harmless_argument(self, use: Use, depth: int) -> bool:
        call: cst.Call = use.how
        if isinstance(call.func, cst.Name) and call.func.value in _HARMLESS_CALLS and self.model.qualify(call.func) is None:
            return True
        if depth >= _MAX_DEPTH:
            return False
        from amplint.analysis.callees import resolve_call

        found = resolve_call(call, use.scope)
        callee_scope = found.scope if found is not None else None
        if callee_scope is None:
            return False
        params = [p for p in callee_scope.params if argument_for(call, callee_scope, p) is use.node]
        if len(params) != 1:
            return False
        model = callee_scope.model
        param_key = model.bindings.key(cst.Name(params[0]), callee_scope)
        return not model.bindings.escapes.escapes(param_key, depth + 1)

    # --- collection ------------------------------------------------------------------
    def _collect(self, root: cst.CSTNode, scope) -> None:
        # (node, ancestors as (node, field) pairs, scope, deferred); iterative: deep code is
        # common.  `deferred`: inside a lambda, or a nested function handed on as a value (a
        # hook: `opt.register_step_post_hook(lambda *a: scaler.update())`), code that runs
        # whenever its holder calls it: a protocol call there runs out of the analysis's sight.
        stack: list[tuple[cst.CSTNode, tuple, object, bool]] = [(root, (), scope, False)]
        scope_of = self.model.scope_of
        while stack:
            node, ancestors, scope, deferred = stack.pop()
            if isinstance(node, _SKIP):
                continue
            if isinstance(node, (cst.Name, cst.Attribute)):
                text = dotted(node)
                if text is not None:
                    how = _how(node, ancestors)
                    if deferred and how is None and _calls_protocol_method(ancestors):
                        how = "escape"
                    self._uses.setdefault(text, []).append(Use(node, scope, how))
                    if isinstance(node, cst.Attribute):
                        stack.append((node.value, ancestors + ((node, "value"),), scope, deferred))
                    continue
            if isinstance(node, cst.Lambda):
                stack.append((node.body, (), scope, True))
                continue
            if isinstance(node, cst.FunctionDef):
                inner = scope_of.get(node, scope)
                # Decorators, defaults and annotations run in the enclosing scope.
                for d in node.decorators:
                    stack.append((d, (), scope, deferred))
                for p in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params):
                    if p.default is not None:
                        stack.append((p.default, ((p, "default"),), scope, deferred))
                stack.append((node.body, (), inner, deferred or self._handed_on(node)))
                continue
            if isinstance(node, cst.ClassDef):
                for a in (*node.bases, *node.keywords):
                    stack.append((a.value, ((a, "value"),), scope, deferred))
                stack.append((node.body, (), scope, deferred))
                continue
            children = []
            for name in child_fields(type(node)):
                value = getattr(node, name, None)
                if isinstance(value, cst.CSTNode):
                    children.append((value, name))
                elif isinstance(value, (list, tuple)):
                    children.extend((v, name) for v in value if isinstance(v, cst.CSTNode))
            for child, name in reversed(children):
                if _not_an_expression(node, name):
                    continue
                stack.append((child, (ancestors + ((node, name),))[-6:], scope, deferred))

    def _handed_on(self, function: cst.FunctionDef) -> bool:
        """A function nested in another whose name is used as a value, not only called
        (`optimizer.register_step_post_hook(on_step)`)."""
        if self.model.scope_of.get(function) is None or self._enclosing_function(function) is None:
            return False
        name = function.name.value
        code = self.model.module.code
        return re.search(rf"(?<![\w.]){re.escape(name)}\b(?!\s*\()", code.replace(f"def {name}", "")) is not None

    def _enclosing_function(self, function: cst.FunctionDef) -> cst.FunctionDef | None:
        scope = self.model.scope_of.get(function)
        parent = getattr(scope, "parent", None)
        while parent is not None:
            if isinstance(getattr(parent, "node", None), cst.FunctionDef):
                return parent.node
            parent = getattr(parent, "parent", None)
        return None


def _calls_protocol_method(ancestors: tuple) -> bool:
    """The use is the receiver of a protocol call: `scaler.update()`, `scaler.step(opt)`."""
    if len(ancestors) < 2:
        return False
    (parent, field), (grand, grand_field) = ancestors[-1], ancestors[-2]
    return (isinstance(parent, cst.Attribute) and field == "value" and parent.attr.value in _PROTOCOL_METHODS
            and isinstance(grand, cst.Call) and grand_field == "func")


def _not_an_expression(node: cst.CSTNode, field: str) -> bool:
    """Fields that hold names which are not reads of an object."""
    return (
        (isinstance(node, cst.Attribute) and field == "attr")
        or (isinstance(node, cst.Arg) and field == "keyword")
        or (isinstance(node, cst.Param) and field == "name")
        or (isinstance(node, (cst.FunctionDef, cst.ClassDef)) and field == "name")
        or (isinstance(node, cst.AsName))
        or (isinstance(node, cst.ExceptHandler) and field == "name")
    )


def _how(node: cst.CSTNode, ancestors: tuple) -> object:
    """None when this use of the object keeps it where the analysis sees it; "escape" when
    it may hand it elsewhere; the Call when it is that call's argument."""
    if not ancestors:
        return "escape"
    parent, field = ancestors[-1]
    grand = ancestors[-2] if len(ancestors) > 1 else (None, None)
    if isinstance(parent, cst.Attribute) and field == "value":
        # `scaler.update()` keeps it; `scaler.update` alone is its bound method, loose; a
        # data attribute read (`scaler._scale`, `scaler.get_scale` handed to a logger) is no
        # way for the protocol to run elsewhere.
        if isinstance(grand[0], cst.Call) and grand[1] == "func":
            return None
        return "escape" if parent.attr.value in _PROTOCOL_METHODS else None
    if isinstance(parent, cst.Call) and field == "func":
        return None
    if isinstance(parent, cst.Arg) and field == "value" and isinstance(grand[0], cst.Call) and grand[1] == "args":
        return grand[0] if not parent.star else "escape"
    if _is_target(node, ancestors):
        return None
    if isinstance(parent, (cst.Comparison, cst.ComparisonTarget)):
        return None  # `scaler is not None`: a bool
    if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not):
        return None
    if (type(parent), field) in _TEST_FIELDS:
        return None
    if isinstance(parent, cst.BooleanOperation):
        # `if scaler and use_amp:`: a test; `s = scaler or other` hands it on.
        i = len(ancestors) - 1
        while i >= 0 and isinstance(ancestors[i][0], cst.BooleanOperation):
            i -= 1
        if i < 0:
            return "escape"
        top, top_field = ancestors[i]
        if (type(top), top_field) in _TEST_FIELDS or isinstance(top, (cst.Comparison, cst.ComparisonTarget)):
            return None
        if isinstance(top, cst.UnaryOperation) and isinstance(top.operator, cst.Not):
            return None
        return "escape"
    if isinstance(parent, cst.Expr):
        return None  # a bare `scaler` statement
    return "escape"


def _is_target(node: cst.CSTNode, ancestors: tuple) -> bool:
    """The node is (inside a tuple or list of) the target of a binding or a `del`."""
    i = len(ancestors) - 1
    while i >= 0 and isinstance(ancestors[i][0], (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        i -= 1
    if i < 0:
        return False
    owner, field = ancestors[i]
    return (
        (isinstance(owner, cst.AssignTarget) and field == "target")
        or (isinstance(owner, (cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.For, cst.CompFor)) and field == "target")
        or (isinstance(owner, cst.Del) and field == "target")
    )
