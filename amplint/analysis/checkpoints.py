"""What a checkpoint holds: model, optimizer, scaler or training-progress state.

Used by AMP106.  `torch.save(payload, path)`'s payload is read through dict literals,
`dict(...)`, names assigned in the function (`ckpt = {...}; ckpt["scaler"] = ...;
ckpt.update(...)`) and, for a same-module helper `save_checkpoint(state, path)`, the
argument at the call site.  Anything we cannot see through (`**extra`, a value returned
by another function) makes the payload UNKNOWN, and an unknown payload is never
reported: it may hold the scaler.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

import re

from amplint.analysis.callees import classes_deriving_in_importers, resolve_call
from amplint.analysis.names import dotted
from amplint.analysis.step_kinds import Kind
from amplint.analysis.syntax import argument_for, call_arg, returned_values
from amplint.analysis.walk import walk

MODEL = "model"
OPTIMIZER = "optimizer"
SCALER = "scaler"
PROGRESS = "progress"  # epoch, step, scheduler: what a resumable checkpoint carries
UNKNOWN = "unknown"

_MAX_DEPTH = 6

# Checkpoint writes: `torch.save(obj, f)` and torch.distributed.checkpoint's
# `save(state_dict, ...)` / `save_state_dict(state_dict, ...)` (a sharded FSDP checkpoint).
WRITES = frozenset(
    {
        "torch.save",
        "torch.distributed.checkpoint.save",
        "torch.distributed.checkpoint.save_state_dict",
        "torch.distributed.checkpoint.state_dict_saver.save",
        "torch.distributed.checkpoint.state_dict_saver.save_state_dict",
        "torch.distributed._shard.checkpoint.save_state_dict",  # the module's earlier name
    }
)
# `accelerator.save(obj, f)` (Accelerate's torch.save on the main process), by its receiver.
ACCELERATE_SAVE = "accelerate.Accelerator.save"
# FSDP's consolidated or sharded optimizer state (`FSDP.full_optim_state_dict(model, optim)`).
_FSDP = ("torch.distributed.fsdp.FullyShardedDataParallel", "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel")
_OPTIMIZER_STATE = frozenset(
    f"{cls}.{fn}"
    for cls in _FSDP
    for fn in ("full_optim_state_dict", "optim_state_dict", "sharded_optim_state_dict", "scatter_full_optim_state_dict")
) | {"torch.distributed.checkpoint.state_dict.get_optimizer_state_dict"}


def _payload_arg(call: cst.Call) -> cst.BaseExpression | None:
    """What a write writes: `torch.save(obj, ...)`, `dcp.save(state_dict, ...)`."""
    return call_arg(call, 0, "obj") or call_arg(call, None, "state_dict")


@dataclass(frozen=True)
class Payload:
    parts: frozenset[str]

    @property
    def known(self) -> bool:
        return UNKNOWN not in self.parts

    @property
    def is_training_checkpoint(self) -> bool:
        """Resumable training state: optimizer state, or model state with progress.

        A bare `torch.save(model.state_dict(), "best.pt")` is an export of weights, not
        a checkpoint to resume from, and is not one.
        """
        return OPTIMIZER in self.parts or (MODEL in self.parts and PROGRESS in self.parts)

    @property
    def has_scaler(self) -> bool:
        return SCALER in self.parts


def _key_part(key: str) -> str | None:
    k = key.lower()
    if "scaler" in k or k in ("amp", "amp_state"):
        return SCALER
    if "optim" in k:
        return OPTIMIZER
    if any(w in k for w in ("sched", "epoch", "step", "iter")):
        return PROGRESS
    if any(w in k for w in ("model", "state_dict", "net", "weights", "params")):
        return MODEL
    return None


# A payload part (and an event qualname) meaning "judged by the helper's name and its
# arguments": the helper's code could not be read (a module outside the project).
BY_NAME = "by-name"
_SAVER = re.compile(r"^_*(?:save|write|dump)_?(?:checkpoint|ckpt|training_state|train_state|state)s?$|^checkpoint_?save$", re.I)
_BUILDER = re.compile(r"^_*(?:create|make|build|get|prepare)_?(?:checkpoint|ckpt|training_state|train_state)(?:_dict|_state)?$", re.I)


def saves_checkpoint_by_name(call: cst.Call) -> bool:
    """`save_checkpoint(...)`, `utils.save_ckpt(...)`: a function (not a method of an object) so named."""
    return _function_name_matches(call, _SAVER)


def builds_checkpoint_by_name(call: cst.Call) -> bool:
    return _function_name_matches(call, _BUILDER)


def _function_name_matches(call: cst.Call, pattern: re.Pattern) -> bool:
    func = call.func
    if isinstance(func, cst.Name):
        return pattern.match(func.value) is not None
    return False


def unresolvable(call: cst.Call, scope) -> bool:
    """The callee's code cannot be had: a name imported from a module that is not in the
    project (or not found there), not one of the libraries amplint knows."""
    from amplint.analysis.callees import is_external, project_symbol

    model = scope.model
    func = call.func
    name = func.value if isinstance(func, cst.Name) else None
    if name is None or name in model.functions or name in model.classes or scope.binds(name):
        return False
    qual = model.imports.qualify_text(name)
    if qual is None:
        return False  # not imported at all: a builtin or a star import; nothing to judge by
    if is_external(qual, model.path):
        return False
    return model.project is None or project_symbol(qual, model) is None


class _Mutations(cst.CSTVisitor):
    """`name[key] = value` and `name.update(...)` inside one function body."""

    def __init__(self, name: str, nested: bool = False) -> None:
        self.name = name
        self.nested = nested  # also `name[uid][key] = value` (a registry per agent)
        self.items: list[tuple[cst.BaseExpression | None, cst.BaseExpression | None]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # nested functions have their own locals

    def _names_it(self, value: cst.BaseExpression) -> bool:
        if dotted(value) == self.name:
            return True
        return self.nested and isinstance(value, cst.Subscript) and dotted(value.value) == self.name

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            target = t.target
            if isinstance(target, cst.Subscript) and self._names_it(target.value):
                index = target.slice[0].slice if target.slice else None
                key = index.value if isinstance(index, cst.Index) else None
                self.items.append((key, node.value))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("update", "setdefault") and dotted(func.value) == self.name:
            if func.attr.value == "setdefault" and node.args:
                self.items.append((node.args[0].value, node.args[1].value if len(node.args) > 1 else None))
                return
            for a in node.args:
                if a.keyword is not None:
                    self.items.append((cst.SimpleString(repr(a.keyword.value)), a.value))
                else:
                    self.items.append((None, a.value))


class _Numbering(cst.CSTVisitor):
    """Pre-order index of every node: source order without computing positions."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.index[id(node)] = len(self.index)
        return True


