"""Precision casts of whole modules, and whether those modules are trained.

`.half()`, `.bfloat16()`, `.to(torch.float16)`, `.to(dtype=weight_dtype)` and
`from_pretrained(..., torch_dtype=torch.float16)` turn every parameter of a module into
a reduced-precision tensor.  That is fine for a frozen module (inference, a VAE or text
encoder next to the trained UNet) and wrong for one whose parameters reach an
optimizer: the optimizer then holds fp16 master weights.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from amplint.analysis.asserts import asserted_values
from amplint.analysis.names import dotted
from amplint.analysis.walk import walk
from amplint.analysis.syntax import call_arg, returned_values, target_names, value_branches
from amplint.analysis.torch_api import HALF_CAST_METHODS, MODULE_RETURNING
from amplint.prefilter import identifier_span

_FROM_PRETRAINED_DTYPE_KWARGS = ("torch_dtype", "dtype")
# Calls that give some parameters back their fp32 precision after a cast (diffusers).
# Helpers that return every float16/bfloat16 parameter to float32: diffusers'
# `cast_training_params`, and PEFT's `prepare_model_for_kbit_training` (it freezes the base
# and casts each non-quantized half parameter to float32 before adapters are added).
_UPCAST_HELPERS = ("cast_training_params", "prepare_model_for_kbit_training")
# Wrapping a (cast) base model with adapters: only the adapters, created in fp32, train.
_ADAPTER_HELPERS = ("get_peft_model", "prepare_model_for_kbit_training", "add_adapter", "inject_adapter_in_model")
_PARAMETER_ACCESSORS = ("parameters", "named_parameters")


@dataclass(frozen=True, eq=False)
class ModuleCast:
    call: cst.Call
    scope: object
    target_text: str  # the dotted name whose parameters change dtype
    key: str
    dtypes: frozenset[str]
    spelling: str  # `.half()`, `.to(torch.bfloat16)`, `from_pretrained(torch_dtype=...)`
    # `p.data = p.data.to(...)` for the parameters of the target that require grad
    # (`if p.requires_grad:`): the trainable ones by the code's own word.
    trainable: bool = False


class Casts:
    def __init__(self, model) -> None:
        self.model = model
        self.b = model.bindings

    @cached_property
    def assigned_from(self) -> dict[int, tuple[str, object]]:
        """id(value expression or branch) -> (target text, scope), to name chained casts."""
        out: dict[int, tuple[str, object]] = {}
        for scope in self.model.scopes:
            for text, values in scope.assignments.items():
                for v in values:
                    for branch in value_branches(v):
                        out[id(branch)] = (text, scope)
                        # `model = Net.from_pretrained(...).to(device).eval()`: the inner
                        # calls of a chain of module-returning methods name the same module.
                        node = branch
                        while _chained_receiver(node) is not None:
                            node = _chained_receiver(node)
                            out.setdefault(id(node), (text, scope))
        return out

    @cached_property
    def _outer_methods(self) -> dict[int, list[cst.Call]]:
        """id(call) -> the method calls chained on its result (`.to(...)`, `.float()`)."""
        out: dict[int, list[cst.Call]] = {}
        for site in self.model.calls:
            node = site.node
            outer: list[cst.Call] = []
            while _chained_receiver(node) is not None:
                outer.append(node)
                node = _chained_receiver(node)
                out.setdefault(id(node), list(reversed(outer)))
        return out

    def _undone_by_chain(self, call: cst.Call, scope) -> bool:
        """`Net().half().float()`: a later method of the same chain casts back to fp32."""
        for outer in self._outer_methods.get(id(call), []):
            name = outer.func.attr.value
            if name in ("float", "double"):
                return True
            if name == "to":
                dtypes = self._to_dtypes(outer, scope)
                if dtypes and not (dtypes & {"float16", "bfloat16"}):
                    return True
        return False

    @cached_property
    def module_casts(self) -> list[ModuleCast]:
        found: list[ModuleCast] = []
        for site in self.model.calls:
            call, scope = site.node, site.scope
            func = call.func
            if not isinstance(func, cst.Attribute):
                continue
            name = func.attr.value
            dtypes: frozenset[str] | None = None
            spelling = ""
            if name in HALF_CAST_METHODS and not call.args:
                dtypes = frozenset({HALF_CAST_METHODS[name]})
                spelling = f".{name}()"
            elif name == "to":
                dtypes = self._to_dtypes(call, scope)
                spelling = ".to(...)"
            elif name == "apply" and len(call.args) == 1 and not call.args[0].keyword and not call.args[0].star:
                # `model.apply(_convert_weights_to_fp16)`: a function that casts the weights of
                # each submodule it is handed (`l.weight.data = l.weight.data.half()`, CLIP's)
                dtypes = _casts_its_argument(call.args[0].value, scope)
                spelling = ".apply(...)"
            elif name == "from_pretrained" and not _loads_no_weights(call):
                for kw in _FROM_PRETRAINED_DTYPE_KWARGS:
                    expr = call_arg(call, None, kw)
                    if expr is not None:
                        dtypes = self.b.values.dtypes(expr, scope) or self.b.values.parameter_dtypes(expr, scope)
                        spelling = f"from_pretrained({kw}=...)"
                        break
            if not dtypes or not (dtypes & {"float16", "bfloat16"}):
                continue
            if self._undone_by_chain(call, scope):
                continue
            trainable = False
            per_parameter = self._parameter_data_casts.get(id(call))
            if per_parameter is not None:
                text, sense = per_parameter
                if sense is False:
                    continue  # only the frozen parameters (`if not p.requires_grad:`)
                target, trainable = (text, scope), sense is True
                receiver = dotted(func.value)
                spelling = f"{receiver.split('.')[0]}.data = {receiver}{spelling}"  # on each of its parameters
            else:
                target = self._target_of(call, scope)
            if target is None:
                continue
            text, tscope = target
            # `for m in (text_encoder, text_encoder_2): m.to(dtype)`: each module of the tuple.
            names = self._literal_loops.get((id(call), text)) or (text,)
            for text in names:
                key = self.b.key(cst.parse_expression(text), tscope)
                found.append(ModuleCast(call, scope, text, key, dtypes & frozenset({"float16", "bfloat16"}), spelling, trainable))
        return found

    @cached_property
    def _literal_loops(self) -> dict[tuple[int, str], tuple[str, ...]]:
        """(id(call), loop variable) -> the dotted names a `for` over a literal tuple or list
        binds to it, for each call inside that loop's body."""
        collector = _LiteralLoops()
        walk(self.model.module, collector)
        return collector.found

    @cached_property
    def _parameter_data_casts(self) -> dict[int, tuple[str, bool | None]]:
        """id(cast call) -> (module text, requires_grad sense) for `p.data = p.data.to(dtype)`
        in `for p in module.parameters()` / `for n, p in module.named_parameters()`: the
        module's parameters change dtype in place.  The sense is True under `if
        p.requires_grad`, False under `if not p.requires_grad` (frozen ones only), else None."""
        collector = _ParameterLoops()
        walk(self.model.module, collector)
        return collector.casts

    def _to_dtypes(self, call: cst.Call, scope) -> frozenset[str] | None:
        exprs = [a.value for a in call.args if a.keyword is None and not a.star]
        kw = call_arg(call, None, "dtype")
        if kw is not None:
            exprs.append(kw)
        found: set[str] = set()
        receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
        while isinstance(receiver, cst.Call) and _chained_receiver(receiver) is not None:
            receiver = _chained_receiver(receiver)
        if isinstance(receiver, cst.Call):
            receiver = None  # `Net().to(dtype)`: judged by what it is assigned to
        for e in exprs:
            got = self._dtypes(e, scope, receiver)
            if got:
                found |= got
        return frozenset(found) if found else None

    def _dtypes(self, expr: cst.BaseExpression, scope, receiver: cst.BaseExpression | None = None) -> frozenset[str] | None:
        """What `expr` may be; for the cast of a module (`receiver`), also a parameter from
        what the function's callers pass."""
        values = self.b.values
        if isinstance(expr, cst.Name):
            allowed = asserted_values(expr.value, expr, scope.node)
            if allowed is not None:
                # `assert precision_type == torch.float` before `.to(precision_type)`
                narrowed = [values.dtypes(v, scope) for v in allowed]
                if all(narrowed):
                    return frozenset().union(*narrowed)
        found = values.dtypes(expr, scope)
        if found or receiver is None:
            return found
        head = (dotted(receiver) or "").split(".")[0]
        if not head or not isinstance(expr, cst.Name) or expr.value not in scope.params:
            return found
        return values.parameter_dtypes(expr, scope) if self._module_like(head, scope, receiver) else found

    def _target_of(self, call: cst.Call, scope) -> tuple[str, object] | None:
        """The name whose module changes: the receiver, or what a chained cast is assigned to."""
        func = call.func
        assert isinstance(func, cst.Attribute)
        receiver = func.value
        text = dotted(receiver)
        if text is not None and func.attr.value != "from_pretrained":
            return text, scope
        # `model = Net().half()`, `unet = UNet.from_pretrained(..., torch_dtype=...)`
        assigned = self.assigned_from.get(id(call))
        if assigned is not None:
            return assigned
        # `model.cuda().bfloat16()` as a statement: the module-returning methods give back
        # `model` itself.
        while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute) and receiver.func.attr.value in MODULE_RETURNING:
            receiver = receiver.func.value
        text = dotted(receiver) if receiver is not func.value else None
        return (text, scope) if text is not None else None

    # --- is the module trained? ----------------------------------------------------------
    @cached_property
    def optimizer_inputs(self) -> list[tuple[cst.Call, set[str]]]:
        """Each optimizer construction with the keys its arguments mention (one hop deep)."""
        out = []
        for site in self.model.calls:
            call, scope = site.node, site.scope
            if not self._builds_optimizer(call, scope):
                continue
            keys: set[str] = set()
            mentions: list[tuple[str, tuple]] = []
            here = self._guards(call, scope)
            for arg in call.args:
                for name_expr in _dotted_names(arg.value):
                    for key, facts in self._keys_through(name_expr, scope, depth=0, origin=scope, facts=here):
                        keys.add(key)
                        mentions.append((key, facts))
            out.append((call, keys))
            self.scope_of_optimizer[id(call)] = scope
            self.optimizer_mentions[id(call)] = mentions
        return out

    @cached_property
    def optimizer_mentions(self) -> dict[int, list[tuple[str, tuple]]]:
        """id(optimizer construction) -> (key, facts) for each module it may optimize, with
        what the conditions say where that module joins its parameters (`params +=
        list(text_encoder.parameters())` under `if args.train_text_encoder:`); filled with
        optimizer_inputs."""
        return {}

    def _guards(self, node: cst.CSTNode, scope) -> tuple:
        """The condition facts (analysis/conditions.py) that hold where `node` runs in its
        function (or module) body."""
        from amplint.analysis.conditions import facts, guarding_tests

        model = scope.model if scope.model is not None else self.model
        tests = guarding_tests(scope.node, node) or ()
        out: tuple = ()
        for test, truth in tests:
            out += facts(test, model.module.code_for_node, truth)
        return out

    @cached_property
    def scope_of_optimizer(self) -> dict[int, object]:
        """id(optimizer construction) -> the scope it is written in (filled with optimizer_inputs)."""
        return {}

    def _builds_optimizer(self, call: cst.Call, scope=None) -> bool:
        if self.b.is_optimizer_constructor(call, scope):
            return True
        if scope is not None and self.factory_construction(call, scope) is not None:
            return True
        name = (dotted(call.func) or "").split(".")[-1].lower()
        # `create_optimizer(model)`, `configure_optimizers()`, not `get_optimizer_cls_and_kwargs(...)`
        return OPTIMIZER_FACTORY.match(name) is not None

    def factory_construction(self, call: cst.Call, scope) -> tuple[cst.Call, object] | None:
        """The optimizer a project factory builds from its arguments, with its scope.

        `get_std_opt(model.parameters(), ...)` (espnet's transformer/optimizer.py) runs
        `torch.optim.Adam(model_params, ..., eps=1e-9)` on its parameter: the call is an
        optimizer construction of the caller's parameters, with the factory's settings.
        The factory may live in another module (resolve_call); only a construction in
        the factory's own body whose parameters to optimize come from one of its own
        parameters counts (`Adam(net.parameters(), lr=lr)` optimizes a global)."""
        memo = self._factories.get(id(call))
        if memo is None:
            memo = (self._find_factory_construction(call, scope),)
            self._factories[id(call)] = memo
        return memo[0]

    @cached_property
    def _factories(self) -> dict[int, tuple]:
        return {}

    def _find_factory_construction(self, call: cst.Call, scope) -> tuple[cst.Call, object] | None:
        from amplint.analysis.callees import resolve_call

        callee = resolve_call(call, scope)
        callees = [callee] if callee is not None else self._methods_of_held_classes(call, scope)
        for callee in callees:
            inner_scope = callee.scope
            if inner_scope is None or not inner_scope.params:
                continue
            model = callee.model
            params = set(inner_scope.params)
            for site in model.calls:
                if site.scope is not inner_scope or not model.bindings.is_optimizer_constructor(site.node, site.scope):
                    continue
                given = call_arg(site.node, 0, "params")  # what it optimizes, not `lr=lr`
                mentioned = {(dotted(n) or "").split(".")[0] for n in _dotted_names(given)} if given is not None else set()
                if mentioned & params:
                    return site.node, site.scope
        return None

    def _methods_of_held_classes(self, call: cst.Call, scope) -> list:
        """`opt_class.from_args(model.parameters(), args)` where `opt_class` holds one of
        several factory classes chosen by a string (callees.classes_held): the method of
        each of them, any of which may run."""
        from amplint.analysis.callees import classes_held, method_of

        func = call.func
        if not isinstance(func, cst.Attribute) or not isinstance(func.value, cst.Name):
            return []
        found = []
        for cls in classes_held(func.value, scope, OPTIMIZER_VOCABULARY):
            method = method_of(cls, func.attr.value, OPTIMIZER_VOCABULARY)
            if method is not None:
                found.append(method)
        return found

    def _keys_through(self, expr: cst.BaseExpression, scope, depth: int, origin=None, facts: tuple = ()) -> list[tuple[str, tuple]]:
        """The keys of the modules `expr` may hold parameters of, each with the condition
        facts along the assignments that brought it in (in the optimizer's own scope)."""
        keys: list[tuple[str, tuple]] = []
        node = expr
        if isinstance(expr, cst.Attribute) and expr.attr.value in _PARAMETER_ACCESSORS:
            expr = expr.value  # `self.parameters()` inside a method: the whole instance
        key = self.b.key(expr, scope)
        if key is not None:
            here = facts + self._guards(node, scope) if scope is origin and depth else facts
            keys.append((key, here))
        if depth < 2 and isinstance(expr, (cst.Name, cst.Attribute)):
            for value, vscope in self.b.values.assigned(expr, scope):
                for inner in _dotted_names(value):
                    if vscope is not origin and vscope is not scope and not _non_local(inner, vscope):
                        # `self.model = model` in `evaluate()`: that method's local is not
                        # the module the optimizer is built from in `train()`.
                        continue
                    keys += self._keys_through(inner, vscope, depth + 1, origin, facts)
        if depth < 2 and isinstance(expr, cst.Name):
            # `p_wd.append(p)` in `for n, p in model.named_parameters():`: the list holds
            # parameters of `model`
            for value in _appended(expr.value, scope.node):
                for inner in _dotted_names(value):
                    keys += self._keys_through(inner, scope, depth + 1, origin, facts)
        return keys

    def is_trained(self, cast: ModuleCast, depth: int = 0) -> bool:
        """Some optimizer receives parameters of the cast module (or of its parent), or a
        known trainer class trains it (analysis/trainers.py), here or, for a module a
        function returns or is handed (`def make_net(): net.half(); return net`), where
        its callers (in this module or in modules that import it) train what they get."""
        if self._trained_here(cast):
            return True
        return depth < _MAX_CALLER_DEPTH and any(self._caller_trains(site, cast, depth) for site in self._caller_casts(cast))

    def _caller_casts(self, cast: ModuleCast) -> list:
        """The module of `cast` as the callers of its function see it: (caller model, cast
        naming what the call returns or the argument it passes for the module)."""
        scope = cast.scope
        fn = scope.node
        if not isinstance(fn, cst.FunctionDef) or scope.cls is not None or self._after_training(cast):
            return []
        head, _, rest = cast.target_text.partition(".")
        if not self._module_like(head, scope, cast.call):
            return []  # `hidden_states.to(dtype)`: a tensor, whatever its callers do
        returned = param = None
        if head in scope.params:
            param = head
        elif not rest and any(dotted(v) == head or v is cast.call for v in returned_values(fn)):
            returned = True
        if param is None and returned is None:
            return []
        found = []
        for model, site in callers_of(scope):
            if param is not None:
                from amplint.analysis.syntax import argument_for

                arg = argument_for(site.node, scope, param)
                text = dotted(arg) if arg is not None else None
                if text is None:
                    continue
                target = (text + (f".{rest}" if rest else ""), site.scope)
            else:
                target = model.casts.assigned_from.get(id(site.node))
                if target is None:
                    continue
            text, tscope = target
            key = model.bindings.key(cst.parse_expression(text), tscope)
            found.append((model, ModuleCast(site.node, site.scope, text, key, cast.dtypes, cast.spelling, cast.trainable)))
        return found

    def _module_like(self, name: str, scope, call: cst.Call) -> bool:
        """`name` holds a module, by what builds it (a class, `Net()`, `nn.Sequential(...)`,
        `X.from_pretrained(...)`, a `build_model(...)`-like factory) or, for a parameter, by
        its name (`model`, `net`, `text_encoder`).  Casts of tensors are far more common
        than casts of modules; only modules are followed to the callers of a function."""
        if name in scope.params:
            return _names_a_module(name)
        values = list(scope.assignments.get(name, []))
        origin = self.assigned_from.get(id(call))
        if origin is not None and origin[0] == name:
            values.append(call)
        for value in values:
            for branch in value_branches(value):
                node = branch
                while _chained_receiver(node) is not None:
                    node = _chained_receiver(node)
                if isinstance(node, cst.Call):
                    last = (dotted(node.func) or "").rsplit(".", 1)[-1]
                    if last[:1].isupper() or last == "from_pretrained" or _names_a_module(last):
                        return True
        return False

    @staticmethod
    def _caller_trains(found, cast: ModuleCast, depth: int) -> bool:
        model, seen = found
        return model.casts.is_trained(seen, depth + 1)

    def _trained_here(self, cast: ModuleCast) -> bool:
        from amplint.analysis.trainers import handed_to_trainer

        if self._upcast_after(cast):
            return False
        if not cast.trainable and self._frozen_base(cast):
            return False  # NB: the parameters that require grad after `get_peft_model` are the adapters
        if not cast.trainable and self.frozen_where_cast(cast):
            return False
        if handed_to_trainer(cast.target_text, cast.scope) is not None:
            return True  # a trainer built here trains it, also after other training here
        if self._after_training(cast):
            return False
        from amplint.analysis.conditions import consistent

        guards = None
        for call, _ in self.optimizer_inputs:
            for k, facts in self.optimizer_mentions.get(id(call), ()):
                if k == cast.key or cast.key.startswith(k + ".") or k.startswith(cast.key + "."):
                    if guards is None:
                        guards = self._guards(cast.call, cast.scope)
                    # `if not args.train_text_encoder: text_encoder.to(weight_dtype)` and its
                    # parameters optimized only `if args.train_text_encoder`: never both.
                    if consistent(guards, facts) and not self._fresh_after(cast, call) and not self._rebound_before(cast, call):
                        return True
        return self.trainer_of(cast) is not None

    @cached_property
    def _call_order(self) -> dict[int, int]:
        return {id(site.node): i for i, site in enumerate(self.model.calls)}

    def _rebound_before(self, cast: ModuleCast, optimizer: cst.Call) -> bool:
        """The cast name is bound to another object between the cast and `optimizer` in the
        same function (`del unet; unet = unet_lllite`, sd-scripts' ControlNet-LLLite): the
        cast module only lent its weights, and the optimizer holds the new one."""
        from amplint.analysis.conditions import guarding_tests

        if self.scope_of_optimizer.get(id(optimizer)) is not cast.scope:
            return False
        root = cast.target_text.split(".")[0]
        body = cast.scope.node.body if isinstance(cast.scope.node, cst.FunctionDef) else cast.scope.node
        finder = _Rebinds(root, cast.call, optimizer)
        walk(body, finder)
        if finder.state != 2:
            return False  # not both found in this order: nothing to say
        code = self.model.module.code_for_node
        known = {(code(t), truth) for t, truth in guarding_tests(cast.scope.node, cast.call) or ()}
        # NB: only a rebinding that runs whenever the cast does (`clip_l = None` under `if not
        # train_clip` leaves the trained path's object alone)
        return any(
            all((code(t), truth) in known for t, truth in guarding_tests(cast.scope.node, stmt) or ())
            for stmt in finder.found
        )

    def _fresh_after(self, cast: ModuleCast, optimizer: cst.Call) -> bool:
        """The cast object is built after `optimizer` in the same function: `text_encoder =
        CLIPTextModel.from_pretrained(..., torch_dtype=weight_dtype)` reloaded for a
        validation pipeline is another object than the one the optimizer holds."""
        if self.scope_of_optimizer.get(id(optimizer)) is not cast.scope:
            return False
        order = self._call_order
        at = order.get(id(cast.call))
        if at is None:
            return False
        binding = None
        if self.assigned_from.get(id(cast.call), (None,))[0] == cast.target_text:
            binding = at  # `x = Cls.from_pretrained(..., torch_dtype=...)`: built by the cast
        else:
            for value in cast.scope.assignments.get(cast.target_text, []):
                for branch in value_branches(value):
                    i = order.get(id(branch))
                    if isinstance(branch, cst.Call) and i is not None and i < at and (binding is None or i > binding):
                        binding = i
        opt_at = order.get(id(optimizer))
        return binding is not None and opt_at is not None and opt_at < binding

    def trainer_of(self, cast: ModuleCast) -> str | None:
        """Why a trainer of another package trains the cast module (a note), else None."""
        from amplint.analysis.trainers import trained_by_trainer

        return trained_by_trainer(cast.target_text, cast.scope)

    def _after_training(self, cast: ModuleCast) -> bool:
        """`model.half()` for an fp16 export once the function's training is over.

        True when the cast is in a statement of the function's own body that comes after
        every training event of the function (backward or an optimizer step, also via an
        inlined helper) and holds none: `if args.save_precision: model.to(save_dtype)`
        before `save_pretrained` once the loop is over.  A cast inside the training loop
        is not after it.
        """
        from amplint.analysis.step_kinds import Kind

        scope = cast.scope
        body = getattr(scope.node, "body", None)
        if not isinstance(body, cst.IndentedBlock) and not isinstance(scope.node, cst.Module):
            return False
        statements = list(scope.node.body) if isinstance(scope.node, cst.Module) else list(body.body)
        index = {}
        for i, stmt in enumerate(statements):
            for call in _calls_in(stmt):
                index[id(call)] = (i, stmt)
        at = index.get(id(cast.call))
        if at is None or isinstance(at[1], (cst.For, cst.While, cst.FunctionDef, cst.ClassDef)):
            return False
        graph = self.model.steps.graph(scope)
        training = [e for e in graph.of_kind(Kind.BACKWARD, Kind.OPT_STEP, Kind.SCALER_STEP)]
        positions = [index.get(id(e.anchor), (None,))[0] for e in training]
        if not positions or any(p is None or p >= at[0] for p in positions):
            return False
        return True

    def _frozen_base(self, cast: ModuleCast) -> bool:
        """A frozen base that only carries adapters: `requires_grad_(False)` and nothing
        unfrozen again, or the module handed to PEFT (`get_peft_model`, `add_adapter`),
        whose LoRA weights are created (and kept) in fp32 after the cast."""
        frozen = unfrozen = False
        for site in self.model.calls:
            call, func = site.node, site.node.func
            name = (dotted(func) or "").split(".")[-1] if not isinstance(func, cst.Attribute) else func.attr.value
            if name in _ADAPTER_HELPERS:
                receiver = func.value if isinstance(func, cst.Attribute) and name == "add_adapter" else None
                exprs = [receiver] if receiver is not None else [a.value for a in call.args]
                if any(self._same_module(e, site.scope, cast) for e in exprs if e is not None):
                    if not self._only_on_some_paths(call, site.scope, cast):
                        return True
            if name == "requires_grad_" and isinstance(func, cst.Attribute) and self._same_module(func.value, site.scope, cast, parts=True):
                flag = self.b.values.literal_bool(call_arg(call, 0, "requires_grad"))
                if flag is False and self._same_module(func.value, site.scope, cast):
                    frozen = True
            if name == "requires_grad_" and self.b.values.literal_bool(call_arg(call, 0, "requires_grad")) is not False:
                # NB: anything unfrozen again (`model[2].requires_grad_(True)`, `head = ...`)
                # may be part of the cast module; we cannot tell, so the cast counts.
                unfrozen = True
        if frozen and not unfrozen:
            unfrozen = any(
                text.endswith(".requires_grad") and any(self.b.values.literal_bool(v) is not False for v in values)
                for scope in self.model.scopes
                for text, values in scope.assignments.items()
            )
        return frozen and not unfrozen

    def frozen_where_cast(self, cast: ModuleCast) -> bool:
        """Frozen on every path that casts it: a `requires_grad_` of the module in the same
        function that runs whenever the cast does (its own tests are ones the cast's imply) and
        whose argument is false there: `False` beside the cast, or the flag the cast's test says
        is false (`if not train_unet: unet.to(dtype)` with `unet.requires_grad_(train_unet)`,
        sd-scripts' shape, where the flags that add parameters to the optimizer are derived from
        learning rates and no test compares with the cast's). Nothing may unfreeze it or a part
        of it by a literal (`requires_grad_(True)`, `p.requires_grad = True`) anywhere: on any
        object, since a subscript or an alias may be a part of it."""
        from amplint.analysis.conditions import guarding_tests

        code = self.model.module.code_for_node
        cast_tests = guarding_tests(cast.scope.node, cast.call)
        if cast_tests is None:
            return False
        known: dict[str, bool] = {}  # what holds where the cast runs, by the tests' text
        for test, truth in cast_tests:
            known[code(test)] = truth
            if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                known[code(test.expression)] = not truth
        frozen = False
        for site in self.model.calls:
            call, func = site.node, site.node.func
            if not isinstance(func, cst.Attribute) or func.attr.value != "requires_grad_":
                continue
            arg = call_arg(call, 0, "requires_grad")
            literal = True if arg is None else self.b.values.literal_bool(arg)
            if literal is True and self._may_be_part(func.value, site.scope, cast):
                return False  # unfrozen somewhere: the module, `model[2]`, `head = model[2]`
            if site.scope is not cast.scope or not self._same_module(func.value, site.scope, cast):
                continue
            tests = guarding_tests(site.scope.node, call) or ()
            if any(known.get(code(test)) is not truth for test, truth in tests):
                continue  # may not run where the cast runs
            if literal is False or (arg is not None and known.get(code(arg)) is False):
                frozen = True
        if frozen:
            # `p.requires_grad = True` over the parameters: which module they are is not known
            frozen = not any(
                text.endswith(".requires_grad") and any(self.b.values.literal_bool(v) is True for v in values)
                for scope in self.model.scopes
                for text, values in scope.assignments.items()
            )
        return frozen

    def _may_be_part(self, expr: cst.BaseExpression, scope, cast: ModuleCast) -> bool:
        """`expr` may be the cast module or a part of it: by its key, by the name under its
        subscripts and attributes (`model[2]`, `model.head[0]`), or through a name assigned
        one of those (`head = model[2]`); an expression of no name may be anything."""
        def root(e: cst.BaseExpression) -> cst.BaseExpression | None:
            while isinstance(e, (cst.Subscript, cst.Attribute, cst.Call)):
                e = e.value if not isinstance(e, cst.Call) else e.func
            return e if isinstance(e, cst.Name) else None

        candidates = [expr]
        if isinstance(expr, cst.Name):
            candidates += [value for value, _ in self.b.values.assigned(expr, scope)]
        for e in candidates:
            if self._same_module(e, scope, cast, parts=True):
                return True
            base = root(e)
            if base is None:
                return True
            key = self.b.key(base, scope)
            if key is not None and (key == cast.key or cast.key.startswith(key + ".")):
                return True
        return False

    def _only_on_some_paths(self, call: cst.Call, scope, cast: ModuleCast) -> bool:
        """The adapters are added under a test that the cast is not (`if args.use_peft:
        model = get_peft_model(model)` after an unconditional fp16 load): the other
        option trains the whole cast model.  Tests compared by their text."""
        from amplint.analysis.conditions import guarding_tests

        if scope is not cast.scope:
            return False
        code = self.model.module.code_for_node
        adapter = guarding_tests(scope.node, call) or ()
        around_cast = {(code(test), truth) for test, truth in guarding_tests(cast.scope.node, cast.call) or ()}
        return any((code(test), truth) not in around_cast for test, truth in adapter)

    def _same_module(self, expr, scope, cast: ModuleCast, parts: bool = False) -> bool:
        """`expr` is the cast module (or, with `parts`, one of its submodules)."""
        key = self.b.key(expr, scope)
        if key is None:
            return False
        return key == cast.key or (parts and key.startswith(cast.key + "."))

    def _upcast_after(self, cast: ModuleCast) -> bool:
        for site in self.model.calls:
            name = (dotted(site.node.func) or "").split(".")[-1]
            if name in _UPCAST_HELPERS:
                for arg in site.node.args:
                    if self.b.key(arg.value, site.scope) == cast.key:
                        return True
        return False


