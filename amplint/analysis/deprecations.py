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
`isinstance` test, a `cls=` default) has no drop-in spelling: `torch.amp.GradScaler`'s
first parameter is `device` where the old class's is `init_scale`, and a
`torch.amp.GradScaler` is no `torch.cuda.amp.GradScaler`.  Such a reference is reported
without a fix, and pins the import it goes through.

Annotations, version-gated fallbacks and bindings of an imported name
(analysis/version_gates.py) are not reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from amplint.analysis.names import dotted, module_name_of
from amplint.analysis.torch_api import AUTOCAST_DEFAULT_SETTERS, DEPRECATIONS, TORCH_AMP_NAME_SINCE, Deprecation
from amplint.analysis.version_gates import Contexts

_DEPRECATED_MODULES = {
    "torch.cuda.amp": "cuda",
    "torch.cpu.amp": "cpu",
    "torch.cuda.amp.autocast_mode": "cuda",
    "torch.cuda.amp.grad_scaler": "cuda",
    "torch.cpu.amp.autocast_mode": "cpu",
    "torch.cpu.amp.grad_scaler": "cpu",
}
_MODERN_NAMES = {"autocast", "GradScaler", "custom_fwd", "custom_bwd"}


@dataclass(eq=False)
class DeprecatedRef:
    node: cst.CSTNode  # what the diagnostic points at
    qualname: str
    deprecation: Deprecation
    statement: cst.CSTNode | None = None
    changes: list | None = None  # CST changes (Replace) that modernise it, None: no safe fix
    needs: tuple[int, int] = (0, 0)  # the first torch that has what `changes` write


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


def _device_arg(value: str) -> cst.Arg:
    return cst.Arg(cst.SimpleString(f'"{value}"'))


def _comma() -> cst.Comma:
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _with_commas(args: list[cst.Arg]) -> list[cst.Arg]:
    """A comma after every argument but the last, which keeps what it had (a trailing
    comma and the line break after it stay where the author put them)."""
    return [a if i == len(args) - 1 or isinstance(a.comma, cst.Comma) else a.with_changes(comma=_comma())
            for i, a in enumerate(args)]


def modernised_call(call: cst.Call, new_func: cst.BaseExpression, dep: Deprecation) -> cst.Call | None:
    """The modern call for a deprecated one, keeping every argument; None when unsafe."""
    args = list(call.args)
    if dep.device_argument == "positional":
        if dep.old.endswith("autocast") or dep.old.endswith("autocast_mode.autocast"):
            args = _legacy_autocast_args(args)
            if args is None:
                return None
        elif any(a.star == "*" for a in args):
            return None
        if any(a.keyword is not None and a.keyword.value in ("device", "device_type") for a in args):
            return None
        new_args = [_device_arg(dep.device), *args]
    else:
        if any(a.keyword is not None and a.keyword.value == "device_type" for a in args):
            new_args = args
        else:
            kw = cst.Arg(
                _device_arg(dep.device).value,
                keyword=cst.Name("device_type"),
                equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
            )
            positional = [a for a in args if a.keyword is None and not a.star]
            rest = [a for a in args if not (a.keyword is None and not a.star)]
            new_args = [*positional, kw, *rest]
    return call.with_changes(func=new_func, args=_with_commas(new_args))


def modern_decorator(expr: cst.BaseExpression, new_func: cst.BaseExpression, dep: Deprecation) -> cst.Call:
    """`@custom_fwd` -> `@torch.amp.custom_fwd(device_type="cuda")`."""
    return modernised_call(cst.Call(func=expr), new_func, dep)


