"""Which autocast a `with` item enters: torch's own contexts and the project's wrappers.

This is the one place that says "this expression enters autocast with device D, dtype T,
enabled E".  Besides `torch.autocast(...)` and its legacy spellings, real code enters
autocast through its own helpers, and what they enter depends on what the call site
hands them:

    def torch_autocast(device_type="cuda", **kw):        # a function returning a context
        return torch.autocast(device_type=device_type, **kw)

    @contextmanager                                       # a contextmanager around a yield
    def maybe_autocast(enabled, dtype=torch.float16):
        with torch.autocast("cuda", dtype=dtype, enabled=enabled):
            yield

    amp_ctx = torch.autocast if use_amp else nullcontext  # a callable chosen by an option
    ctx = functools.partial(torch.autocast, "cuda", dtype=dtype)
    def get_ctx(dtype): return functools.partial(torch.autocast, "cuda", dtype=dtype)

A call of a wrapper binds its arguments to the wrapper's parameters (positional,
keyword, a parameter's default, extra keywords gathered by `**kw` and spread again), so
`with torch_autocast(dtype=torch.float16):` is float16 autocast, and
`with maybe_autocast(False):` is a disabled one.  Wrappers may call wrappers, in this
module or in another module of the project (found through callees.resolve_call); the
depth is bounded.  A choice of a `nullcontext()` enters nothing on that branch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amplint.analysis import memo
from amplint.analysis.names import dotted
from amplint.analysis.torch_api import AUTOCAST_CONTEXTS
from amplint.analysis.syntax import returned_values, value_branches
from amplint.analysis.walk import walk


@dataclass(frozen=True)
class AutocastInfo:
    """One autocast context: what we can tell without running it."""

    node: cst.CSTNode
    device: str | None  # "cuda", "cpu", or None when decided at run time
    dtypes: frozenset[str] | None  # possible dtypes; None when unknown
    enabled: bool | None  # False only for a literal `enabled=False`
    managed: bool = False  # accelerator.autocast(): the library chooses
    # Its bfloat16 is picked by the hardware (`if torch.cuda.is_bf16_supported():`): that is
    # what runs on any GPU that supports it; a float16 alternative only on older ones.
    bf16_where_supported: bool = False

    @property
    def may_be_enabled(self) -> bool:
        return self.enabled is not False

    @property
    def may_reduce_precision(self) -> bool:
        """It may run ops in a low dtype: not disabled, and not known to ask only for float32
        (`autocast(dtype=torch.float32)` around a router gate is torch's "keep this fp32"
        idiom: torch disables an autocast whose dtype it does not lower to)."""
        if not self.may_be_enabled:
            return False
        return self.dtypes is None or not self.dtypes <= {"float32", "float64"}

    @property
    def may_be_fp16(self) -> bool:
        return self.dtypes is not None and "float16" in self.dtypes

    @property
    def may_be_bf16(self) -> bool:
        return self.dtypes is not None and "bfloat16" in self.dtypes


# How many calls, names and wrappers are followed from one `with` item.
MAX_DEPTH = 6
# How many steps one `with` item's walk may take.  A name assigned in many places branches
# at every level (`module = checkpoint_wrapper(module) if flag else module`, fifteen times
# in one function): each step is remembered, so the walk is linear in what it meets, and
# this bound stops what memoising cannot (new wrapper calls at every level).
MAX_STEPS = 5_000
_CONTEXTMANAGERS = frozenset({"contextlib.contextmanager", "contextlib.asynccontextmanager"})


@dataclass(frozen=True, eq=False)
class Bound:
    """The arguments of one call of a wrapper, bound to the wrapper's parameters."""

    scope: object  # the wrapper's scope: its parameters are names there
    params: dict[str, "Arg"] = field(default_factory=dict)
    star_args: str | None = None  # `*args` of the wrapper
    star_kwargs: str | None = None  # `**kw` of the wrapper
    extra_positional: tuple["Arg", ...] = ()
    extra_keywords: tuple["Arg", ...] = ()


@dataclass(frozen=True, eq=False)
class Arg:
    """An argument (or a parameter's value) and where it is evaluated."""

    arg: cst.Arg
    scope: object
    env: Bound | None = None