def _mentions(expr: cst.CSTNode, name: str) -> bool:
    found = []

    class _Find(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                found.append(node)

    expr.visit(_Find())
    return bool(found)


class _Rebinds(cst.CSTVisitor):
    """An assignment (plain or annotated with a value) to `name` between two calls, in source
    order, at the statement level of the function (not in a nested function)."""

    def __init__(self, name: str, start: cst.Call, end: cst.Call) -> None:
        self.name, self.start, self.end = name, start, end
        self.state = 0  # 0 before start, 1 between, 2 after end
        self.found: list[cst.CSTNode] = []  # the assignments

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if node is self.start and self.state == 0:
            self.state = 1
        elif node is self.end and self.state == 1:
            self.state = 2

    def _target(self, node: cst.CSTNode, target: cst.BaseExpression) -> None:
        if self.state == 1 and isinstance(target, cst.Name) and target.value == self.name:
            # NB: `model = model.to(device)`, `model = DDP(model)`, `torch.compile(model)`: the
            # same module, or a wrapper of it, is no other model
            value = getattr(node, "value", None)
            if value is None or not _mentions(value, self.name):
                self.found.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._target(node, t.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._target(node, node.target)


_MODULE_WORDS = ("model", "net", "module", "encoder", "decoder", "unet", "vae", "transformer", "backbone", "student")


def _names_a_module(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _MODULE_WORDS) and "optim" not in lowered


# How many levels of callers a cast module is followed through (`make_net` <- `build` <- main).
_MAX_CALLER_DEPTH = 2


def callers_of(scope, elsewhere: bool = True) -> list:
    """(model, call site) for each call that runs the plain function of `scope`: in its own
    module, and (`elsewhere`) in the project modules that import it and spell its name."""
    memo = scope.model.__dict__.setdefault("_amplint_callers_of", {})
    key = (id(scope), elsewhere)
    if key not in memo:
        memo[key] = []  # a recursive call chain: not while it is being answered
        memo[key] = _find_callers(scope, elsewhere)
    return memo[key]


def _find_callers(scope, elsewhere: bool) -> list:
    from amplint.analysis.callees import resolve_call

    model = scope.model
    name = scope.node.name.value
    here = os.path.abspath(model.path)
    models = [model]
    project = model.project
    if project is not None and elsewhere:
        for path in project.importers(model.path, depth=1):
            text = project.raw_text(path)
            if text is None or name not in text:
                continue
            other = project.model_at(path)
            if other is not None and other is not model:
                models.append(other)
    out = []
    for m in models:
        for site in m.calls:
            func = site.node.func
            called = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
            if called != name:
                continue
            callee = resolve_call(site.node, site.scope, _CAST_VOCABULARY)
            if callee is None:
                continue
            if callee.fn is scope.node or (
                callee.fn.name.value == name and os.path.abspath(callee.model.path) == here and m is not model
            ):
                out.append((m, site))
    return out


# What a function of another module must mention to be read for a cast of its module.
_CAST_VOCABULARY = frozenset({"half", "bfloat16", "float16", "dtype"})


def _non_local(expr: cst.BaseExpression, scope) -> bool:
    """An attribute of `self` (or another object), not a name local to `scope`."""
    text = dotted(expr) or ""
    head = text.split(".")[0]
    if "." in text and scope.self_name == head:
        return True
    return not scope.binds(head) or getattr(scope, "is_module", False)


def _chained_receiver(node: cst.BaseExpression) -> cst.Call | None:
    """`X(...)` of `X(...).to(device)` when the outer method returns the module."""
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in MODULE_RETURNING
        and isinstance(node.func.value, cst.Call)
    ):
        return node.func.value
    return None


class _LiteralLoops(cst.CSTVisitor):
    """Calls inside `for name in (a, b.c):` whose loop variable stands for those names."""

    def __init__(self) -> None:
        self.found: dict[tuple[int, str], tuple[str, ...]] = {}
        self.loops: list[tuple[str, tuple[str, ...]]] = []
        self._pushed: set[int] = set()

    def visit_For(self, node: cst.For) -> None:
        it = node.iter
        if isinstance(node.target, cst.Name) and isinstance(it, (cst.Tuple, cst.List)) and it.elements:
            names = tuple(dotted(el.value) for el in it.elements if not isinstance(el, cst.StarredElement))
            if len(names) == len(it.elements) and all(names):
                self.loops.append((node.target.value, names))  # type: ignore[arg-type]
                self._pushed.add(id(node))

    def leave_For(self, original_node: cst.For) -> None:
        if id(original_node) in self._pushed:
            self._pushed.discard(id(original_node))
            self.loops.pop()

    def visit_Call(self, node: cst.Call) -> None:
        for name, names in self.loops:
            self.found[(id(node), name)] = names


class _ParameterLoops(cst.CSTVisitor):
    """`p.data = <cast>` inside `for [name,] p in module[.named]_parameters()` (see
    Casts._parameter_data_casts), with what the enclosing `if`s say of `p.requires_grad`."""

    def __init__(self) -> None:
        self.casts: dict[int, tuple[str, bool | None]] = {}
        self.loops: list[tuple[str, str, int]] = []  # (parameter name, module text, depth of senses)
        self.senses: list[bool | None] = []
        self._parameter_loops: set[int] = set()  # id of each For node pushed on `loops`

    def visit_For(self, node: cst.For) -> None:
        it = node.iter
        if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value in _PARAMETER_ACCESSORS):
            return
        module = dotted(it.func.value)
        target = node.target
        if isinstance(target, cst.Tuple) and target.elements:
            target = target.elements[-1].value
        if module is not None and isinstance(target, cst.Name):
            self.loops.append((target.value, module, len(self.senses)))
            self._parameter_loops.add(id(node))

    def leave_For(self, original_node: cst.For) -> None:
        if id(original_node) in self._parameter_loops:
            self._parameter_loops.discard(id(original_node))
            self.loops.pop()

    def visit_If_body(self, node: cst.If) -> None:
        self.senses.append(self._sense(node.test))

    def leave_If_body(self, node: cst.If) -> None:
        self.senses.pop()

    def visit_If_orelse(self, node: cst.If) -> None:
        sense = self._sense(node.test) if not isinstance(node.test, cst.BooleanOperation) else None
        self.senses.append(None if sense is None else not sense)

    def leave_If_orelse(self, node: cst.If) -> None:
        self.senses.pop()

    def _sense(self, test: cst.BaseExpression) -> bool | None:
        if not self.loops:
            return None
        return _requires_grad_sense(test, self.loops[-1][0])

    def visit_Assign(self, node: cst.Assign) -> None:
        if not self.loops or not isinstance(node.value, cst.Call):
            return
        param, module, depth = self.loops[-1]
        if not any(dotted(t.target) == f"{param}.data" for t in node.targets):
            return
        func = node.value.func
        if isinstance(func, cst.Attribute) and dotted(func.value) in (param, f"{param}.data"):
            senses = [s for s in self.senses[depth:] if s is not None]
            sense = False if False in senses else True if senses else None
            self.casts[id(node.value)] = (module, sense)


