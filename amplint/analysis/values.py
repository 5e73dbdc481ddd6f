"""What an expression may evaluate to: dtypes, device strings, booleans.

A linter reports what *can* happen, so a value is a set of possibilities gathered
through names, `x if c else y`, dict lookups and class attributes.  `None` means
"unknown"; an empty set never escapes.
"""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from amplint.analysis import memo
from amplint.analysis.names import dotted
from amplint.analysis.syntax import value_branches
from amplint.analysis.walk import walk
from amplint.analysis.torch_api import DTYPE_STRINGS, FULL_DTYPES, HALF_DTYPES

_MAX_DEPTH = 6
_PENDING = object()  # a name whose dtypes are being worked out (a cycle)
# A dtype returned by a function is followed through this many levels of expressions
# (a call costs two): `get_dtype` returning a value of its module's map is one call.
_MAX_CALL_DEPTH = 4
# What a function of another module must mention to be read for the dtype it returns.
DTYPE_VOCABULARY = frozenset({"float16", "bfloat16", "half", "float32", "dtype", "fp16", "bf16"})
# Words that make an option of unknown values a dtype option (`train_dtype`, `precision`).
_DTYPE_OPTION_WORDS = ("dtype", "precision")


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
            own = scope.cls.attributes.get(rest)
            return list(own) if own else _inherited_attribute(scope.cls, rest)
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
        return _union(self._dtype_of(branch, scope, depth) for branch in value_branches(expr))

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
            return self._name_dtypes(expr, scope, depth)
        return None

    def _name_dtypes(self, expr: cst.Name | cst.Attribute, scope, depth: int) -> frozenset[str] | None:
        """What a name may hold: every value ever assigned to it, asked once per analysis for
        the name's text and scope (amplint/analysis/memo.py); a name assigned from itself
        (`dtype = torch.float16 if flag else dtype`) adds nothing through the cycle."""
        table = memo.slot("value_dtypes", dict)
        text = dotted(expr)
        if table is None or text is None:
            return self._assigned_dtypes(expr, scope, depth)
        key = (text, id(scope))
        known = table.get(key)
        if known is not None:
            at, found, _ = known
            if found is _PENDING:
                return None  # NB: unknown adds nothing to a union that knows something
            if at <= depth:
                return found
        table[key] = (depth, _PENDING, scope)  # NB: the scope is held, so its id is not reused
        found = self._assigned_dtypes(expr, scope, depth)
        table[key] = (depth, found, scope)
        return found

    def _assigned_dtypes(self, expr: cst.Name | cst.Attribute, scope, depth: int) -> frozenset[str] | None:
        assigned = self.assigned(expr, scope)
        if not assigned:
            if isinstance(expr, cst.Name):
                return self._unpacked_dtypes(expr.value, scope, depth)
            return self._property_dtypes(expr, scope, depth)
        return _union(self.dtypes(value, vscope, depth + 1) for value, vscope in assigned)

    def _property_dtypes(self, expr: cst.Attribute, scope, depth: int) -> frozenset[str] | None:
        """`self.cfg.autocast_precision` where `cfg` holds a project class whose
        `autocast_precision` is a property: the dtypes its returns may hold (OLMo's
        `precision: amp_fp16` option becomes `torch.float16` there)."""
        from amplint.analysis.callees import class_of_instance, method_of
        from amplint.analysis.syntax import returned_values

        if depth >= _MAX_CALL_DEPTH:
            return None
        cls = class_of_instance(expr.value, scope)
        found = method_of(cls, expr.attr.value, DTYPE_VOCABULARY) if cls is not None else None
        if found is None or found.scope is None or not any(
                (dotted(d.decorator) or "").rsplit(".", 1)[-1] in ("property", "cached_property") for d in found.fn.decorators):
            return None
        return _union(found.model.bindings.values.dtypes(value, found.scope, depth + 2) for value in returned_values(found.fn))

    def _unpacked_dtypes(self, name: str, scope, depth: int) -> frozenset[str] | None:
        """`weight_dtype, save_dtype = prepare_dtype(args)`: the dtypes at that position of
        the tuples the function returns (of this module or another of the project)."""
        from amplint.analysis.syntax import returned_values
        from amplint.analysis.callees import resolve_call

        if depth >= _MAX_CALL_DEPTH or scope.assignments.get(name) != []:
            return None  # bound with a value, or not bound by an assignment (a parameter)
        found = []
        for value, index in self._unpackings.get((id(scope.node), name), ()):
            if not isinstance(value, cst.Call):
                continue
            callee = resolve_call(value, scope, DTYPE_VOCABULARY)
            if callee is None or callee.scope is None:
                continue
            for returned in returned_values(callee.fn):
                if isinstance(returned, cst.Tuple) and index < len(returned.elements):
                    element = returned.elements[index]
                    if not isinstance(element, cst.StarredElement):
                        found.append(callee.model.bindings.values.dtypes(element.value, callee.scope, depth + 2))
        return _union(found) if found else None

    @cached_property
    def _unpackings(self) -> dict[tuple[int, str], list[tuple[cst.BaseExpression, int]]]:
        """(id(function or module node), name) -> (value, position) of each `a, b = value`."""
        collector = _Unpackings(self.model.module)
        walk(self.model.module, collector)
        return collector.found

    def parameter_dtypes(self, expr: cst.BaseExpression | None, scope, depth: int = 0) -> frozenset[str] | None:
        """The dtypes of a parameter of a plain function: its default and what its callers
        pass for it (`train(model, device, model_dtype)` called with the dtype chosen from
        an option).  Callers in other modules are looked for only for a parameter named as
        a dtype.  None for anything else, or when nothing is known.  (Not part of `dtypes`:
        a rule that judges a helper at its callers would see each caller's dtype twice.)"""
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings.values.parameter_dtypes(expr, scope, depth)
        if not isinstance(expr, cst.Name):
            return None
        return self._parameter_dtypes(expr.value, scope, depth)

    def _parameter_dtypes(self, name: str, scope, depth: int) -> frozenset[str] | None:
        from amplint.analysis.syntax import argument_for

        fn = scope.node
        if not isinstance(fn, cst.FunctionDef) or name not in scope.params or scope.cls is not None or depth >= _MAX_CALL_DEPTH:
            return None
        found = []
        for param in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params):
            if param.name.value == name and param.default is not None:
                found.append(self.dtypes(param.default, scope, depth + 1))
        lowered = name.lower()
        elsewhere = any(w in lowered for w in (*_DTYPE_OPTION_WORDS, "fp16", "bf16", "half"))
        from amplint.analysis.casts import callers_of

        for model, site in callers_of(scope, elsewhere):
            arg = argument_for(site.node, scope, name)
            if arg is not None:
                found.append(model.bindings.values.dtypes(arg, site.scope, depth + 2))
        return _union(found) if found else None

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
        from amplint.analysis.syntax import returned_values
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
        for branch in value_branches(expr):
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


