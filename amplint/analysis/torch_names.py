"""Which names read the torch module, and where: what a fix may write `torch.` through.

AMP401 writes `dtype=torch.float16` into a modernised autocast and AMP501 writes
`torch.finfo(x.dtype).min`: new reads of a name, evaluated where the fixed code runs.
Such a name is safe to write only where it certainly holds the torch module: bound by a
module-level `import torch` (or `import torch as th`) that has run before that point,
and bound by nothing else, anywhere in the module, on any path.  A name some other
statement binds may hold another object when the fixed line runs (`del torch`, `except
ImportError as torch:`, `case torch:`, `import numpy as torch` in the function, a
parameter `torch`), and the fix would call numpy, an exception or None, or raise
NameError where the original ran.

So every Python binding form counts, in every scope (a function's, a class body's, a
lambda's, a comprehension's): assignment, augmented and annotated assignment targets,
`for` / `with ... as` / `except ... as` targets, `del`, every import (`import x as
torch`, `from m import torch`), match captures (`case torch:`, `case [*torch]`, `case
{**torch}`, `case C(x=torch)`, `case _ as torch`), the walrus, `def torch` / `class
torch`, type parameters, `global torch` / `nonlocal torch`, comprehension variables and
function or lambda parameters.  Only a module-level `import torch...` that binds the
name to torch itself is harmless (`import torch.nn` binds `torch` to torch too).
"""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.walk import walk


class TorchNames:
    """The names through which a fix may write `torch.` in one module."""

    def __init__(self, model) -> None:
        self.model = model

    @cached_property
    def aliases(self) -> list[str]:
        """Names a module-level `import torch [as th]` binds and nothing else in the module
        binds, in any scope, by any binding form: `torch` first."""
        binders = _Binders()
        walk(self.model.module, binders)
        return sorted(binders.torch_aliases - binders.other_bindings, key=lambda a: (a != "torch", a))

    def at(self, node: cst.CSTNode, contexts=None) -> str | None:
        """The name that reads the torch module where `node` runs, or None: one of `aliases`
        whose import has run before `node` (module level, outside any branch or in the
        branch `node` sits in) and that no enclosing function, lambda or comprehension
        has as a local.  `contexts` (analysis/version_gates.Contexts) must know `node`;
        without it one is built for `node` alone."""
        if not self.aliases:
            return None
        if contexts is None:
            from amplint.analysis.version_gates import Contexts

            contexts = Contexts(self.model, {id(node)})
        where = contexts.of(node)
        return next((a for a in self.aliases if a in where.imported_before and a not in where.locals_here), None)


def target_names(target: cst.CSTNode | None) -> list[str]:
    """The plain names a binding target binds (`a`, `(a, b)`, `[a, *b]`); an attribute or
    a subscript binds none."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in target_names(el.value)]
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return []


class _Binders(cst.CSTVisitor):
    """Every name the module binds, split into the module-level `import torch` aliases and
    the rest (`other_bindings`)."""

    def __init__(self) -> None:
        self.torch_aliases: set[str] = set()
        self.other_bindings: set[str] = set()
        self.depth = 0  # enclosing function and class bodies

    def _bound(self, names) -> None:
        self.other_bindings.update(names)

    # --- scopes: their names, and whether an import is at module level
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._bound([node.name.value])

    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.depth += 1

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.depth -= 1

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._bound([node.name.value])

    def visit_ClassDef_body(self, node: cst.ClassDef) -> None:
        self.depth += 1

    def leave_ClassDef_body(self, node: cst.ClassDef) -> None:
        self.depth -= 1

    def visit_Param(self, node: cst.Param) -> None:  # a function's or a lambda's
        self._bound([node.name.value])

    def visit_TypeVar(self, node) -> None:
        self._bound([node.name.value])

    def visit_TypeVarTuple(self, node) -> None:
        self._bound([node.name.value])

    def visit_ParamSpec(self, node) -> None:
        self._bound([node.name.value])

    def visit_TypeAlias(self, node) -> None:
        self._bound([node.name.value])

    def visit_Global(self, node: cst.Global) -> None:
        self._bound(n.name.value for n in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self._bound(n.name.value for n in node.names)

    # --- imports
    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            full = dotted(alias.name) or ""
            if alias.asname is not None:
                names = target_names(alias.asname.name)
                if self.depth == 0 and full == "torch":
                    self.torch_aliases.update(names)
                else:
                    self._bound(names)
            else:
                head = full.split(".")[0]
                if self.depth == 0 and head == "torch":
                    if full == "torch":
                        self.torch_aliases.add("torch")
                    # NB: `import torch.nn` binds `torch` to torch as well: harmless
                else:
                    self._bound([head])
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                if alias.asname is not None:
                    self._bound(target_names(alias.asname.name))
                else:
                    self._bound([(dotted(alias.name) or "").split(".")[0]])
        return False

    # --- assignments and the statements that bind a target
    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._bound(target_names(node.target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bound(target_names(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bound(target_names(node.target))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bound(target_names(node.target))

    def visit_For(self, node: cst.For) -> None:
        self._bound(target_names(node.target))

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bound(target_names(node.target))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bound(target_names(node.asname.name))

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:  # unbound again when the handler ends
            self._bound(target_names(node.name.name))

    def visit_ExceptStarHandler(self, node: cst.ExceptStarHandler) -> None:
        if node.name is not None:
            self._bound(target_names(node.name.name))

    def visit_Del(self, node: cst.Del) -> None:
        self._bound(target_names(node.target))

    # --- match captures
    def visit_MatchAs(self, node: cst.MatchAs) -> None:
        if node.name is not None:
            self._bound([node.name.value])

    def visit_MatchStar(self, node: cst.MatchStar) -> None:
        if node.name is not None:
            self._bound([node.name.value])

    def visit_MatchMapping(self, node: cst.MatchMapping) -> None:
        if node.rest is not None:
            self._bound([node.rest.value])
