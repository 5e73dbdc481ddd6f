"""What a custom autograd Function computes: does the autocast state matter to it?

AMP205 is about `torch.autograd.Function` subclasses run under autocast without
`custom_fwd` / `custom_bwd`: their forward sees autocast (each op cast on its own) and
their backward does not.  That matters for the ops whose dtype autocast decides: those
of its float16 and float32 lists (`@`, `torch.matmul`, `F.linear`, convolutions,
softmax, exp and log, norms, losses: `AUTOCAST_SENSITIVE_OPS`), as functions or tensor
methods, and for a function the Function was handed and runs again (`ctx.run_function`
recomputing a checkpointed forward in backward).  The forward then computes in the
dtypes autocast chose and the backward in whatever the saved tensors and gradients
hold: mismatched matmuls raise, or the backward quietly runs another precision.

A Function that only moves, gathers, permutes or communicates tensors, or calls a
dtype-generic kernel, computes the same under any autocast state; so does an op whose
tensors are all complex (the results of `torch.fft.fft` and its kin: autocast casts
floating-point tensors only).

A Function that asks for the autocast state itself (`torch.is_autocast_enabled(...)`,
`torch.get_autocast_dtype(...)`, directly or through a helper of its module) and
computes in the dtype it learns handles autocast by hand: what `custom_fwd` records for
backward, the Function records in `ctx` (`reads_autocast_state`).
"""

from __future__ import annotations

import re

import libcst as cst

from amplint.analysis.torch_api import AUTOCAST_SENSITIVE_OPS
from amplint.analysis.walk import walk


def autocast_sensitive(fn: cst.FunctionDef, model, rerun: frozenset[str] = frozenset()) -> bool:
    """`rerun`: the callables the forward was handed and called; the backward calling one
    of them again through `ctx` recomputes the forward (activation checkpointing)."""
    finder = _SensitiveFinder(model, _ctx_name(fn), rerun, _complex_names(fn, model))
    walk(fn.body, finder)
    return finder.found


def runs_autocast_ops(fn: cst.FunctionDef, model) -> bool:
    """The function runs an op autocast casts (`F.linear`, `@`, `softmax`), not only a
    compiled kernel: handing it float32 inputs does not keep it in float32 inside a region."""
    finder = _SensitiveFinder(model, _ctx_name(fn), frozenset(), _complex_names(fn, model), kernels=False)
    walk(fn.body, finder)
    return finder.found


# torch.fft's transforms whose result is complex (irfft, hfft and the like return real
# tensors): autocast casts floating-point tensors only, so an op on these is not its concern.
_COMPLEX_FFT = frozenset(
    f"torch.fft.{name}" for name in ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "rfft2", "rfftn", "ihfft", "ihfft2", "ihfftn")
)


def _is_complex(expr: cst.BaseExpression, model, names: frozenset[str]) -> bool:
    """A complex FFT's result, or a local name bound only to one (`g = fft(grad)`)."""
    if isinstance(expr, cst.Call):
        return model.qualify(expr.func) in _COMPLEX_FFT
    return isinstance(expr, cst.Name) and expr.value in names


def _complex_names(fn: cst.FunctionDef, model) -> frozenset[str]:
    """The function's local names whose every binding is a complex FFT's result.

    Read without regard to order, so a parameter (bound on entry to whatever the caller
    passed) never counts, and every other way of binding a name marks it unknown."""
    finder = _Assignments()
    walk(fn.body, finder)
    params = {p.name.value for p in (*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params)}
    return frozenset(
        name for name, values in finder.values.items()
        if name not in params and all(v is not None and _is_complex(v, model, frozenset()) for v in values)
    )


class _Assignments(cst.CSTVisitor):
    def __init__(self) -> None:
        self.values: dict[str, list] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            names = [target.target] if isinstance(target.target, cst.Name) else _names_in(target.target)
            for name in names:  # NB: an unpacked or augmented name is bound to something else
                self.values.setdefault(name.value, []).append(node.value if isinstance(target.target, cst.Name) else None)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._unknown(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name):
            self.values.setdefault(node.target.value, []).append(node.value)

    def visit_For(self, node: cst.For) -> None:
        self._unknown(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        if isinstance(node.target, cst.Name):
            self.values.setdefault(node.target.value, []).append(node.value)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._unknown(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._unknown(node.asname.name)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self._unknown(node.name.name)

    def _unknown(self, target: cst.BaseExpression) -> None:
        for name in _names_in(target):
            self.values.setdefault(name.value, []).append(None)


def _names_in(target: cst.BaseExpression) -> list[cst.Name]:
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _names_in(e.value)]
    if isinstance(target, cst.StarredElement):
        return _names_in(target.value)
    return []


def called_parameters(fn: cst.FunctionDef) -> frozenset[str]:
    """The parameters of `fn` that it calls: `run_function(*args)` in a checkpoint forward."""
    names = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)}
    finder = _CalledNames(names)
    walk(fn.body, finder)
    return frozenset(finder.found)


