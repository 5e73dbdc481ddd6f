"""Where code sets torch's default dtype, also through a helper of the project.

Real training code rarely calls `torch.set_default_dtype` itself: it builds the model
under a context manager of its own (torchtune's `training.set_default_dtype(self._dtype)`,
torchtitan's `utils.set_default_dtype(TORCH_DTYPE_MAP[config.training.dtype])`) whose
body passes its parameter on.  Such a helper is a *parameter sink*: a call to it sets the
default dtype to the argument it is given, so the call counts as a `set_default_dtype`
with that argument, judged in the caller's scope, where the value comes from.

A sink is found in the helper's own body, or one helper further (a helper that passes its
parameter to another sink), up to `_MAX_SINK_DEPTH` levels; helpers of other modules are
read through the project index, parsed only when their text names `set_default_dtype`.

What a `with` region of such a call constructs decides whether the low default dtype
reaches trained state (`creates_parameters`, `builds_only_frozen_modules`): modules and
parameters built there are half; caches recomputed for modules built before it are not.
"""

from __future__ import annotations

import builtins
import sys
import weakref
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.bindings import call_arg
from amplint.analysis.names import dotted
from amplint.analysis.walk import walk
from amplint.prefilter import Word

SET_DEFAULT_DTYPE = "torch.set_default_dtype"
# What a function of another module must mention to be read as a possible sink.
SINK_VOCABULARY = frozenset({Word("set_default_dtype")})
# How many helper levels lie between a call and `torch.set_default_dtype`.
_MAX_SINK_DEPTH = 2


@dataclass(frozen=True, eq=False)
class Sink:
    """The parameter of a helper that reaches `torch.set_default_dtype`."""

    position: int | None  # among the call's positional arguments (None: keyword-only)
    name: str
    call: cst.Call  # the `torch.set_default_dtype(...)` it reaches (in its own module)
    model: object  # the ModuleModel of `call`


@dataclass(frozen=True, eq=False)
class DefaultDtypeSet:
    """One call that sets the default dtype: `torch.set_default_dtype(x)` or a sink helper's call."""

    call: cst.Call
    scope: object  # where `call` is written (and `dtype` is evaluated)
    dtype: cst.BaseExpression | None  # the expression the default dtype is set to
    helper: object | None = None  # the sink's Callee when set through a helper
    sink: Sink | None = None  # and what of it reaches `torch.set_default_dtype`

    @property
    def spelling(self) -> str:
        """How the message names the call."""
        if self.helper is None:
            return SET_DEFAULT_DTYPE
        return dotted(self.call.func) or self.helper.qualname


def default_dtype_sets(model) -> list[DefaultDtypeSet]:
    """Every call of `model` that sets the default dtype, directly or through a sink helper."""
    found: list[DefaultDtypeSet] = []
    statements = None
    for site in model.calls:
        call, scope = site.node, site.scope
        if model.qualify(call.func) == SET_DEFAULT_DTYPE:
            found.append(DefaultDtypeSet(call, scope, call_arg(call, 0, "d")))
            continue
        if statements is None:
            statements = _statement_calls(model.module)
        if id(call) not in statements or not _may_be_helper(call, model):
            continue
        got = _sink_of_call(call, scope, 0)
        if got is not None:
            callee, sink = got
            found.append(DefaultDtypeSet(call, scope, call_arg(call, sink.position, sink.name), callee, sink))
    return found


def _may_be_helper(call: cst.Call, model) -> bool:
    """A call that can be a project function: not torch's or another library's own."""
    from amplint.analysis.callees import is_external

    if not call.args:
        return False  # a sink is handed the dtype
    qual = model.qualify(call.func)
    return qual is None or not is_external(qual, model.path)


def _sink_of_call(call: cst.Call, scope, depth: int):
    """(callee, Sink) for the function `call` runs, when one of its parameters reaches
    `torch.set_default_dtype`; None otherwise."""
    from amplint.analysis.callees import resolve_call

    callee = resolve_call(call, scope, SINK_VOCABULARY)
    if callee is None or callee.scope is None:
        return None
    sink = sink_parameter(callee, depth)
    return (callee, sink) if sink is not None else None