class _Unpackings(cst.CSTVisitor):
    """`a, b = value` with plain names, keyed by the function (or module) it is written in."""

    def __init__(self, module: cst.Module) -> None:
        self.found: dict[tuple[int, str], list[tuple[cst.BaseExpression, int]]] = {}
        self.owners: list[cst.CSTNode] = [module]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.owners.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.owners.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            if isinstance(t.target, (cst.Tuple, cst.List)):
                for i, el in enumerate(t.target.elements):
                    if isinstance(el, cst.StarredElement):
                        break
                    if isinstance(el.value, cst.Name):
                        self.found.setdefault((id(self.owners[-1]), el.value.value), []).append((node.value, i))


def _inherited_attribute(cls, attr: str) -> list[tuple[cst.BaseExpression, object]]:
    """`self.amp_cm` read in a subclass that never assigns it: what the nearest base class
    that does assigns (`self.amp_cm = autocast if use_amp else nullcontext` in the base
    trainer of another module).  Remembered per class and attribute."""
    memo = cls.__dict__.setdefault("_amplint_inherited", {})
    found = memo.get(attr)
    if found is None:
        found = memo[attr] = _first_base_assigning(cls, attr)
    return list(found)


def _first_base_assigning(cls, attr: str) -> tuple:
    from amplint.analysis.callees import ForeignClass, bases_of

    for base in bases_of(cls):
        info = base.info() if isinstance(base, ForeignClass) else base
        values = getattr(info, "attributes", {}).get(attr) if info is not None else None
        if values:
            return tuple(values)
    return ()