def _requires_grad_sense(test: cst.BaseExpression, param: str) -> bool | None:
    """What `test` says of `<param>.requires_grad` when it holds: True, False or None."""
    if dotted(test) == f"{param}.requires_grad":
        return True
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _requires_grad_sense(test.expression, param)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        left, right = _requires_grad_sense(test.left, param), _requires_grad_sense(test.right, param)
        return left if left is not None else right
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and dotted(test.left) == f"{param}.requires_grad":
        target = test.comparisons[0]
        if isinstance(target.comparator, cst.Name) and target.comparator.value in ("True", "False"):
            value = target.comparator.value == "True"
            if isinstance(target.operator, (cst.Equal, cst.Is)):
                return value
            if isinstance(target.operator, (cst.NotEqual, cst.IsNot)):
                return not value
    return None


class _CallCollector(cst.CSTVisitor):
    # NB: at module level, not inside the function: `walk` plans its dispatch once per class.
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, n: cst.Call) -> None:
        self.calls.append(n)


def _calls_in(node: cst.CSTNode) -> list[cst.Call]:
    collector = _CallCollector()
    walk(node, collector)
    return collector.calls


def _dotted_names(expr: cst.CSTNode) -> list[cst.BaseExpression]:
    """Every maximal dotted name inside an expression (`model.parameters` of `model.parameters()`)."""
    collector = _DottedNameCollector()
    walk(expr, collector)
    return collector.names


