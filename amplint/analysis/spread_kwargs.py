"""Keyword arguments spread from a dict, and dtypes the hardware chooses.

espnet2's trainer enters `autocast(scaler is not None, **autocast_args)` where the module
body says

    autocast_args = dict()
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        autocast_args = dict(dtype=torch.bfloat16)

Two model facts are needed to read it: what `**autocast_args` passes as `dtype` (one
expression per dict the name may hold, or none: the default), and that the bfloat16
alternative is chosen by the hardware, not by an option: on every GPU that supports
bfloat16 (all recent ones) it is the one that runs, the float16 default only on older
cards.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.walk import walk

# Tests of the hardware that pick bfloat16 where it is supported.
BF16_SUPPORT_TESTS = frozenset({"torch.cuda.is_bf16_supported", "torch.cuda.amp.is_bf16_supported"})


@dataclass(frozen=True, eq=False)
class SpreadValue:
    """One dict `**name` may hold: the expression it passes as the keyword (None: absent)."""

    value: cst.BaseExpression | None
    scope: object
    hardware_gated: bool  # assigned under `if torch.cuda.is_bf16_supported():`


def spread_keyword(args, keyword: str, scope, values) -> list[SpreadValue] | None:
    """`f(**kw)`: per dict `kw` may hold (`dict(dtype=...)`, `{"dtype": ...}`), what it gives
    `keyword`.  None when no `**` argument is there or a value is not a dict we can read."""
    spread = [a.value for a in args if a.star == "**"]
    if not spread:
        return None
    found: list[SpreadValue] = []
    for expr in spread:
        if not isinstance(expr, (cst.Name, cst.Attribute)):
            return None
        assigned = values.assigned(expr, scope)
        if not assigned:
            return None
        for value, vscope in assigned:
            entries = _dict_entries(value, vscope)
            if entries is None:
                return None
            gated = id(value) in vscope.model.bindings.hardware_gated_values
            found.append(SpreadValue(entries.get(keyword), vscope, gated))
    return found


def _dict_entries(value: cst.BaseExpression, scope) -> dict[str, cst.BaseExpression] | None:
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict":
        if any(a.keyword is None for a in value.args):
            return None
        return {a.keyword.value: a.value for a in value.args}
    if isinstance(value, cst.Dict):
        out = {}
        for el in value.elements:
            if not isinstance(el, cst.DictElement) or not isinstance(el.key, cst.SimpleString):
                return None
            out[el.key.evaluated_value] = el.value
        return out
    return None


def hardware_gated_values(model) -> frozenset[int]:
    """id() of the values assigned in the body of an `if` whose test asks the hardware
    whether it supports bfloat16 (alone or `and`-ed with other tests); read once per
    module through `Bindings.hardware_gated_values`."""
    finder = _GatedAssignments(model)
    walk(model.module, finder)
    return frozenset(finder.found)


class _GatedAssignments(cst.CSTVisitor):
    def __init__(self, model) -> None:
        self.model = model
        self.found: set[int] = set()

    def visit_If(self, node: cst.If) -> None:
        if _asks_bf16_support(node.test, self.model):
            collector = _AssignedValues()
            walk(node.body, collector)
            self.found |= collector.ids


class _AssignedValues(cst.CSTVisitor):
    def __init__(self) -> None:
        self.ids: set[int] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        self.ids.add(id(node.value))


def _asks_bf16_support(test: cst.BaseExpression, model) -> bool:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _asks_bf16_support(test.left, model) or _asks_bf16_support(test.right, model)
    return isinstance(test, cst.Call) and model.qualify(test.func) in BF16_SUPPORT_TESTS
