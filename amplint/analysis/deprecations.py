"""References to deprecated AMP symbols and the rewrites that modernise them.

Three ways code reaches `torch.cuda.amp.autocast`:

1. spelled in full from a torch alias: `torch.cuda.amp.autocast(...)`, `th.cuda.amp...`;
   each reference is rewritten on its own (`torch.autocast("cuda", ...)`);
2. through a name imported from the deprecated module: `from torch.cuda.amp import
   autocast` then `autocast()`; the import moves to `torch.amp` (same names there) and
   every use gains its device argument, as *one* fix, so no state in between leaves a
   name unbound or a call without its device;
3. through an alias of the module itself: `from torch.cuda import amp` then
   `amp.autocast()`; the alias is re-pointed at `torch.amp` when every use of it is a
   deprecated symbol, again as one fix.

A rewrite is offered only where the new code builds the same object from the same
arguments (issue 17): a call, with the device the old class implied; a decorator, as a
call of the modern decorator; an annotation needs no change.  A bare reference to the
class (`Scaler = torch.cuda.amp.GradScaler`, a base class, `functools.partial(...)`, an
`isinstance` test, a `cls=` default, an annotation that pydantic, typeguard or
singledispatch tests values against) has no drop-in spelling: `torch.amp.GradScaler`'s
first parameter is `device` where the old class's is `init_scale`, and a
`torch.amp.GradScaler` is no `torch.cuda.amp.GradScaler`.  Such a reference is reported
without a fix, and pins the import it goes through.

Annotations, version-gated fallbacks and bindings of an imported name
(analysis/version_gates.py) are not reported.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from amplint.analysis.names import dotted, module_name_of
from amplint.analysis.torch_api import AUTOCAST_DEFAULT_DTYPE, AUTOCAST_DEFAULT_SETTERS, DEPRECATIONS, TORCH_AMP_NAME_SINCE, Deprecation
from amplint.analysis.version_gates import Contexts
from amplint.analysis.walk import walk

_DEPRECATED_MODULES = {
    "torch.cuda.amp": "cuda",
    "torch.cpu.amp": "cpu",
    "torch.cuda.amp.autocast_mode": "cuda",
    "torch.cuda.amp.grad_scaler": "cuda",
    "torch.cpu.amp.autocast_mode": "cpu",
    "torch.cpu.amp.grad_scaler": "cpu",
}
_MODERN_NAMES = {"autocast", "GradScaler", "custom_fwd", "custom_bwd"}
# In a module's lowercased text: a deprecated class named other than as a call (the only
# way a module can use one as a value); a cheap test before a module is parsed.
_EVERY_MODERN_DEVICE = frozenset((d.new, d.device) for d in DEPRECATIONS.values())
# How many imports deep `_same_program` follows what the modules import.
_IMPORT_HOPS = 4
# Calls that run code or look a name up from a string.
_DYNAMIC_LOOKUPS = frozenset({"exec", "eval", "compile", "globals", "locals", "vars", "getattr", "__import__"})
# IPython's methods that run a string as code (what `%time ...`, `%%timeit` and `!cmd {x}`
# become in a script exported by nbconvert or jupytext: `get_ipython().run_line_magic(...)`).
_IPYTHON_RUNS = frozenset({"run_line_magic", "run_cell_magic", "run_cell", "system", "getoutput", "ex", "ev", "magic"})
_STAR_IMPORT = re.compile(r"\bimport\s*\*")
_NAMED_NOT_CALLED = re.compile(r"(?:gradscaler|autocast)\b(?!\s*\()")


@dataclass(eq=False)
class DeprecatedRef:
    node: cst.CSTNode  # what the diagnostic points at
    qualname: str
    deprecation: Deprecation
    statement: cst.CSTNode | None = None
    changes: list | None = None  # CST changes (Replace) that modernise it, None: no safe fix
    needs: tuple[int, int] = (0, 0)  # the first torch that has what `changes` write
    # Why `changes` may change what code amplint cannot read does (the fix is then unsafe:
    # shown, applied only with --unsafe-fixes); None: the change is seen whole.
    unsafe_because: str | None = None


@dataclass(eq=False)
class _Group:
    """All references that go through one imported local name."""

    local: str
    refs: list[DeprecatedRef] = field(default_factory=list)
    fixable: bool = True
    changes: list = field(default_factory=list)


def _legacy_autocast_args(args: list[cst.Arg]) -> list[cst.Arg] | None:
    """Legacy `autocast(enabled, dtype, cache_enabled)` positionals become keywords; every
    other argument (keywords, `**kw`) is kept as written.  None for `*args`: which
    parameters it fills is unknown."""
    names = ("enabled", "dtype", "cache_enabled")
    out = []
    i = 0
    for a in args:
        if a.star == "*":
            return None
        if a.keyword is None and not a.star:
            if i >= len(names):
                return None
            out.append(a.with_changes(keyword=cst.Name(names[i]), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))))
            i += 1
        else:
            out.append(a)
    return out


def _has_keyword(args: list[cst.Arg], name: str) -> bool:
    return any(a.keyword is not None and a.keyword.value == name for a in args)


def _appended(args: list[cst.Arg], arg: cst.Arg) -> list[cst.Arg]:
    """`args` and `arg` after them.  A trailing comma the author wrote, and the line break
    after it, move to the new last argument: `f(\n    a=1,\n)` gains `, b=2` on a's line."""
    if not (args and isinstance(args[-1].comma, cst.Comma)):
        return [*args, arg]
    return [*args[:-1], args[-1].with_changes(comma=_comma()), arg.with_changes(comma=args[-1].comma)]