class _DottedNameCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: list[cst.BaseExpression] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if dotted(node) is not None:
            self.names.append(node)
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node)


# What a function or method of another module must mention to be read as an optimizer
# factory (the project index's relevance check; also among its texts worth reading).
OPTIMIZER_VOCABULARY = frozenset({"optim"})


# --- pre-filter token -------------------------------------------------------------------
# Calls taken for optimizer factories, by the last part of their name:
# `create_optimizer(model)`, `configure_optimizers()`, not `get_optimizer_cls_and_kwargs(...)`.
OPTIMIZER_FACTORY = re.compile(r"^_?(create|build|get|make|configure|init|setup)_?(optimizers?|optim)(_and_schedulers?)?$")
_OPTIMIZER_PACKAGE_PARTS = frozenset({"optim", "optimizers", "optimization"})


@dataclass(frozen=True)
class _OptimizerName:
    """Pre-filter token for "builds an optimizer" (`_builds_optimizer`): an
    identifier that is a part of an OPTIMIZER_PACKAGES name (`optim`, `optimizers`,
    `optimization`: a constructor is only qualified through an import or a dotted name
    that spells one, or through the package of a relative import, which the pre-filter
    appends) or the name of a factory.  `self.optimizer`, `optimizer.step()` and
    `optimum` are none of these; nor is "optimization" in a message (searched outside
    strings; the package of a relative import is appended to that text too).
    """

    outside_strings = True

    def search(self, text: str) -> bool:
        at = text.find("optim")
        while at != -1:
            begin, end = identifier_span(text, at, at + 5)
            name = text[begin:end]
            if name in _OPTIMIZER_PACKAGE_PARTS or OPTIMIZER_FACTORY.match(name):
                return True
            at = text.find("optim", end)
        return False


