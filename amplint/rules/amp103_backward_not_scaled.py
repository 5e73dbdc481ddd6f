"""AMP103 backward-not-scaled."""

from __future__ import annotations

import re

import libcst as cst

from amplint.analysis.bindings import Bindings
from amplint.analysis.callees import bases_of, method_of, resolve_class
from amplint.analysis.model import ClassInfo
from amplint.analysis.scaler_protocol import SCALER_TOKENS, before_training, protocol
from amplint.analysis.steps import Kind
from amplint.analysis.names import dotted
from amplint.analysis.plain_scaler import plain_scaler
from amplint.analysis.syntax import value_branches
from amplint.analysis.walk import walk
from amplint.diagnostics import Applicability
from amplint.rules._base import FixAvailability, Replace, Rule


class BackwardNotScaled(Rule):
    """
    ## What it does
    Flags a plain `loss.backward()` (or `torch.autograd.backward(loss)`) whose
    gradients reach `scaler.step(optimizer)` of a GradScaler that may be enabled,
    with no `scaler.scale(...)` around the loss.

    A backward in the other branch of an AMP/no-AMP split (`if use_amp:
    scaler.scale(loss).backward() else: loss.backward()`) is not flagged, and neither
    are library-managed backwards (`accelerator.backward(loss)`, Lightning's
    `manual_backward`, the `.backward(loss)` of the engine `deepspeed.initialize`
    returns, apex's `with amp.scale_loss(...) as scaled_loss:`) or scalers built with
    `enabled=False`. A scaler whose `enabled=` is false where the backward runs
    (`GradScaler(enabled=use_amp)` and a backward under `if not use_amp:`) steps plainly
    there. A backward before the loop that steps (a gradient-based initialisation, a
    saliency or Fisher estimate) is not that loop's training step.

    ## Why is this bad?
    `scaler.step()` unscales the gradients before stepping: it divides every `.grad`
    by the current scale (65536 by default). Gradients that were never multiplied by
    it become 65536 times too small, so the model barely trains, and fp16 gradients
    that underflow are not rescued. Nothing raises.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    Use instead:
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Unsafe: rewrites `loss.backward(...)` to `scaler.scale(loss).backward(...)`,
    naming the scaler of the `scaler.step` it reaches. Not where the module, or a project
    module it imports, defines a `backward(self, ...)` method: the loss may be such an
    object (named loss terms), which `scaler.scale` refuses. Offered only when that is a
    single scaler visible in the same function, and not where the step runs under a
    condition the backward does not while the scaler may be None (`scaler =
    GradScaler() if use_amp else None` with `if scaler is not None: scaler.step(...)`),
    where the backward also runs without a scaler, and not where the scaler's name may
    denote another scaler at the step (`scaler = other`, or `self.refresh()` that may
    assign `self.scaler`, between the two), nor where a value of the scaler is a
    project's stand-in class without `scale` (`GradScaler() if use_amp else NoScaler()`).
    It asks for positive evidence besides: the scaler is a GradScaler built in the
    module and used only through its methods by its name (not a parameter, a factory's
    result, a conditionally imported stand-in, an alias, an argument, named by a module
    that imports this one, or reachable from a module it imports that names GradScaler,
    `__main__` or optimizer hooks; no `exec`/`globals()` in the module), and every
    `scaler.scale(...)` of the module is directly `.backward()`ed, so no value here is
    scaled already (`sum(scaler.scale(l) for l in losses)`, a lambda, a helper or
    callable object given the scaler), the module and the project modules it imports
    read no `.grad` by hand (a probe head updated as `p -= lr * p.grad`), and no
    optimizer of the function steps plainly
    (`opt_d.step()` beside `scaler.step(opt_g)`: that update would be multiplied by the
    scale). It is wrong if the loss was already scaled by
    hand (`loss * scaler.get_scale()`). A loss scaled by a helper (`loss =
    self.scale_loss(loss)`, an inherited method or a function that returns
    `scaler.scale(loss)`) is scaled: no finding.

    ## Runtime confirmation
    `amplint verify` records backward calls on tensors that did not come from
    `scaler.scale()` while a scaler with scale != 1 later steps the optimizer; a
    backward whose gradients `zero_grad()` clears before that step (an estimate
    before training) does not count. A scaler that never scaled anything has no
    scale yet, and torch's step raises there (`_scale is None`): confirmed with
    `step_raises` instead of a division.
    """

    code = "AMP103"
    name = "backward-not-scaled"
    message = "`{call}` is not scaled, but `{step}` divides its gradients by the loss scale"
    fix_title = "Use `{scaler}.scale({loss}).backward()`"
    fix_availability = FixAvailability.SOMETIMES
    safety = Applicability.UNSAFE
    requires_any = SCALER_TOKENS

    def check(self) -> None:
        proto = protocol(self.model)
        code = self.model.module.code_for_node
        for graph in self.model.steps:
            backwards = graph.of_kind(Kind.BACKWARD)
            scaled = [e for e in backwards if e.scaled]
            for bw in backwards:
                if bw.scaled or bw.managed:
                    continue
                if any(proto.exclusive(bw, s) for s in scaled):
                    continue  # the no-AMP branch of an AMP/no-AMP split
                ends = lambda e: e.kind in (Kind.SCALER_STEP, Kind.UPDATE, Kind.ZERO_GRAD) or (  # noqa: E731
                    e.kind is Kind.BACKWARD and e.scaled
                )
                steps = [
                    e
                    for e in graph.reachable(bw, stop=ends, guarded=True)
                    if e.kind is Kind.SCALER_STEP and not proto.scaler_off_where(e.scaler, bw, e) and not proto.exclusive(bw, e)
                ]
                # A backward before the loop that steps (a gradient-based initialisation, a
                # saliency or Fisher estimate) is not that loop's training step.
                steps = [e for e in steps if not before_training(bw, e)]
                if not steps:
                    continue
                step = steps[0]
                scalers = {Bindings.text_of(e.scaler) for e in steps}
                scaler = scalers.pop() if len(scalers) == 1 else None
                # NB: the finding stays where `scaler.scale(loss)` could raise (no scaler there)
                missing = scaler is not None and self._scaler_may_be_missing(proto, bw, step, scaler)
                if scaler is not None and any(self._rebound(proto, bw, e, scaler) for e in steps):
                    missing = True  # `scaler = other` (or `self.refresh()`) between: which scaler would scale?
                if scaler is not None and self._stand_in_without_scale(scaler, step.scope):
                    missing = True  # `GradScaler() if use_amp else NoScaler()`: the stand-in has no `scale`
                if scaler is not None and not missing and not self._known_unscaled_loss(proto, bw, step, scaler):
                    missing = True  # no proof that `scaler` is a GradScaler and `loss` not scaled already
                if scaler is not None and not missing and (graph.of_kind(Kind.OPT_STEP) or _reads_gradients(self.model)):
                    # `opt_d.step()` beside `scaler.step(opt_g)`: the backward's gradients may
                    # be stepped plainly, and scaling them would multiply that update by the scale.
                    missing = True
                loss, changes = self._rewrite(bw, None if missing else scaler)
                self.report_event(
                    bw,
                    changes=changes,
                    call=code(bw.node.func) + "()",
                    step=code(step.node.func) + "()",
                    scaler=scaler or "scaler",
                    loss=loss or "loss",
                )

    def _scaler_may_be_missing(self, proto, bw, step, scaler: str) -> bool:
        """The step runs under a condition the backward does not (`if scaler is not None:`,
        `if use_amp:`) and the scaler may then be None or false: `scaler = GradScaler() if
        use_amp else None`, `use_amp and GradScaler()`, a parameter.  The backward runs
        without AMP too, where the fixed `scaler.scale(loss)` raised AttributeError."""
        at_backward = {(g.if_id, g.in_body) for g in proto.guards(bw)}
        only_at_step = [g for g in proto.guards(step) if (g.if_id, g.in_body) not in at_backward]
        if not only_at_step:
            return False  # the step runs wherever the backward does: a None scaler fails there already
        if any(re.search(rf"(?<![\w.]){re.escape(scaler)}(?![\w])", g.cond) for g in only_at_step):
            return True  # the step is guarded by the scaler itself
        values = self.model.bindings.values.assigned(cst.parse_expression(scaler), step.scope)
        return not values or any(_may_be_none(v) for v, _ in values)

    def _stand_in_without_scale(self, scaler: str, scope) -> bool:
        """Some value of the scaler is an instance of a project class that defines no `scale`
        (its bases all known and none defining it): a stand-in for the no-AMP run, where the
        fixed `scaler.scale(loss)` raised AttributeError."""
        for value, vscope in self.model.bindings.values.assigned(cst.parse_expression(scaler), scope):
            for branch in value_branches(value):
                if not isinstance(branch, cst.Call):
                    continue
                cls = resolve_class(branch.func, vscope.model)
                if not isinstance(cls, ClassInfo) or method_of(cls, "scale") is not None:
                    continue
                known = bases_of(cls)
                if all(b in ("object",) or any(getattr(k, "name", None) == b.rsplit(".", 1)[-1] for k in known)
                       for b in cls.bases):
                    return True
        return False

    def _known_unscaled_loss(self, proto, bw, step, scaler: str) -> bool:
        """Positive evidence for the fix: `scaler` is plain (analysis/plain_scaler.py: a
        GradScaler built here, used only through its methods by that name), and every
        `<scaler>.scale(...)` the module writes is directly the receiver of `.backward()`,
        so nothing here holds a scaled loss that the fix would scale again
        (`sum(scaler.scale(l) for l in losses)`, a lambda)."""
        if self.model.bindings.escaped(step.scaler) or not plain_scaler(self.model, proto, scaler, step.scope):
            return False
        finder = _ScaleCalls(scaler.rsplit(".", 1)[-1])
        walk(self.model.module, finder)
        return not finder.other_use

    @staticmethod
    def _rebound(proto, bw, step, scaler: str) -> bool:
        """The scaler name may denote another object at the step than at the backward."""
        if bw.inlined or step.inlined or step.scope is not bw.scope:
            return True
        return proto.rebound_between(bw.scope, bw.node, step.node, scaler)

    def _rewrite(self, bw, scaler: str | None) -> tuple[str | None, list[Replace] | None]:
        """`loss.backward(args)` -> `scaler.scale(loss).backward(args)`."""
        func = bw.node.func
        if bw.inlined or scaler is None or bw.qualname is not None or not isinstance(func, cst.Attribute):
            return None, None
        loss = self.model.module.code_for_node(func.value)
        if "\n" in loss:
            return None, None
        if _defines_a_backward_method(self.model):
            # A loss object of the project's own with a `backward(self)` (named loss terms
            # summed in it): `scaler.scale` takes tensors only and would raise on it.
            return None, None
        receiver = cst.parse_expression(f"{scaler}.scale({loss})")
        return loss, [Replace(func.value, receiver)]



