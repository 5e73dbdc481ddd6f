"""Which names are GradScalers, optimizers and autocast contexts.

Identified by construction *and* by use, because real code hands these objects around:
`self.scaler`, a parameter called `grad_scaler`, an attribute of a wrapper.  A name on
which `.unscale_()` is called is a GradScaler whatever it is called; what
`scaler.step(x)` receives is an optimizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from amplint.analysis.autocast_entries import AutocastInfo
from amplint.analysis.callees import function_named
from amplint.analysis.names import attr_name, dotted
from amplint.analysis.torch_api import (
    AUTOCAST_DEFAULT_DTYPE,
    AUTOCAST_IMPLIED_DEVICE,
    NOT_OPTIMIZERS,
    OPTIMIZER_PACKAGES,
    SCALER_CONSTRUCTORS,
    SHARDED_SCALER_CONSTRUCTORS,
)
from amplint.analysis.spread_kwargs import hardware_gated_values, spread_keyword
from amplint.analysis.syntax import call_arg, value_branches
from amplint.analysis.values import ValueResolver
from amplint.analysis.walk import walk


@dataclass(frozen=True)
class ScalerConstruction:
    call: cst.Call
    scope: object
    target: str | None  # dotted text it was assigned to, if any
    enabled: bool | None  # literal value of `enabled=`, None when decided at run time
    sharded: bool
    qualname: str


class Bindings:
    def __init__(self, model) -> None:
        self.model = model
        self.values = ValueResolver(model)

    # --- keys ----------------------------------------------------------------------------
    def key(self, expr: cst.BaseExpression | None, scope) -> str | None:
        """A scope-aware identity for a dotted expression.

        `self.scaler` in any method of class `Trainer` is one key; a local `scaler` in
        `train()` and another in `evaluate()` are two.
        """
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings.key(expr, scope)
        text = dotted(expr)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        if scope.cls is not None and scope.self_name == head:
            rest = _through_properties(scope.cls, rest)
            return f"{scope.cls.name}.self" + (f".{rest}" if rest else "")
        s = scope
        while s is not None and not s.binds(head):
            s = s.parent
        owner = s or self.model.module_scope
        return f"{owner.name}@{id(owner)}:{text}"

    @staticmethod
    def text_of(key: str | None) -> str | None:
        if key is None:
            return None
        if ":" in key:
            return key.split(":", 1)[1]
        return "self" + key.split(".self", 1)[1]

    # --- escapes -------------------------------------------------------------------------
    @cached_property
    def escapes(self):
        """Where the objects of dotted names may go (amplint/analysis/escapes.py)."""
        from amplint.analysis.escapes import Escapes

        return Escapes(self.model)

    def escaped(self, key: str | None) -> bool:
        """Some use of the object of `key` may hand it to code that uses it under another
        name (an alias, a container, an attribute, an argument, a bound method)."""
        return self.escapes.escapes(key)

    # --- scalers -------------------------------------------------------------------------
    @cached_property
    def scaler_constructions(self) -> list[ScalerConstruction]:
        found = []
        targets: dict[int, str] = {}
        for scope in self.model.scopes:
            for text, values in scope.assignments.items():
                for v in values:
                    for b in value_branches(v):
                        targets[id(b)] = text
        for site in self.model.calls:
            qual = self.model.qualify(site.node.func)
            if qual not in SCALER_CONSTRUCTORS and qual not in SHARDED_SCALER_CONSTRUCTORS:
                continue
            enabled = self.values.literal_bool(call_arg(site.node, 4 if qual.startswith(("torch.cuda", "torch.cpu")) else 5, "enabled"))
            found.append(
                ScalerConstruction(
                    call=site.node,
                    scope=site.scope,
                    target=targets.get(id(site.node)),
                    enabled=enabled,
                    sharded=qual in SHARDED_SCALER_CONSTRUCTORS,
                    qualname=qual,
                )
            )
        return found

    @cached_property
    def scaler_keys(self) -> frozenset[str]:
        """Keys of every expression that holds a (possibly enabled) GradScaler."""
        keys: set[str] = set()
        for c in self.scaler_constructions:
            if c.target is not None and c.enabled is not False:
                keys.add(self.key(cst.parse_expression(c.target), c.scope))
        methods: dict[str, set[str]] = {}
        for site in self.model.calls:
            func = site.node.func
            if not isinstance(func, cst.Attribute):
                continue
            k = self.key(func.value, site.scope)
            name = func.attr.value
            if k is None and name != "backward":
                continue
            if name in ("unscale_", "get_scale"):
                keys.add(k)
            elif name == "backward" and isinstance(func.value, cst.Call):
                from amplint.analysis.steps import passed_through

                inner = passed_through(func.value, self.model)
                inner = inner.func if isinstance(inner, cst.Call) else inner
                if isinstance(inner, cst.Attribute) and inner.attr.value == "scale":
                    sk = self.key(inner.value, site.scope)
                    if sk is not None:
                        keys.add(sk)
            elif name in ("scale", "update", "step"):
                methods.setdefault(k, set()).add(name)
        for k, names in methods.items():
            if {"scale", "update"} <= names and "step" in names:
                keys.add(k)
        return frozenset(keys)

    def is_scaler(self, expr: cst.BaseExpression | None, scope) -> bool:
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings.is_scaler(expr, scope)
        k = self.key(expr, scope)
        if k is None:
            return False
        if k in self.scaler_keys:
            return True
        # A parameter or attribute named like a scaler whose methods are scaler methods.
        text = dotted(expr) or ""
        last = text.split(".")[-1].lower()
        return "scaler" in last and last not in ("lr_scaler",)

    @cached_property
    def uses_enabled_scaler(self) -> bool:
        """The module builds or uses a GradScaler that is not literally disabled."""
        if any(c.enabled is not False and not c.sharded for c in self.scaler_constructions):
            return True
        return bool(self.scaler_keys)

    # --- optimizers ----------------------------------------------------------------------
    def is_optimizer_constructor(self, call: cst.Call, scope=None) -> bool:
        return bool(self.optimizer_classes(call, scope))

    def optimizer_classes(self, call: cst.Call, scope=None) -> list[str]:
        """The optimizer classes (qualified) a call may construct: `torch.optim.AdamW(...)`,
        or, with the scope it is written in, a name bound to such classes, as diffusers
        scripts pick one (`optimizer_class = bnb.optim.AdamW8bit if args.use_8bit_adam
        else torch.optim.AdamW`, also in if/else statements)."""
        qual = self.model.qualify(call.func)
        if qual is not None:
            return [qual] if _is_optimizer_class(qual) else []
        if scope is None or not isinstance(call.func, (cst.Name, cst.Attribute)):
            return []
        found = []
        for value, vscope in self.values.assigned(call.func, scope):
            for branch in value_branches(value):
                bq = vscope.model.qualify(branch)
                if bq is not None and _is_optimizer_class(bq):
                    found.append(bq)
        return found

    @cached_property
    def optimizer_keys(self) -> frozenset[str]:
        keys: set[str] = set()
        for scope in self.model.scopes:
            for text, values in scope.assignments.items():
                for v in values:
                    if any(isinstance(b, cst.Call) and self.is_optimizer_constructor(b, scope) for b in value_branches(v)):
                        keys.add(self.key(cst.parse_expression(text), scope))
        methods: dict[str, set[str]] = {}
        for site in self.model.calls:
            func = site.node.func
            if not isinstance(func, cst.Attribute):
                continue
            if func.attr.value in ("step", "unscale_") and self.is_scaler(func.value, site.scope):
                opt = call_arg(site.node, 0, "optimizer")
                k = self.key(opt, site.scope)
                if k is not None:
                    keys.add(k)
                continue
            k = self.key(func.value, site.scope)
            if k is not None and func.attr.value in ("step", "zero_grad"):
                methods.setdefault(k, set()).add(func.attr.value)
        for k, names in methods.items():
            if names == {"step", "zero_grad"}:
                keys.add(k)
        return frozenset(keys)

    def is_optimizer(self, expr: cst.BaseExpression | None, scope) -> bool:
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings.is_optimizer(expr, scope)
        k = self.key(expr, scope)
        if k is not None and k in self.optimizer_keys:
            return True
        text = (dotted(expr) or "").split(".")[-1].lower()
        return text in ("optimizer", "optim", "opt") or text.endswith(("optimizer", "_optim", "_opt"))

    # --- autocast ------------------------------------------------------------------------
    def autocast_of(self, expr: cst.BaseExpression, scope, depth: int = 0) -> list[AutocastInfo]:
        """The autocast contexts a `with` item may enter (empty: not autocast), also through
        the project's own wrappers (amplint/analysis/autocast_entries.py)."""
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings.autocast_of(expr, scope, depth)
        from amplint.analysis.autocast_entries import entered

        return entered(self, expr, scope, None, depth)

    def _decorator_autocast(self, expr: cst.BaseExpression, scope, depth: int) -> list[AutocastInfo]:
        """A function used as a decorator whose wrapper enters autocast around the call:

            def fp16_forward(fn):
                @functools.wraps(fn)
                def wrapper(*args, **kwargs):
                    with torch.autocast("cuda", dtype=torch.float16):
                        return fn(*args, **kwargs)
                return wrapper

        `@fp16_forward` on a forward (this module's function, or one imported from the
        project) runs that forward in the regions the function's body enters.
        """
        found = function_named(expr, scope)
        if found is None:
            return []
        fn, model = found
        return autocast_entered_in(fn, model, depth + 1)

    def _describe_autocast(self, node: cst.CSTNode, qual: str, scope, args: tuple, scopes=None) -> AutocastInfo:
        """`scopes`: id() of an argument's value -> the scope it is read in (arguments a
        wrapper was handed at its call site), `scope` for the others."""
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings._describe_autocast(node, qual, scope, args, scopes)
        scopes = scopes or {}

        def at(expr):
            return scopes.get(id(expr), scope)
        fake = cst.Call(func=cst.Name("autocast"), args=list(args))
        implied = AUTOCAST_IMPLIED_DEVICE.get(qual)
        if implied is not None:
            # legacy signature: autocast(enabled=True, dtype=..., cache_enabled=True)
            device_values = frozenset({implied})
            enabled_expr = call_arg(fake, 0, "enabled")
            dtype_expr = call_arg(fake, 1, "dtype")
        else:
            device_expr = call_arg(fake, 0, "device_type")
            device_values = self.values.strings(device_expr, at(device_expr))
            if device_values is None:
                device_values = self._device_type_strings(device_expr, at(device_expr))
            dtype_expr = call_arg(fake, 1, "dtype")
            enabled_expr = call_arg(fake, 2, "enabled")
        device = next(iter(device_values)) if device_values and len(device_values) == 1 else None
        default = frozenset(AUTOCAST_DEFAULT_DTYPE.get(d, "float16") for d in device_values) if device_values else None
        stars = [a.value for a in args if a.star == "**"]
        spread = spread_keyword(args, "dtype", at(stars[0]) if stars else scope, self.values) if dtype_expr is None else None
        bf16_where_supported = False
        if dtype_expr is not None:
            dtypes = self.values.dtypes(dtype_expr, at(dtype_expr))
        elif spread:
            # `autocast(**autocast_args)`: the dtype of each dict the name may hold
            each = [self.values.dtypes(v.value, v.scope) if v.value is not None else default for v in spread]
            dtypes = None if any(d is None for d in each) else frozenset().union(*each)
            bf16_where_supported = any(v.hardware_gated and d == frozenset({"bfloat16"}) for v, d in zip(spread, each))
        else:
            dtypes = default
        enabled = True if enabled_expr is None else self.values.literal_bool(enabled_expr)
        return AutocastInfo(node=node, device=device, dtypes=dtypes, enabled=enabled, bf16_where_supported=bf16_where_supported)

    @cached_property
    def hardware_gated_values(self) -> frozenset[int]:
        """id() of values assigned under `if torch.cuda.is_bf16_supported():` (spread_kwargs)."""
        return hardware_gated_values(self.model)

    def _device_type_strings(self, expr, scope) -> frozenset[str] | None:
        """`device.type` where `device = torch.device("cuda" if ... else "cpu")` -> {"cuda", "cpu"}."""
        if scope.model is not None and scope.model is not self.model:  # a scope of another module
            return scope.model.bindings._device_type_strings(expr, scope)
        if not (isinstance(expr, cst.Attribute) and expr.attr.value == "type"):
            return None
        found: set[str] = set()
        for value, vscope in self.values.assigned(expr.value, scope):
            if not (isinstance(value, cst.Call) and self.model.qualify(value.func) == "torch.device" and value.args):
                return None
            got = self.values.strings(value.args[0].value, vscope)
            if got is None:
                return None
            found |= {s.split(":")[0] for s in got}
        return frozenset(found) if found else None