def sink_parameter(callee, depth: int = 0) -> Sink | None:
    """The parameter of `callee` whose value its body hands to `torch.set_default_dtype`
    (or to another sink); None when it has none.  `self` is not counted."""
    fn, model = callee.fn, callee.model
    memo = _memo(model)
    if fn in memo:
        return memo[fn]
    memo[fn] = None  # a recursive helper is no sink through itself
    params = _positional(fn, callee.scope)
    names = {p.name.value for p in (*fn.params.params, *fn.params.posonly_params, *fn.params.kwonly_params)}
    found = None
    collector = _CallsIn(fn)
    walk(fn, collector)
    for call in collector.calls:
        if model.qualify(call.func) == SET_DEFAULT_DTYPE:
            handed, target, target_model = call_arg(call, 0, "d"), call, model
        elif depth < _MAX_SINK_DEPTH and id(call) in collector.statements and _may_be_helper(call, model):
            inner = _sink_of_call(call, callee.scope, depth + 1)
            if inner is None:
                continue
            handed, target, target_model = call_arg(call, inner[1].position, inner[1].name), inner[1].call, inner[1].model
        else:
            continue
        if isinstance(handed, cst.Name) and handed.value in names:
            name = handed.value
            found = Sink(params.index(name) if name in params else None, name, target, target_model)
            break
    memo[fn] = found
    return found


def _positional(fn: cst.FunctionDef, scope) -> list[str]:
    """The parameter names a positional argument can bind, `self` (of a method) left out."""
    names = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
    if scope is not None and scope.self_name is not None and names and names[0] == scope.self_name:
        return names[1:]
    return names


_SINKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _memo(model, memos: "weakref.WeakKeyDictionary" = _SINKS) -> dict:
    """Per-model memo (of sink parameters, by default; a model is rebuilt when its file changes)."""
    memo = memos.get(model)
    if memo is None:
        memo = memos[model] = {}
    return memo


# --- does the region build a module that is trained? -------------------------------------
# Methods that hand out a module's submodules or parameters: `for m in model.modules():`.
_MODULE_WALKS = frozenset({"modules", "named_modules", "parameters", "named_parameters", "children", "apply"})


def builds_only_frozen_modules(site: DefaultDtypeSet) -> bool:
    """The call is a `with` item whose body builds (or, building nothing, works on) modules
    that the same function freezes: `model.eval()`, `model.requires_grad_(False)`,
    `for p in model.parameters(): p.requires_grad = False`, and never `model.train()`.

    A frozen teacher or reference model built in bf16 trains nothing (DESIGN.md: frozen
    low-precision parts are fine); a block that builds the trained policy and its frozen
    reference together is not frozen as a whole.
    """
    fn = getattr(site.scope, "node", None)
    if not isinstance(fn, cst.FunctionDef):
        return False
    finder = _RegionFinder(site.call)
    walk(fn, finder)
    if finder.region is None:
        return False
    modules = _region_modules(finder.region)
    if not modules:
        return False
    facts = _FreezeFinder()
    walk(fn, facts)
    return all(m in facts.frozen and m not in facts.trained for m in modules)


def _region_modules(body: cst.BaseSuite) -> set[str]:
    collector = _RegionModules()
    walk(body, collector)
    return collector.assigned or collector.walked


class _RegionFinder(cst.CSTVisitor):
    """The body of the `with` statement that has `call` among its items."""

    def __init__(self, call: cst.Call) -> None:
        self.call = call
        self.region: cst.BaseSuite | None = None

    def visit_With(self, node: cst.With) -> None:
        if any(item.item is self.call for item in node.items):
            self.region = node.body


