"""Mixed precision configured through a framework: Accelerate, Lightning, transformers, DeepSpeed.

Users often do not write the loss scaling themselves; they ask a framework for it by a keyword
or a config file, and the framework scales the loss in float16 out of sight:

- Accelerate: `Accelerator(mixed_precision="fp16")` (or the old `fp16=True`): its
  `accelerator.backward(loss)` scales the loss and the optimizers it `prepare`s step through
  its own `GradScaler`;
- Lightning: `Trainer(precision="16-mixed")` (or the older `16` / `"16"`): the precision plugin
  scales the loss of `training_step` and of `manual_backward`, and steps through its scaler;
- transformers: `TrainingArguments(fp16=True)`: the `Trainer`'s training step scales;
- DeepSpeed: a config whose `fp16.enabled` is true (DeepSpeed's own loss scaler).

This module reads those settings, only where they are *literal*: a keyword given a literal
(or a name assigned literals only, or an argparse option whose every choice agrees), a dict
literal, or a JSON file the code names by a literal path, read as the project index reads
files (amplint/project/index.py `data_file`: next to the file, then at the project root).
`"auto"` and values decided at run time prove nothing, and nothing here guesses them.

It answers two questions:

- `scaling_framework_for(construction)`: the framework that already scales the loss a
  hand-made `GradScaler` scales too (AMP115);
- `precision_conflicts(model)`: calls that configure float16 and bfloat16 at once (AMP207).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.bindings import ScalerConstruction, call_arg
from amplint.analysis.names import dotted
from amplint.analysis.spread_kwargs import spread_keyword
from amplint.analysis.trainers import trainer_base
from amplint.analysis.values import value_branches
from amplint.analysis.walk import walk

ACCELERATOR = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
LIGHTNING_TRAINER = re.compile(r"^(?:pytorch_lightning|lightning(?:\.pytorch)?)\.(?:trainer\.(?:trainer\.)?)?Trainer$")
LIGHTNING_MODULE = re.compile(r"^(?:pytorch_lightning|lightning(?:\.pytorch)?)\.(?:core\.(?:module\.|lightning\.)?)?LightningModule$")
TRAINING_ARGUMENTS = re.compile(r"^(?:transformers|trl|sentence_transformers|setfit)\.(?:[\w.]+\.)?\w*TrainingArguments$")
DEEPSPEED_INITIALIZE = frozenset({"deepspeed.initialize"})
# Lightning's precision values that train in float16 with its GradScaler (not "16-true":
# a model cast to float16, no scaler; not "bf16-mixed").
LIGHTNING_FP16 = frozenset({"16-mixed", "16", 16})
# The keys of a DeepSpeed config's sections ("bfloat16" is the older spelling of "bf16").
_DS_FP16 = ("fp16",)
_DS_BF16 = ("bf16", "bfloat16")
# Methods that change a dict in place: a config a call changes is no longer its literal.
_MUTATORS = frozenset({"update", "pop", "popitem", "setdefault", "clear", "__setitem__", "__delitem__"})
# Calls that only read a config (print it, log it, dump it).
_READERS = frozenset({"print", "json.dump", "json.dumps", "pprint.pprint", "copy.deepcopy", "deepspeed.initialize"})
_MAX_DEPTH = 4


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()  # a value decided at run time (or not a literal)


@dataclass(frozen=True, eq=False)
class Fp16Scaling:
    """A framework configured to scale the loss in float16."""

    framework: str  # "Accelerate", "Lightning", "transformers"
    call: cst.Call  # Accelerator(...), Trainer(...), TrainingArguments(...)
    setting: str  # the keyword that asks for it, as written: `mixed_precision="fp16"`
    scope: object
    target: str | None  # the name the call's result is assigned to


@dataclass(frozen=True, eq=False)
class PrecisionConflict:
    """A call configured with float16 and bfloat16 both literally enabled."""

    call: cst.Call  # TrainingArguments(...) or deepspeed.initialize(...)
    consumer: str  # `TrainingArguments(...)`
    fp16: str  # where float16 is enabled, a phrase
    bf16: str
    related: tuple[cst.CSTNode, ...]  # the config's node in this module, when it is not in the call


# --- literal values ------------------------------------------------------------------------


def literal_values(expr: cst.BaseExpression | None, scope, model, depth: int = 0) -> frozenset | None:
    """Every Python literal (str, bool, int) `expr` may evaluate to, or None when one of its
    possibilities is not a literal.  Names are followed to what is assigned to them, and an
    argparse option to its choices (ValueResolver.strings)."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    found: set = set()
    for branch in value_branches(expr) if isinstance(expr, cst.IfExp) else [expr]:
        if isinstance(branch, cst.SimpleString):
            value = branch.evaluated_value
            if not isinstance(value, str):
                return None
            found.add(value)
        elif isinstance(branch, cst.Name) and branch.value in ("True", "False"):
            found.add(branch.value == "True")
        elif isinstance(branch, cst.Integer):
            found.add(int(branch.evaluated_value))
        elif isinstance(branch, (cst.Name, cst.Attribute)):
            assigned = model.bindings.values.assigned(branch, scope)
            if not assigned:
                strings = model.bindings.values.strings(branch, scope)  # an argparse option's choices
                if strings is None:
                    return None
                found |= strings
                continue
            for value, vscope in assigned:
                got = literal_values(value, vscope, vscope.model or model, depth + 1)
                if got is None:
                    return None
                found |= got
        else:
            return None
    return frozenset(found) if found else None


