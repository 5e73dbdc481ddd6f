"""The module-level semantic model: one traversal, shared by every rule.

`ModuleModel.build(module)` walks the CST once and records what the rules ask about:
imports, scopes (functions, methods, the module body), assignments, calls and dotted
references.  Everything else (`bindings`, `steps`, `autocast`, `values`) is derived
from these records lazily, so a rule that never asks for the step graph never pays for
it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from amplint.analysis.names import ImportTable, dotted
from amplint.analysis.walk import walk


@dataclass(eq=False)
class Scope:
    """A function body or the module body; plain names are keyed per scope."""

    node: cst.Module | cst.FunctionDef
    name: str
    parent: "Scope | None"
    cls: "ClassInfo | None" = None
    params: list[str] = field(default_factory=list)
    # plain local names (and dotted targets like `self.x`) -> the expressions assigned to them
    assignments: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    globals_: set[str] = field(default_factory=set)
    # plain local names (and parameters) -> their annotation (`scaler: ScalerBase = get_scaler(...)`)
    annotations: dict[str, cst.BaseExpression] = field(default_factory=dict)
    # The module the scope belongs to: values and calls found through the project index
    # come with scopes of other modules, and names inside them qualify through those.
    model: "ModuleModel | None" = None

    @property
    def is_module(self) -> bool:
        return isinstance(self.node, cst.Module)

    @property
    def self_name(self) -> str | None:
        """The first parameter of a method (`self`), which denotes the instance."""
        if self.cls is not None and self.params and not self.is_static:
            return self.params[0]
        return None

    @cached_property
    def is_static(self) -> bool:
        if not isinstance(self.node, cst.FunctionDef):
            return False
        return any(dotted(d.decorator) in ("staticmethod",) for d in self.node.decorators)

    def binds(self, name: str) -> bool:
        return name not in self.globals_ and (name in self.assignments or name in self.params)


@dataclass(eq=False)
class ClassInfo:
    node: cst.ClassDef
    name: str
    bases: list[str]
    methods: dict[str, cst.FunctionDef] = field(default_factory=dict)
    # `self.x = value` anywhere in the class's methods: "x" -> values
    attributes: dict[str, list[tuple[cst.BaseExpression, Scope]]] = field(default_factory=dict)
    model: "ModuleModel | None" = None


@dataclass(frozen=True, eq=False)
class CallSite:
    node: cst.Call
    scope: Scope


@dataclass(frozen=True, eq=False)
class Reference:
    """A maximal dotted expression (`torch.cuda.amp.autocast`) or imported name."""

    node: cst.CSTNode
    text: str
    scope: Scope
    # "import" for names inside import statements; "expr" otherwise.
    context: str = "expr"
    statement: cst.CSTNode | None = None


class _Collector(cst.CSTVisitor):
    def __init__(self, model: "ModuleModel") -> None:
        self.m = model
        self.scopes: list[Scope] = [model.module_scope]
        self.classes: list[ClassInfo] = []

    # --- scopes --------------------------------------------------------------------------
    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        bases = [b for b in (dotted(a.value) for a in node.bases) if b]
        info = ClassInfo(node=node, name=node.name.value, bases=bases, model=self.m)
        # NB: nested classes with the same name shadow; the first definition wins.
        self.m.classes.setdefault(info.name, info)
        self.classes.append(info)
        return True

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.classes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        parent = self.scope
        cls = None
        if self.classes and self.classes[-1].node.body.body and any(
            s is node for s in self.classes[-1].node.body.body
        ):
            cls = self.classes[-1]
            cls.methods.setdefault(node.name.value, node)
        elif parent.is_module:
            self.m.functions.setdefault(node.name.value, node)
        params = [p.name.value for p in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params)]
        for star in (node.params.star_arg, node.params.star_kwarg):
            if isinstance(star, cst.Param):
                params.append(star.name.value)
        qual = f"{cls.name}.{node.name.value}" if cls else (
            node.name.value if parent.is_module else f"{parent.name}.{node.name.value}"
        )
        scope = Scope(node=node, name=qual, parent=parent, cls=cls, params=params, model=self.m)
        for p in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params):
            if p.annotation is not None:
                scope.annotations[p.name.value] = p.annotation.annotation
        self.m.scopes.append(scope)
        self.m.scope_of[node] = scope
        self.scopes.append(scope)
        parent.assignments.setdefault(node.name.value, [])
        return True

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_Global(self, node: cst.Global) -> None:
        for n in node.names:
            self.scope.globals_.add(n.name.value)

    # --- imports -------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> bool:
        self.m.imports.add_import(node)
        for alias in node.names:
            text = dotted(alias.name)
            if text:
                self.m.references.append(Reference(alias.name, text, self.scope, "import", node))
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        self.m.imports.add_import_from(node)
        self.m.import_froms.append((node, self.scope))
        return False

    # --- bindings ------------------------------------------------------------------------
    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                # NB: tuple unpacking loses the pairing; record the whole value as unknown.
                self._bind(el.value, None)
            return
        if isinstance(target, cst.StarredElement):
            self._bind(target.value, None)
            return
        key = dotted(target)
        if key is None:
            return
        scope = self.scope
        head = key.split(".")[0]
        if "." not in key and head in scope.globals_:
            scope = self.m.module_scope
        values = scope.assignments.setdefault(key, [])
        if value is not None:
            values.append(value)
        # `self.x = v` in a method: class-wide attribute
        if "." in key and scope.self_name and head == scope.self_name and scope.cls is not None:
            attr = key.split(".", 1)[1]
            scope.cls.attributes.setdefault(attr, []).append((value, scope) if value is not None else (cst.Name("None"), scope))

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._bind(t.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node.value)
        if isinstance(node.target, cst.Name):
            self.scope.annotations.setdefault(node.target.value, node.annotation.annotation)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, None)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node.value)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target, None)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name, None)

    # --- uses ----------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        self.m.calls.append(CallSite(node, self.scope))

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        text = dotted(node)
        if text is None:
            return True
        if self.m.imports.qualify_text(text) is not None:
            self.m.references.append(Reference(node, text, self.scope))
        # Children of a dotted chain are names and attributes only: nothing more to see.
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if self.m.imports.qualify_text(node.value) is not None:
            self.m.references.append(Reference(node, node.value, self.scope))


class ModuleModel:
    """Facts about one module, gathered in one pass and queried by rules."""

    def __init__(self, module: cst.Module, path: str = "<string>", package: str | None = None, project=None) -> None:
        self.module = module
        self.path = path
        # The project index (amplint/project) through which names imported from the
        # project's other modules resolve; None when the module is analysed alone.
        self.project = project
        self.imports = ImportTable(package)
        self.module_scope = Scope(node=module, name="<module>", parent=None, model=self)
        self.scopes: list[Scope] = [self.module_scope]
        self.scope_of: dict[cst.CSTNode, Scope] = {module: self.module_scope}
        self.functions: dict[str, cst.FunctionDef] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.calls: list[CallSite] = []
        self.references: list[Reference] = []
        self.import_froms: list[tuple[cst.ImportFrom, Scope]] = []

    @classmethod
    def build(cls, module: cst.Module, path: str = "<string>", package: str | None = None, project=None) -> "ModuleModel":
        model = cls(module, path, package, project)
        # Imports first: a reference is kept when its head is an imported name.
        # NB: `walk`, not `module.visit`: libcst's visit rebuilds every node (analysis/walk.py).
        walk(module, _ImportPrepass(model))
        walk(module, _Collector(model))
        return model

    # --- derived views (computed on first use) ------------------------------------------
    @cached_property
    def text(self) -> str:
        """The module's code as text, generated once (`module.code` renders the tree again at
        every read; the evidence checks of the fixes read it per name)."""
        return self.module.code

    @cached_property
    def bindings(self):
        from amplint.analysis.bindings import Bindings

        return Bindings(self)

    @cached_property
    def deprecations(self):
        from amplint.analysis.deprecations import Deprecations

        return Deprecations(self)

    @cached_property
    def torch_names(self):
        from amplint.analysis.torch_names import TorchNames

        return TorchNames(self)

    @cached_property
    def options(self):
        from amplint.analysis.options import Options

        return Options(self)

    @cached_property
    def casts(self):
        from amplint.analysis.casts import Casts

        return Casts(self)

    @cached_property
    def steps(self):
        from amplint.analysis.steps import StepGraphs

        return StepGraphs(self)

    def qualify(self, expr: cst.BaseExpression | None) -> str | None:
        return self.imports.qualify(expr)

    def enclosing_class_method(self, cls: ClassInfo, name: str, _seen: frozenset = frozenset()) -> cst.FunctionDef | None:
        """A method by name on `cls` or on a base class defined in this module."""
        if name in cls.methods:
            return cls.methods[name]
        for base in cls.bases:
            info = self.classes.get(base.split(".")[-1])
            if info is not None and info.name not in _seen:
                found = self.enclosing_class_method(info, name, _seen | {cls.name})
                if found is not None:
                    return found
        return None

    def class_of_method(self, fn: cst.FunctionDef) -> ClassInfo | None:
        scope = self.scope_of.get(fn)
        return scope.cls if scope else None


class _ImportPrepass(cst.CSTVisitor):
    """Collects imports only; the main collector needs them before it meets references."""

    def __init__(self, model: ModuleModel) -> None:
        self.m = model

    def visit_Import(self, node: cst.Import) -> bool:
        self.m.imports.add_import(node)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        self.m.imports.add_import_from(node)
        return False

    # Expressions cannot contain imports; skipping them keeps this pass cheap.
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in node.body)