class Checkpoints:
    def __init__(self, model) -> None:
        self.model = model
        self.b = model.bindings
        self._order_cache: dict[int, int] | None = None
        # Values being described, outermost first: `save_obj = {**save_obj, "ema": ...}` names
        # itself, and its spread stands for the name's *other* values, not for itself again.
        self._describing: set[int] = set()

    def payload(self, event) -> Payload:
        """What the `torch.save` of a SAVE event writes (for a helper judged by its name,
        what its arguments hold)."""
        if event.qualname == BY_NAME:
            return Payload(frozenset(self._arguments(event.node, event.scope)))
        forwarded = self._forwarded(event)
        if forwarded is not None:
            return Payload(frozenset(self._describe(forwarded, self._caller_scope(event), 1)))
        expr = _payload_arg(event.node)
        parts = self._describe(expr, event.scope, 0, event)
        return Payload(frozenset(parts))

    def _forwarded(self, event) -> cst.BaseExpression | None:
        """The caller's first positional argument, when the write inside a helper forwards
        the helper's `*args` (`def save_on_master(*args, **kwargs): torch.save(*args, **kwargs)`)."""
        if not event.inlined or len(event.via) != 1 or not event.node.args:
            return None
        first = event.node.args[0]
        fn = event.scope.node
        if first.star != "*" or not isinstance(fn, cst.FunctionDef) or not isinstance(fn.params.star_arg, cst.Param):
            return None
        if not isinstance(first.value, cst.Name) or first.value.value != fn.params.star_arg.name.value or fn.params.params:
            return None
        return call_arg(event.anchor, 0, None)

    def handed_in(self, event) -> bool:
        """The payload a write inside a helper writes is one of the helper's parameters,
        whole (`def save_checkpoint(state, path): torch.save(state, path)`): the caller
        built it, and the caller is where the scaler is missing.  A payload the helper
        builds (from its parameters, its object's attributes) is the helper's own."""
        if event.qualname == BY_NAME or self._forwarded(event) is not None:
            return True
        scope = event.scope
        expr = _payload_arg(event.node)
        for _ in range(_MAX_DEPTH):
            if not isinstance(expr, cst.Name):
                return False
            if expr.value in scope.params:
                return True
            values = self.b.values.assigned(expr, scope)
            if len(values) != 1:
                return False
            expr, scope = values[0]
        return False

    def _arguments(self, call: cst.Call, scope) -> set[str]:
        """The state a call's arguments carry: `save_checkpoint(model, optimizer, epoch, path)`."""
        out: set[str] = set()
        for a in call.args:
            value = a.value
            if a.star:
                # `**extras` built in sight (`extras = {"nc": nc, "date": ...}`) holds what
                # its keys say; anything else may hold anything, the scaler included.
                spread = self._describe(value, scope, 1)
                if UNKNOWN in spread:
                    return {UNKNOWN}
                out |= spread
                continue
            if a.keyword is not None:
                part = _key_part(a.keyword.value)
                if part is not None:
                    out.add(part)
            if isinstance(value, (cst.Dict, cst.Call)):
                out |= self._describe(value, scope, 1) - {UNKNOWN}
            elif isinstance(value, (cst.Name, cst.Attribute)):
                if self.b.is_scaler(value, scope):
                    out.add(SCALER)
                elif self.b.is_optimizer(value, scope):
                    out.add(OPTIMIZER)
                else:
                    part = _key_part((dotted(value) or "").split(".")[-1])
                    if part is not None:
                        out.add(part)
        return out

    # --- describing expressions ----------------------------------------------------------
    def _describe(self, expr, scope, depth: int, event=None) -> set[str]:
        if expr is None or depth > _MAX_DEPTH:
            return {UNKNOWN}
        if isinstance(expr, cst.Dict):
            out: set[str] = set()
            for el in expr.elements:
                if isinstance(el, cst.StarredDictElement):
                    out |= self._spread(el.value, scope, depth, event)
                    continue
                out |= self._item(el.key, el.value, scope, depth)
            return out
        if isinstance(expr, cst.Call):
            return self._call(expr, scope, depth, event)
        if isinstance(expr, (cst.Name, cst.Attribute)):
            return self._name(expr, scope, depth, event)
        if isinstance(expr, (cst.Tuple, cst.List)):
            out = set()
            for el in expr.elements:
                out |= self._describe(el.value, scope, depth + 1, event)
            return out
        if isinstance(expr, cst.DictComp):
            return self._registry(expr, scope, depth)
        if isinstance(expr, cst.IfExp):
            # `opt.state_dict() if exists(opt) else None`: what either branch holds
            return self._describe(expr.body, scope, depth + 1, event) | self._describe(expr.orelse, scope, depth + 1, event)
        if isinstance(expr, cst.Name) and expr.value == "None":
            return set()
        return {UNKNOWN}

    def _spread(self, value, scope, depth: int, event) -> set[str]:
        """`{**base, ...}` / `dict(..., **kwargs)`: what the spread mapping holds.

        The function's own `**kwargs` parameter is the caller's extra metadata (DALLE2's
        `trainer.save(path, epoch=e, **metadata)`): it holds what this module's calls of
        the function pass by keyword, and nothing is known only where one of them spreads
        a mapping again or passes the scaler."""
        fn = scope.node
        params = fn.params if isinstance(fn, cst.FunctionDef) else None
        star = params.star_kwarg if params is not None else None
        if isinstance(value, cst.Name) and isinstance(star, cst.Param) and star.name.value == value.value \
                and not (event is not None and event.inlined):
            out: set[str] = set()
            for site in self.model.calls:
                func = site.node.func
                name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
                if name != fn.name.value:
                    continue
                for a in site.node.args:
                    if a.star == "**":
                        return {UNKNOWN}
                    if a.keyword is not None:
                        part = _key_part(a.keyword.value)
                        if part == SCALER or self.b.is_scaler(a.value, site.scope):
                            return {SCALER}
                        if part is not None:
                            out.add(part)
            return out
        # NB: a spread adds no depth of its own (the name it spreads does): a payload grown
        # by `{**save_obj, key: ...}` in a loop and again under an option stays readable.
        return self._describe(value, scope, depth, event)

    def _registry(self, comp: cst.DictComp, scope, depth: int) -> set[str]:
        """`{name: m.state_dict() for name, m in self.checkpoint_modules.items()}`: a payload
        built from a registry the class fills (`self.checkpoint_modules["optimizer"] =
        self.optimizer`), in its own methods and in those of its subclasses in modules that
        import it (a base agent's checkpoint, filled by PPO's and SAC's constructors)."""
        iterable = comp.for_in.iter
        if (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)
                and iterable.func.attr.value in ("items", "values")):
            iterable = iterable.func.value
        nested = isinstance(iterable, cst.Subscript)  # `self.checkpoint_modules[uid].items()`
        if nested:
            iterable = iterable.value
        text = dotted(iterable) or ""
        cls = getattr(scope, "cls", None)
        head, _, attr = text.partition(".")
        if cls is None or head != scope.self_name or not attr or "." in attr:
            if isinstance(comp.value, (cst.DictComp, cst.Dict)):
                return self._describe(comp.value, scope, depth + 1)  # `{uid: {...registry...} for uid in agents}`
            return {UNKNOWN}
        out: set[str] = set()
        found = False
        for klass in (cls, *classes_deriving_in_importers(self.model, {cls.name})):
            for method in getattr(klass, "methods", {}).values():
                params = method.params.params
                if not params:
                    continue
                mutations = _Mutations(f"{params[0].name.value}.{attr}", nested=nested)
                walk(method.body, mutations)
                for key, value in mutations.items:
                    found = True
                    if klass is cls and key is not None:
                        out |= self._item(key, value, scope, depth)
                        continue
                    part = _key_part(key.evaluated_value) if isinstance(key, cst.SimpleString) and isinstance(
                        key.evaluated_value, str) else None
                    if part is not None:
                        out.add(part)
                    if "scaler" in (dotted(value) or "").lower():
                        out.add(SCALER)  # NB: another module's value, judged by its name
        if not found and isinstance(comp.value, (cst.DictComp, cst.Dict)):
            return self._describe(comp.value, scope, depth + 1)  # `{uid: {...registry...} for uid in self.agents}`
        return out if found else {UNKNOWN}

    def _item(self, key, value, scope, depth: int) -> set[str]:
        out: set[str] = set()
        if isinstance(key, cst.SimpleString):
            part = _key_part(key.evaluated_value if isinstance(key.evaluated_value, str) else "")
            if part is not None:
                out.add(part)
        if isinstance(value, cst.Dict):
            out |= self._describe(value, scope, depth + 1)
        elif isinstance(value, cst.Call):
            got = self._call(value, scope, depth + 1, None)
            out |= got - {UNKNOWN}  # an opaque value under a known key says nothing about the scaler
            if SCALER in got:
                out.add(SCALER)
        elif isinstance(value, (cst.Name, cst.Attribute)) and self.b.is_scaler(value, scope):
            out.add(SCALER)
        elif isinstance(value, cst.Name) and value.value != "None" and value.value not in scope.params:
            # `optimizer_state_dict = optimizer.state_dict() if ... else None` under a key
            got = self._name(value, scope, depth + 1, None)
            out |= got - {UNKNOWN}
            if SCALER in got:
                out.add(SCALER)
        return out

    def _call(self, call: cst.Call, scope, depth: int, event) -> set[str]:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "state_dict":
            receiver = func.value
            if self.b.is_scaler(receiver, scope):
                return {SCALER}
            if _owns_a_scaler(receiver, scope):
                # An optimizer wrapper or precision plugin that builds its own scaler: whether
                # its state_dict carries the scale is AMP110's question, asked at its class.
                return {OPTIMIZER, SCALER}
            if self.b.is_optimizer(receiver, scope):
                return {OPTIMIZER}
            text = (dotted(receiver) or "").lower()
            if "sched" in text:
                return {PROGRESS}
            if "scaler" in text:
                return {SCALER}
            return {MODEL}
        qual = scope.model.qualify(func) if getattr(scope, "model", None) is not None else None
        if qual in _OPTIMIZER_STATE:
            return {OPTIMIZER}
        if qual in _DATACLASS_VIEWS and call.args:
            # `asdict(Snapshot(model=..., optimizer=...))`, `dataclasses.replace(snap, epoch=e)`:
            # what the instance holds, and the fields `replace` sets
            out = self._describe(call.args[0].value, scope, depth + 1, event)
            for a in call.args[1:]:
                if a.keyword is not None:
                    out |= self._item(cst.SimpleString(repr(a.keyword.value)), a.value, scope, depth)
                elif a.star:
                    out |= self._describe(a.value, scope, depth + 1, event)
            return out
        fields = _dataclass_fields(func, scope)
        if fields is not None:
            # `Snapshot(model=model.state_dict(), optimizer=opt.state_dict(), epoch=e)`: a
            # dataclass instance holds its fields, named as its keyword arguments are
            out = set()
            positional = iter(fields)
            for a in call.args:
                if a.star:
                    out |= self._describe(a.value, scope, depth + 1, event)
                    continue
                key = a.keyword.value if a.keyword is not None else next(positional, None)
                if key is None:
                    return {UNKNOWN}
                out |= self._item(cst.SimpleString(repr(key)), a.value, scope, depth)
            return out
        if isinstance(func, cst.Name) and func.value == "dict":
            out: set[str] = set()
            for a in call.args:
                if a.keyword is not None:
                    out |= self._item(cst.SimpleString(repr(a.keyword.value)), a.value, scope, depth)
                elif a.star == "**":
                    out |= self._spread(a.value, scope, depth, event)
                else:
                    out |= self._describe(a.value, scope, depth + 1, event)
            return out
        callee = resolve_call(call, scope)
        if callee is not None and callee.scope is not None:
            # `ckpt = build_checkpoint(model, optimizer, epoch)` of the project: what it returns
            returned = returned_values(callee.fn)
            if not returned:
                return {UNKNOWN}
            out = set()
            for value in returned:
                out |= self._describe(value, callee.scope, depth + 1)
            return out
        if builds_checkpoint_by_name(call) and unresolvable(call, scope):
            # yolov5's `ckpt = create_checkpoint(epoch, model, optimizer, ...)` from a module
            # amplint cannot read: judged by its arguments (AMP106 says so in a note).
            return self._arguments(call, scope) | {BY_NAME}
        return {UNKNOWN}

    def _name(self, expr, scope, depth: int, event) -> set[str]:
        text = dotted(expr)
        if isinstance(expr, cst.Name) and expr.value in scope.params and event is not None and event.inlined:
            arg = self._argument_for(event, scope, expr.value)
            if arg is not None:
                return self._describe(arg, self._caller_scope(event), depth + 1)
        if self.b.is_scaler(expr, scope):
            return {SCALER}
        values = self.b.values.assigned(expr, scope)
        if event is not None and len(values) > 1:
            values = self._reaching(values, event.node)
        if not values:
            return {UNKNOWN}
        out: set[str] = set()
        for value, vscope in values:
            if id(value) in self._describing:
                continue  # the value that spreads this name into itself: already being described
            self._describing.add(id(value))
            try:
                out |= self._describe(value, vscope, depth + 1)
            finally:
                self._describing.discard(id(value))
        if text is not None:
            mutations = _Mutations(text)
            body = scope.node.body if isinstance(scope.node, cst.FunctionDef) else scope.node
            walk(body, mutations)
            for key, value in mutations.items:
                if key is None:
                    out |= self._describe(value, scope, depth + 1)
                else:
                    out |= self._item(key, value, scope, depth)
        return out

    def _reaching(self, values, use: cst.CSTNode):
        """The assignment that last precedes `use` in source order, when there is one.

        `checkpoint = torch.load(...)` at the top of a script and `checkpoint = {...}`
        just before `torch.save(checkpoint, ...)` are two values; the save writes the
        second.  Source order is a flow-insensitive stand-in for reaching definitions
        (a loop can carry a later assignment around), which is good enough here.
        """
        order = self._order()
        at = order.get(id(use))
        if at is None:
            return values
        before = [(order.get(id(v), -1), v, s) for v, s in values if order.get(id(v), -1) < at]
        if not before:
            return values
        _, value, scope = max(before, key=lambda t: t[0])
        return [(value, scope)]

    def _order(self) -> dict[int, int]:
        if self._order_cache is None:
            numbering = _Numbering()
            self.model.module.visit(numbering)
            self._order_cache = numbering.index
        return self._order_cache

    # --- helpers called with the payload -------------------------------------------------
    def _caller_scope(self, event):
        """The analysed function's scope (the graph's), where the anchor call is written."""
        return getattr(event, "graph_scope", None) or self._scope_of_call(event.anchor)

    def _scope_of_call(self, call: cst.Call):
        for site in self.model.calls:
            if site.node is call:
                return site.scope
        return self.model.module_scope

    def _argument_for(self, event, scope, param: str):
        """The argument the anchor call passes for `param` of the inlined function."""
        fn = scope.node
        if not isinstance(fn, cst.FunctionDef) or len(event.via) != 1:
            return None  # only one level of helper: deeper chains rename too much to follow
        return argument_for(event.anchor, scope, param)

    def keeps_scaler_state(self, disabled=lambda key: False) -> bool:
        """Somewhere in the module a scaler's state is taken or restored (`x.scaler.state_dict()`,
        `scaler.load_state_dict(...)`) for a scaler that is not literally disabled.

        A module that checkpoints a scaler this way treats it as part of the training state,
        even when the scaler steps elsewhere (a Trainer whose scaler lives in
        `self.accelerator.scaler` and steps inside Accelerate): its other checkpoints that
        leave the scaler out are the inconsistency AMP106 is about.
        """
        for site in self.model.calls:
            func = site.node.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in ("state_dict", "load_state_dict")
                and self.b.is_scaler(func.value, site.scope)
                and not disabled(self.b.key(func.value, site.scope))
            ):
                return True
        return False

    # --- loading -------------------------------------------------------------------------
    def loads_nothing_into_a_scaler(self) -> bool:
        """No `scaler.load_state_dict(...)` anywhere in the module (any function, any path)."""
        for site in self.model.calls:
            func = site.node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict" and self.b.is_scaler(func.value, site.scope):
                return False
        return True

    def resumes_optimizer(self, event) -> bool:
        """A LOAD event that restores an optimizer from a checkpoint file (also inside a helper)."""
        if event.kind is not Kind.LOAD or event.optimizer is None:
            return False
        return self._from_file(call_arg(event.node, 0, "state_dict"), event.scope, 0)

    def _from_file(self, expr, scope, depth: int) -> bool:
        """The value comes out of `torch.load(...)` (through subscripts and names)."""
        if expr is None or depth > _MAX_DEPTH:
            return False
        while isinstance(expr, cst.Subscript) or (
            isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("get", "pop")
        ):
            expr = expr.value if isinstance(expr, cst.Subscript) else expr.func.value
        if isinstance(expr, cst.Call):
            if scope.model.qualify(expr.func) in ("torch.load", "safetensors.torch.load_file"):
                return True
            callee = resolve_call(expr, scope)
            if callee is not None and callee.scope is not None:
                # `pkg = load_checkpoint(path)` of the project: what it returns
                return any(self._from_file(v, callee.scope, depth + 1) for v in returned_values(callee.fn))
            # `pkg = transformer.load(path)`: a model's own loader (audiolm's returns the
            # `torch.load`ed package) whose class amplint cannot tell; what an optimizer's
            # `load_state_dict` takes from a `load(path)` is a checkpoint.
            func = expr.func
            return (isinstance(func, cst.Attribute) and func.attr.value in _LOADERS and bool(expr.args)
                    and callee is None)
        if isinstance(expr, (cst.Name, cst.Attribute)):
            return any(self._from_file(v, vs, depth + 1) for v, vs in self.b.values.assigned(expr, scope))
        return False