def _keyword(call: cst.Call, name: str, scope, model) -> list[tuple[cst.BaseExpression | None, object]]:
    """What `call` passes as `name`: [(expression, scope)] (None: not passed), one per dict a
    `**kwargs` spread may hold; [] when a spread cannot be read."""
    direct = call_arg(call, None, name)
    if direct is not None:
        return [(direct, scope)]
    spread = spread_keyword(call.args, name, scope, model.bindings.values)
    if spread is None:
        return [(None, scope)] if not any(a.star == "**" for a in call.args) else []
    return [(s.value, s.scope) for s in spread]


def _always(call: cst.Call, name: str, scope, model, accepted) -> cst.BaseExpression | None:
    """The expression passed as `name` when every value it may have is in `accepted`."""
    passed = _keyword(call, name, scope, model)
    if not passed:
        return None
    for expr, vscope in passed:
        values = literal_values(expr, vscope, vscope.model or model) if expr is not None else None
        if values is None or not values <= accepted or not values:
            return None
    return passed[0][0]


def _setting(call: cst.Call, name: str, expr: cst.BaseExpression, model) -> str:
    """The keyword as written (`mixed_precision="fp16"`), or as a `**` spread gives it."""
    if call_arg(call, None, name) is expr:
        return f"{name}={model.module.code_for_node(expr).strip()}"
    return f"**{{..., {name!r}: {model.module.code_for_node(expr).strip()}}}"


# --- frameworks that scale the loss in float16 ---------------------------------------------


def fp16_scaling(model) -> list[Fp16Scaling]:
    """Every call of this module that configures a framework to scale the loss in float16."""
    memo = model.__dict__.get("_amplint_fp16_scaling")
    if memo is not None:
        return memo
    targets = _assignment_targets(model)
    found: list[Fp16Scaling] = []
    for site in model.calls:
        call, scope = site.node, site.scope
        qual = model.qualify(call.func)
        if qual is None:
            continue
        hit: tuple[str, str, cst.BaseExpression] | None = None
        if qual in ACCELERATOR:
            expr = _always(call, "mixed_precision", scope, model, {"fp16"})
            if expr is not None:
                hit = ("Accelerate", "mixed_precision", expr)
            else:
                expr = _always(call, "fp16", scope, model, {True})  # before accelerate 0.9
                hit = ("Accelerate", "fp16", expr) if expr is not None else None
        elif LIGHTNING_TRAINER.match(qual):
            expr = _always(call, "precision", scope, model, LIGHTNING_FP16)
            hit = ("Lightning", "precision", expr) if expr is not None else None
        elif TRAINING_ARGUMENTS.match(qual):
            expr = _always(call, "fp16", scope, model, {True})
            hit = ("transformers", "fp16", expr) if expr is not None else None
        if hit is not None:
            framework, name, expr = hit
            found.append(Fp16Scaling(framework, call, _setting(call, name, expr, model), scope, targets.get(id(call))))
    model.__dict__["_amplint_fp16_scaling"] = found
    return found


