"""Positive evidence that a scaler is plain: a GradScaler built here, used only by its name.

The unsafe fixes of the scaler protocol (AMP102 adds `scaler.update()`, AMP103 rewrites
`loss.backward()` to `scaler.scale(loss).backward()`) are right only when the analysis sees
everything that happens to the scaler: no `update` under another name
(`functools.partial(GradScaler.update, scaler)` returned by a factory), no loss scaled out of
sight (a helper handed the scaler, `scaler = amp_scaler = GradScaler()` and
`amp_scaler.scale(l)`), no stand-in object without `scale`.  The escape analysis
(escapes.py) answers "may it have gone elsewhere?" generously, to keep findings; a fix asks
the stricter question answered here:

- every value ever assigned to the name is a GradScaler construction (or None): not a
  factory's result, a parameter, or a tuple unpacked from a call;
- every use of the name (or, for an attribute `self.scaler`, of any `<x>.scaler`) in the
  module is the receiver of an attribute (`scaler.step(opt)`), the single target of an
  assignment, an operand of a comparison (`scaler is not None`), an `if`/`while` test or an
  argument of a builtin that only reads it (`print`, `isinstance`):
  never an argument, an element, a returned value, an alias's value, or one of several
  targets of a chained assignment;
- no project file that imports the module mentions the name.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.syntax import value_branches
from amplint.analysis.torch_api import SCALER_CONSTRUCTORS, SHARDED_SCALER_CONSTRUCTORS
from amplint.analysis.walk import walk

_SCALER_CLASSES = SCALER_CONSTRUCTORS | SHARDED_SCALER_CONSTRUCTORS
# Builtins that read an object without keeping it or calling its methods.
_PROTOCOL_METHODS = frozenset({"scale", "unscale_", "step", "update", "load_state_dict"})
_READING_BUILTINS = frozenset({"print", "isinstance", "type", "id", "repr", "str", "bool", "callable", "hasattr"})


# Code that reaches names dynamically: a scaler may be used there under no name at all.
_DYNAMIC = ("exec(", "eval(", "globals()", "sys.modules", "__dict__")


def _bound_once(model, values) -> bool:
    """The name each construction calls (`GradScaler`, or `torch` of `torch.amp.GradScaler`)
    is bound once in the module: not a shim chosen by a conditional import."""
    roots = set()
    for value, _ in values:
        for branch in value_branches(value):
            if isinstance(branch, cst.Call):
                root = (dotted(branch.func) or "").split(".")[0]
                if root:
                    roots.add(root)
    finder = _Bindings(roots)
    walk(model.module, finder)
    return all(finder.count.get(r, 0) <= 1 for r in roots)


class _Bindings(cst.CSTVisitor):
    def __init__(self, names) -> None:
        self.names = names
        self.count: dict[str, int] = {}

    def _bind(self, name: str | None) -> None:
        if name in self.names:
            self.count[name] = self.count.get(name, 0) + 1

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        if node.asname is not None and isinstance(node.asname.name, cst.Name):
            self._bind(node.asname.name.value)
        else:
            self._bind((dotted(node.name) or "").split(".")[0] if isinstance(node.name, cst.Attribute) else dotted(node.name))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._bind(dotted(node.target))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._bind(node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._bind(node.name.value)


# What a module imported by this one needs to reach our scaler without being handed it:
# the class itself (patched or replaced), the running script, every object, an optimizer hook.
_REACHING = ("gradscaler", "__main__", "sys.modules", "gc.get_objects", "register_step_post_hook",
             "register_step_pre_hook", "register_optimizer_step")


def _imports_a_reacher(model) -> bool:
    """A project module this one imports mentions a way to reach the scaler out of sight."""
    project = model.project
    path = str(model.path)
    if project is None or path[:1] == "<":
        return False  # nothing imported is known: the module itself is all there is
    for other in project.imported_files(path):
        text = project.raw_text(other) or ""
        if any(w in text for w in _REACHING):
            return True
    return False


def plain_scaler(model, proto, text: str, scope, *, strict_uses: bool = True, built_here: bool = True) -> bool:
    """Whether the scaler named `text` (as written where it is used, in `scope`) is plain.
    `built_here=False` accepts a parameter (AMP101 asks only that nothing here unscales
    under another name).  `strict_uses=False` leaves the uses to the escape analysis (a project helper that only
    reads the scaler, `log(scaler)`, keeps it in sight): enough where the danger is a
    protocol call under another name, which the step graph follows into such helpers."""
    try:
        expr = cst.parse_expression(text)
    except cst.ParserSyntaxError:
        return False
    values = model.bindings.values.assigned(expr, scope)
    if not values and built_here:
        return False  # a parameter, or assigned out of sight
    for value, vscope in values:
        for branch in value_branches(value):
            if isinstance(branch, cst.Name) and branch.value == "None":
                continue
            if not (isinstance(branch, cst.Call) and vscope.model.qualify(branch.func) in _SCALER_CLASSES):
                return False
    if not proto.only_here(text.rsplit(".", 1)[-1]) or any(w in model.text for w in _DYNAMIC):
        return False
    if not _bound_once(model, values) or _imports_a_reacher(model):
        return False
    if not strict_uses:
        key = model.bindings.key(expr, scope)
        return key is not None and not model.bindings.escaped(key)
    finder = _Uses(text)
    walk(model.module, finder)
    return not finder.other_use


class _Uses(cst.CSTVisitor):
    """Whether the scaler's name is used other than as a receiver, a single assignment
    target, a comparison operand or a test (see the module's docstring)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.last = text.rsplit(".", 1)[-1] if "." in text else None
        self.fine: set[int] = set()
        self.callees: set[int] = set()
        self.other_use = False

    def _names_it(self, node: cst.BaseExpression) -> bool:
        name = dotted(node)
        if name is None:
            return False
        return name == self.text or (self.last is not None and name.rsplit(".", 1)[-1] == self.last and "." in name)

    def _check(self, node: cst.BaseExpression) -> None:
        if id(node) not in self.fine and self._names_it(node):
            self.other_use = True

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._check(node)
        self.fine.add(id(node.value))  # `scaler.step(...)`: its receiver
        self.fine.add(id(node.attr))  # an attribute's own name is no use of a variable
        if node.attr.value in _PROTOCOL_METHODS and id(node) not in self.callees and self._names_it(node.value):
            self.other_use = True  # `unscale = scaler.unscale_`: the protocol under another name

    def visit_Call(self, node: cst.Call) -> None:
        self.callees.add(id(node.func))
        if isinstance(node.func, cst.Name) and node.func.value in _READING_BUILTINS:
            self.fine.update(id(a.value) for a in node.args)  # `print(scaler)`, `isinstance(scaler, ...)`

    def visit_Name(self, node: cst.Name) -> None:
        self._check(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1:
            self.fine.add(id(node.targets[0].target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.fine.add(id(node.target))

    def visit_Comparison(self, node: cst.Comparison) -> None:
        self.fine.add(id(node.left))
        self.fine.update(id(c.comparator) for c in node.comparisons)

    def visit_If(self, node: cst.If) -> None:
        self.fine.add(id(node.test))

    def visit_While(self, node: cst.While) -> None:
        self.fine.add(id(node.test))

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        if isinstance(node.operator, cst.Not):
            self.fine.add(id(node.expression))

    def visit_Param(self, node: cst.Param) -> None:
        self.fine.add(id(node.name))  # another function's own parameter of that name

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.fine.add(id(node.keyword))


    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.fine.add(id(node.name))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.fine.add(id(node.name))

    def visit_Global(self, node: cst.Global) -> None:
        self.fine.update(id(n.name) for n in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.fine.update(id(n.name) for n in node.names)