class Deprecations:
    def __init__(self, model) -> None:
        self.model = model

    @cached_property
    def _call_of_func(self) -> dict[int, cst.Call]:
        return {id(site.node.func): site.node for site in self.model.calls}

    @cached_property
    def _autocast_defaults_changed(self) -> bool:
        """The module sets autocast's global defaults, which `torch.autocast(device)` reads
        where the legacy classes passed float16/bfloat16 and cache_enabled=True themselves."""
        qualify = self.model.imports.qualify_text
        return any(qualify(r.text) in AUTOCAST_DEFAULT_SETTERS for r in self.model.references)

    @cached_property
    def references(self) -> list[DeprecatedRef]:
        """The reported references: annotations, version-gated fallbacks and bindings left out."""
        model = self.model
        refs: list[DeprecatedRef] = []
        groups: dict[str, _Group] = {}
        module_aliases = self._deprecated_module_aliases()
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
            return []

        targets = {id(ref.node) for ref in refs}
        targets |= {id(r.node) for r in model.references if r.text.split(".")[0] in groups}
        targets |= {id(_first_name(s)) for local in groups for s in self._import_statements_binding(local)}
        self._contexts = Contexts(model, targets)
        self._used_as_value = {
            (ref.deprecation.new, ref.deprecation.device) for ref in refs if self._is_bare_value(ref)
        }
        for ref, r, head in full_path:
            ref.changes = self._full_path_fix(r, ref.deprecation, head)
            ref.needs = ref.deprecation.new_since
        for merged in self._merge_by_import(groups):
            self._fix_group(merged, module_aliases)
        return [ref for ref in refs if not _unreported(self._contexts.of(ref.node))]

    @cached_property
    def _exported(self) -> set[str]:
        """Names this module re-exports: in `__all__`, or imported `as` themselves (the
        typing convention for an explicit re-export).  Renaming their import would hand
        importers a function whose first parameter is the device."""
        out = set()
        for value in self.model.module_scope.assignments.get("__all__", []):
            if isinstance(value, (cst.List, cst.Tuple)):
                out |= {e.value.evaluated_value for e in value.elements if isinstance(e.value, cst.SimpleString)}
        for node, _ in self.model.import_froms:
            if not isinstance(node.names, cst.ImportStar):
                out |= {dotted(a.name) for a in node.names
                        if a.asname is not None and isinstance(a.asname.name, cst.Name) and a.asname.name.value == dotted(a.name)}
        return out

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
        return not (where.annotation or where.decorator or where.binding)

    def _modern_call(self, call: cst.Call, new_func: cst.BaseExpression, dep: Deprecation) -> cst.Call | None:
        if dep.new == "torch.autocast" and self._autocast_defaults_changed:
            return None
        if (dep.new, dep.device) in self._used_as_value:
            # NB: what this call builds is compared with (or derived from) the deprecated
            # class elsewhere in the module; a `torch.amp.GradScaler` is no
            # `torch.cuda.amp.GradScaler`, so the constructions stay with the class.
            return None
        return modernised_call(call, new_func, dep)

    # --- case 1: the full path from a torch alias ---------------------------------------
    def _full_path_fix(self, r, dep: Deprecation, torch_alias: str) -> list | None:
        from amplint.rules._base import Replace

        new_func = cst.parse_expression(f"{torch_alias}.{dep.new.removeprefix('torch.')}")
        call = self._call_of_func.get(id(r.node))
        if call is not None:
            new = self._modern_call(call, new_func, dep)
            return [Replace(call, new)] if new is not None else None
        if dep.new.endswith(("custom_fwd", "custom_bwd")) and self._contexts.of(r.node).decorator:
            return [Replace(r.node, modern_decorator(r.node, new_func, dep))]
        # NB: a bare class or function reference has no drop-in modern spelling (see the
        # module docstring): `torch.amp.GradScaler` would take the first positional
        # argument given later as its device.
        return None

    # --- cases 2 and 3: through an imported local name ----------------------------------
    def _deprecated_module_aliases(self) -> dict[str, str]:
        """Local names bound to a deprecated module (`from torch.cuda import amp`)."""
        return {local: full for local, full in self.model.imports.items() if full in _DEPRECATED_MODULES}

    def _fix_group(self, groups: list[_Group], module_aliases: dict[str, str]) -> None:
        from amplint.rules._base import Replace

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
        for group in groups:
            for ref in group.refs:
                ref.changes = changes
                ref.needs = needs

    def _use_changes(self, group: _Group) -> list | None:
        from amplint.rules._base import Replace

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
            if where.annotation:
                continue  # names the class and constructs nothing: the same name in torch.amp serves
            if where.fallback or where.binding:
                return None  # kept for an older torch on purpose, or the name is rebound here
            call = self._call_of_func.get(id(use.node))
            if call is not None:
                new = self._modern_call(call, use.node, ref.deprecation)
                if new is None:
                    return None
                changes.append(Replace(call, new))
            elif ref.deprecation.new.endswith(("custom_fwd", "custom_bwd")) and where.decorator:
                changes.append(Replace(use.node, modern_decorator(use.node, use.node, ref.deprecation)))
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


def _unreported(where) -> bool:
    """Annotations, version-gated fallbacks and bindings reference nothing that runs."""
    return where.annotation or where.fallback or where.binding


def _first_name(stmt: cst.CSTNode) -> cst.CSTNode:
    """The first imported name of an import statement (its context is the statement's)."""
    names = getattr(stmt, "names", ())
    return names[0].name if names and not isinstance(names, cst.ImportStar) else stmt
