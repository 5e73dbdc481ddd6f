"""AMP109 unscale-step-mismatch."""

from __future__ import annotations

from dataclasses import dataclass

from amplint.analysis.bindings import call_arg
from amplint.analysis.names import dotted
from amplint.analysis.scaler_protocol import SCALER_TOKENS
from amplint.analysis.steps import Event, Kind
from amplint.analysis.wrappers import ObjectPath, object_path, wraps
from amplint.prefilter import Word
from amplint.rules._base import Rule


@dataclass(frozen=True, eq=False)
class _Use:
    """One `scaler.unscale_(x)` or `scaler.step(x)`, with what its scaler and `x` denote."""

    event: Event
    scaler: ObjectPath | None
    optimizer: ObjectPath | None

    @classmethod
    def of(cls, event: Event) -> "_Use":
        func = event.node.func
        return cls(event, object_path(func.value, event.scope), object_path(_optimizer_expr(event), event.scope))

    @property
    def text(self) -> str:
        return dotted(_optimizer_expr(self.event)) or "optimizer"


def _optimizer_expr(event: Event):
    return call_arg(event.node, 0, "optimizer")


class UnscaleStepMismatch(Rule):
    """
    ## What it does
    Flags `scaler.step(x)` when the same scaler unscales another object `y` in the same
    iteration, never steps `y`, and `x` and `y` are an optimizer and a wrapper around it.

    An object and its wrapper: one is an attribute of the other (`self.fp32_optimizer` and
    `self.fp32_optimizer.optimizer`, `scaler.unscale_(wrapper.optimizer)` and
    `scaler.step(wrapper)`), or one was built from the other (`opt = Lookahead(base)`).
    A class whose `param_groups` forwards to another attribute than the unscaled one
    (`wrapper.optimizer` is the discriminator's, `param_groups` the generator's) holds
    other parameters: not a wrapper of it. Properties are followed (`self.optimizer` returning
    `self.fp32_optimizer.optimizer`, `self.scaler` returning `self._grad_scaler`). In an
    optimizer wrapper class whose methods split the protocol (`clip_grad_norm()` unscales,
    `step()` steps), the methods of the class together count as one iteration, as the
    callers use them. A GAN that unscales and steps `opt_d` and only steps `opt_g` is
    fine: those are two optimizers, not an optimizer and its wrapper.

    ## Why is this bad?
    GradScaler keeps its per-optimizer state by object. `unscale_(inner)` divides the
    gradients and marks `inner` unscaled; `step(wrapper)` finds the wrapper still READY
    and unscales the same gradients (through the wrapper's `param_groups`) a second time.
    Every update is divided by the loss scale (65536 by default) once more: training
    silently crawls, and the inf check of the second pass runs on gradients that are
    already small.

    ## Example
    ```python
    base = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer = Lookahead(base)
    scaler.scale(loss).backward()
    scaler.unscale_(base)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    Use instead:
    ```python
    base = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer = Lookahead(base)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    No fix: which of the two objects to hand to both calls depends on what the wrapper's
    `step` does.

    ## Runtime confirmation
    `amplint verify` sees `scaler.step(x)` find `x` READY while the gradients of its
    parameters were already unscaled through another object in this iteration, and
    reports the scale and the ratio of the gradients the step applies to those it
    should (1/scale).
    """

    code = "AMP109"
    name = "unscale-step-mismatch"
    message = (
        "`{scaler}.step({stepped})` unscales the gradients that `{scaler}.unscale_({unscaled})` already "
        "unscaled: `{stepped}` and `{unscaled}` wrap the same parameters"
    )
    # Pre-filter: an `unscale_` call and a scaler (SCALER_TOKENS) in the file itself.
    requires_any = (Word("unscale_"),)
    and_requires_any = (SCALER_TOKENS,)

    def check(self) -> None:
        reported: set[int] = set()
        for cls in self.model.classes.values():
            for step, unscale in class_mismatches(self.model, cls):
                if id(step.event.node) in reported:
                    continue
                reported.add(id(step.event.node))
                self.report(step.event.node, **self._fmt(step, unscale))
        for graph in self.model.steps:
            own = [_Use.of(e) for e in graph.of_kind(Kind.UNSCALE, Kind.SCALER_STEP) if e.scope is graph.scope]
            for step, unscale in _mismatches(own, graph):
                if id(step.event.node) not in reported:
                    reported.add(id(step.event.node))
                    self.report_event(step.event, witnesses=(unscale.event,), **self._fmt(step, unscale))

    @staticmethod
    def _fmt(step: _Use, unscale: _Use) -> dict:
        scaler = dotted(step.event.node.func.value) or "scaler"
        return {"scaler": scaler, "stepped": step.text, "unscaled": unscale.text}


def class_mismatches(model, cls) -> list[tuple[_Use, _Use]]:
    """Mismatches among the unscale_/step calls written in the methods of one class."""
    uses: list[_Use] = []
    for scope in model.scopes:
        if scope.cls is cls:
            uses += [_Use.of(e) for e in model.steps.graph(scope).of_kind(Kind.UNSCALE, Kind.SCALER_STEP) if e.scope is scope]
    return _mismatches(uses, None)


def _mismatches(uses: list[_Use], graph) -> list[tuple[_Use, _Use]]:
    """(step, unscale) pairs on one scaler where the unscaled object is never stepped and
    the two objects wrap each other.  With a graph, the step must follow the unscale in
    the same iteration (before an update); without one, any two uses count."""
    out = []
    unscales = [u for u in uses if u.event.kind is Kind.UNSCALE and u.scaler is not None and u.optimizer is not None]
    steps = [u for u in uses if u.event.kind is Kind.SCALER_STEP and u.scaler is not None and u.optimizer is not None]
    for unscale in unscales:
        later = steps
        if graph is not None:
            after = {id(e) for e in graph.reachable(unscale.event, stop=lambda e: e.kind is Kind.UPDATE)}
            later = [s for s in steps if id(s.event) in after]
        same_scaler = [s for s in later if s.scaler == unscale.scaler]
        if any(s.optimizer == unscale.optimizer for s in same_scaler):
            continue  # the unscaled object is stepped too (a GAN's opt_d)
        for step in same_scaler:
            if wraps(unscale.optimizer, _optimizer_expr(unscale.event), unscale.event.scope,
                     step.optimizer, _optimizer_expr(step.event), step.event.scope):
                out.append((step, unscale))
    return out
