"""Positive evidence that an expression is a floating-point torch tensor.

A fix that writes `torch.finfo(x.dtype).min` in place of `-1e9` is only right where `x` is
a floating-point tensor: on an int64 or bool tensor `finfo` raises TypeError, on a NumPy
array it does too, and where the code as written ran.  Whether a value is such a tensor is
asked here the other way round from the report's question ("might this be float16?"): only
what the code itself shows counts, and anything unknown (a parameter, a helper's result, a
call into a model whose class is not known) is not evidence.

Evidence, followed through names assigned in the same scope (every assignment must give
it) and through `self.<attr>` assigned in the class:

- a cast to a floating dtype: `.float()`, `.half()`, `.double()`, `.bfloat16()`,
  `.to(<floating dtype>)`, `.type(<floating dtype>)`;
- a factory that makes floats: `torch.randn`/`rand` (and `_like`), `torch.zeros`/`ones`/
  `empty` without a dtype or with a floating one, `torch.full` with a floating dtype or a
  float fill, `torch.tensor` of float literals;
- an operation whose result is floating or which raises on integers: softmax, sigmoid,
  tanh, exp, log, sqrt, mean, layer/group norm, linear, and `nn.Linear`-like modules built
  in the class (`self.proj(x)` with `self.proj = nn.Linear(...)`);
- an operation that keeps its input's dtype (`view`, `transpose`, `masked_fill`, `clone`,
  indexing, ...) of such a tensor, a matmul of one, and arithmetic with one (promotion
  keeps the floating dtype).
"""

from __future__ import annotations

import re

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.syntax import call_arg, target_names
from amplint.analysis.walk import walk

FLOATING_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})

# Tensor methods and torch functions whose result is floating (or that raise on integers).
_FLOAT_RESULT_METHODS = frozenset({
    "float", "half", "double", "bfloat16", "softmax", "log_softmax", "sigmoid", "tanh", "exp", "log", "sqrt",
    "rsqrt", "norm", "sin", "cos",
})  # NB: not `mean`/`std`/`var`, which a NumPy array has too
_FLOAT_RESULT_FUNCTIONS = frozenset(
    [f"torch.{n}" for n in ("randn", "rand", "softmax", "log_softmax", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt",
                            "mean", "layer_norm", "group_norm", "sin", "cos", "randn_like", "rand_like")]
    + [f"torch.nn.functional.{n}" for n in ("softmax", "log_softmax", "sigmoid", "tanh", "gelu", "silu", "linear",
                                            "layer_norm", "group_norm", "scaled_dot_product_attention", "normalize",
                                            "conv1d", "conv2d", "conv3d", "rms_norm")]
)
# Factories: float32 without a dtype.
_DEFAULT_FLOAT_FACTORIES = frozenset(f"torch.{n}" for n in ("zeros", "ones", "empty"))
# `_like` factories and `new_*` methods: the input's dtype unless one is given.
_LIKE_FACTORIES = frozenset(f"torch.{n}" for n in ("zeros_like", "ones_like", "empty_like", "full_like"))
_NEW_METHODS = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
# Methods and functions whose result has their (first) input's dtype.
_DTYPE_KEEPING_METHODS = frozenset({
    "view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "flatten", "contiguous", "clone", "detach",
    "expand", "expand_as", "t", "masked_fill", "masked_fill_", "fill_", "repeat", "chunk", "narrow", "roll",
    "matmul", "bmm", "mm", "add", "sub", "mul", "div", "neg", "abs", "relu", "clamp", "clamp_", "add_", "mul_",
    "sub_", "div_", "cpu", "cuda",
})
_DTYPE_KEEPING_FUNCTIONS = frozenset(
    f"torch.{n}" for n in ("matmul", "bmm", "mm", "einsum", "baddbmm", "cat", "stack", "clamp", "relu", "abs")
)
# Modules built in a class whose output is floating.
_FLOAT_MODULES = frozenset(
    f"torch.nn.{n}" for n in ("Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                              "ConvTranspose3d", "LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d",
                              "BatchNorm3d", "RMSNorm", "Softmax", "LogSoftmax", "GELU", "SiLU", "Tanh", "Sigmoid")
)
_MAX_DEPTH = 6


