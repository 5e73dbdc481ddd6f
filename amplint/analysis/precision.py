"""Where code runs in reduced precision: lexical autocast regions and fp16 evidence.

The step graph knows the autocast regions *events* run in.  The precision rules ask about
any expression (a `masked_fill`, a `.half()`, a `torch.log`) and about the module as a
whole ("does this file run in float16 at all?"), so this view records, in one extra
walk, the autocast regions that lexically enclose every call, assignment and division,
and gathers the module's float16 evidence once.

Lexical means: a region covers the statements of its `with` block and the body of a
function decorated with an autocast context; a function *defined* inside a `with`
block does not run there, so every function body starts outside any region.
"""

from __future__ import annotations

import os

import re
from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from amplint.analysis.bindings import AutocastInfo
from amplint.analysis.callees import is_external
from amplint.analysis.names import dotted
from amplint.analysis.torch_api import AUTOCAST_CONTEXTS, HALF_DTYPES, SCALER_CONSTRUCTORS, SHARDED_SCALER_CONSTRUCTORS
from amplint.analysis.walk import walk

FP16_MAX = 65504.0
# Names of loss scalers (`loss_scaler`, `grad_scaler`, `amp_scaler`, `scaler`), not of data scalers.
_SCALER_NAME = re.compile(r"^(?:loss_|grad_|amp_|fp16_|mixed_precision_)?scaler$", re.IGNORECASE)
_SCALER_CLASS = re.compile(r"(?:Native|Loss|Grad|Amp|Apex|Dynamic)\w*Scaler", re.IGNORECASE)


def precision_of(model) -> "Precision":
    """The model's precision view, built on first use and cached on the model."""
    view = model.__dict__.get("_amplint_precision")
    if view is None:
        view = Precision(model)
        model.__dict__["_amplint_precision"] = view
    return view


@dataclass(frozen=True, eq=False)
class LexicalRegion:
    info: AutocastInfo
    node: cst.CSTNode  # the `with` statement, or the autocast decorator of a function
    scope: object


def active_region(regions: tuple[LexicalRegion, ...]) -> LexicalRegion | None:
    """The innermost region that may be enabled, honouring nested `enabled=False` blocks."""
    disabled: set[str | None] = set()
    for region in reversed(regions):
        info = region.info
        if info.enabled is False:
            disabled.add(info.device)
            continue
        if None in disabled or info.device in disabled:
            continue
        return region
    return None


def may_run_fp16(info: AutocastInfo) -> bool:
    return info.may_be_enabled and not info.managed and info.may_be_fp16