class _RegionModules(cst.CSTVisitor):
    def __init__(self) -> None:
        self.assigned: set[str] = set()
        self.walked: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call):
            for target in node.targets:
                text = dotted(target.target)
                if text is not None:
                    self.assigned.add(text)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _MODULE_WALKS:
            text = dotted(func.value)
            if text is not None:
                self.walked.add(text)


class _FreezeFinder(cst.CSTVisitor):
    """Which names a function freezes and which it puts back into training."""

    def __init__(self) -> None:
        self.frozen: set[str] = set()
        self.trained: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        text = dotted(func.value)
        if text is None:
            return
        flag = node.args[0].value if node.args else None
        off = isinstance(flag, cst.Name) and flag.value == "False"
        if func.attr.value == "eval" or (func.attr.value == "requires_grad_" and off):
            self.frozen.add(text)
        elif func.attr.value in ("train", "requires_grad_") and not off:
            self.trained.add(text)

    def visit_For(self, node: cst.For) -> None:
        # `for p in model.parameters(): p.requires_grad = False`
        it = node.iter
        if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value == "parameters"):
            return
        owner = dotted(it.func.value)
        target = dotted(node.target)
        if owner is None or target is None:
            return
        freezes = _FreezesParameter(target)
        walk(node.body, freezes)
        if freezes.found:
            self.frozen.add(owner)