def _device_arg(value: str, quote: str = '"') -> cst.Arg:
    return cst.Arg(cst.SimpleString(f"{quote}{value}{quote}"))


def _keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(value, keyword=cst.Name(name), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))


def _comma() -> cst.Comma:
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _with_commas(args: list[cst.Arg]) -> list[cst.Arg]:
    """A comma after every argument but the last, which keeps what it had (a trailing
    comma and the line break after it stay where the author put them)."""
    return [a if i == len(args) - 1 or isinstance(a.comma, cst.Comma) else a.with_changes(comma=_comma())
            for i, a in enumerate(args)]


def modernised_call(call: cst.Call, new_func: cst.BaseExpression, dep: Deprecation, *,
                     torch_alias: str | None = "torch", quote: str = '"') -> cst.Call | None:
    """The modern call for a deprecated one, keeping every argument; None when unsafe.

    A legacy autocast passes its own default dtype (float16 on cuda, bfloat16 on cpu)
    and cache_enabled=True where `torch.autocast(device)` without them takes the
    *enclosing* region's: a `torch.cuda.amp.autocast()` nested in a bfloat16 region (or in
    a forward called from one) runs float16, so the fix writes both out
    (`dtype=torch.float16, cache_enabled=True`), the dtype through `torch_alias`, the name
    this module binds torch to; without one, or with `**kwargs` that may hold either,
    there is no fix.  `quote` is the quote the device string takes
    (the other one inside an f-string: Python < 3.12 cannot nest the same quote)."""
    args = list(call.args)
    if dep.device_argument == "positional":
        if dep.new == "torch.autocast":
            args = _legacy_autocast_args(args)
            if args is None:
                return None
            if not _has_keyword(args, "dtype"):
                if torch_alias is None or any(a.star == "**" for a in args):
                    return None
                args = _appended(args, _keyword("dtype", cst.parse_expression(f"{torch_alias}.{AUTOCAST_DEFAULT_DTYPE[dep.device]}")))
            if not _has_keyword(args, "cache_enabled"):
                # NB: the legacy class passes cache_enabled=True; `torch.autocast` without it
                # takes the enclosing region's (a region built with cache_enabled=False), and a
                # weight updated in place inside the region is then read afresh where the legacy
                # region reused its stale cast copy.  `**kw` may hold it: no fix.
                if any(a.star == "**" for a in args):
                    return None
                args = _appended(args, _keyword("cache_enabled", cst.Name("True")))
        elif any(a.star == "*" for a in args):
            return None
        if any(a.keyword is not None and a.keyword.value in ("device", "device_type") for a in args):
            return None
        new_args = [_device_arg(dep.device, quote), *args]
    else:
        if any(a.keyword is not None and a.keyword.value == "device_type" for a in args):
            new_args = args
        else:
            kw = _keyword("device_type", _device_arg(dep.device, quote).value)
            positional = [a for a in args if a.keyword is None and not a.star]
            rest = [a for a in args if not (a.keyword is None and not a.star)]
            new_args = [*positional, kw, *rest]
    return call.with_changes(func=new_func, args=_with_commas(new_args))


def modern_decorator(expr: cst.BaseExpression, new_func: cst.BaseExpression, dep: Deprecation, *,
                     quote: str = '"') -> cst.Call:
    """`@custom_fwd` -> `@torch.amp.custom_fwd(device_type="cuda")`."""
    return modernised_call(cst.Call(func=expr), new_func, dep, quote=quote)


