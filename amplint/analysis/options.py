"""Command-line options: the strings `args.train_dtype` may hold.

Training scripts pick their precision with an option (`--train-dtype`, `--precision`)
whose values argparse restricts with `choices=[...]`, and hand the parsed namespace to a
backend module: `espnet/bin/asr_train.py` declares the option, `asr.py`'s `train(args)`
does `getattr(torch, args.train_dtype)`.  The possible values of `args.train_dtype` are
then the choices of the option whose destination is `train_dtype`, declared

- in the module itself (an `add_arguments` method next to the code that reads it), or
- in the project modules that import it, directly or not (`ProjectIndex.importers`):
  the scripts that parse the command line and run this code.

Only the ProjectIndex API reads other files, so a cached result records them as used.
A destination with no declaration found, or whose choices are not literal strings, is
unknown (None).
"""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from amplint.analysis.bindings import call_arg
from amplint.analysis.names import dotted
from amplint.analysis.walk import walk

# An importer whose text lacks these cannot declare the option.
_DECLARATION_WORDS = ("add_argument", "choices")


class Options:
    """The argparse options one module declares: destination -> the choices' strings."""

    def __init__(self, model) -> None:
        self.model = model

    @cached_property
    def declared(self) -> dict[str, frozenset[str]]:
        out: dict[str, set[str]] = {}
        defaults: dict[str, set[str]] = {}
        for site in self.model.calls:
            call = site.node
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "set_defaults":
                # `parser.set_defaults(precision="fp16")`: argparse checks no default against choices
                for arg in call.args:
                    if arg.keyword is not None and isinstance(arg.value, cst.SimpleString):
                        defaults.setdefault(arg.keyword.value, set()).add(arg.value.evaluated_value)
                continue
            if not isinstance(func, cst.Attribute) or func.attr.value != "add_argument":
                continue
            dest = _destination(call)
            choices = call_arg(call, None, "choices")
            if dest is None or choices is None:
                continue
            strings = _choice_strings(choices, site.scope, self.model.bindings.values)
            if strings:
                out.setdefault(dest, set()).update(strings)
                default = call_arg(call, None, "default")
                if isinstance(default, cst.SimpleString) and isinstance(default.evaluated_value, str):
                    out[dest].add(default.evaluated_value)  # a default outside the choices is kept as given
        for dest, values in defaults.items():
            if dest in out:
                out[dest] |= values
        return {k: frozenset(v) for k, v in out.items()}

    def choices(self, dest: str) -> frozenset[str] | None:
        """The strings option `dest` may hold, from this module or the modules importing it."""
        if dest not in self._choices:
            self._choices[dest] = self._find_choices(dest)
        return self._choices[dest]

    @cached_property
    def _choices(self) -> dict[str, frozenset[str] | None]:
        return {}

    def _find_choices(self, dest: str) -> frozenset[str] | None:
        found = set(self.declared.get(dest, ()))
        project = self.model.project
        if project is not None and self.model.path:
            # The flag or destination spelled as a string literal (raw text is lowercased).
            spellings = [f"{q}{name}{q}".lower() for q in "\"'" for name in (f"--{dest}", f"--{dest.replace('_', '-')}", dest)]

            def may_declare(text: str) -> bool:
                return all(w in text for w in _DECLARATION_WORDS) and any(s in text for s in spellings)

            # Only the few files that may declare it are followed forward to this module
            # (the whole project's reverse import graph cost seconds on transformers).
            for path in project.importers_among(self.model.path, may_declare):
                other = project.model_at(path)
                if other is not None and other is not self.model:
                    found |= other.options.declared.get(dest, frozenset())
        return frozenset(found) if found else None


def _destination(call: cst.Call) -> str | None:
    """`add_argument("--train-dtype", ...)` -> "train_dtype" (argparse's rule), or `dest=`."""
    dest = call_arg(call, None, "dest")
    if isinstance(dest, cst.SimpleString) and isinstance(dest.evaluated_value, str):
        return dest.evaluated_value
    flags = [
        a.value.evaluated_value
        for a in call.args
        if a.keyword is None and isinstance(a.value, cst.SimpleString) and isinstance(a.value.evaluated_value, str)
    ]
    long = [f for f in flags if f.startswith("--")]
    chosen = long[0][2:] if long else (flags[0].lstrip("-") if flags else None)
    return chosen.replace("-", "_") if chosen else None


def _choice_strings(expr: cst.BaseExpression, scope, values, depth: int = 0) -> frozenset[str] | None:
    """The strings of `choices=["float16", "float32"]`, also through a name bound to the
    list (`choices=DTYPES`); None unless every element is a known string."""
    if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
        found: set[str] = set()
        for element in expr.elements:
            got = values.strings(element.value, scope) if isinstance(element, cst.Element) else None
            if got is None:
                return None
            found |= got
        return frozenset(found)
    if isinstance(expr, (cst.Name, cst.Attribute)) and depth < 2:
        assigned = values.assigned(expr, scope)
        text = dotted(expr)
        modules = {id(s.model.module): s.model.module for _, s in assigned} | {id(scope.model.module): scope.model.module}
        if text is None or any(_mutated(module, text) for module in modules.values()):
            return None  # `DTYPES.append("fp16")`, `DTYPES += [...]`: not only the literal's strings
        found = set()
        for value, vscope in assigned:
            got = _choice_strings(value, vscope, values, depth + 1)
            if got is None:
                return None
            found |= got
        return frozenset(found) if assigned else None
    return None


_MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "__setitem__", "__iadd__"})


def _mutated(module: cst.Module, text: str) -> bool:
    """The module changes the container named `text` in place: a mutating method
    (`append`, `extend`, `insert`, `add`, `update`), an augmented assignment, or an item
    or slice assignment."""
    finder = _Mutations(text)
    walk(module, finder)
    return finder.found


class _Mutations(cst.CSTVisitor):
    def __init__(self, text: str) -> None:
        self.text = text
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _MUTATORS and dotted(func.value) == self.text:
            self.found = True

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if dotted(node.target) == self.text:
            self.found = True

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Subscript) and dotted(node.target.value) == self.text:
            self.found = True
