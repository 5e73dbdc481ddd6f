"""What one expression, call or function says by its shape alone: no model, no project.

The argument a call passes (`call_arg`, `argument_for`), what a function returns
(`returned_values`), the branches a value may come from (`value_branches`).  Nearly every
analysis asks these, so they live below all of them: in `bindings`, `values` or
`scaler_protocol` they tied those modules and their users into one import cycle.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.walk import walk


def call_arg(call: cst.Call, position: int | None, keyword: str | None) -> cst.BaseExpression | None:
    """The argument passed at `position` (0-based, positional only) or as `keyword`."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if keyword is not None:
        for a in call.args:
            if a.keyword is not None and a.keyword.value == keyword:
                return a.value
    if position is not None and position < len(positional):
        return positional[position].value
    return None


def returned_values(fn: cst.FunctionDef) -> list[cst.BaseExpression]:
    """The expressions `fn` returns (not those of functions nested in it)."""
    collector = _ReturnCollector(fn)
    walk(fn, collector)
    return collector.values


class _ReturnCollector(cst.CSTVisitor):
    # NB: at module level, not inside the function: `walk` plans its dispatch once per class.
    def __init__(self, fn: cst.FunctionDef) -> None:
        self.fn = fn
        self.values: list[cst.BaseExpression] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.fn

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.values.append(node.value)


def _branches(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The sub-expressions a value may come from (`a if c else b`, `a or b`, `(a)`)."""
    if isinstance(expr, cst.IfExp):
        return [*_branches(expr.body), *_branches(expr.orelse)]
    if isinstance(expr, cst.BooleanOperation):
        return [*_branches(expr.left), *_branches(expr.right)]
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, (cst.Dict, cst.List, cst.Tuple)):
        # `{"bf16": autocast(dtype=bf16), "fp16": autocast(dtype=fp16)}[args.precision]`: a
        # table of choices indexed by an option is any of its entries
        elements = expr.value.elements
        if elements and not any(isinstance(e, (cst.StarredDictElement, cst.StarredElement)) for e in elements):
            return [b for e in elements for b in _branches(e.value)]
    return [expr]


def value_branches(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    return _branches(expr)


def argument_for(call: cst.Call, callee, param: str) -> cst.BaseExpression | None:
    """The argument `call` passes for parameter `param` of the function of scope `callee`."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value == param:
            return a.value
    params = list(callee.params)
    if callee.self_name is not None and params and params[0] == callee.self_name:
        params = params[1:]
    if param not in params or any(a.star for a in call.args):
        return None
    positional = [a for a in call.args if a.keyword is None]
    index = params.index(param)
    return positional[index].value if index < len(positional) else None


def sets_true(statement: cst.CSTNode, flag: str) -> bool:
    """`statement` is a line that assigns `True` to the flag `flag`, as `flag_text` writes it
    (`unscaled = True`, `self.unscaled = True`, `state["unscaled"] = True`)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    return any(isinstance(small, cst.Assign) and isinstance(small.value, cst.Name) and small.value.value == "True"
               and any(flag_text(t.target) == flag for t in small.targets) for small in statement.body)


def flag_text(expr: cst.BaseExpression) -> str | None:
    """A flag's spelling, blanks and quote style aside: a dotted name (`self.unscaled`) or a
    string-keyed item of one (`state["unscaled"]` and `state['unscaled']` alike); None for
    anything else."""
    name = dotted(expr)
    if name is not None:
        return name
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        key = expr.slice[0].slice.value
        owner = dotted(expr.value)
        if owner is not None and isinstance(key, cst.SimpleString):
            return f"{owner}[{key.evaluated_value!r}]"
    return None


def target_names(target: cst.BaseExpression) -> set[str]:
    """The plain names an assignment or loop target binds (`a`, `a, (b, *c)`); attributes
    and subscripts bind none."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(target_names(e.value) for e in target.elements)) if target.elements else set()
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return set()