class Deprecations:
    def __init__(self, model) -> None:
        self.model = model

    @cached_property
    def _call_of_func(self) -> dict[int, cst.Call]:
        return {id(site.node.func): site.node for site in self.model.calls}

    @cached_property
    def _autocast_defaults_changed(self) -> bool:
        """The module sets autocast's global defaults.  The fix writes the dtype and the cache
        the legacy class passed, so the new call reads neither; the module that visibly
        tunes them is still left as written (its author may be comparing the two)."""
        qualify = self.model.imports.qualify_text
        return any(qualify(r.text) in AUTOCAST_DEFAULT_SETTERS for r in self.model.references)

    @cached_property
    def references(self) -> list[DeprecatedRef]:
        """The reported references: annotations, version-gated fallbacks and bindings left out."""
        collected = self._collected
        if collected is None:
            return []
        refs, groups, full_path = collected
        for ref, r, head in full_path:
            ref.changes = self._full_path_fix(r, ref.deprecation, head)
            ref.needs = ref.deprecation.new_since
            if ref.deprecation.new.endswith("GradScaler"):
                ref.unsafe_because = UNSAFE_CLASS_CHANGES
        module_aliases = self._deprecated_module_aliases()
        for merged in self._merge_by_import(groups):
            self._fix_group(merged, module_aliases)
        self._judge_what_others_see(refs)
        return [ref for ref in refs if not _unreported(self._contexts.of(ref.node))]

    def _judge_what_others_see(self, refs: list[DeprecatedRef]) -> None:
        """Fixes whose effect other code can see (hostile pass 13). Where the project
        replaces a legacy name at run time (`torch.cuda.amp.autocast = torch.npu.amp.autocast`,
        `mock.patch("torch.cuda.amp.autocast")`), the call no longer reaches torch's class and
        the modern spelling would skip the replacement: no fix. An autocast object that
        escapes its `with` (assigned, passed, returned) may be tested with `isinstance` or
        cloned with `type(ctx)(...)`, where its class differs: the fix is unsafe."""
        if self._legacy_names_patched:
            for ref in refs:
                ref.changes = None
            return
        escaping: set[int] = set()
        for ref in refs:
            if ref.changes is None or not ref.deprecation.new.endswith("autocast"):
                continue
            call = self._call_of_func.get(id(ref.node))
            if call is not None and id(call) not in self._with_items and not self._contexts.of(ref.node).decorator:
                escaping.add(id(ref.changes))
        for ref in refs:
            if ref.changes is not None and id(ref.changes) in escaping and ref.unsafe_because is None:
                ref.unsafe_because = UNSAFE_AUTOCAST_ESCAPES

    @cached_property
    def _with_items(self) -> set[int]:
        """Calls that are a `with` item without `as`: the object is entered and dropped."""
        found = _BareWithItems()
        self.model.module.visit(found)
        return found.ids

    @cached_property
    def _legacy_names_patched(self) -> bool:
        """This module, or a module of the project, replaces a legacy AMP name at run time."""
        texts = [self.model.text]
        project = self.model.project
        if project is not None:
            # NB: the modules that share objects with this one (what imports it, what it
            # imports, and theirs): a device shim the trainer imports, a test that patches
            # the module it imports; not an unrelated file that only names the spelling
            here = os.path.abspath(self.model.path)
            texts += [project.raw_text(f) or "" for f in _same_program(project, here) if f != here]
        return any("amp" in t and _PATCHES_LEGACY.search(t) for t in texts)

    @cached_property
    def bare_values(self) -> frozenset[tuple[str, str]]:
        """(modern name, device) of each deprecated class or function this module uses as a
        value (`isinstance(s, torch.cuda.amp.GradScaler)`, a base class, an alias): what
        another module builds from it must stay an instance of the deprecated class."""
        return frozenset(self._used_as_value) if self._collected is not None else frozenset()

    @cached_property
    def _collected(self):
        """(references, groups by imported local name, full-path references), with their
        contexts; None when the module references nothing deprecated.  No fix is worked out
        here: other modules ask for `bare_values` alone."""
        model = self.model
        refs: list[DeprecatedRef] = []
        groups: dict[str, _Group] = {}
        full_path: list[tuple[DeprecatedRef, object, str]] = []

        # imported names: `from torch.cuda.amp import autocast as ac`
        for node, _scope in model.import_froms:
            if isinstance(node.names, cst.ImportStar):
                continue
            module = module_name_of(node, model.imports.package)
            for alias in node.names:
                name = dotted(alias.name)
                qual = f"{module}.{name}" if module and name else None
                dep = DEPRECATIONS.get(qual or "")
                if dep is None:
                    continue
                local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
                ref = DeprecatedRef(alias.name, qual, dep, node)
                refs.append(ref)
                groups.setdefault(local, _Group(local)).refs.append(ref)

        modern_locals = self._locals_bound_to_modern()
        for r in model.references:
            if r.context == "import":
                continue
            qual = model.imports.qualify_text(r.text)
            dep = DEPRECATIONS.get(qual or "")
            if dep is None:
                continue
            head = r.text.split(".")[0]
            if head in modern_locals:
                continue  # bound by the modern import too (a version-gated pair): whichever ran decides
            ref = DeprecatedRef(r.node, qual, dep)
            refs.append(ref)
            if model.imports.qualify_text(head) == "torch":
                full_path.append((ref, r, head))
            else:
                groups.setdefault(head, _Group(head)).refs.append(ref)
        if not refs:
            return None

        targets = {id(ref.node) for ref in refs}
        targets |= {id(r.node) for r in model.references if r.text.split(".")[0] in groups}
        targets |= {id(_first_name(s)) for local in groups for s in self._import_statements_binding(local)}
        self._contexts = Contexts(model, targets)
        self._used_as_value = {
            (ref.deprecation.new, ref.deprecation.device) for ref in refs if self._is_bare_value(ref)
        }
        return refs, groups, full_path

    @cached_property
    def _exported(self) -> set[str]:
        """Names this module re-exports: in `__all__`, or imported `as` themselves (the
        typing convention for an explicit re-export).  Renaming their import would hand
        importers a function whose first parameter is the device."""
        out = set()
        for value in self.model.module_scope.assignments.get("__all__", []):
            if isinstance(value, (cst.List, cst.Tuple)) and all(isinstance(e.value, cst.SimpleString) for e in value.elements):
                out |= {e.value.evaluated_value for e in value.elements}
            else:
                out |= _MODERN_NAMES | self._every_local_name  # `__all__ = ["Grad" + "Scaler"]`: any name
        if "__all__" in self.model.module_scope.assignments:
            counter = _NameCounter("__all__")
            walk(self.model.module, counter)
            if counter.count > len(self.model.module_scope.assignments["__all__"]):
                # `__all__ += [...]`, `__all__.append(...)`, `__all__.extend(...)`: any name
                out |= _MODERN_NAMES | self._every_local_name
        for node, _ in self.model.import_froms:
            if not isinstance(node.names, cst.ImportStar):
                out |= {dotted(a.name) for a in node.names
                        if a.asname is not None and isinstance(a.asname.name, cst.Name) and a.asname.name.value == dotted(a.name)}
        return out

    @cached_property
    def _every_local_name(self) -> set[str]:
        """Every name an import of this module binds."""
        return {local for local, _ in self.model.imports.items()}

    def _locals_bound_to_modern(self) -> set[str]:
        """Local names some import binds to a modern AMP name (`from torch.amp import GradScaler`)."""
        out = set()
        for node, _ in self.model.import_froms:
            if isinstance(node.names, cst.ImportStar):
                continue
            module = module_name_of(node, self.model.imports.package)
            if module not in ("torch.amp", "torch"):
                continue
            for alias in node.names:
                name = dotted(alias.name)
                if name in _MODERN_NAMES or (module == "torch" and name == "amp"):
                    out.add(alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name)
        return out

    def _merge_by_import(self, groups: dict[str, _Group]) -> list[list[_Group]]:
        """Groups bound by one import statement move together: it is rewritten once."""
        merged: list[list[_Group]] = []
        by_stmt: dict[int, list[_Group]] = {}
        for group in groups.values():
            stmts = self._import_statements_binding(group.local)
            target = next((by_stmt[id(s)] for s in stmts if id(s) in by_stmt), None)
            if target is None:
                target = []
                merged.append(target)
            target.append(group)
            for s in stmts:
                by_stmt[id(s)] = target
        return merged

    def _is_bare_value(self, ref: DeprecatedRef) -> bool:
        """The class or function itself as a value: a base class, an alias, an `isinstance` argument."""
        if ref.statement is not None or id(ref.node) in self._call_of_func:
            return False
        where = self._contexts.of(ref.node)
        if where.annotation and id(ref.node) in self._checked_annotations:
            return True  # `@f.register def _(x: GradScaler)`, `@validate_call`: an isinstance test reads it
        return not (where.annotation or where.decorator or where.binding or where.shadowed)

    @cached_property
    def _checked_annotations(self) -> set[int]:
        """Ids of the names in annotations that code may test values against at run time
        (module docstring): a decorated function's parameters and return (singledispatch's
        `@f.register`, pydantic's `@validate_call`, typeguard's `@typechecked`, beartype), and
        the fields of a class with a base or a decorator (a pydantic model or dataclass).
        Decorators and bases known to read no annotation (`staticmethod`, `dataclasses.dataclass`,
        `torch.nn.Module`, ...) leave them inert."""
        finder = _CheckedAnnotations(self.model.imports.qualify_text)
        walk(self.model.module, finder)
        return finder.ids

    # --- what other modules of the project do with the names -------------------------------
    def _imported_elsewhere(self, locals_: set[str]) -> bool:
        """A module of the project imports this one and names one of `locals_`: `from utils
        import autocast`, `utils.autocast(...)`, `from utils import *` then `autocast()`,
        also where the import is not one Python would resolve for a script (`sys.path`
        edits, `importlib`), and a notebook's code cells (`ProjectIndex.may_import_unresolved`).
        Renaming the import here would hand it `torch.amp.autocast`, whose first parameter
        is the device, called the old way."""
        project = self.model.project
        if project is None:
            return False
        if project.may_import_unresolved(self.model.path, locals_):
            return True  # `sys.path.insert(0, "../lib")`, `importlib.import_module("utils")`: unseen importers
        words = re.compile("|".join(rf"\b{re.escape(name.lower())}\b" for name in sorted(locals_)))
        # A star import re-exports every name (`pkg/__init__.py`: `from .amp_utils import *`):
        # whoever imports that module may name them, so its importers are read too.
        frontier, seen = [self.model.path], {os.path.abspath(self.model.path)}
        for _ in range(_IMPORT_HOPS):
            following = []
            for module in frontier:
                for path in project.importers(module, depth=1):
                    if os.path.abspath(path) in seen:
                        continue
                    seen.add(os.path.abspath(path))
                    text = project.raw_text(path)
                    if text is None or words.search(text):
                        return True  # NB: an importer that cannot be read may use them too
                    if _STAR_IMPORT.search(text):
                        if project.may_import_unresolved(path, locals_):
                            return True  # a notebook (or an unresolved importer) of the re-exporter
                        following.append(path)
            frontier = following
            if not frontier:
                return False
        return bool(frontier)  # NB: a chain of star imports longer than followed may reach a user

    @cached_property
    def _class_body_imports(self) -> set[int]:
        """Ids of the import statements whose nearest enclosing body is a class's."""
        finder = _ClassBodyImports()
        walk(self.model.module, finder)
        return finder.ids

    def _star_import_after(self, statements: list[cst.CSTNode]) -> bool:
        """A star import follows one of `statements` in the module's text (which names it
        binds is not known here; one before them is overridden by them)."""
        order = _ImportOrder()
        walk(self.model.module, order)
        first = min((order.index[id(s)] for s in statements if id(s) in order.index), default=None)
        # NB: a star import before them may still rebind `torch`, which the rewrite names
        # (`dtype=torch.bfloat16`) after `import torch`: any star import stops the fix.
        return first is not None and bool(order.stars)

    def _looked_up_by_name(self, locals_: set[str]) -> bool:
        """A string names one of `locals_` in a module that runs or looks up code by name
        (`exec`, `eval`, `globals()[...]`, `getattr(sys.modules[__name__], ...)`): that use
        calls the renamed import the legacy way, unseen by the fix."""
        model = self.model
        if not (any(_runs_a_string(site.node.func) for site in model.calls)
                or any(r.text.startswith("sys.modules") or r.text.endswith(".__dict__") for r in model.references)):
            return False
        words = re.compile("|".join(rf"\b{re.escape(name)}\b" for name in sorted(locals_)))
        finder = _StringFinder(words)
        walk(model.module, finder)
        return finder.found

    def _read_at_run_time_by_text(self, locals_: set[str]) -> bool:
        """A use of the names that no rewrite sees: an annotation (read back by
        `typing.get_type_hints`, `inspect.signature`, a metaclass, a checker applied by a
        call such as `typechecked(step)` or `f.register(handler)`, in any module), or a
        doctest in a string of the module (`>>> GradScaler(4.0)`) that runs the old call."""
        words = re.compile("|".join(rf"\b{re.escape(name)}\b" for name in sorted(locals_)))
        for r in self.model.references:
            if r.text.split(".")[0] in locals_ and self._contexts.of(r.node).annotation:
                return True
        finder = _DoctestFinder(words)
        walk(self.model.module, finder)
        if finder.found:
            return True
        quoted = _QuotedAnnotationFinder(words)
        walk(self.model.module, quoted)
        return quoted.found

    def _reaches_its_own_namespace(self) -> bool:
        """The module reaches names through frames or by module name, not by their text:
        `sys._getframe().f_globals[...]`, `import __main__; __main__.GradScaler(...)`,
        `importlib.import_module(__name__)`, `pkgutil.resolve_name(...)`: a use of the
        renamed import that the fix cannot see may be among them."""
        model = self.model
        texts = [r.text for r in model.references] + [dotted(site.node.func) or "" for site in model.calls]
        return any(_REACHES_NAMESPACES.search(t) for t in texts)

    def _used_as_value_elsewhere(self, dep: Deprecation) -> bool:
        """Another module of the project uses the deprecated class as a value (an
        `isinstance` test, a base class, a tuple of scaler types): a scaler built here may
        reach it, and the test would flip for a `torch.amp.GradScaler`."""
        return (dep.new, dep.device) in self._bare_values_elsewhere

    @cached_property
    def _bare_values_elsewhere(self) -> frozenset[tuple[str, str]]:
        project = self.model.project
        if project is None:
            return frozenset()
        found: set[tuple[str, str]] = set()
        here = os.path.abspath(self.model.path)
        for path in _same_program(project, here):
            text = project.raw_text(path)
            if text is None or "amp" not in text or not _NAMED_NOT_CALLED.search(text):
                continue  # every deprecated value use names the class without calling it
            other = project.model_at(path)
            # NB: a module that cannot be read may test against any of them
            found |= other.deprecations.bare_values if other is not None else _EVERY_MODERN_DEVICE
        return frozenset(found)

    def _modern_call(self, call: cst.Call, new_func: cst.BaseExpression, dep: Deprecation,
                     torch_alias: str | None) -> cst.Call | None:
        if dep.new == "torch.autocast" and self._autocast_defaults_changed:
            return None
        if (dep.new, dep.device) in self._used_as_value or self._used_as_value_elsewhere(dep):
            # NB: what this call builds is compared with (or derived from) the deprecated
            # class elsewhere in the module or the project; a `torch.amp.GradScaler` is no
            # `torch.cuda.amp.GradScaler`, so the constructions stay with the class.
            return None
        quote = self._quote_for(call.func)
        if quote is None:
            return None
        return modernised_call(call, new_func, dep, torch_alias=torch_alias, quote=quote)

    def _quote_for(self, node: cst.CSTNode) -> str | None:
        """The quote a string written at `node` takes: inside an f-string, one the
        enclosing f-strings do not use (before Python 3.12 a replacement field cannot hold
        its own f-string's quote); None when every quote is taken."""
        taken = self._contexts.of(node).fstring_quotes
        return next((q for q in ('"', "'") if q not in taken), None)

    @cached_property
    def module_torch_aliases(self) -> list[str]:
        """Names a module-level `import torch [as th]` binds and nothing else in the module
        binds, by any binding form, in any scope (analysis/torch_names.py): `torch` first."""
        return self.model.torch_names.aliases

    def torch_name_at(self, node: cst.Name | cst.Attribute) -> str | None:
        """`_torch_alias_at` for a node of any rule (AMP501's `torch.finfo`): the name that
        reads the torch module where `node` (a name or attribute) runs, or None."""
        return self.model.torch_names.at(node)

    def _torch_alias_at(self, node: cst.CSTNode) -> str | None:
        """The name that reads the torch module where `node` runs (for `torch.float16` in a
        fixed autocast), or None (analysis/torch_names.py: an import inside another
        function, after the use, in a branch that may not run, or a name bound anything
        else anywhere in the module would make the written dtype a NameError or another
        object's attribute)."""
        return self.model.torch_names.at(node, self._contexts)

    # --- case 1: the full path from a torch alias ---------------------------------------
    def _full_path_fix(self, r, dep: Deprecation, torch_alias: str) -> list | None:
        from amplint.changes import Replace

        new_func = cst.parse_expression(f"{torch_alias}.{dep.new.removeprefix('torch.')}")
        call = self._call_of_func.get(id(r.node))
        if call is not None:
            new = self._modern_call(call, new_func, dep, torch_alias)
            return [Replace(call, new)] if new is not None else None
        if dep.new.endswith(("custom_fwd", "custom_bwd")) and self._contexts.of(r.node).decorator:
            quote = self._quote_for(r.node)
            return [Replace(r.node, modern_decorator(r.node, new_func, dep, quote=quote))] if quote else None
        # NB: a bare class or function reference has no drop-in modern spelling (see the
        # module docstring): `torch.amp.GradScaler` would take the first positional
        # argument given later as its device.
        return None

    # --- cases 2 and 3: through an imported local name ----------------------------------
    def _deprecated_module_aliases(self) -> dict[str, str]:
        """Local names bound to a deprecated module (`from torch.cuda import amp`)."""
        return {local: full for local, full in self.model.imports.items() if full in _DEPRECATED_MODULES}

    def _fix_group(self, groups: list[_Group], module_aliases: dict[str, str]) -> None:
        from amplint.changes import Replace

        changes: list = []
        statements: list[cst.CSTNode] = []
        names: set[str] = set()
        for group in groups:
            uses = self._use_changes(group)
            if uses is None:
                return  # one use we cannot rewrite pins the import where it is
            changes.extend(uses)
            names |= {ref.qualname.rsplit(".", 1)[-1] for ref in group.refs}
            for stmt in self._import_statements_binding(group.local):
                if stmt not in statements:
                    statements.append(stmt)
        locals_ = {g.local for g in groups}
        if locals_ & self._exported:
            return  # other modules import the name from here and call it the old way
        if any(len({ref.deprecation.device for ref in g.refs if ref.statement is not None}) > 1 for g in groups):
            # `from torch.cuda.amp import autocast` in one branch, `from torch.cpu.amp import
            # autocast` in the other: which device a call means is decided when it runs.
            return
        if self._imported_elsewhere(locals_):
            return  # another module imports the name from here and calls it the old way
        if self._looked_up_by_name(locals_) or self._reaches_its_own_namespace() or self._read_at_run_time_by_text(locals_):
            return  # `exec("s = GradScaler(4.0)")`, `globals()["GradScaler"](4.0)`: a use no fix sees
        if self._star_import_after(statements):
            # NB: `from torch.cuda.amp import *` (or a project module that re-exports the
            # legacy name) run after the import binds the name again: `autocast("cuda")`
            # would then pass "cuda" as the legacy `enabled`.
            return
        if any(id(stmt) in self._class_body_imports for stmt in statements):
            # NB: an import in a class body binds a class attribute: `self.autocast(...)`,
            # `Trainer.autocast(...)`, `type(obj).GradScaler(...)` reach it from anywhere,
            # and no fix sees every such use.
            return
        for stmt in statements:
            if self._contexts.of(_first_name(stmt)).fallback:
                return  # the import is kept for an older torch on purpose
            new_stmt = self._modern_import(stmt, locals_, module_aliases)
            if new_stmt is None:
                return
            if isinstance(stmt, cst.ImportFrom):
                names |= {dotted(a.name) for a in stmt.names}  # type: ignore[union-attr]
            changes.append(Replace(stmt, new_stmt))
        if not changes:
            return
        needs = max((TORCH_AMP_NAME_SINCE.get(n, (1, 13)) for n in names), default=(1, 13))
        unsafe = None
        if any(id(stmt) not in self._function_imports for stmt in statements):
            unsafe = UNSAFE_REBINDS_MODULE_NAME
        if any(ref.deprecation.new.endswith("GradScaler") for group in groups for ref in group.refs):
            unsafe = UNSAFE_CLASS_CHANGES
        for group in groups:
            for ref in group.refs:
                ref.changes = changes
                ref.needs = needs
                ref.unsafe_because = unsafe

    @cached_property
    def _function_imports(self) -> set[int]:
        """Import statements inside a function: they bind a local no other module can reach."""
        found = _FunctionImports()
        self.model.module.visit(found)
        return found.ids

    def _use_changes(self, group: _Group) -> list | None:
        from amplint.changes import Replace

        changes: list = []
        uses_of_local = [r for r in self.model.references if r.context != "import" and r.text.split(".")[0] == group.local]
        by_node = {id(ref.node): ref for ref in group.refs}
        for use in uses_of_local:
            ref = by_node.get(id(use.node))
            if ref is None:
                return None  # `amp.something_else`: leave the module alias alone
            if isinstance(use.node, cst.Attribute) and use.node.attr.value not in _MODERN_NAMES:
                return None
            where = self._contexts.of(use.node)
            if where.annotation or where.shadowed:
                continue  # names the class and constructs nothing, or reads a local of the same name
            if where.fallback or where.binding:
                return None  # kept for an older torch on purpose, or the name is rebound here
            call = self._call_of_func.get(id(use.node))
            if call is not None:
                new = self._modern_call(call, use.node, ref.deprecation, self._torch_alias_at(use.node))
                if new is None:
                    return None
                changes.append(Replace(call, new))
            elif ref.deprecation.new.endswith(("custom_fwd", "custom_bwd")) and where.decorator:
                quote = self._quote_for(use.node)
                if quote is None:
                    return None
                changes.append(Replace(use.node, modern_decorator(use.node, use.node, ref.deprecation, quote=quote)))
            else:
                return None  # a bare reference: no drop-in spelling (module docstring)
        return changes

    def _import_statements_binding(self, local: str) -> list[cst.CSTNode]:
        out = []
        for node, _ in self.model.import_froms:
            if isinstance(node.names, cst.ImportStar):
                continue
            for alias in node.names:
                bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else dotted(alias.name)
                if bound == local:
                    out.append(node)
        for r in self.model.references:
            if r.context == "import" and isinstance(r.statement, cst.Import):
                for alias in r.statement.names:
                    if alias.asname and isinstance(alias.asname.name, cst.Name) and alias.asname.name.value == local:
                        if r.statement not in out:
                            out.append(r.statement)
        return out

    def _modern_import(self, stmt: cst.CSTNode, locals_: set[str], module_aliases: dict[str, str]) -> cst.CSTNode | None:
        if isinstance(stmt, cst.ImportFrom):
            module = module_name_of(stmt, self.model.imports.package)
            names = [dotted(a.name) for a in stmt.names]  # type: ignore[union-attr]
            if module in _DEPRECATED_MODULES and all(n in _MODERN_NAMES for n in names):
                return stmt.with_changes(module=cst.parse_expression("torch.amp"), relative=())
            if module in ("torch.cuda", "torch.cpu") and names == ["amp"]:
                return stmt.with_changes(module=cst.Name("torch"), relative=())
            return None
        if isinstance(stmt, cst.Import) and len(stmt.names) == 1 and dotted(stmt.names[0].name) in _DEPRECATED_MODULES:
            return stmt.with_changes(names=[stmt.names[0].with_changes(name=cst.parse_expression("torch.amp"))])
        return None