def is_lightning_module(cls, model, _seen: frozenset = frozenset()) -> bool:
    """The class (a ClassInfo) derives from Lightning's `LightningModule` (through bases of this module)."""
    for base in cls.bases:
        qual = model.imports.qualify_text(base)
        if qual is not None and LIGHTNING_MODULE.match(qual):
            return True
        local = model.classes.get(base)
        if local is not None and local.name not in _seen and local is not cls:
            if is_lightning_module(local, model, _seen | {cls.name}):
                return True
    return False


def scaler_key(construction: ScalerConstruction, model) -> str | None:
    if construction.target is None:
        return None
    return model.bindings.key(cst.parse_expression(construction.target), construction.scope)


def scale_calls(model, key: str) -> list:
    """The `scaler.scale(...)` call sites of the scaler `key`."""
    return [
        site
        for site in model.calls
        if isinstance(site.node.func, cst.Attribute)
        and site.node.func.attr.value == "scale"
        and model.bindings.key(site.node.func.value, site.scope) == key
    ]


def scaling_framework_for(construction: ScalerConstruction, model) -> Fp16Scaling | None:
    """The framework that already scales in float16 the loss this hand-made scaler scales:

    - an fp16 `Accelerator` whose `backward` is given the scaler's scaled loss, or whose
      `prepare`d optimizer the scaler steps or unscales;
    - a Lightning `Trainer` of this module in float16 mixed precision, and the scaler is
      built and used by a `LightningModule`;
    - `TrainingArguments(fp16=True)` in this module, and the scaler is built and used by a
      subclass of a transformers `Trainer`.

    None for a scaler literally disabled or never used to scale."""
    if construction.enabled is False:
        return None
    key = scaler_key(construction, model)
    if key is None:
        return None
    scaled = scale_calls(model, key)
    if not scaled:
        return None
    configs = fp16_scaling(model)
    cls = getattr(construction.scope, "cls", None)
    for config in configs:
        if config.framework == "Accelerate" and config.target is not None:
            if _accelerator_takes_scaler(model, config, key, scaled):
                return config
        elif config.framework == "Lightning" and cls is not None and is_lightning_module(cls, model):
            return config
        elif config.framework == "transformers" and cls is not None and trainer_base(cls) is not None:
            return config
    return None


def _accelerator_takes_scaler(model, config: Fp16Scaling, key: str, scaled) -> bool:
    acc = model.bindings.key(cst.parse_expression(config.target), config.scope)
    scaled_ids = {id(site.node) for site in scaled}
    prepared = _prepared_keys(model, acc)
    for site in model.calls:
        func = site.node.func
        if not isinstance(func, cst.Attribute):
            continue
        receiver = model.bindings.key(func.value, site.scope)
        if func.attr.value == "backward" and receiver == acc:
            loss = call_arg(site.node, 0, "loss")
            if loss is not None and _holds_call(loss, scaled_ids, site.scope, model):
                return True
        elif func.attr.value in ("step", "unscale_") and receiver == key:
            opt = call_arg(site.node, 0, "optimizer")
            if opt is not None and model.bindings.key(opt, site.scope) in prepared:
                return True
    return False