class _Walk:
    """The steps of the walks from `with` items: their results by what they were asked (with
    the depth each was worked out at), and what each key names (held, so that no id is
    reused while the results last).  One lives for one `with` item, or for a whole module's
    analysis (amplint/analysis/memo.py): every rule asks about the same items."""

    def __init__(self) -> None:
        self.results: dict[tuple, tuple[int, list | None]] = {}
        self.held: list = []
        self.steps = 0  # of the present top-level question


_walk: _Walk | None = None


def _asked(expr) -> object:
    """What a step on `expr` depends on: a name's text (every value ever assigned to it in
    the scope, whichever of its occurrences asks), else the node itself."""
    if isinstance(expr, (cst.Name, cst.Attribute)):
        text = dotted(expr)
        if text is not None:
            return text
    return id(expr)


def _remembered(step, kind: str, expr, scope, env, args, node, depth: int) -> list:
    """`step()`, or what it gave when asked the same before at the same depth or a shallower
    one (deeper ones were cut off sooner); [] for a question that is still being answered
    (a name assigned from itself) and past MAX_STEPS."""
    walk_ = _walk
    key = (kind, _asked(expr), id(scope), id(env), id(args), id(node))
    known = walk_.results.get(key)
    if known is not None:
        at, found = known
        if found is None:
            return []  # NB: a cycle (`ctx = autocast(...) if flag else ctx`): its answer is being made
        if at <= depth:
            return found
    walk_.steps += 1
    if walk_.steps > MAX_STEPS:
        return []
    walk_.held.append((expr, scope, env, args, node))
    walk_.results[key] = (depth, None)
    # NB: each context once: a context reached on many paths would multiply the lists
    found = list(dict.fromkeys(step()))
    walk_.results[key] = (depth, found)
    return found


def entered(bindings, expr: cst.BaseExpression, scope, env: Bound | None = None, depth: int = 0) -> list:
    """The AutocastInfos `with <expr>:` (written in `scope`) may enter."""
    global _walk
    if _walk is not None:
        return _remembered(lambda: _entered(bindings, expr, scope, env, depth), "entered", expr, scope, env, None, None, depth)
    _walk = memo.slot("autocast_entries", _Walk) or _Walk()
    _walk.steps = 0
    try:
        return list(_remembered(lambda: _entered(bindings, expr, scope, env, depth), "entered", expr, scope, env, None, None, depth))
    finally:
        _walk = None


def _entered(bindings, expr: cst.BaseExpression, scope, env: Bound | None, depth: int) -> list:
    if depth > MAX_DEPTH:
        return []
    found: list = []
    for branch in value_branches(expr):
        branch, bscope, benv = resolve(branch, scope, env)
        model = bscope.model
        if isinstance(branch, cst.Call):
            args = tuple(Arg(a, bscope, benv) for a in branch.args)
            found.extend(produced(model.bindings, branch.func, bscope, benv, args, branch, depth))
        elif isinstance(branch, (cst.Name, cst.Attribute)):
            assigned = model.bindings.values.assigned(branch, bscope)
            for value, vscope in assigned:
                found.extend(entered(vscope.model.bindings, value, vscope, benv if vscope is bscope else None, depth + 1))
            if not assigned and model.qualify(branch) not in AUTOCAST_CONTEXTS:
                found.extend(model.bindings._decorator_autocast(branch, bscope, depth))
    return found


def produced(bindings, func: cst.BaseExpression, scope, env: Bound | None, args: tuple, node: cst.Call, depth: int) -> list:
    """What calling `func` with `args` enters (the context a call builds), `node` the call
    at the `with` item (what the AutocastInfo points at)."""
    if _walk is None:  # NB: asked outside a walk of `entered`
        return _produced(bindings, func, scope, env, args, node, depth)
    return _remembered(lambda: _produced(bindings, func, scope, env, args, node, depth),
                       "produced", func, scope, env, args, node, depth)


