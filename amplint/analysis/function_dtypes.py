"""Does a custom autograd Function reconcile its dtypes by hand, as custom_fwd/custom_bwd would?

Without `custom_fwd`, autocast casts each op of a Function's forward on its own; without
`custom_bwd`, the backward runs outside autocast, in whatever dtypes the gradient and the
saved tensors hold.  What goes wrong is an op of autocast's lower-precision list (a matmul,
a linear, a convolution) in the backward: its operands no longer meet in one dtype (the
float16 gradient of a float16 output against a saved float32 weight raises), or meet in
another precision than the forward computed in.  Two shapes of real code make that
impossible by construction, and are what this module recognises:

- **The backward computes in the gradient's dtype** (`computes_in_gradient_dtype`): every
  operand of each lower-precision op of the backward is the gradient, or was cast to the
  gradient's dtype (`w.to(grad.dtype)`, `x.type_as(grad)`, `compute_dtype = grad.dtype`
  ... `.to(compute_dtype)`, a helper handed `grad.dtype` that returns a tensor in it:
  dequantize to the gradient's dtype), or computed from such operands only.  The gradient
  of an output has that output's dtype, the one autocast gave the forward: the backward
  computes in the precision the forward did, which is what `custom_bwd` replays.
- **No lower-precision op, and a backward autocast would not change** (`upcasts_by_hand`):
  neither pass (nor a function of its module that they call) runs an op autocast would
  cast down, so autocast can only have raised the forward's ops to float32 (which
  `custom_fwd` without `cast_inputs` leaves as they are); and the backward turns its
  tensors into float32 itself (`logits[rows].float()`, `grad.float()`), as autocast would
  for its float32-list ops, or runs none of them (`_softmax_backward_data` on the saved
  float32 softmax output: `custom_bwd` would change no op of it).

Not recognised (the Function stays reported): a backward that casts to another tensor's
dtype (`grad.to(weight.dtype)`: float32 where the forward computed in float16), a caller
that upcasts before `.apply` (autocast casts a matmul's float32 inputs down again inside
the forward), and a function handed over and run again in backward (`ctx.run_function`).
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.function_body import compiled_kernel
from amplint.analysis.names import dotted
from amplint.analysis.torch_api import AUTOCAST_FLOAT32_OPS, AUTOCAST_LOWER_PRECISION_OPS
from amplint.analysis.walk import walk

_FLOAT32 = frozenset({"torch.float32", "torch.float"})
# Tensor methods that change a tensor's dtype: what they return is not in its receiver's dtype.
_RECASTS = frozenset({"to", "type", "float", "half", "bfloat16", "double", "type_as", "view_as_real", "view_as_complex"})
# How deep functions of the module that a pass calls are followed.
_MAX_HELPER_DEPTH = 2


def computes_in_gradient_dtype(backward: cst.FunctionDef, model) -> bool:
    """Every lower-precision op of `backward` meets its operands in the gradient's dtype
    (and it has at least one: otherwise there is nothing to reconcile)."""
    grads = {p.name.value for p in backward.params.params[1:]}
    if not grads:
        return False
    flow = _GradientFlow(model, grads)
    walk(backward.body, flow)
    return flow.ops > 0 and not flow.mismatched


def upcasts_by_hand(forward: cst.FunctionDef, backward: cst.FunctionDef, model) -> bool:
    """Neither pass runs a lower-precision op (nor anything it cannot see: a function it was
    handed, a method of ctx), also in the module's functions they call; and the backward
    either upcasts its tensors itself or runs no op of autocast's float32 list at all (then
    `custom_bwd`'s autocast would change none of its ops)."""
    fwd, bwd = _ops_of(forward, model), _ops_of(backward, model)
    if fwd.lower or bwd.lower:
        return False
    return bwd.upcasts or not bwd.float32_ops


def _compiled_call(node: cst.Call, model) -> bool:
    """A call into a project's compiled extension (function_body.compiled_kernel)."""
    return compiled_kernel(model.qualify(node.func) or dotted(node.func) or "")


