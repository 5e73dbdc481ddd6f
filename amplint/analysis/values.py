"""What an expression may evaluate to: dtypes, device strings, booleans.

A linter reports what *can* happen, so a value is a set of possibilities gathered
through names, `x if c else y`, dict lookups and class attributes.  `None` means
"unknown"; an empty set never escapes.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.torch_api import DTYPE_STRINGS, FULL_DTYPES, HALF_DTYPES

_MAX_DEPTH = 6
# A dtype returned by a function is followed through this many levels of expressions
# (a call costs two): `get_dtype` returning a value of its module's map is one call.
_MAX_CALL_DEPTH = 4
# What a function of another module must mention to be read for the dtype it returns.
DTYPE_VOCABULARY = frozenset({"float16", "bfloat16", "half", "float32", "dtype", "fp16", "bf16"})
# Words that make an option of unknown values a dtype option (`train_dtype`, `precision`).
_DTYPE_OPTION_WORDS = ("dtype", "precision")


def _branches(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The sub-expressions a value may come from (`a if c else b`, `a or b`, `(a)`)."""
    if isinstance(expr, cst.IfExp):
        return [*_branches(expr.body), *_branches(expr.orelse)]
    if isinstance(expr, cst.BooleanOperation):
        return [*_branches(expr.left), *_branches(expr.right)]
    return [expr]


def _union(possibilities) -> frozenset[str] | None:
    """Everything any alternative may be; unknown (None) only when nothing known was found."""
    found: set[str] = set()
    unknown = False
    for got in possibilities:
        if got is None:
            unknown = True
        else:
            found |= got
    if found:
        return frozenset(found)
    return None if unknown else frozenset()