class _CalledNames(cst.CSTVisitor):
    def __init__(self, names: set[str]) -> None:
        self.names, self.found = names, set()

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value in self.names:
            self.found.add(node.func.value)


def _ctx_name(fn: cst.FunctionDef) -> str | None:
    params = fn.params.params
    return params[0].name.value if params else None


class _SensitiveFinder(cst.CSTVisitor):
    def __init__(self, model, ctx: str | None, rerun: frozenset[str], complex_names: frozenset[str] = frozenset(),
                 kernels: bool = True) -> None:
        self.model = model
        self.kernels = kernels  # a compiled kernel's call counts
        self.ctx = ctx
        self.rerun = rerun
        self.complex_names = complex_names
        self.found = False

    def _on_complex(self, node: cst.Call) -> bool:
        """Every tensor the op takes is complex (peft's C3A: `einsum(eq, ifft(x), fft(w))`);
        a string (einsum's equation) is no tensor, and a starred argument could be anything."""
        operands = [a.value for a in node.args if not isinstance(a.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))]
        if isinstance(node.func, cst.Attribute) and self.model.qualify(node.func) is None:
            operands.append(node.func.value)  # `a.matmul(b)`: the receiver too
        return bool(operands) and not any(a.star for a in node.args) and all(
            _is_complex(o, self.model, self.complex_names) for o in operands
        )

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply):
            self.found = True

    def visit_Call(self, node: cst.Call) -> None:
        if self.found:
            return
        func = node.func
        qual = self.model.qualify(func)
        if qual is not None:
            if qual.split(".")[0] == "torch" and not compiled_kernel(qual):
                self.found = qual.rsplit(".", 1)[-1] in AUTOCAST_SENSITIVE_OPS and not self._on_complex(node)
            else:
                self.found = self.kernels and compiled_kernel(qual)
            return
        if isinstance(func, cst.Attribute):
            if func.attr.value in AUTOCAST_SENSITIVE_OPS:
                self.found = not self._on_complex(node)  # `x.matmul(w)`, `grad.mm(weight)`, `scores.softmax(-1)`
            elif isinstance(func.value, cst.Name) and func.value.value == self.ctx and func.attr.value in self.rerun:
                self.found = True  # `ctx.run_function(...)`: the forward handed over, run again


# The module of a compiled extension, by the names projects give it: `from detectron2 import _C`,
# `import fused_layer_norm_cuda`, `ext = load(name="deform_conv_ext", ...)`, `_backend`.
_EXTENSION_MODULE = re.compile(r"^(?:_C|_ext|\w+_(?:C|ext|cuda|cpp|backend|kernels?)|_backend|_cuda)$", re.I)


def compiled_kernel(qual: str) -> bool:
    """A call into a project's compiled C++/CUDA extension, which often implements one dtype
    or needs its operands in one: a function of an extension module
    (`detectron2._C.deform_conv_forward`), or an operator the project registered with torch
    (`torch.ops.detectron2.roi_align_rotated_forward`; torch's own `aten`/`prims` are the ops
    autocast knows).  A Triton launch is not one: its kernels load and convert per element,
    in whatever dtypes they are handed."""
    parts = qual.split(".")
    if _MOVES_DATA.search(parts[-1]):
        return False  # `sort_kv_pairs`, `gather_rows`: the same in any dtype
    if qual.startswith("torch.ops."):
        return len(parts) > 3 and parts[2] not in ("aten", "prims", "_c10d_functional", "c10d", "profiler")
    return len(parts) > 1 and parts[0] != "torch" and any(_EXTENSION_MODULE.match(p) for p in parts[:-1])


# Kernels by the names of what only moves, sorts or counts values.
_MOVES_DATA = re.compile(r"sort|gather|scatter|index|copy|permute|transpose|pack|pad|offsets|lengths|load_library|all_?reduce|broadcast_?(?:to|tensor)|bucketize|hash", re.I)


def upcasts_inputs(forward: cst.FunctionDef, model) -> bool:
    """The forward turns one of its tensor arguments into float32 itself (`x.float()`,
    `x.to(torch.float32)`): what `custom_fwd(cast_inputs=torch.float32)` would do."""
    names = {p.name.value for p in forward.params.params[1:]}
    finder = _UpcastFinder(model, names)
    walk(forward.body, finder)
    return finder.found