# The two ways an AMP401 fix reaches beyond what amplint reads (hostile pass 12); each makes
# the fix unsafe (applied with --unsafe-fixes only).
UNSAFE_CLASS_CHANGES = (
    "the scaler it builds is a `torch.amp.GradScaler`, not the deprecated subclass: an `isinstance` test, "
    "`type(scaler)(...)` or a pickle allow-list in a library or in code loaded by name tells them apart"
)
UNSAFE_REBINDS_MODULE_NAME = (
    "it rebinds a module-level name that code loaded by name (a lazy `__getattr__`, `import_module` of a "
    "computed name, `runpy`, a registry) may still call the old way"
)


UNSAFE_AUTOCAST_ESCAPES = (
    "the autocast object leaves its `with` (assigned, passed or returned): its class is `torch.autocast`'s, not "
    "the deprecated subclass, which an `isinstance` test or `type(ctx)(...)` elsewhere tells apart"
)
# `torch.cuda.amp.autocast = shim`, `setattr(torch.cuda.amp, "autocast", shim)`,
# `mock.patch("torch.cuda.amp.autocast")`, `patch.object(torch.cuda.amp, "GradScaler")`.
# Also through any other spelling of the module (hostile pass 20): `cpu_amp.autocast = Shim`
# after `import torch.cpu.amp as cpu_amp`, `th.cuda.amp.autocast = ...`, a `torch_mod` parameter,
# `import_module("torch.cpu.amp").autocast = ...`, `setattr(amp_mod, "autocast", ...)`: any
# statement that assigns a legacy name as an attribute of anything but `self`, a value that is
# not a literal (`cfg.autocast = True` is a setting).
_PATCHES_LEGACY = re.compile(
    r"^[ \t]*torch\.(?:cuda|cpu)\.amp(?:\.\w+)?[ \t]*=[^=]"  # a statement (not a parameter's default)
    r"|^[ \t]*(?!self\.|def\b|async\b|lambda\b)[^\s=#][^=\n]*\.(?:autocast|GradScaler|custom_fwd|custom_bwd)[ \t]*"
    r"=(?!=)(?![ \t]*(?:True|False|None|[-+]?\d)\b)"
    r"|setattr\(\s*torch\.(?:cuda|cpu)\.amp\b"
    r"|setattr\([^,()]+,\s*[\"'](?:autocast|GradScaler|custom_fwd|custom_bwd)[\"']"
    r"|patch(?:\.object)?\(\s*(?:[\"']torch\.(?:cuda|cpu)\.amp|torch\.(?:cuda|cpu)\.amp\b)",
    re.M,
)