def _holds_call(expr: cst.BaseExpression, ids: set[int], scope, model, depth: int = 0) -> bool:
    """`expr` is (or contains, or is a name assigned) one of the calls `ids`."""
    if depth > _MAX_DEPTH:
        return False
    found = _Contains(ids)
    walk(expr, found)
    if found.hit:
        return True
    if isinstance(expr, cst.Name):
        return any(_holds_call(v, ids, s, model, depth + 1) for v, s in model.bindings.values.assigned(expr, scope))
    return False


class _Contains(cst.CSTVisitor):
    def __init__(self, ids: set[int]) -> None:
        self.ids = ids
        self.hit = False

    def visit_Call(self, node: cst.Call) -> None:
        if id(node) in self.ids:
            self.hit = True


def _prepared_keys(model, acc: str | None) -> set[str]:
    """Keys of the names bound to what `acc.prepare(...)` returns (`model, opt = acc.prepare(model, opt)`)."""
    out: set[str] = set()
    if acc is None:
        return out
    finder = _PrepareTargets(model, acc)
    walk(model.module, finder)
    return finder.keys


class _PrepareTargets(cst.CSTVisitor):
    def __init__(self, model, acc: str) -> None:
        self.model = model
        self.acc = acc
        self.scopes = [model.module_scope]
        self.keys: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append(self.model.scope_of.get(node, self.scopes[-1]))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "prepare"):
            return
        if self.model.bindings.key(value.func.value, self.scopes[-1]) != self.acc:
            return
        for t in node.targets:
            for name in _target_texts(t.target):
                key = self.model.bindings.key(cst.parse_expression(name), self.scopes[-1])
                if key is not None:
                    self.keys.add(key)