def autocast_entered_in(fn: cst.FunctionDef, model, depth: int = 0) -> list[AutocastInfo]:
    """The autocast contexts `with` statements inside `fn` (nested functions included) enter."""
    collector = _WithCollector(model, fn)
    walk(fn, collector)
    found: list[AutocastInfo] = []
    for item, scope in collector.items:
        found.extend(model.bindings.autocast_of(item, scope, depth))
    return found


class _WithCollector(cst.CSTVisitor):
    def __init__(self, model, fn: cst.FunctionDef) -> None:
        self.model = model
        self.scopes = [model.scope_of.get(fn, model.module_scope)]
        self.items: list[tuple[cst.BaseExpression, object]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append(self.model.scope_of.get(node, self.scopes[-1]))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_WithItem(self, node: cst.WithItem) -> None:
        self.items.append((node.item, self.scopes[-1]))


def _is_optimizer_class(qual: str) -> bool:
    if not qual.startswith(OPTIMIZER_PACKAGES) or qual.startswith(NOT_OPTIMIZERS):
        return False
    last = qual.rsplit(".", 1)[-1]
    return last[:1].isupper() and last not in ("Optimizer",)


def receiver_name(call: cst.Call) -> str | None:
    """`model` for `model.half()`; None when the callee is not a method call."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return dotted(func.value)
    return None


def method_name(call: cst.Call) -> str | None:
    return attr_name(call.func) if isinstance(call.func, cst.Attribute) else None


def _through_properties(cls, rest: str) -> str:
    """`scaler.step` as `_scaler.step` where the class's `scaler` is a property that returns
    `self._scaler`: one object under two names, one key."""
    first, dot, tail = rest.partition(".")
    method = cls.methods.get(first) if first else None
    if method is None or not any(dotted(d.decorator) in ("property", "functools.cached_property", "cached_property")
                                 for d in method.decorators):
        return rest
    body = method.body.body
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or not isinstance(body[0].body[0], cst.Return):
        return rest
    returned = dotted(body[0].body[0].value) if body[0].body[0].value is not None else None
    params = method.params.params
    if returned is None or not params or not returned.startswith(params[0].name.value + "."):
        return rest
    return returned.split(".", 1)[1] + (dot + tail if dot else "")