class _BareWithItems(cst.CSTVisitor):
    def __init__(self) -> None:
        self.ids: set[int] = set()

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is None and isinstance(node.item, cst.Call):
            self.ids.add(id(node.item))


class _FunctionImports(cst.CSTVisitor):
    """The import statements inside a function (by id)."""

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.depth = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.depth += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.depth -= 1

    def visit_Import(self, node: cst.Import) -> None:
        if self.depth:
            self.ids.add(id(node))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if self.depth:
            self.ids.add(id(node))


class _DoctestFinder(cst.CSTVisitor):
    """A string holding an interactive example (`>>> `) that names one of the words."""

    def __init__(self, words: re.Pattern) -> None:
        self.words, self.found = words, False

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if ">>>" in node.value and self.words.search(node.value):
            self.found = True


class _QuotedAnnotationFinder(cst.CSTVisitor):
    """A quoted annotation (`s: "GradScaler"`) that names one of the words: a forward
    reference `typing.get_type_hints` evaluates in the module's namespace (hostile pass 18)."""

    def __init__(self, words: re.Pattern) -> None:
        self.words, self.found = words, False
        self.depth = 0

    def visit_Annotation(self, node: cst.Annotation) -> None:
        self.depth += 1

    def leave_Annotation(self, original_node: cst.Annotation) -> None:
        self.depth -= 1

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if self.depth and self.words.search(node.value):
            self.found = True


