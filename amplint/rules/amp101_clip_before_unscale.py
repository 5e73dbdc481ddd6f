"""AMP101 clip-before-unscale."""

from __future__ import annotations

from amplint.analysis.bindings import Bindings
from amplint.analysis.names import dotted
from amplint.analysis.steps import Kind
from amplint.diagnostics import Applicability
from amplint.prefilter import Attr
from amplint.rules._base import FixAvailability, InsertBefore, Rule

# After any of these the gradients are no longer the scaled ones this backward produced:
# unscale_ divided them, step/update ended the iteration, zero_grad cleared them, and a
# new scaled backward starts its own story.
_ENDS_SCALED_WINDOW = (Kind.UNSCALE, Kind.SCALER_STEP, Kind.UPDATE, Kind.ZERO_GRAD)


class ClipBeforeUnscale(Rule):
    """
    ## What it does
    Flags gradient clipping (`clip_grad_norm_`, `clip_grad_value_`, FSDP's
    `model.clip_grad_norm_`, under any alias) that can run after
    `scaler.scale(loss).backward()` and before `scaler.unscale_(optimizer)`.

    ## Why is this bad?
    Until `unscale_` runs, every `.grad` holds the gradient times the loss scale
    (65536 by default). The clipping threshold is compared with that inflated norm,
    so clipping fires on every step and shrinks the update by the scale factor, or
    (with `clip_grad_value_`) clamps gradients to a tiny fraction of their size. The
    loss still goes down, just worse; nothing raises.

    ## Example
    ```python
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    Use instead:
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Unsafe: inserts `scaler.unscale_(optimizer)` before the clip, naming the
    optimizer that the following `scaler.step` receives. It is offered only when both
    names are visible in the same function; it would be wrong if another code path
    already unscales that optimizer in this iteration (`unscale_` twice raises).

    ## Runtime confirmation
    `amplint verify` reads the scaler's per-optimizer stage at the clip call: READY
    with a scale != 1 means the gradients were still scaled. It reports the norm seen
    by the clip, the true norm (norm / scale) and `max_norm`.

    ## References
    - PyTorch AMP examples, "Working with Unscaled Gradients"
    """

    code = "AMP101"
    name = "clip-before-unscale"
    message = "`{clip}` runs on gradients still multiplied by the loss scale"
    fix_title = "Call `{scaler}.unscale_({optimizer})` before clipping"
    fix_availability = FixAvailability.SOMETIMES
    safety = Applicability.UNSAFE
    # Pre-filter: every clip spelling contains `clip_grad` (CLIP_FUNCTIONS, CLIP_METHODS);
    # a scaled backward is a `.backward`/`autograd.backward` of a `.scale(...)` call.
    requires_any = ("clip_grad",)
    # `X.scale(loss).backward()`, `torch.autograd.backward(X.scale(loss))`: both attributes.
    and_requires_any = ((Attr("backward"),), (Attr("scale"),))
    # The clip may sit in a project helper (`clip_gradients(model, 1.0)` from utils.py).
    imported_tokens = (0,)

    def check(self) -> None:
        for graph in self.model.steps:
            for backward in graph.of_kind(Kind.BACKWARD):
                if not backward.scaled:
                    continue
                stop = lambda e: e.kind in _ENDS_SCALED_WINDOW or (e.kind is Kind.BACKWARD and e.scaled)  # noqa: E731
                unscales = lambda p: graph.runs_in_loop(p, lambda e: e.kind is Kind.UNSCALE)  # noqa: E731
                for event in graph.reachable(backward, stop=stop, guarded=True, stop_at=unscales):
                    if event.kind is not Kind.CLIP:
                        continue
                    clip_name = dotted(event.node.func) or event.qualname or "clip_grad_norm_"
                    scaler = Bindings.text_of(backward.scaler) or "scaler"
                    optimizer = self._stepped_optimizer(graph, event)
                    changes = None
                    if optimizer and not backward.inlined and backward.scope is event.scope and event.statement is not None:
                        changes = [InsertBefore(event.statement, f"{scaler}.unscale_({optimizer})")]
                    self.report_event(
                        event, changes=changes, clip=clip_name, scaler=scaler, optimizer=optimizer or "optimizer"
                    )

    @staticmethod
    def _stepped_optimizer(graph, clip) -> str | None:
        """The optimizer text of the first `scaler.step(opt)` after the clip, if one is certain."""
        found = {
            Bindings.text_of(e.optimizer)
            for e in graph.reachable(clip, stop=lambda e: e.kind in (Kind.SCALER_STEP, Kind.UPDATE))
            if e.kind is Kind.SCALER_STEP and e.optimizer and e.scope is clip.scope and not e.inlined
        }
        return found.pop() if len(found) == 1 else None