def known_float_tensor(expr: cst.BaseExpression | None, scope, depth: int = 0) -> bool:
    """Whether the code shows that `expr` is a floating-point torch tensor."""
    if expr is None or depth > _MAX_DEPTH:
        return False
    model = scope.model
    if isinstance(expr, cst.Name) and not model.bindings.values.assigned(expr, scope):
        source = _split_source(expr.value, scope)  # `q, k, v = self.qkv(x).chunk(3, dim=-1)`
        return source is not None and known_float_tensor(source, scope, depth + 1)
    if isinstance(expr, cst.Attribute) and not _attribute_set_only_in_its_class(expr, scope):
        return False  # an attribute may be set from anywhere (`head.bias = torch.arange(6)`)
    if isinstance(expr, cst.Name) and _data_replaced(expr.value, model):
        return False  # `x.data = ids.argsort()` changes the dtype under the same name
    if isinstance(expr, cst.Name) and _rebound_unseen(expr.value, scope):
        return False  # `for bias in [torch.arange(4)]`, `other.BIAS = ...` from an importer
    if isinstance(expr, (cst.Name, cst.Attribute)):
        assigned = model.bindings.values.assigned(expr, scope)
        # `x = x.masked_fill(...)` keeps what x was: the other assignments decide
        others = [(v, s) for v, s in assigned if not _keeps(v, expr)]
        return bool(others) and all(known_float_tensor(v, s, depth + 1) for v, s in others)
    if isinstance(expr, cst.Subscript):
        return known_float_tensor(expr.value, scope, depth + 1)
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.MatrixMultiply)):
            return known_float_tensor(expr.left, scope, depth + 1) or known_float_tensor(expr.right, scope, depth + 1)
        return False
    if not isinstance(expr, cst.Call):
        return False
    if any(a.star for a in expr.args):
        return False  # `**kwargs` may name a dtype (`zeros_like(h, **opts)`)
    func = expr.func
    qual = model.qualify(func)
    if qual == "torch.where":
        # `where(cond, x, y)` has x's and y's dtype; `where(cond)` gives int64 indices
        return len(expr.args) == 3 and any(known_float_tensor(a.value, scope, depth + 1) for a in expr.args[1:])
    if qual in _FLOAT_RESULT_FUNCTIONS:
        return True
    if qual in _DEFAULT_FLOAT_FACTORIES:
        return _floating_dtype_or_none(call_arg(expr, None, "dtype"), scope)
    if qual == "torch.full":
        dtype = call_arg(expr, None, "dtype")
        if dtype is not None:
            return floating_dtype(dtype, scope)
        fill = call_arg(expr, 1, "fill_value")
        return isinstance(fill, cst.Float) or (isinstance(fill, cst.UnaryOperation) and isinstance(fill.expression, cst.Float))
    if qual in _LIKE_FACTORIES:
        dtype = call_arg(expr, None, "dtype")
        return floating_dtype(dtype, scope) if dtype is not None else known_float_tensor(call_arg(expr, 0, "input"), scope, depth + 1)
    if qual in _DTYPE_KEEPING_FUNCTIONS:
        return any(known_float_tensor(_unstarred(a), scope, depth + 1) for a in expr.args if a.keyword is None)
    if qual in _FLOAT_MODULES:
        return False  # building the module, not calling it
    if isinstance(func, cst.Attribute):
        method = func.attr.value
        if method == "view" and any(_may_be_dtype(a.value, scope) for a in expr.args):
            return False  # `x.view(torch.int32)` reinterprets the bits as another dtype
        if method in _FLOAT_RESULT_METHODS and method not in ("float", "half", "double", "bfloat16"):
            return True
        if method in ("float", "half", "double", "bfloat16"):
            return not expr.args
        if method in ("to", "type"):
            dtype = call_arg(expr, None, "dtype") or (expr.args[0].value if expr.args else None)
            return dtype is not None and floating_dtype(dtype, scope)
        if method in _NEW_METHODS:
            dtype = call_arg(expr, None, "dtype")
            return floating_dtype(dtype, scope) if dtype is not None else known_float_tensor(func.value, scope, depth + 1)
        if method in _DTYPE_KEEPING_METHODS:
            return known_float_tensor(func.value, scope, depth + 1)
    # `proj(x)` with `proj = nn.Linear(...).to(device)`, `self.proj(x)` when nothing but the
    # class sets `self.proj` (a caller may swap in `nn.Identity()`)
    if isinstance(func, cst.Attribute) and not _attribute_set_only_in_its_class(func, scope):
        return False
    return isinstance(func, (cst.Name, cst.Attribute)) and _float_module(func, scope)


