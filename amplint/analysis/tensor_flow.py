"""Where a tensor value goes after it is made: through names, reshapes and sums, out of
its function by `return`, into a dtype cast or an in-place write.

AMP501 asks it about a float32 tensor that holds a value beyond float16's range
(`mask = torch.where(m > 0, 0.0, -1e10)`): harmless where it is made, an overflow to
-inf where it later meets a float16 tensor, by a cast (`bias.type(scores.dtype)`,
`.half()`) or by an in-place op that keeps the receiver's dtype (`scores += bias`).
transformers' LongT5 attention is written so: the mask is added to a position bias,
the bias is split into blocks by a helper and cast to the scores' dtype by the caller.

What carries the value (`_Flow.carries`): the tensor itself, names assigned from a
carrier (in source order; a rebinding in the same block or an enclosing one ends it),
`+` / `-` with anything, subscripts, shape methods (`transpose`, `view`, `reshape`,
...), `torch.cat` / `torch.stack` of a list holding one, and a call of a project
function whose return carries the parameter the value is passed as (`_split_into_blocks(x,
...)` returns `x.reshape(...)`).  Anything else (a product, `softmax`, `exp`, a
comparison) is taken to make a new value.  A `return` of a carrier continues at the
calls of the function in the same module.  Nothing here judges dtypes: the rule does.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.walk import walk

# Tensor methods whose result holds the receiver's values (rearranged, or cast: a cast
# carries too, a later one still overflows).
_PRESERVING_METHODS = frozenset(
    {
        "transpose", "permute", "view", "reshape", "unsqueeze", "squeeze", "expand", "expand_as",
        "repeat", "repeat_interleave", "contiguous", "clone", "flatten", "unflatten", "narrow",
        "detach", "to", "type", "type_as", "float", "double", "half", "cuda", "cpu", "masked_fill",
        "roll", "flip", "movedim", "swapaxes", "t",
    }
)
# torch functions whose first argument's values come out (rearranged or padded).
_PRESERVING_FUNCTIONS = frozenset(
    {
        "torch.transpose", "torch.permute", "torch.reshape", "torch.flatten", "torch.unsqueeze",
        "torch.squeeze", "torch.roll", "torch.flip", "torch.nn.functional.pad",
    }
)
_JOINING_FUNCTIONS = frozenset({"torch.cat", "torch.concat", "torch.concatenate", "torch.stack"})
# Casts: the value leaves in the dtype the call names.
CAST_METHODS = frozenset({"to", "type", "type_as", "half"})
# In-place methods that write their argument into the receiver, in the receiver's dtype.
_INPLACE_METHODS = frozenset({"add_", "sub_", "copy_"})
# What a helper of another module must mention to be read for this question (the project
# index's relevance check, and its list of texts worth reading: index._interesting_words):
# it rearranges a tensor.
RESHAPE_VOCABULARY = frozenset({"reshape", "view", "transpose", "permute", "pad", "flatten", "unsqueeze"})
# How many calls deep the value is followed (a helper's return into its caller's caller).
_MAX_DEPTH = 2


@dataclass(frozen=True, eq=False)
class Sink:
    """Where the value meets a dtype it may not fit: `kind` "cast" (`node` is the cast call,
    `dtype` the dtype expression or, for `type_as`, the other tensor's `.dtype`; None for
    `.half()`) or "inplace" (`node` the statement or call, `tensor` the receiver)."""

    kind: str
    node: cst.CSTNode
    scope: object
    dtype: cst.BaseExpression | None = None
    tensor: cst.BaseExpression | None = None


def flows_from(origin: cst.CSTNode, scope) -> list[Sink]:
    """Every sink the value of expression `origin` (written in `scope`) reaches."""
    return _sinks(origin, scope, depth=0, seen=set())


def _sinks(origin: cst.CSTNode, scope, depth: int, seen: set[int]) -> list[Sink]:
    if id(scope) in seen or not isinstance(scope.node, cst.FunctionDef):
        return []
    seen = seen | {id(scope)}
    # NB: at depth 0 `torch.where(...).to(x.dtype)` is the rule's own direct check; at a
    # caller `helper(mask).to(x.dtype)` casts what the helper returned.
    flow = _Flow(scope, origins={id(origin)}, names=set(), depth=depth, direct=depth > 0)
    out = list(flow.sinks)
    if flow.returned and depth < _MAX_DEPTH:
        for site in _callers(scope):
            out += _sinks(site.node, site.scope, depth + 1, seen)
    return out


def passes_through(scope, param: str, depth: int) -> bool:
    """A `return` of the function of `scope` carries its parameter `param`."""
    memo = scope.model.__dict__.setdefault("_amplint_passes_through", {})
    key = (id(scope), param)
    if key not in memo:
        memo[key] = False  # a recursive helper: not while it is being judged
        memo[key] = _Flow(scope, origins=set(), names={param}, depth=depth).returned
    return memo[key]


def _callers(scope) -> list:
    """The calls in the same module that run the function of `scope`."""
    from amplint.analysis.callees import resolve_call

    name = scope.node.name.value
    out = []
    for site in scope.model.calls:
        func = site.node.func
        called = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
        if called != name:
            continue
        callee = resolve_call(site.node, site.scope)
        if callee is not None and callee.fn is scope.node:
            out.append(site)
    return out


class _Flow(cst.CSTVisitor):
    """One walk of a function body in source order, following the carriers."""

    def __init__(self, scope, origins: set[int], names: set[str], depth: int, direct: bool = True) -> None:
        self.scope = scope
        self.direct = direct  # a cast of the origin itself counts
        self.model = scope.model
        self.origins = origins
        self.depth = depth
        # carrying name -> the block path of the assignment that made it carry
        self.names: dict[str, tuple[int, ...]] = {n: () for n in names}
        self.blocks: list[int] = []
        self.sinks: list[Sink] = []
        self.returned = False
        walk(scope.node.body, self)

    # --- structure -------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested function runs elsewhere

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self.blocks.append(id(node))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        self.blocks.pop()

    # --- bindings (after their value is evaluated) ---------------------------------------
    def leave_Assign(self, original_node: cst.Assign) -> None:
        for target in original_node.targets:
            self._bind(target.target, original_node.value)

    def leave_AnnAssign(self, original_node: cst.AnnAssign) -> None:
        if original_node.value is not None:
            self._bind(original_node.target, original_node.value)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        text = dotted(target)
        if text is None:
            return
        if self.carries(value):
            self.names[text] = tuple(self.blocks)
        elif text in self.names and self.names[text][: len(self.blocks)] == tuple(self.blocks):
            # NB: only a rebinding that certainly runs after the carrying one (same block
            # or an enclosing one) ends it; `else: mask = None` does not.
            del self.names[text]

    def leave_AugAssign(self, original_node: cst.AugAssign) -> None:
        node = original_node
        if not isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)) or not self.carries(node.value):
            return
        target = node.target
        if not self.carries(target):
            self.sinks.append(Sink("inplace", node, self.scope, tensor=target))
        text = dotted(target)
        if text is not None:
            self.names[text] = tuple(self.blocks)

    def leave_Return(self, original_node: cst.Return) -> None:
        if original_node.value is not None and self.carries(original_node.value):
            self.returned = True

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        method = func.attr.value
        if method in CAST_METHODS and self.carries(func.value) and (self.direct or id(func.value) not in self.origins):
            self.sinks.append(Sink("cast", node, self.scope, dtype=_cast_dtype(node, method)))
        elif method in _INPLACE_METHODS and node.args and self.carries(node.args[0].value) and not self.carries(func.value):
            self.sinks.append(Sink("inplace", node, self.scope, tensor=func.value))

    # --- values ----------------------------------------------------------------------
    def carries(self, expr: cst.BaseExpression) -> bool:
        if id(expr) in self.origins:
            return True
        if isinstance(expr, (cst.Name, cst.Attribute)):
            text = dotted(expr)
            if text is not None and text in self.names:
                return True
            return isinstance(expr, cst.Attribute) and expr.attr.value in ("T", "mT", "data") and self.carries(expr.value)
        if isinstance(expr, cst.BinaryOperation):
            return isinstance(expr.operator, (cst.Add, cst.Subtract)) and (self.carries(expr.left) or self.carries(expr.right))
        if isinstance(expr, cst.UnaryOperation):
            return isinstance(expr.operator, (cst.Minus, cst.Plus)) and self.carries(expr.expression)
        if isinstance(expr, cst.Subscript):
            return self.carries(expr.value)
        if isinstance(expr, cst.Call):
            return self._call_carries(expr)
        return False

    def _call_carries(self, call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in _PRESERVING_METHODS and self.carries(func.value):
            return True
        qual = self.model.qualify(func)
        first = call.args[0].value if call.args and call.args[0].keyword is None else None
        if qual in _PRESERVING_FUNCTIONS:
            return first is not None and self.carries(first)
        if qual in _JOINING_FUNCTIONS:
            return isinstance(first, (cst.List, cst.Tuple)) and any(self.carries(e.value) for e in first.elements)
        if self.depth >= _MAX_DEPTH or not any(self.carries(a.value) for a in call.args):
            return False
        return self._helper_passes(call)

    def _helper_passes(self, call: cst.Call) -> bool:
        """A project function that returns (a rearrangement of) the argument it is given."""
        from amplint.analysis.callees import resolve_call

        callee = resolve_call(call, self.scope, RESHAPE_VOCABULARY)
        inner = callee.scope if callee is not None else None
        if inner is None or not isinstance(inner.node, cst.FunctionDef):
            return False
        params = list(inner.params)
        if inner.self_name is not None and isinstance(call.func, cst.Attribute):
            params = params[1:]  # a bound method: `self` is not among the arguments
        for i, arg in enumerate(call.args):
            if arg.star or not self.carries(arg.value):
                continue
            param = arg.keyword.value if arg.keyword is not None else params[i] if i < len(params) else None
            if param is not None and passes_through(inner, param, self.depth + 1):
                return True
        return False


def _cast_dtype(call: cst.Call, method: str) -> cst.BaseExpression | None:
    if method == "half":
        return None
    if method == "type_as":
        other = call.args[0].value if call.args else None
        return cst.Attribute(other, cst.Name("dtype")) if other is not None and dotted(other) is not None else other
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dtype":
            return arg.value
    return call.args[0].value if call.args and call.args[0].keyword is None else None
