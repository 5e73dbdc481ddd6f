"""AMP111 scale-divided-after-unscale."""

from __future__ import annotations

from amplint.analysis.grad_norms import contains_call, divided_by_scale
from amplint.analysis.steps import Event, Kind
from amplint.prefilter import Attr, Word
from amplint.rules._base import Rule
from amplint.rules.amp112_norm_of_scaled_gradients import is_norm

# After any of these the gradients are the true ones: `unscale_` divided them by the scale,
# a library's clip unscaled them, `scaler.step` unscaled them if nothing had yet.
_UNSCALES = (Kind.UNSCALE, Kind.MANAGED_UNSCALE, Kind.SCALER_STEP)


class ScaleDividedAfterUnscale(Rule):
    """
    ## What it does
    Flags a gradient norm divided by the loss scale (`scaler.get_scale()`) after the
    gradients were unscaled: after `scaler.unscale_(optimizer)`, a library's unscaling
    clip (`accelerator.clip_grad_norm_`), or `scaler.step`, and before the next scaled
    backward. The division is written next to the norm (`norm / scaler.get_scale()`,
    `norm /= scaler.get_scale()`, `norm * (1.0 / scaler.get_scale())`), or in a helper
    that computes the norm and is handed the scale (`grad_norm(params,
    scale=scaler.get_scale())`). The diagnostic points at the norm call, or at the call
    of the helper that computes it.

    It is the mirror of AMP112: there the norm is of gradients still multiplied by the
    scale; here it is divided by the scale twice.

    ## Why is this bad?
    `unscale_` already divided every `.grad` by the scale. Dividing their norm by it
    again gives the true norm divided by 65536 (or whatever the scale is): logged norms
    look vanishingly small, a threshold or NaN check built on them never fires, and an
    adaptive clip or learning rate derived from them is off by the scale, which the
    scaler changes as it grows and backs off. Nothing raises.

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters()]
    grad_norm = torch.nn.utils.get_total_norm(grads) / scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    ```

    Use instead:
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters()]
    grad_norm = torch.nn.utils.get_total_norm(grads)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    No fix: whether to drop the division or to move the norm before `unscale_` depends on
    what the norm is for.

    ## Runtime confirmation
    `amplint verify` records `scaler.get_scale()` read while the scaler holds an
    optimizer UNSCALED in the current iteration, at the line that reads it.
    """

    code = "AMP111"
    name = "scale-divided-after-unscale"
    message = "`{norm}` is divided by the loss scale after the gradients were unscaled"
    # Pre-filter: the division reads the scale (`get_scale`, `_scale`, `cur_scale`,
    # `loss_scale`: all contain "scale"); the norm contains "norm"; gradients are unscaled
    # by `unscale_`, a library's clip or `scaler.step`.
    requires_any = ("scale",)
    and_requires_any = (("norm",), (Attr("unscale_"), Attr("step"), Word("clip_grad_norm_")))
    # The norm (and the division) may sit in a project helper (`log_grad_norm(model, scale)`).
    imported_tokens = (0, 1)

    def check(self) -> None:
        for graph in self.model.steps:
            found: dict[int, tuple[Event, Event]] = {}
            for unscale in graph.of_kind(*_UNSCALES):
                stop = lambda e: e.kind is Kind.ZERO_GRAD or (e.kind is Kind.BACKWARD and e.scales_loss)  # noqa: E731
                for event in graph.reachable(unscale, stop=stop, guarded=True):
                    if id(event) not in found and is_norm(event) and divided_by_scale(event):
                        found[id(event)] = (event, unscale)
            # `torch.norm(torch.stack([p.grad.norm() for p in ...]))` is one norm, not two
            outer = [e for e, _ in found.values()]
            for event, unscale in found.values():
                if not any(o is not event and contains_call(o.node, event.node) for o in outer):
                    self.report_event(event, witnesses=(unscale,), norm=self._spelling(event))

    def _spelling(self, event: Event) -> str:
        code = event.scope.model.module.code_for_node
        return f"{code(event.node.func)}(...)"