def _attribute_set_only_in_its_class(expr: cst.Attribute, scope) -> bool:
    """`self.<attr>` that only its class's own assignments set: the module writes
    `.<attr> =` nowhere else (a subclass, a caller swapping a layer), never uses `setattr`,
    and no project module that imports this one writes `.<attr> =` or uses `setattr`."""
    cls = getattr(scope, "cls", None)
    text = dotted(expr)
    if cls is None or text is None or text.count(".") != 1 or text.split(".")[0] != scope.self_name:
        return False
    attr = text.split(".")[1]
    if attr in cls.methods:
        return False  # a property (or method) of that name computes what it gives
    own = len(cls.attributes.get(attr, ()))
    pattern = re.compile(rf"\.\s*{re.escape(attr)}\s*=(?!=)", re.I)  # NB: importers' text is lowercased
    code = scope.model.text
    if "setattr(" in code or _WRITES_NAMESPACES.search(code) or len(pattern.findall(code)) > own:
        return False
    return not _an_importer_says(scope.model, re.compile(rf"setattr\(|{pattern.pattern}", re.I))


def _an_importer_says(model, pattern: re.Pattern) -> bool:
    """A project module importing this one has text `pattern` finds (importers' text is
    lowercased); also True where they cannot be known (a project too large to list)."""
    project, path = model.project, str(model.path)
    if project is None or path[:1] == "<":
        return False
    importers = project.importers(path)
    if not importers and project.may_be_imported(path):
        return True
    return any(pattern.search(project.raw_text(o) or "") for o in importers)


def _may_be_dtype(arg: cst.BaseExpression, scope) -> bool:
    """A `view` argument that is, or may be, a dtype rather than a size."""
    if isinstance(arg, (cst.Integer, cst.UnaryOperation)):
        return False
    if isinstance(arg, cst.Name):
        # a parameter or name bound to anything but an integer literal or a size may hold a dtype
        values = scope.model.bindings.values.assigned(arg, scope)
        return not values or not all(_a_size(v) for v, _ in values)
    if isinstance(arg, cst.Call):
        # `getattr(torch, "int32")` may be a dtype; `x.size(0)`, `len(x)`, `int(n)` are sizes
        name = arg.func.attr.value if isinstance(arg.func, cst.Attribute) else dotted(arg.func)
        return name not in ("size", "len", "int", "numel", "dim")
    if scope.model.bindings.values.dtypes(arg, scope) is not None:
        return True
    return "dtype" in (dotted(arg) or "").lower() or isinstance(arg, cst.Attribute) and arg.attr.value.startswith(("int", "float", "bool", "uint", "half", "bfloat"))


def _a_size(value: cst.BaseExpression) -> bool:
    """An integer literal, `x.size(i)`, `x.shape[i]`, `len(x)`, `int(...)`, or arithmetic of them."""
    if isinstance(value, cst.Integer):
        return True
    if isinstance(value, cst.BinaryOperation):
        return _a_size(value.left) and _a_size(value.right)
    if isinstance(value, cst.Subscript):
        return isinstance(value.value, cst.Attribute) and value.value.attr.value == "shape"
    if isinstance(value, cst.Call):
        name = value.func.attr.value if isinstance(value.func, cst.Attribute) else dotted(value.func)
        return name in ("size", "len", "int", "numel", "dim")
    return False


def _data_replaced(name: str, model) -> bool:
    """The module may assign `<name>.data` (`x.data = ...`, `x.data, y.data = ...`) or
    swap the tensor's contents (`torch.utils.swap_tensors`): anything but a read of an
    attribute of `.data` counts."""
    code = model.text
    if "swap_tensors" in code:
        return True
    return ".data" in code and re.search(rf"(?<![\w.]){re.escape(name)}\s*\.\s*data\b(?!\s*[.\[(])", code) is not None


def _rebound_unseen(name: str, scope) -> bool:
    """A name bound in a way the value analysis does not follow: a `for` target, `with
    ... as`, a walrus or a comprehension anywhere in the module, or, for a module-level
    name, set from an importer (`train.BIAS = torch.arange(4)`, `setattr`)."""
    model = scope.model
    code = model.text
    if _WRITES_NAMESPACES.search(code) or re.search(rf"\bnonlocal\b[^\n]*\b{re.escape(name)}\b", code):
        return True  # `globals()["x"] = ...`, `exec(...)`, `sys.modules[__name__].x = ...`, `nonlocal x`
    if _bound_by_other_than_assign(name, model):
        return True
    if getattr(scope, "node", None) is not model.module and name not in model.module_scope.assignments:
        return False
    return _an_importer_says(model, re.compile(rf"setattr\(|\.\s*{re.escape(name)}\s*=(?!=)", re.I))


# Code that writes a namespace without naming what it binds.
_WRITES_NAMESPACES = re.compile(
    r"\bglobals\s*\(|\bvars\s*\(|\bexec\s*\(|\bsys\.modules\b|__dict__|__setstate__|\blocals\s*\(")


def _bound_by_other_than_assign(name: str, model) -> bool:
    finder = _OtherBindings(name)
    walk(model.module, finder)
    return finder.found