def _produced(bindings, func: cst.BaseExpression, scope, env: Bound | None, args: tuple, node: cst.Call, depth: int) -> list:
    if depth > MAX_DEPTH:
        return []
    func, scope, env = resolve(func, scope, env)
    model = scope.model
    qual = model.qualify(func)
    if qual in AUTOCAST_CONTEXTS:
        return [describe(model.bindings, node, qual, scope, args)]
    if qual == "functools.partial" and isinstance(func, (cst.Name, cst.Attribute)) and args and func is node.func:
        # `functools.partial(torch.autocast, "cuda")` itself: the context it will build
        inner, rest = args[0], args[1:]
        inner_expr, inner_scope, _ = resolve(inner.arg.value, inner.scope, inner.env)
        inner_qual = inner_scope.model.qualify(inner_expr)
        if inner_qual in AUTOCAST_CONTEXTS:
            return [describe(model.bindings, node, inner_qual, inner_scope, rest)]
        return []
    if isinstance(func, cst.Attribute) and func.attr.value == "autocast" and qual is None:
        receiver = (dotted(func.value) or "").lower()
        if "accelerator" in receiver or "fabric" in receiver:
            return [AutocastInfo(node=node, device=None, dtypes=None, enabled=None, managed=True)]
    if isinstance(func, cst.Call):
        return _called_result(func, scope, env, args, node, depth)
    if not isinstance(func, (cst.Name, cst.Attribute)):
        return []
    wrapper = _wrapper(func, scope, node, depth)
    if wrapper is not None:
        return _through_wrapper(wrapper, args, node, depth)
    if qual is not None and _is_library(qual, model):
        return []
    found: list = []
    for value, vscope in model.bindings.values.assigned(func, scope):
        venv = env if vscope is scope else None
        for branch in value_branches(value):
            found.extend(produced(vscope.model.bindings, branch, vscope, venv, args, node, depth + 1))
    return found


def _called_result(call: cst.Call, scope, env, args: tuple, node: cst.Call, depth: int) -> list:
    """Calling what `call` returns: `functools.partial(torch.autocast, "cuda", ...)(...)`,
    or a helper that returns a partial or an autocast class (`get_ctx(dtype)()`)."""
    model = scope.model
    if model.qualify(call.func) == "functools.partial" and call.args:
        head = call.args[0]
        prefix = tuple(Arg(a, scope, env) for a in call.args[1:])
        return produced(model.bindings, head.value, scope, env, (*prefix, *args), node, depth + 1)
    wrapper = _wrapper(call.func, scope, call, depth)
    if wrapper is None:
        return []
    fn, fscope = wrapper
    bound = bind(tuple(Arg(a, scope, env) for a in call.args), fn, fscope)
    found: list = []
    for value in returned_values(fn):
        for branch in value_branches(value):
            found.extend(produced(fscope.model.bindings, branch, fscope, bound, args, node, depth + 1))
    return found


def _through_wrapper(wrapper, args: tuple, node: cst.Call, depth: int) -> list:
    """A project function called at a `with` item: what its returned context enters, or
    for a contextmanager, the autocast it holds open around its `yield`."""
    fn, fscope = wrapper
    bound = bind(args, fn, fscope)
    bindings = fscope.model.bindings
    found: list = []
    if is_contextmanager(fn, fscope.model):
        for item, iscope in _items_around_yield(fn, fscope.model):
            found.extend(entered(bindings, item, iscope, bound if iscope is fscope else None, depth + 1))
        return _at(found, node)
    for value in returned_values(fn):
        found.extend(entered(bindings, value, fscope, bound, depth + 1))
    return _at(found, node)


def _at(infos: list, node: cst.Call) -> list:
    """The infos of a wrapper, pointing at the call that entered them."""
    from dataclasses import replace

    return [replace(info, node=node) for info in infos]


def _wrapper(func: cst.BaseExpression, scope, node: cst.Call, depth: int):
    """(FunctionDef, its scope) of a project function `func` names, or None."""
    if depth >= MAX_DEPTH:
        return None
    if func is node.func:
        from amplint.analysis.callees import resolve_call

        callee = resolve_call(node, scope)
        if callee is None or callee.scope is None or callee.fn.name.value == "__init__":
            return None
        return callee.fn, callee.scope
    from amplint.analysis.callees import function_named

    found = function_named(func, scope)
    if found is None:
        return None
    fn, model = found
    fscope = model.scope_of.get(fn)
    return (fn, fscope) if fscope is not None else None