# Methods that read a checkpoint file by their name (`model.load(path)`).
_LOADERS = frozenset({"load", "load_checkpoint", "load_ckpt"})
_DATACLASS_VIEWS = frozenset({"dataclasses.asdict", "dataclasses.astuple", "dataclasses.replace", "copy.replace"})
_DATACLASS_DECORATORS = frozenset({"dataclasses.dataclass", "attr.s", "attr.attrs", "attr.define", "attrs.define", "attr.frozen", "attrs.frozen"})


def _dataclass_fields(func: cst.BaseExpression, scope) -> list[str] | None:
    """The field names, in order, of the project dataclass `func` names (None when it is
    not one): `@dataclass class Snapshot: model: dict; optimizer: dict; epoch: int = 0`."""
    from amplint.analysis.callees import ForeignClass, resolve_class

    model = getattr(scope, "model", None)
    if model is None or not isinstance(func, (cst.Name, cst.Attribute)):
        return None
    cls = resolve_class(func, model)
    if isinstance(cls, ForeignClass):
        cls = cls.info()
    node = getattr(cls, "node", None)
    if not isinstance(node, cst.ClassDef):
        return None
    home = getattr(cls, "model", None) or model
    decorated = any(
        home.qualify(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) in _DATACLASS_DECORATORS
        for d in node.decorators
    )
    if not decorated and "typing.NamedTuple" not in {home.imports.qualify_text(b) for b in cls.bases}:
        return None
    fields = []
    for stmt in node.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    fields.append(small.target.value)
    return fields


def _owns_a_scaler(receiver: cst.BaseExpression, scope) -> bool:
    """`receiver` holds an instance of a project class that builds a GradScaler of its own."""
    from amplint.analysis.callees import ForeignClass, class_of_instance, resolve_class
    from amplint.analysis.wrappers import owned_scalers

    classes = [class_of_instance(receiver, scope)]
    if classes[0] is None and isinstance(receiver, cst.Attribute):
        # `trainer.optimizer`: what the holder's class assigns to `self.optimizer`
        holder = class_of_instance(receiver.value, scope)
        for value, vscope in getattr(holder, "attributes", {}).get(receiver.attr.value, ()):
            if isinstance(value, cst.Call):
                classes.append(resolve_class(value.func, vscope.model))
    for cls in classes:
        if isinstance(cls, ForeignClass):  # defined in another module: read only when it names a scaler
            cls = cls.info() if cls.symbol.relevant() else None
        if cls is not None and hasattr(cls, "attributes") and owned_scalers(cls):
            return True
    return False