# Module methods that return the module itself.
_MODULE_RETURNING_SELF = frozenset({"to", "cuda", "cpu", "float", "half", "bfloat16", "double", "train", "eval",
                                    "requires_grad_"})


def _float_module(func: cst.BaseExpression, scope) -> bool:
    """A name or `self.<attr>` assigned only modules whose output is floating (`nn.Linear(...)`,
    also moved or cast: `nn.Linear(8, 8).to(device)`)."""
    assigned = scope.model.bindings.values.assigned(func, scope)

    def built(value: cst.BaseExpression, vscope) -> bool:
        while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
               and value.func.attr.value in _MODULE_RETURNING_SELF):
            value = value.func.value
        return isinstance(value, cst.Call) and vscope.model.qualify(value.func) in _FLOAT_MODULES

    return bool(assigned) and all(built(v, s) for v, s in assigned) and not _calls_may_be_patched(scope.model)


# Text that changes what calling a module returns: a hook, or a `forward` replaced on an instance.
_PATCHED_CALL = re.compile(r"forward_hook|forward_pre_hook|\.forward\s*=(?!=)|__call__\s*=(?!=)")


def _calls_may_be_patched(model) -> bool:
    """The module, or a project module that imports it, registers forward hooks or
    replaces a module's `forward`: a layer's output may then be anything."""
    return bool(_PATCHED_CALL.search(model.text)) or _an_importer_says(model, _PATCHED_CALL)


def floating_dtype(dtype: cst.BaseExpression | None, scope) -> bool:
    """A dtype expression known to be floating (`torch.float16`, `x.dtype` of a float tensor)."""
    if dtype is None:
        return False
    dtypes = scope.model.bindings.values.dtypes(dtype, scope)
    if dtypes is not None:
        return bool(dtypes) and dtypes <= FLOATING_DTYPES
    if isinstance(dtype, cst.Attribute) and dtype.attr.value == "dtype":
        return known_float_tensor(dtype.value, scope, 1)
    return False


def _floating_dtype_or_none(dtype: cst.BaseExpression | None, scope) -> bool:
    return dtype is None or floating_dtype(dtype, scope)


def _unstarred(arg: cst.Arg) -> cst.BaseExpression:
    return arg.value.elements[0].value if isinstance(arg.value, (cst.List, cst.Tuple)) and arg.value.elements else arg.value


def _keeps(value: cst.BaseExpression, name: cst.BaseExpression) -> bool:
    """`x.masked_fill(...)` / `x.view(...)` assigned back to `x`: it has what `x` had."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _DTYPE_KEEPING_METHODS:
        value = value.func.value
    return dotted(value) is not None and dotted(value) == dotted(name)


_SPLITTING_METHODS = frozenset({"chunk", "split", "unbind", "tensor_split"})


def _split_source(name: str, scope) -> cst.BaseExpression | None:
    """The tensor a local name is unpacked from when its function binds it exactly once, by
    `a, b, c = <tensor>.chunk(...)` (or `split`, `unbind`): each part has its dtype."""
    node = getattr(scope, "node", None)
    if not isinstance(node, cst.FunctionDef) or name in getattr(scope, "params", ()):
        return None
    finder = _Unpacking(name)
    walk(node.body, finder)
    return finder.source if finder.bindings == 1 else None


class _OtherBindings(cst.CSTVisitor):
    """A binding of `name` by a `for` target, `as`, a walrus or a comprehension."""

    def __init__(self, name: str) -> None:
        self.name, self.found = name, False

    def _bind(self, target) -> None:
        self.found = self.found or self.name in target_names(target)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._bind(node.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bind(node.target)

    def visit_MatchAs(self, node) -> None:
        if node.name is not None:
            self._bind(node.name)

    def visit_MatchStar(self, node) -> None:
        if node.name is not None:
            self._bind(node.name)


class _Unpacking(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.bindings = 0
        self.source: cst.BaseExpression | None = None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # another scope

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            names = target_names(target.target)
            if self.name not in names:
                continue
            self.bindings += 1
            value = node.value
            direct = isinstance(target.target, (cst.Tuple, cst.List)) and any(
                isinstance(e.value, cst.Name) and e.value.value == self.name for e in target.target.elements
                if not isinstance(e, cst.StarredElement))  # `a, *rest = ...`: `rest` is a list
            if (direct and isinstance(value, cst.Call)
                    and isinstance(value.func, cst.Attribute) and value.func.attr.value in _SPLITTING_METHODS):
                self.source = value.func.value

    def _other(self, target) -> None:
        if self.name in target_names(target):
            self.bindings += 2  # bound otherwise too: not known

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._other(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._other(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._other(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._other(node.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._other(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._other(node.target)