class _OpKinds(cst.CSTVisitor):
    """Which kinds of ops a function runs: lower-precision, float32-list, explicit float32 casts."""

    def __init__(self, model, fn: cst.FunctionDef, *, is_pass: bool) -> None:
        self.model = model
        self.lower = self.float32_ops = self.upcasts = False
        self.helpers: set[str] = set()
        params = [p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)]
        self.ctx = params[0] if params and is_pass else None  # a helper's first parameter is no ctx
        self.params = set(params)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply):
            self.lower = True
        elif isinstance(node.operator, cst.Power) or (
                isinstance(node.operator, cst.Divide) and isinstance(node.left, (cst.Integer, cst.Float))):
            self.float32_ops = True  # `__pow__`, `__rtruediv__`: on autocast's float32 list

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name) and func.value in self.params:
            self.lower = True  # a function handed over (`run_function(*args)`): it may run anything
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == self.ctx \
                and func.attr.value not in _CTX_BOOKKEEPING:
            self.lower = True  # `ctx.run_function(...)`: the same
        if _compiled_call(node, self.model):
            self.lower = True  # a compiled kernel: it takes the dtypes it is handed, whatever they are
        name = _op_name(node.func, self.model)
        if name in AUTOCAST_LOWER_PRECISION_OPS:
            self.lower = True
        elif name in AUTOCAST_FLOAT32_OPS:
            self.float32_ops = True
        if is_float32_cast(node, self.model):
            self.upcasts = True
        if isinstance(node.func, cst.Name) and node.func.value in self.model.functions:
            self.helpers.add(node.func.value)


_CTX_BOOKKEEPING = frozenset({"save_for_backward", "mark_dirty", "mark_non_differentiable", "set_materialize_grads"})


def _ops_of(fn: cst.FunctionDef, model, depth: int = 0, seen: frozenset = frozenset()) -> _OpKinds:
    kinds = _OpKinds(model, fn, is_pass=depth == 0)
    walk(fn.body, kinds)
    if depth < _MAX_HELPER_DEPTH:
        for name in sorted(kinds.helpers):
            helper = model.functions[name]
            if helper is fn or helper in seen:
                continue
            inner = _ops_of(helper, model, depth + 1, seen | {fn})
            kinds.lower |= inner.lower
            kinds.float32_ops |= inner.float32_ops
            kinds.upcasts |= inner.upcasts
    return kinds


def _op_name(func: cst.BaseExpression, model) -> str | None:
    """The op a call runs: `torch.matmul` / `F.linear` by their qualified name's last part, a
    tensor method (`grad.mm(w)`) by its name; None for anything else."""
    qual = model.qualify(func)
    if qual is not None:
        return qual.rsplit(".", 1)[-1] if qual.split(".")[0] == "torch" else None
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


def is_float32_cast(call: cst.Call, model) -> bool:
    """`x.float()`, `x.to(torch.float32)`, `x.to(dtype=torch.float32)`, `x.type(torch.float)`."""
    func = call.func
    if not isinstance(func, cst.Attribute) or model.qualify(func) is not None:
        return False
    if func.attr.value == "float" and not call.args:
        return True
    if func.attr.value in ("to", "type"):
        return any(model.qualify(a.value) in _FLOAT32 for a in call.args if a.keyword is None or a.keyword.value == "dtype")
    return False


