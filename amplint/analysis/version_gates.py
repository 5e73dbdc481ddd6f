"""Where a reference to a deprecated AMP symbol sits: annotation, decorator, version-gated fallback.

AMP401 is about references that run and warn.  Three places change what a reference
means, and none of them is visible from the reference alone:

- an annotation (`def f(s: torch.cuda.amp.GradScaler)`) never constructs or calls
  anything (with `from __future__ import annotations` it is not even evaluated);
- a decorator (`@torch.cuda.amp.custom_fwd`) is called with the function, so it can be
  rewritten as a call of the modern decorator; elsewhere a bare reference cannot;
- a binding (`def autocast(enabled=True):` in the `else` of `from torch.cuda.amp import
  autocast`, `GradScaler = None`) reads nothing, though it rebinds the imported name;
- a version-gated fallback is the deprecated spelling kept on purpose for an older torch,
  as libraries that support several torch versions write it::

      if is_torch_version(">=", "2.4"):          try:
          from torch.amp import GradScaler            self.scaler = torch.amp.GradScaler(device=device)
      else:                                       except (AttributeError, TypeError):
          from torch.cuda.amp import GradScaler       self.scaler = torch.cuda.amp.GradScaler()

  A reference is such a fallback when it sits in one branch of an `if` (or a conditional
  expression) whose test reads the torch version, or probes torch with `hasattr`, while
  the other branch uses the modern spelling; or in an `except` that catches what an older
  torch raises there (AttributeError, ImportError, TypeError, or anything) for a `try`
  that uses the modern spelling.  Both halves are required: `if device == "cuda":` is no
  version check, and a version check whose other branch does something else is no
  fallback.

One walk of the module, made only when it holds a deprecated reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.names import dotted, module_name_of
from amplint.analysis.torch_api import MODERN_AMP
from amplint.analysis.walk import walk

# What an older torch raises on the modern spelling: AttributeError (no torch.amp.GradScaler),
# TypeError (no `device` parameter), ImportError (`from torch.amp import GradScaler`).
_OLD_TORCH_ERRORS = frozenset(
    {"AttributeError", "ImportError", "ModuleNotFoundError", "TypeError", "Exception", "BaseException"}
)
# An identifier that reads a version: `is_torch_version`, `TORCH_VERSION`, `version.parse`,
# `_TORCH_GREATER_EQUAL_2_4`, `is_torch_greater_or_equal`, `torch_ge_2_4`, `TORCH_2_4`.
_VERSIONISH = re.compile(r"version|greater|less|newer|older|at_?least|(?:^|_)(?:ge|gt|le|lt|geq|leq)(?:_|$)|\d", re.I)
_MODERN_MODULES = frozenset({"torch.amp", "torch.amp.autocast_mode", "torch.amp.grad_scaler"})
_MODERN_FROM_TORCH = frozenset({"amp", "autocast", "GradScaler"})


@dataclass
class RefContext:
    annotation: bool = False
    decorator: bool = False
    fallback: bool = False
    # a name being bound, not read: `def autocast(...)`, `GradScaler = None`, a parameter
    binding: bool = False
    # the name is a local of an enclosing function, lambda or comprehension (a parameter
    # `autocast`, `for autocast in ...`): it reads that local, not the module's import
    shadowed: bool = False
    # the quotes of the f-strings the node sits in (a string written there takes another)
    fstring_quotes: frozenset = frozenset()
    # the names local to the enclosing functions, lambdas and comprehensions
    locals_here: frozenset = frozenset()
    # the names that module-level `import x` / `import x as y` statements before the node bind,
    # outside any branch or handler, or in the branch the node sits in (statements that have run)
    imported_before: frozenset = frozenset()


class Contexts:
    """The context of each node in `targets` (ids of nodes of `model.module`)."""

    def __init__(self, model, targets: set[int]) -> None:
        self.model = model
        self._modern: dict[int, bool] = {}
        walker = _ContextWalker(targets, model.scope_of)
        walk(model.module, walker)
        self._found: dict[int, RefContext] = {}
        for key, (frames, annotation, decorator, shadowed, quotes, locals_here, imported) in walker.found.items():
            self._found[key] = RefContext(annotation, decorator, any(self._gates(f) for f in frames),
                                          key in walker.bound, shadowed, quotes, locals_here, imported)

    def of(self, node: cst.CSTNode) -> RefContext:
        return self._found.get(id(node), RefContext())

    # --- one enclosing branch -----------------------------------------------------------------
    def _gates(self, frame: tuple) -> bool:
        kind, node, which = frame
        if kind == "except":
            handler, try_node = node, which
            return _catches_old_torch_errors(handler) and self._uses_modern(try_node.body)
        other = node.orelse if which == "body" else node.body
        return other is not None and is_torch_version_check(node.test, self.model) and self._uses_modern(other)

    def _uses_modern(self, node: cst.CSTNode) -> bool:
        key = id(node)
        if key not in self._modern:
            finder = _ModernFinder(self.model)
            walk(node, finder)
            self._modern[key] = finder.found
        return self._modern[key]


def is_torch_version_check(test: cst.BaseExpression, model) -> bool:
    """`test` reads torch's version (`is_torch_version(">=", "2.4")`, `_TORCH_GREATER_EQUAL_2_4`,
    `version.parse(torch.__version__) >= ...`) or probes torch (`hasattr(torch.amp, "GradScaler")`)."""
    reader = _TestReader(model)
    walk(test, reader)
    return reader.probes_torch or (reader.mentions_torch and reader.versionish)


def _catches_old_torch_errors(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True  # a bare `except:`
    types = [e.value for e in handler.type.elements] if isinstance(handler.type, cst.Tuple) else [handler.type]
    return any((dotted(t) or "").split(".")[-1] in _OLD_TORCH_ERRORS for t in types)


class _ContextWalker(cst.CSTVisitor):
    def __init__(self, targets: set[int], scope_of: dict) -> None:
        self.targets = targets
        self.scope_of = scope_of
        self.frames: list[tuple] = []
        self.tries: list[cst.CSTNode] = []
        self.annotations = 0
        self.decorators: set[int] = set()
        self.bound: set[int] = set()
        # names local to each enclosing function body, lambda and comprehension
        self.locals: list[frozenset[str]] = []
        self.quotes: list[str] = []
        self.parameters: set[int] = set()
        self.found: dict[int, tuple] = {}
        # names bound so far by `import` statements outside any function or class body, each
        # with the branches it sits in (ids of the `if`/`except` frames around it)
        self.module_imports: list[tuple[str, tuple]] = []
        self.nesting = 0

    def _seen(self, node: cst.CSTNode) -> None:
        key = id(node)
        if key in self.targets:
            head = (dotted(node) or "").split(".")[0]
            shadowed = key in self.parameters or any(head in names for names in self.locals)
            here = self._branches()
            # NB: an import in a branch or a handler may never run (`if TYPE_CHECKING:` never
            # does): it counts only where the node sits in the same branch, after it (a
            # script's `if __name__ == "__main__":` block that imports torch and then uses it).
            imported = frozenset(name for name, where in self.module_imports if here[:len(where)] == where)
            self.found[key] = (tuple(self.frames), self.annotations > 0, key in self.decorators, shadowed,
                               frozenset(self.quotes), frozenset().union(*self.locals), imported)

    def _branches(self) -> tuple:
        return tuple((kind, id(node), which) for kind, node, which in self.frames)

    def visit_Import(self, node: cst.Import) -> None:
        if self.nesting == 0:
            for alias in node.names:
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    name = alias.asname.name.value
                else:
                    name = (dotted(alias.name) or "").split(".")[0]
                self.module_imports.append((name, self._branches()))

    # --- local names: what a reference inside a function, lambda or comprehension reads
    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        scope = self.scope_of.get(node)
        names = frozenset()
        if scope is not None:
            names = frozenset(n for n in (*scope.assignments, *scope.params) if "." not in n) - scope.globals_
        self.locals.append(names)

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.locals.pop()

    def visit_Lambda_body(self, node: cst.Lambda) -> None:
        params = node.params
        names = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
        names += [p.name.value for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
        self.locals.append(frozenset(names))

    def leave_Lambda_body(self, node: cst.Lambda) -> None:
        self.locals.pop()

    def visit_Param(self, node: cst.Param) -> None:
        # a parameter binds a local of its function: never the module's name
        self.bound.add(id(node.name))
        self.parameters.add(id(node.name))

    def _comprehension(self, node) -> None:
        names: set[str] = set()
        comp = node.for_in
        while comp is not None:
            for name in _target_names(comp.target):
                names.add(name.value)
                self.bound.add(id(name))
            comp = comp.inner_for_in
        self.locals.append(frozenset(names))

    def _end_comprehension(self, node) -> None:
        self.locals.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension
    leave_ListComp = leave_SetComp = leave_DictComp = leave_GeneratorExp = _end_comprehension

    def visit_For(self, node: cst.For) -> None:
        self.bound.update(id(n) for n in _target_names(node.target))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.bound.update(id(n) for n in _target_names(node.asname.name))

    def visit_ExceptHandler_name(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self.bound.update(id(n) for n in _target_names(node.name.name))

    def visit_Global(self, node: cst.Global) -> None:
        self.bound.update(id(n.name) for n in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.bound.update(id(n.name) for n in node.names)

    # --- f-strings: their quotes
    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self.quotes.append(node.start.lstrip("fFrRbBuU")[:1])

    def leave_FormattedString(self, original_node: cst.FormattedString) -> None:
        self.quotes.pop()

    # A field that prints its own text (`f"{expr=}"`) takes no rewrite: the output would
    # change.  It counts as a field where every quote is taken (`_quote_for` gives None).
    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        if node.equal is not None:
            self.quotes.extend(('"', "'"))

    def leave_FormattedStringExpression(self, original_node: cst.FormattedStringExpression) -> None:
        if original_node.equal is not None:
            del self.quotes[-2:]

    def visit_Name(self, node: cst.Name) -> None:
        self._seen(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._seen(node)

    def visit_Annotation(self, node: cst.Annotation) -> None:
        self.annotations += 1

    def leave_Annotation(self, original_node: cst.Annotation) -> None:
        self.annotations -= 1

    def visit_Decorator(self, node: cst.Decorator) -> None:
        self.decorators.add(id(node.decorator))

    # names bound here (a `def` of the same name as a deprecated import, an assignment)
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.bound.add(id(node.name))
        self.nesting += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.nesting -= 1

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.bound.add(id(node.name))
        self.nesting += 1

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.nesting -= 1

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.bound.add(id(node.target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.bound.add(id(node.target))

    # branches of an `if` and of a conditional expression
    def visit_If_body(self, node: cst.If) -> None:
        self.frames.append(("if", node, "body"))

    def leave_If_body(self, node: cst.If) -> None:
        self.frames.pop()

    def visit_If_orelse(self, node: cst.If) -> None:
        self.frames.append(("if", node, "orelse"))

    def leave_If_orelse(self, node: cst.If) -> None:
        self.frames.pop()

    def visit_IfExp_body(self, node: cst.IfExp) -> None:
        self.frames.append(("if", node, "body"))

    def leave_IfExp_body(self, node: cst.IfExp) -> None:
        self.frames.pop()

    def visit_IfExp_orelse(self, node: cst.IfExp) -> None:
        self.frames.append(("if", node, "orelse"))

    def leave_IfExp_orelse(self, node: cst.IfExp) -> None:
        self.frames.pop()

    # handlers of a `try`
    def visit_Try(self, node: cst.Try) -> None:
        self.tries.append(node)

    def leave_Try(self, original_node: cst.Try) -> None:
        self.tries.pop()

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.frames.append(("except", node, self.tries[-1]))

    def leave_ExceptHandler(self, original_node: cst.ExceptHandler) -> None:
        self.frames.pop()


def _target_names(target: cst.CSTNode) -> list[cst.Name]:
    """The plain names an assignment target binds (`a`, `(a, b)`, `[a, *b]`)."""
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in _target_names(el.value)]
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []


class _ModernFinder(cst.CSTVisitor):
    """Does a subtree spell the modern API (a reference, or an import from torch.amp)?"""

    def __init__(self, model) -> None:
        self.model = model
        self.found = False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        module = module_name_of(node, self.model.imports.package)
        if not isinstance(node.names, cst.ImportStar):
            names = {dotted(a.name) for a in node.names}
            if module in _MODERN_MODULES or (module == "torch" and names & _MODERN_FROM_TORCH):
                self.found = True
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return self._reference(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._reference(node)

    def _reference(self, node) -> bool:
        text = dotted(node)
        if text is None:
            return True
        qual = self.model.imports.qualify_text(text)
        if qual is not None and (qual in MODERN_AMP or qual.startswith("torch.amp.")):
            self.found = True
        return False


class _TestReader(cst.CSTVisitor):
    """What a branch condition mentions: torch, a version, a `hasattr` probe of torch."""

    def __init__(self, model) -> None:
        self.model = model
        self.mentions_torch = False
        self.versionish = False
        self.probes_torch = False

    def _word(self, word: str) -> None:
        if "torch" in word.lower():
            self.mentions_torch = True
        if _VERSIONISH.search(word):
            self.versionish = True

    def visit_Name(self, node: cst.Name) -> None:
        self._word(node.value)
        if self.model.imports.qualify_text(node.value) == "torch":
            self.mentions_torch = True

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._word(node.attr.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if "torch" in node.value.lower():
            self.mentions_torch = True

    def visit_Call(self, node: cst.Call) -> None:
        if dotted(node.func) in ("hasattr", "getattr") and node.args:
            head = (dotted(node.args[0].value) or "").split(".")[0]
            if head and self.model.imports.qualify_text(head) == "torch":
                self.probes_torch = True