class _ScaleCalls(cst.CSTVisitor):
    """Whether `<...name>.scale` is used other than as `<...name>.scale(x).backward(...)` or
    `torch.autograd.backward(<...name>.scale(x))` (the receiver's last part is compared:
    `scaler`, `self.scaler`, `trainer.scaler` alike)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.backward_receivers: set[int] = set()
        self.other_use = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "backward" and isinstance(func.value, cst.Call):
            self.backward_receivers.add(id(func.value.func))
        elif dotted(func) in ("torch.autograd.backward", "autograd.backward") and node.args and isinstance(node.args[0].value, cst.Call):
            self.backward_receivers.add(id(node.args[0].value.func))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value != "scale" or id(node) in self.backward_receivers:
            return
        receiver = dotted(node.value)
        if receiver is not None and receiver.rsplit(".", 1)[-1] == self.name:
            self.other_use = True


def _may_be_none(value: cst.BaseExpression) -> bool:
    """`None`, or an expression that can give it (or another false value): a conditional
    expression with such a branch, `use_amp and GradScaler()`."""
    if isinstance(value, cst.Name):
        return value.value in ("None", "False")
    if isinstance(value, cst.IfExp):
        return _may_be_none(value.body) or _may_be_none(value.orelse)
    return isinstance(value, cst.BooleanOperation)


_READS_GRAD = re.compile(r"\.grad\b(?!_)")


def _reads_gradients(model) -> bool:
    """The module, or a project module it imports, reads `.grad` (`p -= lr * p.grad` of a
    probe head updated by hand, in `probes.sgd_update`, a gradient used as a value):
    scaling the backward would scale what it reads.  A buffer with no project: the
    module alone."""
    return _in_module_or_its_imports(model, _READS_GRAD)


_BACKWARD_METHOD = re.compile(r"^[ \t]+def backward\(\s*self\b", re.M)


def _defines_a_backward_method(model) -> bool:
    """The module, or a project module it imports, defines a `backward(self, ...)` method: a
    tensor-like loss object whose result a `loss.backward()` may be (hostile pass 17). An
    autograd Function's `backward(ctx, ...)` is no such method."""
    return _in_module_or_its_imports(model, _BACKWARD_METHOD)


def _in_module_or_its_imports(model, pattern: re.Pattern) -> bool:
    """`pattern` is in the module's text or a project module it imports (a buffer with no
    project: the module alone)."""
    if pattern.search(model.text):
        return True
    project = model.project
    if project is None or str(model.path)[:1] == "<":
        return False
    return any(pattern.search(project.raw_text(f) or "") for f in project.imported_files(str(model.path)))