def _is_library(qual: str, model) -> bool:
    from amplint.project.layout import is_external

    return is_external(qual, model.path)


def is_contextmanager(fn: cst.FunctionDef, model) -> bool:
    for d in fn.decorators:
        qual = model.qualify(d.decorator) or dotted(d.decorator) or ""
        if qual in _CONTEXTMANAGERS or qual.split(".")[-1] in ("contextmanager", "asynccontextmanager"):
            return True
    return False


# --- binding arguments ------------------------------------------------------------------


def bind(args: tuple, fn: cst.FunctionDef, fscope) -> Bound:
    """`args` bound to the parameters of `fn` (whose scope is `fscope`)."""
    p = fn.params
    positional = [x.name.value for x in (*p.posonly_params, *p.params)]
    if fscope.self_name is not None and positional and positional[0] == fscope.self_name:
        positional = positional[1:]
    named = set(positional) | {x.name.value for x in p.kwonly_params}
    params: dict[str, Arg] = {}
    extra_pos: list[Arg] = []
    extra_kw: list[Arg] = []
    spread_positional = any(a.arg.star == "*" for a in args)
    index = 0
    for a in args:
        if a.arg.star == "**":
            extra_kw.append(a)  # `**cfg`: which parameters it fills is not known
        elif a.arg.star == "*":
            extra_pos.append(a)
        elif a.arg.keyword is not None:
            name = a.arg.keyword.value
            if name in named:
                params[name] = a
            else:
                extra_kw.append(a)
        elif not spread_positional:
            if index < len(positional):
                params[positional[index]] = a
            else:
                extra_pos.append(a)
            index += 1
    star_args = p.star_arg.name.value if isinstance(p.star_arg, cst.Param) else None
    star_kwargs = p.star_kwarg.name.value if isinstance(p.star_kwarg, cst.Param) else None
    return Bound(fscope, params, star_args, star_kwargs, tuple(extra_pos), tuple(extra_kw))


def resolve(expr: cst.BaseExpression, scope, env: Bound | None):
    """A parameter of a wrapper replaced by what the call bound to it (or its default, when
    the call passes nothing for it)."""
    for _ in range(MAX_DEPTH):
        if not isinstance(expr, cst.Name) or scope is None or expr.value not in scope.params or expr.value in scope.assignments:
            break
        if env is None or env.scope is not scope:
            break  # the wrapper's own code, read without a call: the parameter is unknown
        if expr.value in env.params:
            bound = env.params[expr.value]
            expr, scope, env = bound.arg.value, bound.scope, bound.env
            continue
        default = _default(scope.node, expr.value)
        if default is None:
            break
        expr, scope, env = default, scope.parent or scope, None
    return expr, scope, env


def _default(fn, name: str) -> cst.BaseExpression | None:
    if not isinstance(fn, cst.FunctionDef):
        return None
    for p in (*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params):
        if p.name.value == name:
            return p.default
    return None


def spread(args: tuple, depth: int = 0) -> list[Arg]:
    """`args` with a wrapper's `*args` / `**kw` replaced by the arguments they gathered."""
    out: list[Arg] = []
    for a in args:
        env, value = a.env, a.arg.value
        if a.arg.star and env is not None and env.scope is a.scope and isinstance(value, cst.Name) and depth < MAX_DEPTH:
            if a.arg.star == "**" and value.value == env.star_kwargs:
                out.extend(spread(env.extra_keywords, depth + 1))
                continue
            if a.arg.star == "*" and value.value == env.star_args:
                out.extend(spread(env.extra_positional, depth + 1))
                continue
        out.append(a)
    return out