_REACHES_NAMESPACES = re.compile(
    r"(?:^|\.)(?:_getframe|currentframe|f_globals|f_locals|f_back|import_module|resolve_name|locate"
    r"|import_string|__main__|getmembers)(?:$|\.)")


def _runs_a_string(func: cst.BaseExpression) -> bool:
    """`exec`, `eval`, `globals`, ... or `get_ipython().run_line_magic`: a call that runs or looks up code by name."""
    if isinstance(func, cst.Attribute) and func.attr.value in _IPYTHON_RUNS:
        return True
    return dotted(func) in _DYNAMIC_LOOKUPS


# Decorators and base classes that never test a value against an annotation.  Anything
# else may (pydantic, typeguard, beartype, singledispatch, a project's own checker).
_INERT_DECORATORS = frozenset({
    "staticmethod", "classmethod", "property", "functools.cached_property", "functools.wraps",
    "functools.lru_cache", "functools.cache", "abc.abstractmethod", "typing.overload", "typing.final",
    "typing.override", "typing_extensions.override", "typing_extensions.final", "dataclasses.dataclass",
    "contextlib.contextmanager",
})
_INERT_BASES = frozenset({
    "object", "typing.NamedTuple", "typing.TypedDict", "typing.Protocol", "typing.Generic", "abc.ABC",
    "enum.Enum", "typing_extensions.TypedDict", "typing_extensions.Protocol",
})


