"""AMP108 unscale-twice."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.bindings import Bindings
from amplint.analysis.names import dotted
from amplint.analysis.scaler_protocol import protocol, search
from amplint.analysis.steps import Kind
from amplint.diagnostics import Applicability
from amplint.prefilter import Word
from amplint.rules._base import FixAvailability, RemoveStatement, Rule


class UnscaleTwice(Rule):
    """
    ## What it does
    Flags a `scaler.unscale_(optimizer)` that can run after another `unscale_` of
    the same scaler and optimizer with no `scaler.update()` in between, for example an
    explicit `unscale_` before a helper that unscales again, two clipping blocks
    that each unscale, or a clipping method whose early `return` after an
    `unscale_gradients()` does not cover every path, so that some calls fall through
    to a second one. The diagnostic points at the second call.

    A loop such as `for opt in optimizers: scaler.unscale_(opt)` unscales each
    optimizer once: its next pass is another optimizer, not a second unscale_.

    An `unscale_` that repeats on every micro-batch of one loop iteration is AMP107's
    finding, not this one.

    Accelerate's `accelerator.clip_grad_norm_(...)` (and `unscale_gradients()`) unscales
    every optimizer the accelerator prepared, under float16 mixed precision: a second such
    call before an optimizer step (the prepared optimizer's `step()` updates the scaler)
    raises the same error. Two clips of two parameter groups back to back
    (audiolm-pytorch's discriminators) are flagged at the second.

    ## Why is this bad?
    `unscale_` divides the gradients by the scale and records that it did; a second
    call before `update()` raises "unscale_() has already been called on this
    optimizer since the last update()". Code paths that only rarely take both calls
    (a clipping option, a logging step) crash late in a run.

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    log_grad_norm(model)
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    Use instead:
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    log_grad_norm(model)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Unsafe: deletes the second `unscale_` statement, leaving its lines empty (later
    lines keep their numbers). Offered only when every path to it passes the first one
    (so the call could only ever raise), the statement is alone on its line (not
    `scaler.unscale_(opt); clip(...)`) and not alone in its block, and there is positive evidence that nothing catches the
    RuntimeError it raises (where a handler runs, deleting the call changes which code
    runs): no `try`, `finally` that leaves (`return`, `break`, `continue`),
    `contextlib.suppress`, `ExitStack` or project context manager around it, and its
    function is reached only by direct calls of this module (up to four callers deep, or
    from the module level of a script that no project file imports or runs by path with
    `runpy`, `importlib` or `exec`) that nothing catches either. A decorated function or
    a method of a decorated class, a generator, a callback or thread target (named other
    than in a call), a call inside a lambda or a generator expression, a method nothing
    here calls (a framework's hook), a name a module importing this one mentions, or a
    module that reaches names dynamically (`globals()`, `exec`) gets no fix. Two calls whose optimizer name
    is bound again between them (`optimizer = o2`) unscale two objects: no finding. The
    optimizer must be a name or a `self.<attr>` its class assigns (a property may give
    another optimizer at each read: then the second call unscales another one).

    ## Runtime confirmation
    `amplint verify` records the second `unscale_` call for an optimizer between two
    updates (PyTorch raises there).
    """

    code = "AMP108"
    name = "unscale-twice"
    message = "`{call}` can run after `{first}` already unscaled {optimizer} (no `update()` in between)"
    fix_title = "Remove the second `{call}`"
    fix_availability = FixAvailability.SOMETIMES
    safety = Applicability.UNSAFE
    # The method's name (not `unscale_lora_layers`), or Accelerate's clip, which unscales.
    requires_any = (Word("unscale_"), ("accelerat", Word("clip_grad_norm_")), ("accelerat", Word("unscale_gradients")))

    def check(self) -> None:
        self._check_library_unscales()
        proto = protocol(self.model)
        code = self.model.module.code_for_node
        for graph in self.model.steps:
            unscales = graph.of_kind(Kind.UNSCALE)
            if len(unscales) < 2:
                continue
            for first in unscales:
                if proto.scaler_disabled(first.scaler) or proto.key(first, graph, "optimizer") is None:
                    continue
                escaped = self._escapes(proto, first, graph)
                # Stay within one iteration of every loop around the first unscale_: an
                # unscale_ repeated by the training loop, with the update skipped on some
                # iterations, is AMP107's finding, and the next pass of
                # `for opt in optimizers: scaler.unscale_(opt)` is another optimizer.  A
                # path may still leave those loops: after `unscale_gradients()` has
                # unscaled every optimizer, an unscale_ further on is a second one.
                own_loops = {id(loop.header): loop for loop in first.loops}
                onward = lambda p: own_loops[id(p)].exits() if id(p) in own_loops else p.succ  # noqa: E731
                blocked = lambda p, f=first: (  # noqa: E731
                    p.event is not None and p.event.kind is Kind.UPDATE and proto.same(proto.key(p.event, graph), proto.key(f, graph))
                )
                for second in unscales:
                    if second is first or proto.key(second, graph) != proto.key(first, graph):
                        continue
                    if proto.key(second, graph, "optimizer") != proto.key(first, graph, "optimizer"):
                        continue
                    target = graph.point(second)
                    if not search(graph.point(first), found=lambda p, t=target: p is t, blocked=blocked, onward=onward):
                        continue
                    if proto.exclusive(first, second):
                        continue
                    if escaped and self._hidden_call_between(proto, graph, first, second):
                        # Aliased, stored, passed on or its bound `update` taken
                        # (`on_step_end = scaler.update`), and a call between the two could
                        # run that update under another name, out of this analysis's sight.
                        continue
                    if self._rebound(proto, graph, first, second):
                        continue  # `optimizer = o2` between them: another optimizer, unscaled once
                    if any(g.holds is False and g.cond and proto.flag_set_after(first, g.cond, second) for g in proto.guards(second)):
                        continue  # `unscale_(opt); unscaled = True` ... `if not unscaled: unscale_(opt)`
                    changes = None
                    if (not second.inlined and proto.alone_on_its_line(second) and proto.removable(second.statement)
                            and self._dominated(graph, first, second)
                            and _stable_argument(second) and proto.raises_uncaught(second)):
                        changes = [RemoveStatement(second.statement)]
                    self.report_event(
                        second,
                        witnesses=(first,),
                        changes=changes,
                        call=code(second.anchor.func) + "()" if second.inlined else code(second.node),
                        first=code(first.anchor if first.inlined else first.node),
                        optimizer=self._optimizer_text(first, proto.key(first, graph, "optimizer")),
                    )

    def _check_library_unscales(self) -> None:
        """Two `accelerator.clip_grad_norm_` calls (or `unscale_gradients()`) on one path with
        no optimizer step, scaler step or update between: the second unscales again."""
        if self._accelerator_not_fp16():
            return
        code = self.model.module.code_for_node
        for graph in self.model.steps:
            unscales = [e for e in graph.of_kind(Kind.MANAGED_UNSCALE) if "accelerat" in (e.qualname or "").lower()]
            if len(unscales) < 2 or not any(
                    e.kind is Kind.BACKWARD and e.managed and "accelerat" in (e.qualname or "").lower() for e in graph.events):
                continue
            resets = (Kind.OPT_STEP, Kind.SCALER_STEP, Kind.UPDATE)
            for first in unscales:
                own_loops = {id(loop.header): loop for loop in first.loops}
                onward = lambda p: own_loops[id(p)].exits() if id(p) in own_loops else p.succ  # noqa: E731
                blocked = lambda p: p.event is not None and p.event.kind in resets  # noqa: E731
                for second in unscales:
                    if second is first or second.qualname.rsplit(".", 1)[0] != first.qualname.rsplit(".", 1)[0]:
                        continue
                    target = graph.point(second)
                    if not search(graph.point(first), found=lambda p, t=target: p is t, blocked=blocked, onward=onward):
                        continue
                    if protocol(self.model).exclusive(first, second):
                        continue
                    self.report_event(
                        second,
                        witnesses=(first,),
                        call=code(second.anchor.func) + "()" if second.inlined else code(second.node),
                        first=code(first.anchor if first.inlined else first.node),
                        optimizer="every optimizer the accelerator prepared",
                    )

    def _accelerator_not_fp16(self) -> bool:
        """Every `Accelerator(...)` of the module says, by a literal, bfloat16 or no mixed
        precision: no GradScaler, nothing to unscale twice."""
        found = False
        for site in self.model.calls:
            qual = self.model.qualify(site.node.func) or ""
            if not qual.endswith("Accelerator") or not qual.startswith("accelerate"):
                continue
            found = True
            arg = next((a.value for a in site.node.args if a.keyword is not None and a.keyword.value == "mixed_precision"), None)
            if not (isinstance(arg, cst.SimpleString) and arg.evaluated_value in ("bf16", "no", "fp8")):
                return False
        return found

    @staticmethod
    def _optimizer_text(first, key: str | None) -> str:
        """How the message names the optimizer: the analysed function's own name for it, or,
        for a name local to the helper that unscales (`for opt in self._optimizers:`), that
        helper's (`opt` of `unscale_gradients`)."""
        name = f"`{Bindings.text_of(key) or 'optimizer'}`"
        if first.inlined and key == first.optimizer and key is not None and key.startswith(f"{first.scope.name}@{id(first.scope)}:"):
            return f"{name} of `{first.via[-1]}`"
        return name

    @staticmethod
    def _hidden_call_between(proto, graph, first, second) -> bool:
        """A call between the two that could reach the scaler under another name: a plain
        function or callback (`on_step_end()`, `cb()`), or one handed the scaler."""
        start, end = (first.anchor, second.anchor) if first.anchor is not second.anchor else (first.node, second.node)
        scope = graph.scope if first.anchor is not second.anchor else first.scope
        calls = proto.calls_between(scope, start, end)
        if calls is None:
            return True
        scaler = (Bindings.text_of(proto.key(first, graph)) or "").split(".")[0]
        for call in calls:
            if isinstance(call.func, cst.Name) and call.func.value not in _BUILTINS:
                return True
            if any(dotted(a.value) == scaler for a in call.args):
                return True
        return False

    def _escapes(self, proto, event, graph) -> bool:
        if event.scope.model.bindings.escaped(event.scaler):
            return True
        caller_key = proto.key(event, graph)
        return caller_key != event.scaler and self.model.bindings.escaped(caller_key)

    @staticmethod
    def _rebound(proto, graph, first, second) -> bool:
        """The two calls' optimizer, or their scaler, may not be one object: its name (as
        the analysed function writes it) is bound again between them (`optimizer = o2`,
        `scaler = GradScaler()`), or their order is unknown."""
        if first.anchor is not second.anchor:
            return any(proto.rebound_between(graph.scope, first.anchor, second.anchor, Bindings.text_of(proto.key(first, graph, which)))
                       for which in ("optimizer", "scaler"))
        if first.scope is second.scope:  # both inside one call of the same helper
            return any(proto.rebound_between(first.scope, first.node, second.node, Bindings.text_of(getattr(first, which)))
                       for which in ("optimizer", "scaler"))
        return False

    @staticmethod
    def _dominated(graph, first, second) -> bool:
        """Every path from the function's entry to `second` passes `first`."""
        a, b = graph.point(first), graph.point(second)
        return not search(graph.entry, found=lambda p: p is b, blocked=lambda p: p is a)


# Builtins that never call back into the program's objects.
_BUILTINS = frozenset({"print", "len", "list", "tuple", "dict", "set", "range", "enumerate", "zip", "isinstance",
                       "float", "int", "str", "bool", "sum", "min", "max", "abs", "any", "all", "sorted", "iter", "next",
                       "hasattr", "getattr", "round", "repr", "format", "id", "type"})


def _stable_argument(event) -> bool:
    """`unscale_(opt)` / `unscale_(self.optimizer)` where reading the argument twice gives
    one object: a name, or `self.<attr>` its class assigns and does not compute (a property
    may give another optimizer at each read, and the second call then unscales that one)."""
    args = event.node.args
    if len(args) != 1 or args[0].keyword is not None or args[0].star:
        return False
    value, scope = args[0].value, event.scope
    if isinstance(value, cst.Name):
        return True
    text = dotted(value) or ""
    head, _, attr = text.partition(".")
    cls = getattr(scope, "cls", None)
    if cls is None or head != scope.self_name or not attr or "." in attr or attr in cls.methods:
        return False
    return bool(scope.model.bindings.values.assigned(value, scope))