class _FreezesParameter(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.found = False

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if isinstance(value, cst.Name) and value.value == "False":
            self.found = self.found or any(dotted(t.target) == f"{self.name}.requires_grad" for t in node.targets)


def _statement_calls(module: cst.Module) -> set[int]:
    """ids of the calls that can be a sink's: a `with` item or a statement of its own.

    A helper that sets the default dtype returns nothing worth keeping (`with
    set_default_dtype(d):`, `set_default_dtype(d)`); a call whose value is used (an
    argument, an assignment) is not resolved, which keeps the search to a few calls a file.
    """
    collector = _StatementCalls()
    walk(module, collector)
    return collector.statements


class _StatementCalls(cst.CSTVisitor):
    def __init__(self) -> None:
        self.statements: set[int] = set()

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if isinstance(node.item, cst.Call):
            self.statements.add(id(node.item))

    def visit_Expr(self, node: cst.Expr) -> None:
        if isinstance(node.value, cst.Call):
            self.statements.add(id(node.value))


class _CallsIn(_StatementCalls):
    """The calls a function's own body makes (not those of functions nested in it), and
    which of them can be a sink's (`statements`)."""

    def __init__(self, fn: cst.FunctionDef) -> None:
        super().__init__()
        self.fn = fn
        self.calls: list[cst.Call] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.fn

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


# --- does the region create parameters? --------------------------------------------------
# What a function of another module must mention to be read for what it constructs: a
# `Parameter`, a `torch.nn` class (`nn.Linear`, `from torch.nn import Linear`).
BUILD_VOCABULARY = frozenset({"parameter", Word("nn")})
# How many helper levels a region's calls are followed; deeper, a call counts as building.
_MAX_BUILD_DEPTH = 3
# Builtins (`hasattr`, `isinstance`, `setattr`, `len`) build no parameter; `eval` and `exec` may run anything.
_HARMLESS_BUILTINS = frozenset(
    name for name in dir(builtins) if name[:1].islower() and callable(getattr(builtins, name))
) - {"eval", "exec"}


def creates_parameters(site: DefaultDtypeSet) -> bool:
    """Whether the low default dtype of `site` can reach a parameter: the call is not a
    `with` item (the dtype stays set for everything after it), or the `with` body builds
    something: a `torch.nn` module or `nn.Parameter`, an object of a class or factory that
    builds one (followed into project helpers, across modules), or an object the region
    binds from a call it cannot follow.

    A body that only calls methods of modules that already exist (`for m in
    model.modules(): m.rope_init()`, torchtune's recomputation of RoPE caches after
    sharding; `m.to_empty(...)`, `m.reset_parameters()`) creates no parameter: theirs
    already have a dtype, and what such a method recomputes (a buffer, a cache, values
    written into the existing parameters) does not make the trained state half.  Such a
    method is read when its class is known (it may still build a submodule or a new
    Parameter); one of an object whose class cannot be known counts as recomputing.
    """
    root = getattr(site.scope, "node", None)
    if not isinstance(root, (cst.FunctionDef, cst.Module)):
        return True
    finder = _RegionFinder(site.call)
    walk(root, finder)
    if finder.region is None:
        return True
    return _builds(finder.region, site.scope, 0, region=True)


def _builds(body: cst.CSTNode, scope, depth: int, *, region: bool = False) -> bool:
    """`body` (a `with` region, or a helper's definition) constructs a parameter or a module."""
    collector = _BuildCalls()
    walk(body, collector)
    return any(_call_builds(call, scope, depth, bound=region and id(call) in collector.bound) for call in collector.calls)


def _call_builds(call: cst.Call, scope, depth: int, *, bound: bool) -> bool:
    model = scope.model
    func = call.func
    qual = model.qualify(func)
    if qual is not None:
        verdict = _library_builds(qual, model)
        if verdict is not None:
            return verdict
    elif isinstance(func, cst.Attribute) and not _names_a_definition(func.value, scope):
        # A method of an object that exists (a parameter, a local, `self.x`, a loop's
        # module): it recomputes that object's state unless its definition builds.
        return _followed_builds(call, scope, depth, unknown=bound)
    elif isinstance(func, cst.Name) and func.value in _HARMLESS_BUILTINS and not scope.binds(func.value) \
            and func.value not in model.functions and func.value not in model.classes:
        return False
    # A function, a class or a factory: what it builds is what its definition builds.
    return _followed_builds(call, scope, depth, unknown=True)


def _followed_builds(call: cst.Call, scope, depth: int, *, unknown: bool) -> bool:
    """What the project definition `call` runs builds; `unknown` when there is none to read."""
    from amplint.analysis.callees import resolve_call

    callee = resolve_call(call, scope, BUILD_VOCABULARY)
    if callee is None or callee.scope is None:
        return unknown
    if depth >= _MAX_BUILD_DEPTH:
        return True
    memo = _memo(callee.model, _BUILDS)
    if callee.fn not in memo:
        memo[callee.fn] = False  # a recursive helper builds nothing through itself
        memo[callee.fn] = _builds(callee.fn.body, callee.scope, depth + 1)
    return memo[callee.fn]


def _library_builds(qual: str, model) -> bool | None:
    """A library's callable: torch builds parameters only through `torch.nn` classes (a
    module, `nn.Parameter`); its functions and tensor factories do not, nor does the
    standard library.  Another library's callable may (`AutoModel.from_pretrained`).
    None: a name of the project, to be followed."""
    from amplint.analysis.callees import is_external

    if not is_external(qual, model.path):
        return None
    parts = qual.split(".")
    if parts[0] == "torch":
        return parts[1:2] == ["nn"] and parts[-1][:1].isupper()
    return parts[0] not in _STDLIB


_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


def _names_a_definition(expr: cst.BaseExpression, scope) -> bool:
    """`expr` (a call's receiver) is rooted at a class or function of the module (`Net.from_config`),
    not at an object."""
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    if not isinstance(expr, cst.Name) or scope.binds(expr.value):
        return False
    return expr.value in scope.model.classes or expr.value in scope.model.functions


# Per-model memo of what a function's definition builds (`_followed_builds`).
_BUILDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _BuildCalls(cst.CSTVisitor):
    """The calls a body runs (not those of functions, lambdas or classes defined in it), and
    which of them bind a new object (`model = builder.build(cfg)`)."""

    def __init__(self) -> None:
        self.calls: list[cst.Call] = []
        self.bound: set[int] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self._bind(node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.value)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.value)

    def _bind(self, value: cst.BaseExpression | None) -> None:
        if isinstance(value, cst.Call):
            self.bound.add(id(value))
