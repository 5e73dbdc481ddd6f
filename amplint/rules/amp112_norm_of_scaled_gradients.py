"""AMP112 norm-of-scaled-gradients."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.frameworks import lightning_may_scale_in_fp16
from amplint.analysis.grad_norms import divided_by_scale, measures_only
from amplint.analysis.steps import Event, Kind
from amplint.prefilter import Attr, Word
from amplint.rules._base import Rule

# After any of these the gradients are no longer the scaled ones a backward produced:
# unscale_ divided them (or the library did: `accelerator.clip_grad_norm_`, or the step of
# a managed optimizer), step/update ended the iteration, zero_grad cleared them.
_ENDS_SCALED_WINDOW = (Kind.UNSCALE, Kind.MANAGED_UNSCALE, Kind.SCALER_STEP, Kind.UPDATE, Kind.ZERO_GRAD, Kind.OPT_STEP)
# Lightning calls this hook right after backward, before the precision plugin unscales.
_AFTER_BACKWARD_HOOKS = frozenset({"on_after_backward"})


class NormOfScaledGradients(Rule):
    """
    ## What it does
    Flags a gradient norm computed after a scaled backward and before the gradients are
    unscaled.

    A norm divided by the scale (`norm / scaler.get_scale()`, or a helper handed
    `scale=scaler.get_scale()` that divides by it) is the true norm and is not flagged;
    the same division after `unscale_` is AMP111.

    Norms: `p.grad.norm()` (also summed over parameters in a helper),
    `torch.norm` / `torch.linalg.vector_norm` / `torch.nn.utils.get_total_norm` of
    gradients, Lightning's `grad_norm(...)`, and `clip_grad_norm_(..., max_norm=inf)`
    used only to measure. The backward is `scaler.scale(loss).backward()`, or a
    library's backward that scales in float16 mixed precision (`accelerator.backward`,
    `fabric.backward`, Lightning's `self.manual_backward`, and Lightning's
    `on_after_backward` hook) before its own unscale (`scaler.unscale_`,
    `accelerator.clip_grad_norm_`, the optimizer step). The diagnostic points at the
    norm call, or at the call of the helper that computes it. An `on_after_backward`
    hook is judged by the precision the project gives its Trainer: where every value it
    sets (a `precision:` key of its YAML configs, a literal `precision=` of a `Trainer(`
    call) scales nothing (`bf16-mixed`, `bf16-true`, `32`), the hook reads true
    gradients; a value decided at run time, or none, may be `16-mixed`.

    ## Why is this bad?
    Until `unscale_` runs, every `.grad` is the true gradient times the loss scale
    (65536 by default, and changing as the scaler adapts), so the norm is too: logged
    gradient norms are meaningless, adaptive clipping or learning-rate schedules built on
    them act on the wrong number, and a NaN check or threshold compares against a value
    thousands of times too large. Nothing is clipped, so AMP101 stays silent; nothing
    raises.

    ## Example
    ```python
    scaler.scale(loss).backward()
    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    scaler.step(optimizer)
    scaler.update()
    ```

    Use instead:
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    No fix: where the norm belongs depends on what it is for (log it after `unscale_`,
    or divide by `scaler.get_scale()`).

    ## Runtime confirmation
    `amplint verify` sees the norm call while an enabled scaler holds the measured
    gradients' optimizer READY (still scaled) and reports the norm seen, the scale and
    the norm after unscaling (norm / scale).
    """

    code = "AMP112"
    name = "norm-of-scaled-gradients"
    message = "`{norm}` measures gradients that are still multiplied by the loss scale"
    # Pre-filter: a norm is `.norm`, `get_total_norm`, `vector_norm`, `_foreach_norm`,
    # Lightning's `grad_norm` or an infinite `clip_grad_norm_` (all contain "norm"), of
    # gradients (`.grad`, or `grad_norm`); the backward is an attribute (`.backward`,
    # `manual_backward`) or `torch.autograd.backward`, or the hook Lightning calls after it.
    requires_any = ("norm",)
    and_requires_any = ((Attr("grad"), "grad_norm"), (Attr("backward"), Word("manual_backward"), Word("on_after_backward")))
    # The norm may be computed in a project helper (`log_grad_norm(model)` from utils.py).
    imported_tokens = (0, 1)

    def check(self) -> None:
        for graph in self.model.steps:
            for event, backward in self._norms_after_backward(graph):
                self.report_event(event, witnesses=(backward,) if backward is not None else (), norm=self._spelling(event))

    def _norms_after_backward(self, graph):
        """(norm event, the backward whose scaled gradients it measures) pairs of a graph."""
        unscales = lambda p: graph.runs_in_loop(p, lambda e: e.kind is Kind.UNSCALE)  # noqa: E731
        starts: list[Event | None] = [b for b in graph.of_kind(Kind.BACKWARD) if b.scales_loss]
        for backward in starts:
            stop = lambda e, b=backward: e.kind in _ENDS_SCALED_WINDOW or (  # noqa: E731
                e.kind is Kind.BACKWARD and e is not b and e.scales_loss
            )
            for event in graph.reachable(backward, stop=stop, guarded=True, stop_at=unscales):
                if self._is_norm(event):
                    yield event, backward
        if self._is_after_backward_hook(graph.scope) and lightning_may_scale_in_fp16(self.model):
            stop = lambda e: e.kind in _ENDS_SCALED_WINDOW  # noqa: E731
            for event in graph.reachable(graph.entry, stop=stop, guarded=True, stop_at=unscales):
                if self._is_norm(event):
                    yield event, None

    @staticmethod
    def _is_norm(event: Event) -> bool:
        """A norm of the scaled gradients, not divided by the scale to get the true one."""
        return is_norm(event) and not divided_by_scale(event)


    @staticmethod
    def _is_after_backward_hook(scope) -> bool:
        node = scope.node
        return scope.cls is not None and isinstance(node, cst.FunctionDef) and node.name.value in _AFTER_BACKWARD_HOOKS

    def _spelling(self, event: Event) -> str:
        code = event.scope.model.module.code_for_node
        return f"{code(event.node.func)}(...)"


def is_norm(event: Event) -> bool:
    """A norm of gradients: a GRAD_NORM event, or a clip to infinity used only to measure."""
    if event.kind is Kind.GRAD_NORM:
        return True
    return event.kind is Kind.CLIP and measures_only(event.node, event.scope.model)