class _RegionWalker(cst.CSTVisitor):
    def __init__(self, view: "Precision") -> None:
        self.v = view
        self.model = view.model
        self.scopes = [self.model.module_scope]
        self.stacks: list[list[LexicalRegion]] = [[]]
        self.statement: list[cst.CSTNode] = []

    @property
    def stack(self) -> list[LexicalRegion]:
        return self.stacks[-1]

    def _regions_for(self, expr: cst.BaseExpression, node: cst.CSTNode) -> list[LexicalRegion]:
        infos = self.model.bindings.autocast_of(expr, self.scopes[-1])
        if not infos:
            return []
        from amplint.analysis.steps import _merge_autocast

        region = LexicalRegion(_merge_autocast(infos), node, self.scopes[-1])
        self.v._regions.append(region)
        return [region]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for d in node.decorators:
            walk(d, self)
        scope = self.model.scope_of.get(node, self.scopes[-1])
        self.scopes.append(scope)
        fresh: list[LexicalRegion] = []
        for d in node.decorators:
            fresh += self._regions_for(d.decorator, d)
        self.stacks.append(fresh)
        walk(node.body, self)
        self.stacks.pop()
        self.scopes.pop()
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_With(self, node: cst.With) -> bool:
        pushed = 0
        for item in node.items:
            walk(item, self)
            found = self._regions_for(item.item, node)
            self.stack.extend(found)
            pushed += len(found)
        walk(node.body, self)
        for _ in range(pushed):
            self.stack.pop()
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.statement.append(node)

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self.statement.pop()

    def _record(self, node: cst.CSTNode) -> None:
        key = id(node)
        self.v.scope_of_node[key] = self.scopes[-1]
        if self.statement:
            self.v.statement_of[key] = self.statement[-1]
        if self.stack:
            self.v.regions_of_node[key] = tuple(self.stack)

    def visit_Call(self, node: cst.Call) -> None:
        self._record(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self._record(node)
        self.v._assigns.append(node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._record(node)
        self.v._augassigns.append(node)

    # fp16 options spelled as attributes or strings: `args.fp16`, `mixed_precision="fp16"`
    def visit_Attribute(self, node: cst.Attribute) -> None:
        if self.v._fp16_word is None and _names_fp16(node.attr.value):
            self.v._fp16_word = f"the module has an fp16 option (`{node.attr.value}`)"

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if self.v._fp16_word is None and len(node.value) < 16:
            value = node.evaluated_value
            if isinstance(value, str) and value.lower() in ("fp16", "float16", "--fp16"):
                self.v._fp16_word = f'the module names "{value}"'

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Divide):
            self._record(node)
            self.v._divisions.append(node)


class Precision:
    def __init__(self, model) -> None:
        self.model = model
        self._walked = False

    def _walk(self) -> None:
        """The one extra traversal, done only when a rule asks about lexical regions."""
        if self._walked:
            return
        self._walked = True
        self._regions: list[LexicalRegion] = []
        self.regions_of_node: dict[int, tuple[LexicalRegion, ...]] = {}
        self.statement_of: dict[int, cst.CSTNode] = {}
        self.scope_of_node: dict[int, object] = {}
        self._assigns: list[cst.Assign] = []
        self._augassigns: list[cst.AugAssign] = []
        self._divisions: list[cst.BinaryOperation] = []
        self._fp16_word: str | None = None
        walk(self.model.module, _RegionWalker(self))

    @property
    def regions(self) -> list[LexicalRegion]:
        self._walk()
        return self._regions

    @property
    def assigns(self) -> list[cst.Assign]:
        self._walk()
        return self._assigns

    @property
    def augassigns(self) -> list[cst.AugAssign]:
        self._walk()
        return self._augassigns

    @property
    def divisions(self) -> list[cst.BinaryOperation]:
        self._walk()
        return self._divisions

    # --- lexical regions -----------------------------------------------------------------
    def regions_of(self, node: cst.CSTNode) -> tuple[LexicalRegion, ...]:
        self._walk()
        return self.regions_of_node.get(id(node), ())

    def active(self, node: cst.CSTNode) -> LexicalRegion | None:
        return active_region(self.regions_of(node))

    def scope_of(self, node: cst.CSTNode):
        self._walk()
        return self.scope_of_node.get(id(node), self.model.module_scope)

    def statement(self, node: cst.CSTNode) -> cst.CSTNode | None:
        self._walk()
        return self.statement_of.get(id(node))

    # --- autocast anywhere in the module -------------------------------------------------
    @cached_property
    def autocast_sites(self) -> list[tuple[cst.Call, object, AutocastInfo]]:
        """Every call that builds or enters an autocast context (`with`, decorator, `ctx = ...`)."""
        out = []
        b = self.model.bindings
        for site in self.model.calls:
            func = site.node.func
            qual = self.model.qualify(func)
            if qual is not None and qual not in AUTOCAST_CONTEXTS and qual != "functools.partial" and (
                    "autocast" not in qual.lower() or is_external(qual, self.model.path)):
                continue  # a library call; a project's wrapper (`amp_utils.maybe_autocast`) is read
            if qual is None and not isinstance(func, (cst.Name, cst.Attribute)):
                continue
            for info in b.autocast_of(site.node, site.scope):
                out.append((site.node, site.scope, info))
        return out

    @cached_property
    def autocast_dtypes(self) -> frozenset[str] | None:
        """Union of the dtypes of every autocast context that may be enabled; None if one is unknown."""
        found: set[str] = set()
        for _, _, info in self.autocast_sites:
            if not info.may_be_enabled or info.managed:
                continue
            if info.dtypes is None:
                return None
            found |= info.dtypes
        return frozenset(found)

    @cached_property
    def bf16_where_supported(self) -> bool:
        """Every autocast that may be enabled runs bfloat16 on hardware that supports it:
        each is bf16, or picks bf16 by `torch.cuda.is_bf16_supported()` and falls back to
        float16 only on older GPUs (espnet2's module-level `autocast_args`)."""
        sites = [info for _, _, info in self.autocast_sites if info.may_be_enabled and not info.managed]
        if not sites or any(info.dtypes is None or not info.may_be_bf16 for info in sites):
            return False
        return all(info.dtypes == frozenset({"bfloat16"}) or info.bf16_where_supported for info in sites)

    # --- scalers -------------------------------------------------------------------------
    @cached_property
    def enabled_scaler(self) -> bool:
        """A GradScaler that is not literally `enabled=False` is built or used in the module."""
        b = self.model.bindings
        disabled_keys = set()
        for c in b.scaler_constructions:
            if c.enabled is False:
                if c.target is not None:
                    disabled_keys.add(b.key(cst.parse_expression(c.target), c.scope))
            else:
                return True
        return any(k not in disabled_keys for k in b.scaler_keys)

    @cached_property
    def scaler_wrapper(self) -> bool:
        """A project's own loss scaler: timm's `NativeScaler`, MAE's
        `NativeScalerWithGradNormCount`, a `loss_scaler` handed to the training function.

        They wrap `torch.amp.GradScaler` in another module, so the scaler is there even
        though this module never spells it.  sklearn's `StandardScaler` and friends do
        not match.
        """
        for scope in self.model.scopes:
            if any(_SCALER_NAME.search(p) for p in scope.params):
                return True
            for text, values in scope.assignments.items():
                if not _SCALER_NAME.search(text.split(".")[-1]):
                    continue
                if any(isinstance(v, cst.Call) and not self._torch_scaler(v) for v in values):
                    return True
        for site in self.model.calls:
            name = (dotted(site.node.func) or "").split(".")[-1]
            if _SCALER_CLASS.search(name) and not self._torch_scaler(site.node):
                return True
        return False

    def _torch_scaler(self, call: cst.Call) -> bool:
        """torch's own scalers are judged by `enabled_scaler` (a literal enabled=False is none)."""
        qual = self.model.qualify(call.func)
        return qual in SCALER_CONSTRUCTORS or qual in SHARDED_SCALER_CONSTRUCTORS

    # --- does this module run in float16? ------------------------------------------------
    @cached_property
    def fp16_evidence(self) -> str | None:
        """Why we believe the module's code runs in float16, or None.

        A linter that flags every `-1e9` in every model file is switched off within a
        day, yet the same constant is a crash in a model trained with fp16 autocast.  The
        module must say that it runs in float16 itself: an autocast context that may be
        float16 (cuda's default included), an enabled GradScaler (only fp16 needs one),
        `torch.float16`/`torch.half` or `.half()`, apex amp, or an `fp16` option
        (`args.fp16`, `mixed_precision="fp16"`); code under an option counts as if the
        option were on.  bfloat16 alone is no evidence: -1e9 fits bfloat16.
        """
        for _, _, info in self.autocast_sites:
            if may_run_fp16(info):
                return "the module uses float16 autocast"
        for c in self.model.bindings.scaler_constructions:
            if c.enabled is not False:
                return "the module builds a GradScaler"
        for ref in self.model.references:
            qual = self.model.imports.qualify_text(ref.text) or ""
            if HALF_DTYPES.get(qual) == "float16":
                return f"the module uses `{ref.text}`"
            if qual.startswith("apex.amp"):
                return "the module uses apex amp"
        for site in self.model.calls:
            func = site.node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "half" and not site.node.args:
                return "the module calls `.half()`"
        for scope in self.model.scopes:
            for text in scope.assignments:
                if _names_fp16(text):
                    return f"the module has an fp16 option (`{text}`)"
        return self._fp16_words

    @property
    def _fp16_words(self) -> str | None:
        self._walk()
        return self._fp16_word


def runs_autocast(model) -> bool:
    """The module enters an autocast context that may be enabled in a low dtype (not one that
    only asks for float32), or builds an enabled scaler."""
    view = precision_of(model)
    return view.enabled_scaler or any(info.may_reduce_precision for _, _, info in view.autocast_sites)


def may_run_autocast(text: str) -> bool:
    """What `ProjectIndex.runs_autocast` needs in a module's lowercased text before parsing it."""
    return "autocast" in text or "gradscaler" in text


def autocast_from_importers(model) -> tuple[str, bool] | None:
    """Where the code of this module may run under autocast entered elsewhere in the
    project: (path, True) for a module that imports it, directly or through others
    (`layers.py` applied in `model.py`'s forward, inside `engine.py`'s autocast);
    else (path, False) for any other module of the project that runs autocast (a
    library's training loop runs the models users plug in: speechbrain's `Brain`).
    None when nothing in the project does."""
    project = model.project
    if project is None:
        return None
    importers = project.importers_among(model.path, may_run_autocast)
    for path in importers:
        if project.runs_autocast(path):
            return path, True
    here = os.path.dirname(os.path.abspath(model.path))
    # the nearest first: a folder's own trainer before one elsewhere in a repository
    for path in sorted(project.project_files(model.path), key=lambda p: -len(os.path.commonpath((here, p)))):
        if path not in importers and project.runs_autocast(path):
            return path, False
    return None



def fp16_from_importers(model) -> str | None:
    """Why code of this module may run in float16 because the program that uses it trains
    in float16: it is reached, through imports, from a training module that enters
    float16 autocast (cuda's default included) or builds an enabled GradScaler (only
    float16 needs one), or from a module that imports such a trainer (`main.py` imports
    the trainer and the model: the model's forward runs in the trainer's autocast; a
    model whose base class in `model.py` holds the fp16 `fit()`).  None when nothing
    in the project does.

    Answered once per project, forward from its few float16 trainers (found by their
    text, then parsed), not backward from each model file: a model file asks a set."""
    project = model.project
    if project is None:
        return None
    here = os.path.abspath(model.path)
    files = project.project_files(model.path)
    if not files:
        return None
    memo: dict = project.__dict__.setdefault("_amplint_fp16_reach", {})
    key = files
    if key not in memo:
        memo.clear()  # one project at a time: the answer of the last one asked
        memo[key] = _fp16_reach(project, files)
    reason = memo[key].get(here)
    return reason


def _fp16_reach(project, files) -> dict[str, str]:
    """{module path: why it runs in float16} for every module reached from a float16
    trainer of the project or from a module that imports one."""
    trainers = []
    for path in files:
        text = project.raw_text(path)
        # A training module: it scales, or calls backward next to an autocast that may be
        # float16.  Models and utilities that merely mention autocast are not parsed.
        if text is None or not (
            "gradscaler" in text or ("autocast" in text and "backward" in text and ("float16" in text or "half" in text or "cuda.amp" in text))
        ):
            continue
        other = project.model_at(path)
        if other is not None and (
            any(may_run_fp16(info) for _, _, info in precision_of(other).autocast_sites)
            or any(c.enabled is not False for c in other.bindings.scaler_constructions)
        ):
            trainers.append(path)
    reach: dict[str, str] = {}
    for trainer in trainers:
        starts = [(trainer, f"`{os.path.basename(trainer)}`, which imports this module, trains in float16")]
        starts += [(user, f"`{os.path.basename(user)}` uses this module and `{os.path.basename(trainer)}`, which trains in float16")
                   for user in project.importers(trainer, depth=1)]
        for start, why in starts:
            level = {start}
            for _ in range(_FP16_REACH_DEPTH):
                following = set()
                for f in level:
                    for g in project.imported_files(f):
                        if g not in reach and g not in trainers:
                            reach[g] = why
                            following.add(g)
                level = following
                if not level:
                    break
    return reach


# How many imports deep a trainer's float16 reaches (trainer -> model -> layers -> attention).
_FP16_REACH_DEPTH = 4


def _names_fp16(text: str) -> bool:
    last = text.split(".")[-1].lower()
    return last == "fp16" or last.startswith("fp16_") or last.endswith("_fp16") or last in ("half_precision",)


# --- literals ------------------------------------------------------------------------


def number_of(expr: cst.BaseExpression | None) -> float | None:
    """The value of a float literal (`-1e9`, `1e5`, `-10000.0`), else None.

    Only floats: an integer fill (`-100`, `1_000_000`) usually targets an integer tensor
    (labels, ids), which has no fp16 range problem.
    """
    sign = 1.0
    node = expr
    while isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        if isinstance(node.operator, cst.Minus):
            sign = -sign
        node = node.expression
    if isinstance(node, cst.Float):
        try:
            return sign * float(node.value.replace("_", ""))
        except ValueError:
            return None
    return None


def overflows_fp16(value: float | None) -> bool:
    return value is not None and value == value and abs(value) != float("inf") and abs(value) > FP16_MAX



# --- conditions that select bfloat16 ---------------------------------------------------------

_BF16_STRINGS = frozenset({"bf16", "bfloat16", "bf16-mixed", "bf16-true", "torch.bfloat16"})
_FP16_STRINGS = frozenset({"fp16", "float16", "half", "16", "16-mixed", "fp16-mixed", "torch.float16"})


def selects_bf16(test: cst.BaseExpression | None, model, truth: bool = True) -> bool:
    """`test` evaluating to `truth` means the run is in bfloat16: a flag named for it
    (`args.bf16`, `use_bfloat16`), a dtype or precision compared with bfloat16 (`amp_dtype
    == torch.bfloat16`, `cfg.precision in ("bf16", "bf16-mixed")`), or compared unequal
    with float16 where the choice is between the two (`amp_dtype != torch.float16`, when
    `two_way`).  A call (`torch.cuda.is_bf16_supported()`) is the hardware's answer, not
    the run's choice, and says nothing."""
    if test is None:
        return False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return selects_bf16(test.expression, model, not truth)
    if isinstance(test, cst.BooleanOperation):
        left, right = selects_bf16(test.left, model, truth), selects_bf16(test.right, model, truth)
        both = isinstance(test.operator, cst.And) == truth  # `a and b` true: both hold
        return (left or right) if both else (left and right)
    if isinstance(test, (cst.Name, cst.Attribute)):
        last = (dotted(test) or "").rsplit(".", 1)[-1].lower()
        named = ("bf16" in last or "bfloat16" in last) and "fp16" not in last.replace("bf16", "")
        return truth and named
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        op = target.operator
        sides = (_dtype_word(test.left, model), _dtype_word(target.comparator, model))
        if isinstance(op, (cst.Equal, cst.Is)):
            return truth and "bf16" in sides
        if isinstance(op, (cst.NotEqual, cst.IsNot)):
            return not truth and "bf16" in sides
        if isinstance(op, cst.In) and isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set)):
            words = {_dtype_word(el.value, model) for el in target.comparator.elements}
            return truth and words == {"bf16"}
    return False


def _dtype_word(expr: cst.BaseExpression, model) -> str | None:
    """"bf16" or "fp16" for a literal that names one of them (a torch dtype, a string)."""
    qual = model.qualify(expr) or ""
    if qual in HALF_DTYPES:
        return "bf16" if HALF_DTYPES[qual] == "bfloat16" else "fp16"
    if isinstance(expr, cst.SimpleString) and isinstance(expr.evaluated_value, str):
        text = expr.evaluated_value.lower()
        return "bf16" if text in _BF16_STRINGS else "fp16" if text in _FP16_STRINGS else None
    return None


def scaler_only_for_bf16(call: cst.Call, scope, model) -> bool:
    """A GradScaler that exists, or is enabled, only when the run is in bfloat16: its
    `enabled=` selects bfloat16, or an `if` (or conditional expression) around its
    construction does (`if args.bf16: return GradScaler()`), in the function that builds
    it."""
    from amplint.analysis.bindings import call_arg
    from amplint.analysis.conditions import guarding_tests

    if selects_bf16(call_arg(call, None, "enabled"), model):
        return True
    return any(selects_bf16(test, model, truth) for test, truth in guarding_tests(scope.node, call) or ())