class _UpcastFinder(cst.CSTVisitor):
    def __init__(self, model, names: set[str]) -> None:
        self.model, self.names, self.found = model, names, False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in self.names):
            return
        if func.attr.value == "float" and not node.args:
            self.found = True
        elif func.attr.value in ("to", "type") and node.args:
            target = node.args[0].value if node.args[0].keyword is None else None
            for a in node.args:
                if a.keyword is not None and a.keyword.value == "dtype":
                    target = a.value
            if target is not None and self.model.qualify(target) in ("torch.float32", "torch.float"):
                self.found = True


# `torch.is_autocast_enabled`, `torch.is_autocast_cpu_enabled`, `torch.get_autocast_dtype`,
# `torch.get_autocast_gpu_dtype`, ...: the readers of the autocast state, old and new.
_AUTOCAST_STATE_READER = re.compile(r"torch\.(is_autocast_\w*enabled|get_autocast_\w*dtype)")
# How deep helpers of the same module are followed (`_compute_dtype(hidden)` in forward).
_MAX_HELPER_DEPTH = 2


def reads_autocast_state(fn: cst.FunctionDef, model, depth: int = 0) -> bool:
    """`fn` (or a function of its module that it calls) asks torch for the autocast state:
    `torch.get_autocast_dtype(d) if torch.is_autocast_enabled(d) else x.dtype`."""
    finder = _StateReaderFinder(model)
    walk(fn.body, finder)
    if finder.found:
        return True
    if depth >= _MAX_HELPER_DEPTH:
        return False
    return any(
        reads_autocast_state(model.functions[name], model, depth + 1)
        for name in finder.helpers
        if model.functions.get(name) is not None and model.functions[name] is not fn
    )


class _StateReaderFinder(cst.CSTVisitor):
    def __init__(self, model) -> None:
        self.model, self.found, self.helpers = model, False, set()

    def visit_Call(self, node: cst.Call) -> None:
        qual = self.model.qualify(node.func)
        if qual is not None and _AUTOCAST_STATE_READER.fullmatch(qual):
            self.found = True
        elif isinstance(node.func, cst.Name) and node.func.value in self.model.functions:
            self.helpers.add(node.func.value)


def decorated_with(fn: cst.FunctionDef, model, name: str) -> bool:
    """`fn` carries the decorator `name` (`custom_fwd`, `custom_bwd`), however spelled:
    `@torch.amp.custom_fwd(...)`, an import alias (`from torch.amp import custom_fwd as
    amp_fwd`), or a name bound to it (`fp32_fwd = functools.partial(torch.amp.custom_fwd,
    cast_inputs=torch.float32)`, `cuda_bwd = torch.amp.custom_bwd(device_type="cuda")`)."""
    scope = model.module_scope
    for d in fn.decorators:
        expr = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        if _names_decorator(expr, model, name):
            return True
        if isinstance(expr, (cst.Name, cst.Attribute)):
            for value, vscope in model.bindings.values.assigned(expr, scope):
                if isinstance(value, cst.Call):
                    head = value.func
                    if vscope.model.qualify(head) == "functools.partial" and value.args:
                        head = value.args[0].value
                    if _names_decorator(head, vscope.model, name):
                        return True
    return False


def _names_decorator(expr: cst.BaseExpression, model, name: str) -> bool:
    from amplint.analysis.names import dotted

    text = model.qualify(expr) or dotted(expr) or ""
    return text.split(".")[-1] == name


def may_be_applied(cls, model) -> bool:
    """Whether the project may run the Function `cls` (a ClassInfo): its module names it
    other than in its own `class` statement (`Cls.apply(...)`, `fn = Cls.apply`, a
    subclass, a registry), or another file of the project does (an import, a registry
    string `"ops.ScaledMatmul"`).  A Function nothing names is never applied: whatever
    autocast the project enters, it does not run there.  Without a project (a buffer
    checked alone), it may be."""
    project = model.project
    alone = project is None or str(model.path)[:1] == "<"
    finder = _NameUses(cls.name, cls.node.name)
    walk(model.module, finder)
    if finder.found:
        return alone or not _only_in_uncalled_wrappers(cls, model)
    if alone:
        return True
    return project.named_elsewhere(str(model.path), cls.name.lower())