def describe(bindings, node: cst.CSTNode, qual: str, scope, args: tuple):
    """The AutocastInfo of `qual(*args)`, each argument read where it was written."""
    from dataclasses import replace

    from amplint.analysis.torch_api import AUTOCAST_IMPLIED_DEVICE

    plain: list[cst.Arg] = []
    scopes: dict[int, object] = {}
    spread_args = spread(args)
    for a in spread_args:
        value, vscope, _ = resolve(a.arg.value, a.scope, a.env)
        arg = a.arg if value is a.arg.value else a.arg.with_changes(value=value)
        plain.append(arg)
        scopes[id(arg.value)] = vscope
    info = bindings._describe_autocast(node, qual, scope, tuple(plain), scopes)
    if info.enabled is None:
        enabled = _argument(spread_args, 0 if qual in AUTOCAST_IMPLIED_DEVICE else 2, "enabled")
        if enabled is not None:
            known = literal_truth(enabled.arg.value, enabled.scope, enabled.env)
            if known is not None:
                info = replace(info, enabled=known)
    return info


def _argument(args: list, position: int, keyword: str) -> Arg | None:
    for a in args:
        if a.arg.keyword is not None and a.arg.keyword.value == keyword:
            return a
    positional = [a for a in args if a.arg.keyword is None and not a.arg.star]
    return positional[position] if position < len(positional) else None


def literal_truth(expr: cst.BaseExpression, scope, env: Bound | None, depth: int = 0) -> bool | None:
    """The truth of a flag a wrapper computes from what it was handed, when the call site
    decides it: `enabled and device == "cuda"` with `enabled=False`, `bool(enabled)`,
    `not disable`; None when it is not known before running."""
    if depth > MAX_DEPTH:
        return None
    expr, scope, env = resolve(expr, scope, env)
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    if isinstance(expr, cst.Name) and env is not None and env.scope is scope and expr.value in env.params:
        # a parameter the wrapper re-binds from itself (`enabled = bool(enabled)`)
        values = scope.assignments.get(expr.value, [])
        if values and all(_rebinds(v, expr.value) for v in values):
            bound = env.params[expr.value]
            return literal_truth(bound.arg.value, bound.scope, bound.env, depth + 1)
        return None
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "bool" and len(expr.args) == 1:
        return literal_truth(expr.args[0].value, scope, env, depth + 1)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        inner = literal_truth(expr.expression, scope, env, depth + 1)
        return None if inner is None else not inner
    if isinstance(expr, cst.BooleanOperation):
        left = literal_truth(expr.left, scope, env, depth + 1)
        right = literal_truth(expr.right, scope, env, depth + 1)
        if isinstance(expr.operator, cst.And):
            return False if False in (left, right) else True if left is right is True else None
        return True if True in (left, right) else False if left is right is False else None
    return None


def _rebinds(value: cst.BaseExpression, name: str) -> bool:
    """`bool(enabled)` for `enabled`: the same flag, re-bound."""
    return (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "bool"
            and len(value.args) == 1 and isinstance(value.args[0].value, cst.Name) and value.args[0].value.value == name)


# --- reading wrappers -------------------------------------------------------------------



def _items_around_yield(fn: cst.FunctionDef, model) -> list[tuple[cst.BaseExpression, object]]:
    """The `with` items of a contextmanager whose block holds its `yield`."""
    finder = _YieldingWiths(model, fn)
    walk(fn.body, finder)
    return finder.items


class _YieldingWiths(cst.CSTVisitor):
    def __init__(self, model, fn: cst.FunctionDef) -> None:
        self.scope = model.scope_of.get(fn)
        self.open: list[cst.With] = []
        self.items: list[tuple[cst.BaseExpression, object]] = []
        self._taken: set[int] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_With(self, node: cst.With) -> None:
        self.open.append(node)

    def leave_With(self, original_node: cst.With) -> None:
        self.open.pop()

    def visit_Yield(self, node: cst.Yield) -> None:
        for w in self.open:
            if id(w) not in self._taken:
                self._taken.add(id(w))
                self.items.extend((item.item, self.scope) for item in w.items)


def holds_yield(with_node: cst.With) -> bool:
    """The block of `with_node` yields (not in a nested function): a contextmanager's
    region, which the caller enters at its own `with` (and is judged there, with the
    arguments it hands the contextmanager)."""
    finder = _YieldFinder()
    walk(with_node.body, finder)
    return finder.found


class _YieldFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Yield(self, node: cst.Yield) -> bool:
        self.found = True
        return False