class _GradientFlow(cst.CSTVisitor):
    """Walks a backward in source order: which local names hold a tensor in the gradient's
    dtype (`tensors`) or a dtype equal to it (`dtypes`, `compute_dtype = grad.dtype`), and
    whether each lower-precision op, where it runs, meets only such operands: both sides
    of `@`, the receiver and positional arguments of `a.mm(b)` / `torch.matmul(a, b)` (an
    einsum's equation string left out).  Branches are read one after the other, a name's
    last assignment above a use decides."""

    def __init__(self, model, grads: set[str]) -> None:
        self.model = model
        self.tensors: set[str] = set(grads)
        self.dtypes: set[str] = set()
        self.ops = 0
        self.mismatched = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply):
            self._op([node.left, node.right])

    def visit_Call(self, node: cst.Call) -> None:
        if _op_name(node.func, self.model) not in AUTOCAST_LOWER_PRECISION_OPS:
            return
        args = [a.value for a in node.args if a.keyword is None and not isinstance(a.value, (cst.SimpleString, cst.ConcatenatedString))]
        if self.model.qualify(node.func) is None and isinstance(node.func, cst.Attribute):
            args.insert(0, node.func.value)
        self._op(args)

    def _op(self, operands: list[cst.BaseExpression]) -> None:
        self.ops += 1
        if not all(self.aligned(x) for x in operands):
            self.mismatched = True

    def leave_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def leave_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, cst.BinaryOperation(node.target, cst.Add(), node.value))

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            names = [e.value for e in target.elements]
            values = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else []
            for i, t in enumerate(names):
                self._bind(t, values[i] if len(values) == len(names) else None)
            return
        if not isinstance(target, cst.Name):
            return
        name = target.value
        self.tensors.discard(name)
        self.dtypes.discard(name)
        if value is None:
            return  # unpacked from what is not followed (`x, w = ctx.saved_tensors`)
        if self.is_dtype(value):
            self.dtypes.add(name)
        elif self.aligned(value):
            self.tensors.add(name)

    def is_dtype(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Name):
            return expr.value in self.dtypes
        return isinstance(expr, cst.Attribute) and expr.attr.value == "dtype" and self.aligned(expr.value)

    def aligned(self, expr: cst.BaseExpression) -> bool:
        """`expr` is a tensor in the gradient's dtype (or a plain number, which does not
        change a tensor's dtype)."""
        if isinstance(expr, (cst.Integer, cst.Float)):
            return True
        if isinstance(expr, cst.Name):
            return expr.value in self.tensors
        if isinstance(expr, cst.Subscript):
            return self.aligned(expr.value)
        if isinstance(expr, cst.UnaryOperation):
            return self.aligned(expr.expression)
        if isinstance(expr, cst.BinaryOperation):
            return self.aligned(expr.left) and self.aligned(expr.right)
        if isinstance(expr, cst.Call):
            return self._call_aligned(expr)
        return False

    def _call_aligned(self, call: cst.Call) -> bool:
        func = call.func
        args = [a.value for a in call.args]
        if isinstance(func, cst.Attribute) and self.model.qualify(func) is None:
            method = func.attr.value
            if method in ("to", "type"):
                return any(self.is_dtype(a) or (isinstance(a, cst.Name) and a.value in self.tensors) for a in args)
            if method == "type_as":
                return bool(args) and self.aligned(args[0])
            if method not in _RECASTS and self.aligned(func.value):
                return True  # `g.reshape(...)`, `g.t()`, `g.contiguous()`: the receiver's dtype
        if any(self.is_dtype(a) for a in args):
            return True  # a helper handed the gradient's dtype: `dequantize(w, scale, grad.dtype)`
        if isinstance(func, cst.Name) and func.value in self.model.functions:
            # a function of the module computing from tensors in the gradient's dtype (and
            # from settings kept on ctx: `ctx.scale`)
            tensors = [a for a in args if not _is_setting(a)]
            return bool(tensors) and all(self.aligned(a) for a in tensors)
        qual = self.model.qualify(func)
        if qual is not None and qual.split(".")[0] == "torch":
            tensors = [a for a in args if not isinstance(a, (cst.SimpleString, cst.ConcatenatedString))]
            return bool(tensors) and all(self.aligned(a) for a in tensors)  # `torch.einsum(eq, g, w_aligned)`
        return False


def _is_setting(expr: cst.BaseExpression) -> bool:
    """A literal or an attribute kept on ctx (`ctx.in_features`): not a tensor operand."""
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.Name)) and not isinstance(expr, cst.Name):
        return True
    return isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "ctx"