OPTIMIZER_TOKENS = (_OptimizerName(),)


class _TrainerName:
    """Pre-filter token for "hands the model to a trainer" (analysis/trainers.py): an
    identifier ending in `trainer` (`Trainer`, `SFTTrainer`, `BaseTrainer`), outside strings.
    Such a trainer builds the optimizer itself: the module names none."""

    outside_strings = True

    def search(self, text: str) -> bool:
        at = text.find("trainer")
        while at != -1:
            _, end = identifier_span(text, at, at + len("trainer"))
            if end == at + len("trainer"):  # the identifier ends with it
                return True
            at = text.find("trainer", end)
        return False


class _OptimizerLookup:
    """Pre-filter token for an optimizer class looked up by a call (`callees.classes_held`:
    espnet's `dynamic_import_optimizer(args.opt)`): a called identifier that contains
    `optimizer`, outside strings."""

    outside_strings = True

    def search(self, text: str) -> bool:
        at = text.find("optimizer")
        while at != -1:
            _, end = identifier_span(text, at, at + len("optimizer"))
            after = end
            while after < len(text) and text[after] in " \t":
                after += 1
            if after < len(text) and text[after] == "(":
                return True
            at = text.find("optimizer", end)
        return False


# An optimizer built by a class looked up by name; and what trains a model without an
# optimizer spelled in its module: that, or a trainer.
OPTIMIZER_LOOKUP_TOKENS = (*OPTIMIZER_TOKENS, _OptimizerLookup())
TRAINING_TOKENS = (*OPTIMIZER_LOOKUP_TOKENS, _TrainerName())