def _target_texts(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [t for el in target.elements for t in _target_texts(el.value)]
    if isinstance(target, cst.StarredElement):
        return _target_texts(target.value)
    text = dotted(target)
    return [text] if text is not None else []


def _assignment_targets(model) -> dict[int, str]:
    """id() of an assigned value (each branch of it) -> the dotted name it is assigned to."""
    targets: dict[int, str] = {}
    for scope in model.scopes:
        for text, values in scope.assignments.items():
            for v in values:
                for b in value_branches(v):
                    targets[id(b)] = text
    return targets


# --- float16 and bfloat16 both enabled -----------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """Where a precision is enabled: a phrase, and the node of this module that holds it."""

    phrase: str
    node: cst.CSTNode | None


def precision_conflicts(model) -> list[PrecisionConflict]:
    """Calls that configure float16 and bfloat16 both, by literals: `TrainingArguments(fp16=True,
    bf16=True)`, or with a DeepSpeed config (a dict or a JSON file) whose `fp16` and `bf16`
    sections are both `enabled: true`, given to `TrainingArguments(deepspeed=...)` or to
    `deepspeed.initialize(config=...)`."""
    found: list[PrecisionConflict] = []
    for site in model.calls:
        call, scope = site.node, site.scope
        qual = model.qualify(call.func)
        if qual is None:
            continue
        fp16: list[_Source] = []
        bf16: list[_Source] = []
        if TRAINING_ARGUMENTS.match(qual):
            consumer = f"`{dotted(call.func) or 'TrainingArguments'}(...)`"
            for name, into in (("fp16", fp16), ("bf16", bf16)):
                expr = _always(call, name, scope, model, {True})
                if expr is not None:
                    into.append(_Source(f"`{_setting(call, name, expr, model)}`", None))
            ds = call_arg(call, None, "deepspeed")
        elif qual in DEEPSPEED_INITIALIZE:
            consumer = f"`{dotted(call.func) or 'deepspeed.initialize'}(...)`"
            ds = call_arg(call, None, "config") or call_arg(call, None, "config_params")
        else:
            continue
        if ds is not None:
            config = deepspeed_config(ds, scope, model)
            if config is not None:
                mapping, origin, node = config
                node = None if node is ds else node  # written in the call: the finding is there
                for keys, into in ((_DS_FP16, fp16), (_DS_BF16, bf16)):
                    for k in keys:
                        section = mapping.get(k)
                        if isinstance(section, dict) and section.get("enabled") is True:
                            into.append(_Source(f'`"{k}": {{"enabled": true}}` in {origin}', node))
        if fp16 and bf16:
            related = tuple(dict.fromkeys(s.node for s in (fp16[0], bf16[0]) if s.node is not None))
            found.append(PrecisionConflict(call, consumer, fp16[0].phrase, bf16[0].phrase, related))
    return found


def deepspeed_config(expr: cst.BaseExpression, scope, model, depth: int = 0):
    """(the config as a dict of literals, where it comes from (a phrase), its node in this
    module or None) for a DeepSpeed config given as a dict literal, a `dict(...)` call, a
    literal path of a JSON file, `json.load(open(<literal path>))`, or a name assigned one
    of these once and never changed in place; None otherwise."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, (cst.Dict, cst.Call)) and _is_dict_literal(expr, model):
        mapping = _literal_dict(expr, scope, model)
        return (mapping, "the DeepSpeed config", expr) if mapping is not None else None
    if isinstance(expr, cst.SimpleString) and isinstance(expr.evaluated_value, str):
        return _json_file(expr.evaluated_value, expr, model)
    if isinstance(expr, cst.Call) and model.qualify(expr.func) == "json.load":
        opened = call_arg(expr, 0, "fp")
        if isinstance(opened, cst.Call) and isinstance(opened.func, cst.Name) and opened.func.value == "open":
            path = call_arg(opened, 0, "file")
            if isinstance(path, cst.SimpleString) and isinstance(path.evaluated_value, str):
                return _json_file(path.evaluated_value, expr, model)
        return None
    if isinstance(expr, cst.Name):
        assigned = model.bindings.values.assigned(expr, scope)
        if len(assigned) != 1 or _changed_in_place(expr.value, assigned[0][1], model):
            return None
        value, vscope = assigned[0]
        if vscope.model is not None and vscope.model is not model:
            return None  # another module's config: its own check reads it
        return deepspeed_config(value, vscope, model, depth + 1)
    return None


def _is_dict_literal(expr: cst.BaseExpression, model) -> bool:
    if isinstance(expr, cst.Dict):
        return True
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "dict" and not model.module_scope.binds("dict")


def _literal_dict(expr: cst.BaseExpression, scope, model, depth: int = 0) -> dict | None:
    """A dict literal (or `dict(k=...)`) as a dict of literals; UNKNOWN for values that are not;
    None when its keys cannot all be read (a `**spread` may set any key)."""
    if depth > _MAX_DEPTH:
        return None
    out: dict = {}
    if isinstance(expr, cst.Dict):
        for el in expr.elements:
            if not isinstance(el, cst.DictElement) or not isinstance(el.key, cst.SimpleString):
                return None
            out[el.key.evaluated_value] = _literal_value(el.value, scope, model, depth)
        return out
    if isinstance(expr, cst.Call):
        for a in expr.args:
            if a.keyword is None:
                return None
            out[a.keyword.value] = _literal_value(a.value, scope, model, depth)
        return out
    return None


def _literal_value(expr: cst.BaseExpression, scope, model, depth: int):
    if _is_dict_literal(expr, model):
        inner = _literal_dict(expr, scope, model, depth + 1)
        return inner if inner is not None else UNKNOWN
    values = literal_values(expr, scope, model)
    if values is not None and len(values) == 1:
        return next(iter(values))
    return UNKNOWN


def _json_file(relative: str, node: cst.CSTNode, model):
    if not relative.endswith(".json") or model.project is None:
        return None
    got = model.project.data_file(model.path, relative)
    if got is None:
        return None
    try:
        data = json.loads(got[1])
    except ValueError:
        return None
    return (data, f"`{relative}`", None) if isinstance(data, dict) else None


def _changed_in_place(name: str, scope, model) -> bool:
    """The dict held by the local `name` may be changed after it is built: an item assigned or
    deleted (`cfg["bf16"]["enabled"] = False`), a mutating method called (`cfg.update(...)`),
    or the dict handed to a function that may change it (anything but a reader or a consumer)."""
    finder = _InPlace(name, model)
    body = scope.node.body if isinstance(scope.node, cst.FunctionDef) else scope.node
    walk(body, finder)
    return finder.changed


class _InPlace(cst.CSTVisitor):
    def __init__(self, name: str, model) -> None:
        self.name = name
        self.model = model
        self.changed = False

    def _roots_at_name(self, target: cst.BaseExpression) -> bool:
        while isinstance(target, (cst.Subscript, cst.Attribute)):
            target = target.value
        return isinstance(target, cst.Name) and target.value == self.name

    def _is_item(self, target: cst.BaseExpression) -> bool:
        return isinstance(target, (cst.Subscript, cst.Attribute)) and self._roots_at_name(target)

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(self._is_item(t.target) for t in node.targets):
            self.changed = True

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if self._is_item(node.target):
            self.changed = True

    def visit_Del(self, node: cst.Del) -> None:
        if self._is_item(node.target):
            self.changed = True

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _MUTATORS and self._roots_at_name(func.value):
            self.changed = True
            return
        qual = self.model.qualify(func) or (func.value if isinstance(func, cst.Name) else None)
        if qual in _READERS or (qual is not None and TRAINING_ARGUMENTS.match(qual)):
            return
        for a in node.args:
            if self._roots_at_name(a.value) or (isinstance(a.value, cst.Name) and a.value.value == self.name):
                self.changed = True


# --- Lightning's precision, as the project configures it ----------------------------------------

# Lightning precisions that need no loss scale: nothing scales the gradients an
# `on_after_backward` hook reads.
_LIGHTNING_UNSCALED = frozenset({"bf16", "bf16-mixed", "bf16-true", "32", "32-true", "64", "64-true",
                                 "transformer-engine"})
_YAML_PRECISION = re.compile(r"^[ \t]*(?:trainer\.)?precision[ \t]*:[ \t]*['\"]?([^'\"#\s]*)", re.MULTILINE)
_PY_PRECISION = re.compile(r"\bprecision[ \t]*=[ \t]*([^,)\n]+)")
_PY_LITERAL = re.compile(r"^['\"]?([\w-]+)['\"]?$")


def lightning_may_scale_in_fp16(model) -> bool:
    """Could the project's Lightning Trainer run with a loss scale (`16-mixed`)?

    False only on positive evidence: the project sets the Trainer's precision somewhere (a
    `precision:` key of its YAML configs, as Hydra and the Lightning CLI read them; a
    `precision=` keyword on the line of a `Trainer(` / `Fabric(` call) and every value set is
    one that scales nothing (bf16, 32, 64).  A value decided at run time (`precision=args.p`,
    `${oc.env:...}`) or none found at all: it may be float16."""
    project = getattr(model, "project", None)
    if project is None:
        return True
    values: list[str | None] = []
    for path in project.config_files(model.path):
        text = project.raw_text(path)
        if text and "precision" in text:
            values.extend(m.group(1) or None for m in _YAML_PRECISION.finditer(text))
    for path in project.project_files(model.path):
        text = project.raw_text(path)
        if not text or "precision" not in text or not ("trainer(" in text or "fabric(" in text):
            continue
        for line in text.splitlines():
            if "precision" in line and ("trainer(" in line or "fabric(" in line):
                for m in _PY_PRECISION.finditer(line):
                    literal = _PY_LITERAL.match(m.group(1).strip())
                    values.append(literal.group(1) if literal else None)
    return not values or any(v is None or v not in _LIGHTNING_UNSCALED for v in values)