def _only_in_uncalled_wrappers(cls, model) -> bool:
    """Every use of the Function in its module sits in module-level wrappers that nothing
    uses: an undecorated function (`def identity_with_clip_norm(x, c): return
    ClipNorm.apply(x, c)`), an alias (`masked_conv2d = MaskedConv2dFunction.apply`) or an
    undecorated class (the `nn.Module` that calls the alias), each named nowhere else in the
    module nor in a project file other than a package `__init__.py` that re-exports it
    (vendored mmcv ops in LAVIS): the Function never runs."""
    project = model.project
    pending, wrappers, seen = [(cls.name, cls.node.name)], [], {cls.name}
    while pending:
        name, own = pending.pop()
        for stmt in model.module.body:
            uses = _NameUses(name, own)
            walk(stmt, uses)
            if not uses.found:
                continue
            defined = _wrapper_name(stmt)
            if defined is None:
                return False  # a call, a registry, a decorated (registered) definition, `__main__`
            if defined == "__all__":
                continue  # the export list: a use only if another file imports the name
            if defined not in seen:
                seen.add(defined)
                wrappers.append(defined)
                pending.append((defined, _defined_name_node(stmt)))
            if len(seen) > 8:
                return False
    if not wrappers:
        return False
    return not any(project.named_elsewhere(str(model.path), w.lower(), skip_package_inits=True) for w in wrappers)


def _wrapper_name(stmt: cst.CSTNode) -> str | None:
    """The name a module-level wrapper statement defines: an undecorated `def` or `class`,
    or a one-name assignment (`fn = Cls.apply`); None for any other statement."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return None if stmt.decorators else stmt.name.value
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            return small.targets[0].target.value
    return None


def _defined_name_node(stmt: cst.CSTNode) -> cst.Name:
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return stmt.name
    return stmt.body[0].targets[0].target


class _NameUses(cst.CSTVisitor):
    def __init__(self, name: str, own: cst.Name) -> None:
        self.name, self.own, self.found = name, own, False

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and node is not self.own:
            self.found = True

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if node.evaluated_value == self.name:
            self.found = True  # `getattr(module, "ScaledGelu")`, a registry keyed by name


def recomputes_forward(forward: cst.FunctionDef, backward: cst.FunctionDef | None) -> str | None:
    """`ctx.run_function` when the backward runs again a function the forward was handed
    and ran (activation checkpointing by hand): the text of what it calls, else None.
    Without the forward's autocast state restored (torch.utils.checkpoint saves it and
    re-enters it), that recompute runs in other dtypes than the forward did."""
    if backward is None:
        return None
    rerun = _CtxCalls(_ctx_name(backward), handed_functions(forward))
    walk(backward.body, rerun)
    return rerun.found


def handed_functions(forward: cst.FunctionDef) -> frozenset[str]:
    """What a forward runs that it was handed: the parameters it calls
    (`run_function(*args)`), and the attributes of ctx it keeps such a parameter in
    (`ctx.run_function = run_function`), or keeps a parameter in and calls
    (`ctx.fn = fn`, then `ctx.fn(*args)`).  A function handed over only for the
    backward (`ctx.backward_op = backward_op`) is no recompute of the forward."""
    ctx = _ctx_name(forward)
    params = frozenset(p.name.value for p in (*forward.params.params[1:], *forward.params.kwonly_params))
    finder = _StoredOnCtx(ctx, params)
    walk(forward.body, finder)
    called = called_parameters(forward)
    in_forward = _CtxCalls(ctx, set(finder.attrs))
    walk(forward.body, in_forward)
    return called | frozenset(a for a, p in finder.attrs.items() if p in called or a in in_forward.calls)


class _StoredOnCtx(cst.CSTVisitor):
    """`ctx.fn = run_function`: attributes of ctx that hold a parameter."""

    def __init__(self, ctx: str | None, params: frozenset[str]) -> None:
        self.ctx, self.params = ctx, params
        self.attrs: dict[str, str] = {}  # attribute -> the parameter it holds

    def visit_Assign(self, node: cst.Assign) -> None:
        if not (isinstance(node.value, cst.Name) and node.value.value in self.params):
            return
        for t in node.targets:
            target = t.target
            if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == self.ctx:
                self.attrs[target.attr.value] = node.value.value


class _CtxCalls(cst.CSTVisitor):
    def __init__(self, ctx: str | None, attrs) -> None:
        self.ctx, self.attrs, self.found = ctx, attrs, None
        self.calls: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
                and func.value.value == self.ctx and func.attr.value in self.attrs):
            self.calls.add(func.attr.value)
            if self.found is None:
                self.found = f"{self.ctx}.{func.attr.value}"