def value_branches(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    return _branches(expr)


class ValueResolver:
    """Resolves names to the expressions assigned to them, through scopes and `self`."""

    def __init__(self, model) -> None:
        self.model = model

    def assigned(self, expr: cst.BaseExpression, scope) -> list[tuple[cst.BaseExpression, object]]:
        """Every (value, scope) ever assigned to the dotted name `expr` as seen from `scope`."""
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings.values.assigned(expr, scope)
        text = dotted(expr)
        if text is None:
            return []
        head, _, rest = text.partition(".")
        if scope.cls is not None and scope.self_name == head and rest:
            return list(scope.cls.attributes.get(rest, []))
        s = scope
        while s is not None:
            if text in s.assignments:
                return [(v, s) for v in s.assignments[text]]
            if s.binds(head):
                return []
            s = s.parent
        return self._imported(text)

    def _imported(self, text: str) -> list[tuple[cst.BaseExpression, object]]:
        """`AMP_DTYPE` from `from config import AMP_DTYPE`: the values the project module gives it."""
        from amplint.analysis.callees import project_symbol

        qual = self.model.imports.qualify_text(text)
        symbol = project_symbol(qual, self.model) if qual is not None else None
        if symbol is None or symbol.kind != "value" or not symbol.relevant():
            return []
        model = symbol.model
        if model is None:
            return []
        scope = model.module_scope
        return [(v, scope) for v in scope.assignments.get(symbol.name, [])]

    # --- dtypes --------------------------------------------------------------------------
    def dtypes(self, expr: cst.BaseExpression | None, scope, depth: int = 0) -> frozenset[str] | None:
        """Possible dtype names (`float16`, `bfloat16`, `float32`...) or None if unknown."""
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings.values.dtypes(expr, scope, depth)
        if expr is None or depth > _MAX_DEPTH:
            return None
        return _union(self._dtype_of(branch, scope, depth) for branch in _branches(expr))

    def _dtype_of(self, expr: cst.BaseExpression, scope, depth: int) -> frozenset[str] | None:
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings.values._dtype_of(expr, scope, depth)
        qual = self.model.qualify(expr)
        if qual in HALF_DTYPES:
            return frozenset({HALF_DTYPES[qual]})
        if qual in FULL_DTYPES:
            return frozenset({FULL_DTYPES[qual]})
        if isinstance(expr, cst.SimpleString):
            text = expr.evaluated_value
            if isinstance(text, str) and text in DTYPE_STRINGS:
                return frozenset({DTYPE_STRINGS[text]})
            return None
        if isinstance(expr, cst.Subscript):
            # {"float16": torch.float16, ...}[name] -> any of the values
            return self._dict_values(expr.value, scope, depth)
        if isinstance(expr, cst.Call) and dotted(expr.func) == "getattr" and len(expr.args) >= 2:
            if self.model.qualify(expr.args[0].value) == "torch":
                return self._torch_attribute_dtypes(expr.args[1].value, scope, depth)
            return None
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "get" and expr.args:
            # DTYPES.get(name, default): a value of the map, or the default
            values = self._dict_values(expr.func.value, scope, depth)
            if values is not None:
                default = expr.args[1].value if len(expr.args) > 1 else None
                return _union((values, self.dtypes(default, scope, depth + 1) if default is not None else None))
        if isinstance(expr, cst.Call):
            return self._returned_dtypes(expr, scope, depth)
        if isinstance(expr, (cst.Name, cst.Attribute)):
            assigned = self.assigned(expr, scope)
            if not assigned:
                return None
            return _union(self.dtypes(value, vscope, depth + 1) for value, vscope in assigned)
        return None

    def _dict_values(self, target: cst.BaseExpression, scope, depth: int) -> frozenset[str] | None:
        """The dtypes among the values of the dict `target` is (or names: a module-level map,
        also one imported from another module of the project)."""
        dicts = [(target, scope)] if isinstance(target, cst.Dict) else self.assigned(target, scope)
        found: set[str] = set()
        for d, dscope in dicts:
            if isinstance(d, cst.Dict):
                for el in d.elements:
                    if isinstance(el, cst.DictElement):
                        got = self.dtypes(el.value, dscope, depth + 1)
                        if got:
                            found |= got
        return frozenset(found) if found else None

    def _returned_dtypes(self, call: cst.Call, scope, depth: int) -> frozenset[str] | None:
        """`get_dtype(cfg.dtype)` of this module or of another module of the project: the
        dtypes any of its `return` expressions may hold (a linter reports what can happen)."""
        from amplint.analysis.bindings import returned_values
        from amplint.analysis.callees import resolve_call

        if depth >= _MAX_CALL_DEPTH:
            return None
        callee = resolve_call(call, scope, DTYPE_VOCABULARY)
        if callee is None or callee.scope is None:
            return None
        return _union(callee.model.bindings.values.dtypes(value, callee.scope, depth + 2) for value in returned_values(callee.fn))

    def _torch_attribute_dtypes(self, name: cst.BaseExpression, scope, depth: int) -> frozenset[str] | None:
        """`getattr(torch, name)`: the dtypes among the strings `name` may hold.

        `getattr(torch, args.train_dtype)` with `--train-dtype` declared with
        `choices=["float16", "float32", "O1"]` may be float16 or float32 ("O1" names no
        dtype).  A name whose strings are unknown but that is spelled as a dtype option
        (`cfg.train_dtype`, `args.precision`) is analysed as if the option were on
        (DESIGN.md): it may be a reduced dtype, as it may be float32."""
        strings = self.strings(name, scope, depth + 1)
        if strings is None:
            last = (dotted(name) or "").rsplit(".", 1)[-1].lower()
            if any(word in last for word in _DTYPE_OPTION_WORDS):
                return frozenset({"float16", "bfloat16", "float32"})
            return None
        found: set[str] = set()
        for text in strings:
            qual = f"torch.{text}"
            found.update(d for d in (HALF_DTYPES.get(qual), FULL_DTYPES.get(qual)) if d is not None)
        return frozenset(found) if found else None

    # --- literals ------------------------------------------------------------------------
    def strings(self, expr: cst.BaseExpression | None, scope, depth: int = 0) -> frozenset[str] | None:
        """Possible string values (device names), or None if unknown."""
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings.values.strings(expr, scope, depth)
        if expr is None or depth > _MAX_DEPTH:
            return None
        found: set[str] = set()
        for branch in _branches(expr):
            if isinstance(branch, cst.SimpleString) and isinstance(branch.evaluated_value, str):
                found.add(branch.evaluated_value)
                continue
            if isinstance(branch, (cst.Name, cst.Attribute)):
                assigned = self.assigned(branch, scope)
                if not assigned:
                    # `args.train_dtype`: an attribute nothing here assigns, read from a
                    # parsed command line; its argparse choices if some module declares them.
                    choices = self.model.options.choices(branch.attr.value) if isinstance(branch, cst.Attribute) else None
                    if choices is None:
                        return None
                    found |= choices
                    continue
                for value, vscope in assigned:
                    got = self.strings(value, vscope, depth + 1)
                    if got is None:
                        return None
                    found |= got
                continue
            return None
        return frozenset(found)

    @staticmethod
    def literal_bool(expr: cst.BaseExpression | None) -> bool | None:
        """True/False for the literals, None for anything that is decided at run time."""
        if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
            return expr.value == "True"
        if isinstance(expr, cst.Integer):
            return expr.evaluated_value != 0
        return None