_NO_WEIGHTS = re.compile(r"(?:Config|Tokenizer(?:Fast)?|Processor|FeatureExtractor|Scheduler)$")


def _loads_no_weights(call: cst.Call) -> bool:
    """`AutoConfig.from_pretrained(..., torch_dtype="float16")` reads a configuration (a
    tokenizer, a processor): it records the dtype for a later model, it casts no weights."""
    receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
    last = (dotted(receiver) or "").split(".")[-1]
    return bool(_NO_WEIGHTS.search(last))


_HALF_DTYPES = {"float16": "float16", "half": "float16", "bfloat16": "bfloat16"}


def _casts_its_argument(expr: cst.BaseExpression, scope) -> frozenset[str] | None:
    """The low-precision dtypes a function handed to `Module.apply` casts its argument's
    tensors to: `.half()`, `.bfloat16()` or `.to(torch.float16)` on a name, attribute or
    `.data` reached from its first parameter (also through `getattr(l, attr)`)."""
    from amplint.analysis.callees import function_named

    found = function_named(expr, scope) if isinstance(expr, (cst.Name, cst.Attribute)) else None
    if found is None:
        return None
    fn, _ = found
    params = fn.params.params
    if not params:
        return None
    finder = _ArgumentCasts(params[0].name.value)
    walk(fn.body, finder)
    return frozenset(finder.dtypes) or None


