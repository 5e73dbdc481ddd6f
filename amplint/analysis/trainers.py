"""Training done by another package's trainer: which modules a known trainer class trains.

A `transformers.Trainer` (and the trainers built on it: trl's `SFTTrainer`, sentence-
transformers' `SentenceTransformerTrainer`) builds its optimizer from the model it is
given and runs the whole training loop itself, out of sight of the code that configures
it.  So a module cast to float16 and handed to such a trainer is trained in float16
although no optimizer, backward or step is written in the project.  The project's own
code shows it in two ways:

- a subclass of a trainer (through project bases in other modules: trl's `SFTTrainer`
  derives from `_BaseTrainer`, which derives from `transformers.Trainer`): in its
  methods `self.model` / `self.model_wrapped`, the model it passes to
  `super().__init__(model=...)`, and what an `unwrap...` helper yields for them
  (`with unwrap_model_for_generation(self.model_wrapped) as unwrapped:`) are trained;
- a trainer built in the same function: `Trainer(model=model, ...)`.

Lightning and Accelerate are not here: their optimizers are written in the project
(`configure_optimizers`, `accelerator.prepare(model, optimizer)`), where the optimizer
analysis (casts.py) sees them.
"""

from __future__ import annotations

import re

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.syntax import call_arg
from amplint.analysis.walk import walk

# Qualified names of trainer classes that train the `model` they are given.
TRAINER_CLASS = re.compile(r"^(?:transformers|trl|sentence_transformers|setfit)\.(?:[\w.]+\.)?\w*Trainer$")
# Attributes of a trainer that hold the model it trains.
_MODEL_ATTRIBUTES = ("model", "model_wrapped")
# Methods a trainer subclass overrides whose loss the trainer then backpropagates and steps on.
TRAINING_HOOKS = frozenset({"compute_loss", "training_step"})


def trainer_base(cls) -> str | None:
    """The known trainer class (qualified) the project class `cls` (a ClassInfo) derives from."""
    from amplint.analysis.callees import project_symbol

    model = cls.model
    memo = model.__dict__.setdefault("_amplint_trainer_base", {})
    if id(cls) in memo:
        return memo[id(cls)]
    memo[id(cls)] = None  # a cycle of bases reads as none
    found = None
    for base in cls.bases:
        qual = model.imports.qualify_text(base)
        # NB: a class of the project first (trl's `_BaseTrainer`), whatever its name; an
        # imported trainer before a local class of the same name (the stand-in of
        # `try: from transformers import Trainer` / `except ImportError: class Trainer:`).
        symbol = project_symbol(qual, model) if qual is not None else None
        local = model.classes.get(base)
        if symbol is not None and symbol.kind == "class":
            found = next((q for q in model.project.external_bases(symbol.path, symbol.name) if TRAINER_CLASS.match(q)), None)
        elif symbol is None and qual is not None and TRAINER_CLASS.match(qual):
            found = qual
        elif local is not None and local is not cls:
            found = trainer_base(local)
        if found is not None:
            break
    memo[id(cls)] = found
    return found


def training_hook_of(scope) -> str | None:
    """The known trainer (qualified) whose training step runs `scope`: a `compute_loss` or
    `training_step` of a subclass, whose loss the trainer's backward and step take."""
    fn = scope.node
    if scope.cls is None or not isinstance(fn, cst.FunctionDef) or fn.name.value not in TRAINING_HOOKS:
        return None
    return trainer_base(scope.cls)


def trained_by_trainer(text: str, scope) -> str | None:
    """Why the module the dotted name `text` holds in `scope` is trained by a known
    trainer (a phrase for a note), or None."""
    cls = scope.cls
    base = trainer_base(cls) if cls is not None else None
    if base is not None:
        trained = _trainer_models(scope)
        if text in trained or text in _unwrapped_aliases(scope, trained):
            return f"`{cls.name}` is a `{base}`, which trains it"
    return handed_to_trainer(text, scope)


def handed_to_trainer(text: str, scope) -> str | None:
    """Why the module `text` holds is trained by a trainer built in the same function
    (`Trainer(model=model, ...)`), or None.  The trainer trains it whenever it runs, also
    after other training in that function (no export-after-training cast then)."""
    for site in scope.model.calls:
        if site.scope is not scope:
            continue
        trainer = trainer_constructed(site.node, scope)
        if trainer is not None and dotted(model_argument(site.node)) == text:
            return f"it is handed to `{trainer}`, which trains it"
    return None


def _trainer_models(scope) -> set[str]:
    """Names that hold the model a trainer subclass trains, as seen in one of its methods."""
    out = {f"{scope.self_name}.{attr}" for attr in _MODEL_ATTRIBUTES} if scope.self_name else set()
    for site in scope.model.calls:
        func = site.node.func
        if site.scope is scope and isinstance(func, cst.Attribute) and func.attr.value == "__init__" and _is_super(func.value):
            given = model_argument(site.node)
            if dotted(given) is not None:
                out.add(dotted(given))
    return out


def trainer_constructed(call: cst.Call, scope) -> str | None:
    """The trainer class a call constructs (`Trainer(...)`, a project subclass), else None."""
    from amplint.analysis.callees import ForeignClass, resolve_class

    qual = scope.model.qualify(call.func)
    if qual is not None and TRAINER_CLASS.match(qual):
        return qual
    if not isinstance(call.func, (cst.Name, cst.Attribute)):
        return None
    cls = resolve_class(call.func, scope.model)
    if isinstance(cls, ForeignClass):
        # NB: by the text of its module and bases: nothing is parsed for this question
        symbol = cls.symbol
        bases = symbol.index.external_bases(symbol.path, symbol.name)
        return dotted(call.func) if any(TRAINER_CLASS.match(q) for q in bases) else None
    return dotted(call.func) if cls is not None and trainer_base(cls) is not None else None


def model_argument(call: cst.Call) -> cst.BaseExpression | None:
    """`model=...` or the first positional argument (the trainers' first parameter), under
    the module-returning methods chained on it (`model.half()` is `model`)."""
    from amplint.analysis.torch_api import MODULE_RETURNING

    arg = call_arg(call, 0, "model")
    while isinstance(arg, cst.Call) and isinstance(arg.func, cst.Attribute) and arg.func.attr.value in MODULE_RETURNING:
        arg = arg.func.value
    return arg


def _is_super(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "super"


def _unwrapped_aliases(scope, trained: set[str]) -> set[str]:
    """Names bound to an `unwrap...` helper's view of a trained model: `with
    unwrap_model_for_generation(self.model_wrapped, ...) as m:`, `m = accelerator.unwrap_model(self.model)`."""
    out: set[str] = set()
    for text, values in scope.assignments.items():
        if any(_unwraps(v, trained) for v in values):
            out.add(text)
    collector = _WithAliases()
    walk(scope.node.body, collector)
    for name, item in collector.aliases:
        if _unwraps(item, trained):
            out.add(name)
    return out


def _unwraps(expr: cst.BaseExpression, trained: set[str]) -> bool:
    if not isinstance(expr, cst.Call):
        return False
    name = (dotted(expr.func) or "").split(".")[-1].lower()
    return "unwrap" in name and any(dotted(a.value) in trained for a in expr.args)


class _WithAliases(cst.CSTVisitor):
    """(`as` name, the context expression) of the `with` items of one function body."""

    def __init__(self) -> None:
        self.aliases: list[tuple[str, cst.BaseExpression]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None and dotted(node.asname.name) is not None:
            self.aliases.append((dotted(node.asname.name), node.item))
