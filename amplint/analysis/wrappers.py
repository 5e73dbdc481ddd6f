"""Wrapper classes: what an attribute of `self` really is, and which scalers a class owns.

Training toolkits wrap the torch optimizer and the GradScaler in classes of their own
(fairseq's `AMPOptimizer`, mmengine's `AmpOptimWrapper`, timm's `NativeScaler`, the
DeepSpeed ZeRO optimizers).  Two questions about them need more than the text of a
call:

- *Which object is this?*  `self.optimizer` may be a property that returns
  `self.fp32_optimizer.optimizer`, and `self.scaler` one that returns
  `self._grad_scaler`.  `object_path` follows properties (on the class or its bases,
  also in other modules) and plain local aliases (`inner = wrapper.optimizer`) to a
  path from a root: `self` of the class, or a name of the function.  Two paths where
  one extends the other (`self.fp32_optimizer.optimizer` inside
  `self.fp32_optimizer`), or a name built by a call that received the other
  (`opt = Lookahead(base)`), are an object and its wrapper: `wraps`.
- *Which GradScalers does a class own?*  `owned_scalers` lists the attributes a class
  assigns a GradScaler construction to (directly, through a conditional, or through a
  local name), skipping literally disabled ones; a scaler only received from outside
  (`self.scaler = scaler`) belongs to whoever built it.  `mentions` says whether a
  method (and the `self.`/`super()` helpers it calls) reads one of those attributes, or
  the properties that return them.

Nothing here reports; AMP109 and AMP110 ask.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.callees import Callee, ForeignClass, bases_of, method_of, resolve_call
from amplint.analysis.names import dotted
from amplint.analysis.syntax import value_branches
from amplint.analysis.torch_api import SCALER_CONSTRUCTORS, SHARDED_SCALER_CONSTRUCTORS
from amplint.analysis.walk import walk

_PROPERTY_DECORATORS = frozenset({"property", "functools.cached_property", "cached_property"})
# How many properties and aliases are followed from one expression.
_MAX_HOPS = 4
# How deep `mentions` follows the helpers a method calls.
_MENTION_DEPTH = 2


@dataclass(frozen=True)
class ObjectPath:
    """`root` (("self", class name) or ("name", scope key)) and the attributes after it."""

    root: tuple[str, str]
    attrs: tuple[str, ...]

    def text(self) -> str:
        head = "self" if self.root[0] == "self" else self.root[1].rsplit(":", 1)[-1]
        return ".".join((head, *self.attrs))

    def inside(self, other: "ObjectPath") -> bool:
        """This object is reached from `other` through attributes (`other.x.y`)."""
        return self.root == other.root and len(self.attrs) > len(other.attrs) and self.attrs[: len(other.attrs)] == other.attrs


def property_value(cls, name: str):
    """(returned expression, the getter's scope) when `name` is a property of `cls` (or
    of a base) whose getter returns one expression; None otherwise."""
    if cls is None:
        return None
    callee = method_of(cls, name)
    if callee is None or callee.scope is None:
        return None
    fn = callee.fn
    if not any((callee.model.qualify(d.decorator) or dotted(d.decorator)) in _PROPERTY_DECORATORS for d in fn.decorators):
        return None
    returns = _returned(fn)
    if len(returns) != 1:
        return None
    return returns[0], callee.scope


def object_path(expr: cst.BaseExpression | None, scope, hops: int = 0) -> ObjectPath | None:
    """What `expr` (written in `scope`) denotes, with properties and aliases followed."""
    text = dotted(expr)
    if text is None or scope is None:
        return None
    head, *attrs = text.split(".")
    if scope.cls is not None and head == scope.self_name:
        if attrs and hops < _MAX_HOPS:
            found = property_value(scope.cls, attrs[0])
            if found is not None:
                value, getter = found
                inner = object_path(value, getter, hops + 1)
                if inner is not None and inner.root[0] == "self":
                    return ObjectPath(("self", scope.cls.name), inner.attrs + tuple(attrs[1:]))
        return ObjectPath(("self", scope.cls.name), tuple(attrs))
    if hops < _MAX_HOPS and head not in scope.params:
        values = scope.assignments.get(head, [])
        if len(values) == 1 and dotted(values[0]) is not None:
            inner = object_path(values[0], scope, hops + 1)
            if inner is not None:
                return ObjectPath(inner.root, inner.attrs + tuple(attrs))
    key = scope.model.bindings.key(cst.Name(head), scope) if scope.model is not None else head
    return ObjectPath(("name", key or head), tuple(attrs))


def built_from(expr: cst.BaseExpression | None, scope) -> list[ObjectPath]:
    """The objects a name was built from by a call: `opt = Lookahead(base, k=5)` -> [base]."""
    if expr is None or scope is None or dotted(expr) is None:
        return []
    out: list[ObjectPath] = []
    for value, vscope in scope.model.bindings.values.assigned(expr, scope):
        for branch in value_branches(value):
            if not isinstance(branch, cst.Call):
                continue
            for arg in branch.args:
                path = object_path(arg.value, vscope)
                if path is not None and path not in out:
                    out.append(path)
    return out


def wraps(a: ObjectPath, a_expr, a_scope, b: ObjectPath, b_expr, b_scope) -> bool:
    """`a` and `b` are an object and a wrapper around it, either way round."""
    if a == b:
        return False
    if a.inside(b):
        return not _params_held_elsewhere(b_expr, b_scope, a.attrs[len(b.attrs)])
    if b.inside(a):
        return not _params_held_elsewhere(a_expr, a_scope, b.attrs[len(a.attrs)])
    return a in built_from(b_expr, b_scope) or b in built_from(a_expr, a_scope)


def _params_held_elsewhere(wrapper: cst.BaseExpression | None, scope, attr: str) -> bool:
    """The wrapper's class forwards `param_groups` to another of its attributes than `attr`
    (`wrapper.optimizer` is the discriminator's optimizer, `param_groups` the generator's):
    the two objects hold different parameters, not one optimizer and its wrapper.  False
    when it cannot be told (an unknown class, no `param_groups` of its own)."""
    from amplint.analysis.callees import class_of_instance

    cls = class_of_instance(wrapper, scope) if wrapper is not None and scope is not None else None
    if isinstance(cls, ForeignClass):
        cls = cls.info()
    if cls is None or not hasattr(cls, "attributes"):
        return False
    source = _param_groups_source(cls)
    if source is None:
        return False
    return source != _attribute_behind(cls, attr)


def _param_groups_source(cls) -> str | None:
    """The attribute `self.<x>` whose `param_groups` the class's own `param_groups` is
    (a property returning `self.x.param_groups`, or `self.param_groups = self.x.param_groups`)."""
    values = []
    found = property_value(cls, "param_groups")
    if found is not None:
        values.append(found)
    values += cls.attributes.get("param_groups", [])
    sources = set()
    for value, vscope in values:
        path = object_path(value, vscope)
        if path is None or path.root[0] != "self" or len(path.attrs) != 2 or path.attrs[1] != "param_groups":
            return None
        sources.add(_attribute_behind(cls, path.attrs[0]))
    return sources.pop() if len(sources) == 1 else None


def _attribute_behind(cls, attr: str) -> str:
    """`attr`, or the attribute of `self` a property of that name returns."""
    found = property_value(cls, attr)
    if found is not None:
        path = object_path(*found)
        if path is not None and path.root[0] == "self" and len(path.attrs) == 1:
            return path.attrs[0]
    return attr


def inherited_method(cls, name: str) -> Callee | None:
    """`name` as `cls` defines or inherits it, from a base of this module or of another
    module of the project, read whatever it mentions.

    `callees.method_of` reads another module's method only when its text is about the
    training step (the project index's relevance check); a `state_dict` that returns
    `self.optimizer.state_dict()` is not, and it is exactly what AMP110 must read."""
    if name in cls.methods:
        return Callee(cls.model, cls.methods[name], cls)
    for base in bases_of(cls):
        if isinstance(base, ForeignClass):
            symbol = base.symbol.index.method_in_class(base.symbol.path, base.symbol.name, name)
            fn = symbol.node if symbol is not None else None
            if fn is not None:
                owner = symbol.model.classes.get(symbol.name.split(".")[0])
                return Callee(symbol.model, fn, owner)
        elif name in base.methods:
            return Callee(base.model, base.methods[name], base)
    return None


# --- scalers a class owns ------------------------------------------------------------------


@dataclass(frozen=True)
class OwnedScaler:
    attr: str  # `_grad_scaler` of `self._grad_scaler = torch.amp.GradScaler(...)`
    call: cst.Call  # the construction
    model: object  # the module it is written in


def owned_scalers(cls) -> list[OwnedScaler]:
    """The attributes of `cls` (a ClassInfo) that hold a GradScaler it builds itself."""
    out: list[OwnedScaler] = []
    for attr, values in cls.attributes.items():
        if "." in attr:
            continue
        for value, scope in values:
            call = _scaler_construction(value, scope)
            if call is not None:
                out.append(OwnedScaler(attr, call, scope.model))
                break
    return out


def _scaler_construction(value: cst.BaseExpression, scope, depth: int = 0) -> cst.Call | None:
    model = scope.model
    for branch in value_branches(value):
        if isinstance(branch, cst.Call):
            qual = model.qualify(branch.func) or _through_star_import(branch.func, model)
            if qual in SCALER_CONSTRUCTORS or qual in SHARDED_SCALER_CONSTRUCTORS:
                if not _literally_disabled(branch, qual, model):
                    return branch
        elif isinstance(branch, cst.Name) and depth < 2 and branch.value not in scope.params:
            # `scaler = GradScaler(...) if fp16 else None; self.scaler = scaler`
            for inner in scope.assignments.get(branch.value, []):
                found = _scaler_construction(inner, scope, depth + 1)
                if found is not None:
                    return found
    return None


def _through_star_import(func: cst.BaseExpression, model) -> str | None:
    """`torch.amp.GradScaler` in a module that has `torch` only from a `from x import *`
    (DeepSpeed's stage3.py): the spelling is unambiguous, the import table cannot see it."""
    text = dotted(func)
    if text is None or not text.startswith("torch.") or model.imports.qualify_text("torch") is not None:
        return None
    stars = any(isinstance(node.names, cst.ImportStar) for node, _ in model.import_froms)
    return text if stars and not model.module_scope.binds("torch") else None


def _literally_disabled(call: cst.Call, qual: str, model) -> bool:
    from amplint.analysis.syntax import call_arg

    position = 4 if qual.startswith(("torch.cuda", "torch.cpu")) else 5
    return model.bindings.values.literal_bool(call_arg(call, position, "enabled")) is False


def scaler_names(cls, scaler: OwnedScaler) -> frozenset[str]:
    """The attribute and the properties of `cls` that return it (`scaler` for `_grad_scaler`)."""
    names = {scaler.attr}
    for name, fn in cls.methods.items():
        if name in names:
            continue
        found = property_value(cls, name)
        if found is None:
            continue
        value, getter = found
        path = object_path(value, getter)
        if path is not None and path.root[0] == "self" and path.attrs == (scaler.attr,):
            names.add(name)
    return frozenset(names)


def mentions(fn: cst.FunctionDef, model, names: frozenset[str], depth: int = 0) -> bool:
    """`fn` reads `self.<name>` for one of `names` (also as a string: `getattr(self,
    "scaler")`), reads the whole instance (`self.__dict__`, `vars(self)`), or calls a
    `self.`/`super()` helper that does."""
    scope = model.scope_of.get(fn)
    if scope is None:
        return True  # cannot tell: assume the scaler is handled
    finder = _MentionFinder(scope.self_name, names)
    walk(fn.body, finder)
    if finder.found:
        return True
    if depth >= _MENTION_DEPTH:
        return False
    for call in finder.self_calls:
        callee = resolve_call(call, scope)
        if callee is not None and callee.fn is not fn and mentions(callee.fn, callee.model, names, depth + 1):
            return True
    return False


class _MentionFinder(cst.CSTVisitor):
    def __init__(self, self_name: str | None, names: frozenset[str]) -> None:
        self.self_name = self_name
        self.names = names
        self.found = False
        self.self_calls: list[cst.Call] = []

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if isinstance(node.value, cst.Name) and node.value.value == self.self_name:
            if node.attr.value in self.names or node.attr.value == "__dict__":
                self.found = True

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if node.evaluated_value in self.names:
            self.found = True

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name) and func.value == "vars" and node.args:
            arg = node.args[0].value
            if isinstance(arg, cst.Name) and arg.value == self.self_name:
                self.found = True
        if isinstance(func, cst.Attribute):
            receiver = func.value
            if (isinstance(receiver, cst.Name) and receiver.value == self.self_name) or (
                isinstance(receiver, cst.Call) and dotted(receiver.func) == "super"
            ):
                self.self_calls.append(node)


def _returned(fn: cst.FunctionDef) -> list[cst.BaseExpression]:
    from amplint.analysis.syntax import returned_values

    return returned_values(fn)