class _ArgumentCasts(cst.CSTVisitor):
    def __init__(self, param: str) -> None:
        self.reached = {param}  # the parameter, and names bound to its attributes
        self.dtypes: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        # `tensor = getattr(l, attr)`, `w = l.weight`: reached from the parameter too
        value = node.value
        source = value.args[0].value if (isinstance(value, cst.Call) and dotted(value.func) == "getattr" and value.args) else value
        if (dotted(source) or "").split(".")[0] in self.reached:
            for t in node.targets:
                if isinstance(t.target, cst.Name):
                    self.reached.add(t.target.value)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or (dotted(func.value) or "").split(".")[0] not in self.reached:
            return
        method = func.attr.value
        if method in ("half", "bfloat16") and not node.args:
            self.dtypes.add("float16" if method == "half" else "bfloat16")
        elif method == "to":
            for a in node.args:
                text = dotted(a.value) or ""
                if text.startswith("torch.") and text.split(".", 1)[1] in _HALF_DTYPES:
                    self.dtypes.add(_HALF_DTYPES[text.split(".", 1)[1]])


def _appended(name: str, body: cst.CSTNode) -> list[cst.BaseExpression]:
    """What a function's own code adds to the list `name` (`name.append(v)`,
    `name.extend(v)`), with a loop variable replaced by what its loop iterates over."""
    finder = _Appends(name)
    walk(body.body if isinstance(body, cst.FunctionDef) else body, finder)
    return finder.values


class _Appends(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.values: list[cst.BaseExpression] = []
        self._loops: list[cst.For] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_For(self, node: cst.For) -> None:
        self._loops.append(node)

    def leave_For(self, original_node: cst.For) -> None:
        self._loops.pop()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in ("append", "extend")
                and isinstance(func.value, cst.Name) and func.value.value == self.name and node.args):
            return
        value = node.args[0].value
        for loop in reversed(self._loops):
            if isinstance(value, cst.Name) and value.value in target_names(loop.target):
                value = loop.iter  # `for n, p in model.named_parameters(): ... append(p)`
                break
        self.values.append(value)