class _CheckedAnnotations(cst.CSTVisitor):
    """The names in annotations that a decorator or a base class may read and test values against."""

    def __init__(self, qualify) -> None:
        self.qualify = qualify
        self.ids: set[int] = set()

    def _inert(self, expr: cst.BaseExpression, known: frozenset[str]) -> bool:
        if isinstance(expr, cst.Call):
            expr = expr.func  # `@dataclasses.dataclass(frozen=True)`
        if isinstance(expr, cst.Subscript):
            expr = expr.value  # `Generic[T]`
        name = dotted(expr)
        if name is None:
            return False
        full = self.qualify(name) or name
        # NB: torch's decorators and classes read no annotation; `@x.setter` is a property's
        return full in known or full.startswith("torch.") or name.rsplit(".", 1)[-1] in ("setter", "getter", "deleter")

    def _collect(self, annotation: cst.Annotation | None) -> None:
        if annotation is not None:
            collector = _NamesIn()
            walk(annotation, collector)
            self.ids |= collector.ids

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if all(self._inert(d.decorator, _INERT_DECORATORS) for d in node.decorators):
            return
        params = node.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params,
                      *(p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param))):
            self._collect(param.annotation)
        self._collect(node.returns)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if (all(self._inert(d.decorator, _INERT_DECORATORS) for d in node.decorators)
                and all(a.keyword is not None or self._inert(a.value, _INERT_BASES) for a in node.bases)):
            return
        for stmt in node.body.body:  # the class's own fields, not its methods' locals
            for small in getattr(stmt, "body", ()) if isinstance(stmt, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.AnnAssign):
                    self._collect(small.annotation)


