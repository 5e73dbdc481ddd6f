"""Which function a call runs: in this module, or in another module of the project.

The step graphs inline the functions a training step calls (a `clip_gradients` helper,
`self.optim.step()` of an optimizer wrapper, `train_one_epoch` from `engine.py`), and
other analyses read what a called function returns (`with self.autocast_ctx():`).
This is the one place that decides what a call's callee is:

- a function of the same module, not shadowed by a local name;
- a method through `self` (or `super()`), found on the class or its bases, which may
  be defined in other modules;
- a name imported from the project (`from utils import save_checkpoint`,
  `import engine; engine.train_one_epoch(...)`), resolved by the project index,
  re-exports followed;
- a class called to build an instance: its `__init__`;
- a method of an instance whose class we know from what was assigned to it
  (`t = Trainer(...); t.epoch()`, `self.optim = AmpOptimizer(...)` then
  `self.optim.step()`).

Anything else (a callable in a variable we cannot follow, a library function) has no
callee: the call is opaque, which costs recall, never precision.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis import memo
from amplint.analysis.names import dotted
from amplint.analysis.syntax import returned_values
from amplint.project.layout import is_external

# Class names of training engines (see steps.MANAGED_RECEIVER_WORDS).
_ENGINE_WORDS = ("accelerator", "fabric", "engine", "deepspeed", "trainer", "strategy")
# How far a class's bases are followed (`class A(B)`, `class B(C)` ...).
_MAX_BASE_DEPTH = 6


@dataclass(frozen=True, eq=False)
class Callee:
    """A function definition a call runs, and where it lives."""

    model: object  # the ModuleModel that defines it
    fn: cst.FunctionDef
    cls: object | None = None  # the ClassInfo the method was found on (for `self`)

    @property
    def scope(self):
        return self.model.scope_of.get(self.fn)

    @property
    def qualname(self) -> str:
        scope = self.scope
        return scope.name if scope is not None else self.fn.name.value


def resolve_call(call: cst.Call, scope, vocabulary: frozenset | None = None) -> Callee | None:
    """The function `call`, written in `scope`, runs (None when we cannot tell).

    `vocabulary`: what a function of another module must mention to be parsed (the
    project index's relevance check); by default that of the step graphs
    (CALLEE_VOCABULARY), another for an analysis that looks for something else (the
    dtype a helper returns, the `set_default_dtype` it calls).
    """
    model = scope.model
    func = call.func
    if isinstance(func, cst.Name):
        return _by_name(func.value, scope, vocabulary)
    if not isinstance(func, cst.Attribute):
        return None
    name = func.attr.value
    receiver = func.value
    if isinstance(receiver, cst.Name) and scope.cls is not None and receiver.value == scope.self_name:
        return method_of(scope.cls, name, vocabulary)
    if _is_super_call(receiver) and scope.cls is not None:
        for base in bases_of(scope.cls):
            found = method_of(base, name, vocabulary)
            if found is not None:
                return found
        return None
    # `utils.save_checkpoint(...)`, `engine.Trainer.fit(...)`: a dotted name that qualifies.
    qual = model.qualify(func)
    if qual is not None:
        symbol = project_symbol(qual, model)
        return _callee_of_symbol(symbol, vocabulary) if symbol is not None else None
    cls = class_of_instance(receiver, scope)
    if cls is not None:
        return method_of(cls, name, vocabulary)
    return None


def _by_name(name: str, scope, vocabulary: frozenset | None = None) -> Callee | None:
    model = scope.model
    nested = _nested_def(name, scope)
    if nested is not None:
        return Callee(model, nested)
    local = not scope.binds(name) or scope.is_module
    if local and name in model.functions:
        return Callee(model, model.functions[name])
    if local and name in model.classes:
        return method_of(model.classes[name], "__init__", vocabulary)
    qual = model.imports.qualify_text(name)
    if qual is None or not local:
        return None
    symbol = project_symbol(qual, model)
    return _callee_of_symbol(symbol, vocabulary) if symbol is not None else None


def _nested_def(name: str, scope) -> cst.FunctionDef | None:
    """A function defined (once) in the body of the calling function or of one around it:
    `def _save_optimizer(): ...` then `_save_optimizer()` inside `save_checkpoint`."""
    s = scope
    while s is not None and isinstance(s.node, cst.FunctionDef):
        defs = s.__dict__.get("_nested_defs")
        if defs is None:  # NB: once per function: every call by name in it asks
            defs = s.__dict__["_nested_defs"] = _defs_in(s.node.body)
        found = [d for d in defs if d.name.value == name]
        if found:
            # (a `def` is recorded as a binding without a value; any assigned value is another
            # object the name may hold)
            return found[0] if len(found) == 1 and not s.assignments.get(name) else None
        if s.binds(name):
            return None
        s = s.parent
    return None


def _defs_in(block: cst.BaseSuite) -> list[cst.FunctionDef]:
    """The functions a function body defines, also inside its `with`, `if`, `try` and loops
    (not those of a nested function or class)."""
    out: list[cst.FunctionDef] = []
    stack: list[cst.CSTNode] = [block]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.FunctionDef):
            out.append(node)
            continue
        if isinstance(node, (cst.ClassDef, cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            continue
        stack.extend(reversed(node.children))
    return out


def _callee_of_symbol(symbol, vocabulary: frozenset | None = None) -> Callee | None:
    """A function (or a class's constructor) of another module, parsed only if relevant.

    The constructor of a training engine of the project (a DeepSpeed engine, a Trainer,
    an Accelerator) is not read: building one sets up a whole run, the largest code of a
    framework, and no rule judges a step by it (AMP105 counts a new engine as a new run).
    """
    if symbol.kind == "class":
        if any(word in symbol.name.lower() for word in _ENGINE_WORDS):
            return None
        return method_of(ForeignClass(symbol), "__init__", vocabulary)
    if symbol.kind != "function" or not symbol.relevant(vocabulary):
        return None
    fn = symbol.node
    if fn is None:
        return None
    cls = symbol.model.classes.get(symbol.name.split(".")[0]) if "." in symbol.name else None
    return Callee(symbol.model, fn, cls)


def project_symbol(qual: str, model):
    project = model.project
    if project is None or is_external(qual, model.path):
        return None
    return project.resolve(qual, model)


def function_named(expr: cst.BaseExpression, scope):
    """(FunctionDef, its ModuleModel) that a name refers to: a function nested in an
    enclosing scope, one of the module, or one imported from the project (if relevant)."""
    model = scope.model
    if isinstance(expr, cst.Name):
        s = scope
        while s is not None:
            for inner in model.scopes:
                if inner.parent is s and isinstance(inner.node, cst.FunctionDef) and inner.node.name.value == expr.value:
                    return inner.node, model
            s = s.parent
        if expr.value in model.functions:
            return model.functions[expr.value], model
    qual = model.qualify(expr)
    symbol = project_symbol(qual, model) if qual is not None else None
    if symbol is not None and symbol.kind == "function" and "." not in symbol.name and symbol.relevant():
        fn = symbol.node
        if fn is not None:
            return fn, symbol.model
    return None


def _is_super_call(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "super"


# --- classes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForeignClass:
    """A class defined in another module of the project, known by name until a method of it
    is needed (its module is parsed only then, and only if that method is relevant)."""

    symbol: object  # amplint.project.index.Symbol of kind "class"

    @property
    def name(self) -> str:
        return self.symbol.name

    def info(self):
        """The parsed ClassInfo (parses the defining module)."""
        return self.symbol.node


def resolve_class(expr: cst.BaseExpression, model):
    """The class a class expression (`Trainer`, `optim.AmpOptimizer`) names: a ClassInfo of
    this module, a ForeignClass of another module of the project, or None."""
    text = dotted(expr)
    if text is None:
        return None
    return resolve_class_text(text, model)


def resolve_class_text(text: str, model):
    if text in model.classes:
        return model.classes[text]
    qual = model.imports.qualify_text(text)
    if qual is None:
        return None
    symbol = project_symbol(qual, model)
    if symbol is not None and symbol.kind == "class":
        return ForeignClass(symbol)
    return None


def bases_of(cls, _depth: int = 0):
    """The classes `cls` derives from, nearest first: ClassInfos of its own module, and the
    bases from other modules as ForeignClass (whose own bases the project index follows)."""
    out = []
    if _depth > _MAX_BASE_DEPTH or isinstance(cls, ForeignClass):
        return out
    for base in cls.bases:
        info = resolve_class_text(base, cls.model) if cls.model is not None else None
        if info is None or info is cls:
            continue
        out.append(info)
        out.extend(b for b in bases_of(info, _depth + 1) if b not in out)
    return out


def method_of(cls, name: str, vocabulary: frozenset | None = None) -> Callee | None:
    """`name` defined on `cls` or inherited from one of its bases (method resolution order
    approximated depth-first, which is exact for single inheritance); a method from
    another module only when it is relevant (amplint/project/index.py)."""
    if isinstance(cls, ForeignClass):
        symbol = cls.symbol.index.method_in_class(cls.symbol.path, cls.symbol.name, name)
        return _callee_of_symbol(symbol, vocabulary) if symbol is not None else None
    if name in cls.methods:
        return Callee(cls.model, cls.methods[name], cls)
    for base in bases_of(cls):
        if isinstance(base, ForeignClass):
            found = method_of(base, name, vocabulary)
            if found is not None:
                return found
        elif name in base.methods:
            return Callee(base.model, base.methods[name], base)
    return None


def class_of_instance(expr: cst.BaseExpression, scope, depth: int = 0, _seen: dict | None = None):
    """The project class an expression holds an instance of, from what was assigned to it."""
    if depth > 3 or not isinstance(expr, (cst.Name, cst.Attribute)):
        return None
    # What a name holds depends on its text and scope alone (every value ever assigned to
    # it): each is worked out once per question.  A name rebound from itself many times
    # (`module = wrap(module) if flag else module`) otherwise branches at every level.
    # Kept for the whole analysis (amplint/analysis/memo.py), else for this question.
    seen = _seen if _seen is not None else memo.slot("class_of_instance", dict)
    if seen is None:
        seen = {}
    key = (dotted(expr), id(scope), depth)
    if key in seen:
        return seen[key][0]
    seen[key] = (None, scope)  # NB: a cycle back to this name adds nothing; the scope is held (its id)
    found = _class_of_instance(expr, scope, depth, seen)
    seen[key] = (found, scope)
    return found


def _class_of_instance(expr: cst.BaseExpression, scope, depth: int, seen: dict):
    model = scope.model
    found = None
    for value, vscope in model.bindings.values.assigned(expr, scope):
        for branch in _branches(value):
            cls = None
            if isinstance(branch, cst.Call):
                cls = resolve_class(branch.func, vscope.model)
            elif isinstance(branch, (cst.Name, cst.Attribute)) and branch is not expr:
                cls = class_of_instance(branch, vscope, depth + 1, seen)
            if cls is not None:
                if found is not None and found != cls:
                    return None  # two classes: which method runs depends on the path
                found = cls
    if found is None and isinstance(expr, cst.Name):
        found = _annotated_class(expr.value, scope)
    if (found is None and isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)
            and scope.cls is not None and expr.value.value == scope.self_name):
        found = _field_class(scope.cls, expr.attr.value)
    return found


def _field_class(cls, name: str):
    """The project class a field of `cls` is declared with in the class body (`cfg:
    TrainConfig` of a dataclass): `self.cfg` holds one."""
    for stmt in cls.node.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.target.value == name:
                    annotation = small.annotation.annotation
                    if isinstance(annotation, cst.SimpleString):
                        text = annotation.evaluated_value
                        return resolve_class_text(text, cls.model) if isinstance(text, str) and text.isidentifier() else None
                    return resolve_class(annotation, cls.model) if cls.model is not None else None
    return None


def _annotated_class(name: str, scope):
    """The project class `name` is annotated with where it is bound (`scaler: ScalerBase =
    get_scaler(cfg)`, `def step(self, scaler: AmpScaler)`): what the value is built by may be
    out of sight (a factory chosen by a config string), its declared class is not."""
    s = scope
    while s is not None:
        if name in s.annotations:
            annotation = s.annotations[name]
            if isinstance(annotation, cst.SimpleString):  # `scaler: "ScalerBase"`
                text = annotation.evaluated_value
                return resolve_class_text(text, s.model) if isinstance(text, str) and text.isidentifier() else None
            return resolve_class(annotation, s.model)
        if s.binds(name):
            return None
        s = s.parent
    return None


def _branches(expr):
    from amplint.analysis.syntax import value_branches

    return value_branches(expr)


# --- classes held as values ------------------------------------------------------------
# How many classes a name may hold before we stop listing them (a registry of dozens).
_MAX_HELD_CLASSES = 16


def classes_held(expr: cst.BaseExpression, scope, vocabulary: frozenset | None = None) -> list:
    """The project classes a name may hold as class objects (not instances), every
    possibility: `opt_class = dynamic_import_optimizer(args.opt)` where the function
    returns `OPTIMIZER_FACTORY_DICT[name]`, a dict of classes in another module
    (espnet's string-keyed factories), or `cls = A if flag else B`.

    `vocabulary`: what a function of another module that returns them must mention to be
    read (resolve_call)."""
    if not isinstance(expr, (cst.Name, cst.Attribute)):
        return []
    out: list = []
    for value, vscope in scope.model.bindings.values.assigned(expr, scope):
        for branch in _branches(value):
            if isinstance(branch, cst.Call):
                callee = resolve_call(branch, vscope, vocabulary)
                inner = callee.scope if callee is not None else None
                if inner is not None:
                    for returned in returned_values(callee.fn):
                        out += _classes_named(returned, inner)
            else:
                out += _classes_named(branch, vscope)
            if len(out) > _MAX_HELD_CLASSES:
                return out[:_MAX_HELD_CLASSES]
    unique: list = []
    for cls in out:
        if cls not in unique:
            unique.append(cls)
    return unique


def _classes_named(expr: cst.BaseExpression, scope) -> list:
    """A class expression, or an item of a dict or list of classes (`REGISTRY[name]`)."""
    if isinstance(expr, cst.Subscript):
        out = []
        for container, model in _container_values(expr.value, scope):
            for element in container.elements:
                value = getattr(element, "value", None)
                if value is not None and dotted(value) is not None:
                    cls = resolve_class(value, model)
                    if cls is not None:
                        out.append(cls)
        return out
    cls = resolve_class(expr, scope.model) if dotted(expr) is not None else None
    return [cls] if cls is not None else []


def _container_values(expr: cst.BaseExpression, scope) -> list:
    """(literal container, the ModuleModel it is written in) for each dict, list or tuple a
    name is bound to, also a module-level one imported from a project module (`from
    espnet.optimizer.pytorch import OPTIMIZER_FACTORY_DICT`, inside the function too)."""
    containers = (cst.Dict, cst.List, cst.Tuple)
    found = [(v, s.model) for v, s in scope.model.bindings.values.assigned(expr, scope) if isinstance(v, containers)]
    if found or not isinstance(expr, cst.Name):
        return found
    qual = scope.model.imports.qualify_text(expr.value)
    symbol = project_symbol(qual, scope.model) if qual is not None else None
    if symbol is None or symbol.kind != "value" or symbol.model is None:
        return []
    module = symbol.model
    values = module.module_scope.assignments.get(symbol.name.split(".")[-1], [])
    return [(v, module) for v in values if isinstance(v, containers)]


def classes_deriving_in_importers(model, names: set[str]) -> list:
    """ClassInfos of the classes of project modules importing `model` that derive from one
    of its classes named in `names` (a base trainer's subclasses in the trainers' modules)."""
    import os

    project = model.project
    if project is None or str(model.path)[:1] == "<":
        return []
    here = os.path.abspath(model.path)
    words = {n.lower() for n in names}
    found = []
    for path in project.importers_among(model.path, lambda text: any(w in text for w in words)):
        other = project.model_at(path)
        if other is None:
            continue
        for sub in other.classes.values():
            if any(isinstance(base, ForeignClass) and os.path.abspath(base.symbol.path) == here and base.name in names
                   for base in bases_of(sub)):
                found.append(sub)
    return found
