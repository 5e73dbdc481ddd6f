"""AMP102 step-without-update."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from amplint.analysis.bindings import Bindings
from amplint.analysis.plain_scaler import plain_scaler
from amplint.analysis.names import dotted
from amplint.analysis.scaler_protocol import SCALER_TOKENS, in_iteration_reaches, protocol, training_loop
from amplint.analysis.steps import Kind
from amplint.diagnostics import Applicability
from amplint.rules._base import FixAvailability, InsertBefore, Rule


class StepWithoutUpdate(Rule):
    """
    ## What it does
    Flags `scaler.step(optimizer)` when the same iteration never calls
    `scaler.update()`: the module never updates that scaler at all, or the step runs
    in a loop whose iteration cannot reach an update before the next one starts
    (for example, `update()` only once per epoch, after the batch loop).
    A scaler that leaves the analysis's sight is not judged: aliased (`s = scaler`),
    stored in a container or an attribute, passed to a call amplint cannot read, or
    its bound `scaler.update` taken without calling it; the update may run there.
    A scaler known only by its use (a callback's `self.scaler`, the learner's scaler
    reached through `__getattr__`) may be updated under another name in the module.
    A retry loop around the step (`while True: ... step ... break`, retried when an
    `except` caught an out-of-memory error) is not an iteration of training: the
    update belongs after it or in its caller's loop.

    ## Why is this bad?
    `update()` is what adapts the loss scale: it halves the scale after a step that
    found inf/NaN gradients and grows it after a run of clean steps, and it resets the
    per-optimizer state that `step()` records. Without it the scale never recovers
    from an overflow (every later step is skipped, silently) and, on current PyTorch,
    the second `scaler.step()` raises "step() has already been called since the last
    update()".

    ## Example
    ```python
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.zero_grad()
    ```

    Use instead:
    ```python
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    ```

    ## Fix safety
    Unsafe: adds `scaler.update()` right after the `scaler.step(...)` statement (when
    another statement follows it in its block). It is offered only when the module
    never updates that scaler anywhere, the module steps it once (with two steps on
    one scaler, a GAN's `d_step()` and `g_step()` included, the update belongs after the
    last), the stepped optimizer is a name (or a
    `self.<attr>` its class assigns) bound only to `torch.optim` optimizers (a project's
    own may take the scaler and update it, `_step_supports_amp_scaling`), and the
    scaler is plain: a GradScaler built in
    the module (not returned by a factory, not a conditionally imported stand-in) and
    used only through its methods by its name (not handed to a function, stored or
    aliased), that no module importing this one names and no module it imports could
    reach (one that names GradScaler, `__main__` or optimizer step hooks), so that no
    update runs under another name (`functools.partial(GradScaler.update, scaler)`);
    where an update
    exists elsewhere (after the loop, in another method), a second one would raise
    "No inf checks were recorded prior to update", so moving it is left to you. With
    several optimizers on one scaler, the update belongs after the last step.

    ## Runtime confirmation
    `amplint verify` counts `scaler.step` and `scaler.update` calls per scaler; more
    steps than updates confirms the finding.

    ## References
    - PyTorch AMP examples, "Typical Mixed Precision Training"
    """

    code = "AMP102"
    name = "step-without-update"
    message = "`{step}` is not followed by `{scaler}.update()` in the same iteration"
    fix_title = "Call `{scaler}.update()` after `{step}`"
    fix_availability = FixAvailability.SOMETIMES
    safety = Applicability.UNSAFE
    requires_any = SCALER_TOKENS

    def check(self) -> None:
        proto = protocol(self.model)
        graphs = list(self.model.steps)
        updated = self._updated_keys(graphs)
        for graph in graphs:
            for step in graph.of_kind(Kind.SCALER_STEP):
                if proto.scaler_disabled(step.scaler):
                    continue
                if self._escapes(step, graph):
                    # Aliased, stored, passed on or its bound `update` taken: the update
                    # may run under another name, out of this analysis's sight.
                    continue
                never = step.scaler not in updated and not (updated and self._by_name_only(step))
                if training_loop(graph, step) is None and (not never or self._received(step, graph)):
                    # The update may well follow in the caller: one that passed the scaler
                    # in (a `optimizer_step(scaler, opt)` helper) judges the whole step
                    # when it inlines this function, in this module or in its own.
                    continue
                if not never:
                    same = lambda e: e.kind is Kind.UPDATE and proto.same(proto.key(e, graph), proto.key(step, graph))  # noqa: E731
                    if in_iteration_reaches(graph, step, same):
                        continue
                scaler = Bindings.text_of(step.scaler) or "scaler"
                step_text = self.model.module.code_for_node(step.node)
                # One step of this scaler in the whole module: a GAN's `d_step()` and `g_step()`
                # each step it once, and an update inserted in both doubles the scale's
                # growth (hostile pass 17); the update belongs after the last of them.
                one_step = len({id(s.node) for g in graphs for s in g.of_kind(Kind.SCALER_STEP)
                                if s.scaler == step.scaler}) == 1
                changes = (self._insert_update(step, scaler)
                           if never and one_step and plain_scaler(self.model, proto, scaler, step.scope)
                           and self._torch_optimizer(step) and not self._owner_handed_out(step, scaler)
                           else None)
                self.report_event(step, changes=changes, step=step_text, scaler=scaler)

    def _updated_keys(self, graphs) -> set[str | None]:
        """Scalers updated anywhere: in this module's code, or in a helper it calls (any module)."""
        b = self.model.bindings
        keys: set[str | None] = set()
        for site in self.model.calls:
            func = site.node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "update" and b.is_scaler(func.value, site.scope):
                keys.add(b.key(func.value, site.scope))
        for graph in graphs:
            keys.update(e.scaler for e in graph.of_kind(Kind.UPDATE))
        return keys

    def _escapes(self, step, graph) -> bool:
        """The stepped scaler may be updated where the analysis cannot follow it."""
        if step.scope.model.bindings.escaped(step.scaler):
            return True
        caller_key = protocol(self.model).key(step, graph)
        return caller_key != step.scaler and self.model.bindings.escaped(caller_key)

    @staticmethod
    def _received(step, graph) -> bool:
        """The stepped scaler was handed to the function that holds the step (a parameter)."""
        text = Bindings.text_of(step.scaler) or ""
        head = text.split(".")[0]
        scope = graph.scope
        return head in scope.params and head != scope.self_name

    def _by_name_only(self, step) -> bool:
        """A parameter or unresolved scaler: any update in the module may be its update
        (the caller that passed it in updates it).  So is a scaler known only from its use
        (`self.scaler.get_scale()` in a callback whose `self.scaler` is the learner's,
        reached through `__getattr__`, and updated as `self.learn.scaler.update()`)."""
        key = step.scaler
        if key is None or key not in self._built_keys:
            return True
        receiver = step.node.func.value if isinstance(step.node.func, cst.Attribute) else None
        head = (dotted(receiver) or "").split(".")[0]
        return head in step.scope.params and head != step.scope.self_name

    @cached_property
    def _built_keys(self) -> frozenset[str]:
        """Keys of the names a GradScaler construction in this module is assigned to."""
        b = self.model.bindings
        return frozenset(
            b.key(cst.parse_expression(c.target), c.scope) for c in b.scaler_constructions if c.target is not None
        ) & b.scaler_keys

    def _torch_optimizer(self, step) -> bool:
        """The stepped optimizer is a name bound only to `torch.optim` optimizers: one of
        the project's own may take the scaler (`_step_supports_amp_scaling`) and update it
        itself, and a second update would then raise."""
        args = step.node.args
        if not args or args[0].keyword is not None or args[0].star:
            return False
        optimizer, scope = args[0].value, step.scope
        if isinstance(optimizer, cst.Attribute):
            # `self.optimizer` that the class assigns (not a method or a property of it)
            text, cls = dotted(optimizer) or "", getattr(scope, "cls", None)
            head, _, attr = text.partition(".")
            if cls is None or head != scope.self_name or "." in attr or attr in cls.methods:
                return False
        elif not isinstance(optimizer, cst.Name):
            return False
        assigned = self.model.bindings.values.assigned(optimizer, scope)

        def builtin(value, vscope) -> bool:
            classes = isinstance(value, cst.Call) and vscope.model.bindings.optimizer_classes(value, vscope)
            return bool(classes) and all(q.startswith("torch.optim.") for q in classes)

        return bool(assigned) and all(builtin(v, vs) for v, vs in assigned)

    @staticmethod
    def _owner_handed_out(step, scaler: str) -> bool:
        """`self.scaler` where the class hands `self` to other code (`cb.on_step_end(self)`,
        a callback loaded by path that calls `trainer.scaler.update()`): the update may run
        there, and an inserted one would be a second, which torch refuses (hostile pass 13)."""
        scope = step.scope
        cls = getattr(scope, "cls", None)
        if cls is None or not scaler.startswith(f"{scope.self_name}."):
            return False
        node = getattr(cls, "node", None)
        if node is None:
            return True  # NB: the class cannot be read: it may hand itself anywhere
        found = []

        class _HandsSelf(cst.CSTVisitor):
            def visit_Call(self, call: cst.Call) -> None:
                if any(isinstance(a.value, cst.Name) and a.value.value == scope.self_name for a in call.args):
                    found.append(call)

        node.visit(_HandsSelf())
        return bool(found)

    def _insert_update(self, step, scaler: str) -> list[InsertBefore] | None:
        """Insert the update before the statement that follows the step (same block)."""
        stmt = step.statement
        if step.inlined or not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return None
        small = stmt.body[0]
        if not isinstance(small, cst.Expr) or small.value is not step.node:
            return None
        following = protocol(self.model).next_statement(stmt)
        if following is None:
            return None  # NB: last in its block; text insertion after it is not supported
        return [InsertBefore(following, f"{scaler}.update()")]