class _NamesIn(cst.CSTVisitor):
    def __init__(self) -> None:
        self.ids: set[int] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.ids.add(id(node))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.ids.add(id(node))


class _ImportOrder(cst.CSTVisitor):
    """The position of each import statement in the module's text, and those of its star imports."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}
        self.stars: list[int] = []

    def _seen(self, node: cst.CSTNode) -> None:
        self.index[id(node)] = len(self.index)

    def visit_Import(self, node: cst.Import) -> None:
        self._seen(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._seen(node)
        if isinstance(node.names, cst.ImportStar):
            self.stars.append(self.index[id(node)])


class _ClassBodyImports(cst.CSTVisitor):
    """The import statements that bind class attributes (directly in a class body)."""

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.bodies: list[bool] = []  # enclosing bodies: True for a class's

    def visit_ClassDef_body(self, node: cst.ClassDef) -> None:
        self.bodies.append(True)

    def leave_ClassDef_body(self, node: cst.ClassDef) -> None:
        self.bodies.pop()

    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.bodies.append(False)

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.bodies.pop()

    def visit_Import(self, node: cst.Import) -> bool:
        if self.bodies and self.bodies[-1]:
            self.ids.add(id(node))
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if self.bodies and self.bodies[-1]:
            self.ids.add(id(node))
        return False

    # expressions hold no import
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in node.body)


class _NameCounter(cst.CSTVisitor):
    """How many times a name is written."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0

    def visit_Name(self, node: cst.Name) -> None:
        self.count += node.value == self.name


class _StringFinder(cst.CSTVisitor):
    """Is a word of `words` inside a string literal?"""

    def __init__(self, words: re.Pattern) -> None:
        self.words = words
        self.found = False

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.found = self.found or bool(self.words.search(node.value))

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self.found = self.found or bool(self.words.search(node.value))


def _same_program(project, path: str) -> set[str]:
    """The project modules an object built in `path` can reach: those that import it
    (directly or not), and what it and each of them import (directly or not).  A folder
    of scripts that import nothing of each other shares no object."""
    related = {path, *project.importers(path)}
    level = set(related)
    for _ in range(_IMPORT_HOPS):
        level = {f for m in level for f in project.imported_files(m)} - related
        if not level:
            break
        related |= level
    related.discard(path)
    return related


def _unreported(where) -> bool:
    """Annotations, version-gated fallbacks and bindings reference nothing that runs; a
    local of the same name (a parameter `autocast`) is not the import."""
    return where.annotation or where.fallback or where.binding or where.shadowed


def _first_name(stmt: cst.CSTNode) -> cst.CSTNode:
    """The first imported name of an import statement (its context is the statement's)."""
    names = getattr(stmt, "names", ())
    return names[0].name if names and not isinstance(names, cst.ImportStar) else stmt
