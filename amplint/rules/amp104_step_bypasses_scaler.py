"""AMP104 step-bypasses-scaler."""

from __future__ import annotations

from amplint.analysis.scaler_protocol import protocol
from amplint.analysis.steps import Kind
from amplint.prefilter import Attr
from amplint.rules._base import Rule


class StepBypassesScaler(Rule):
    """
    ## What it does
    Flags a plain `optimizer.step()` that runs on gradients produced by
    `scaler.scale(loss).backward()` in the same iteration, whether or not
    `scaler.step(optimizer)` is called as well (then the optimizer steps twice).

    The plain step of the no-AMP branch (`if use_amp: scaler.step(opt) else:
    opt.step()`) is not flagged, nor is the `.step()` of an LR scheduler, nor steps
    after a literally disabled scaler (`GradScaler(enabled=False)`), nor the step after
    a library's backward (`accelerator.backward(loss)`: the optimizer the library
    prepared steps through its scaler), even where the library's code is in the project.
    Nor is the step of a scaler whose `enabled=` flag is false where it runs
    (`GradScaler(enabled=use_amp)` and a step under `if not use_amp:`), or the step a
    project's stand-in scaler takes on the fp32 path (`GradScaler() if use_amp else
    DummyGradScaler()`, whose `step` calls `optimizer.step()` and whose `scale` returns
    the loss).

    ## Why is this bad?
    Scaled gradients are the true gradients times the loss scale (65536 by
    default). Stepping on them applies an update thousands of times too large (with
    SGD) or skews Adam's moment estimates, and steps taken on inf/NaN gradients are not
    skipped, so one overflow writes NaN into the weights. When `scaler.step` runs as
    well, every batch is applied twice.

    ## Example
    ```python
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
    ```

    Use instead:
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    No fix: replacing the call is only right when it is the sole step, and a double
    step needs a decision about which one to keep.

    ## Runtime confirmation
    `amplint verify` checks, in an optimizer step pre-hook, whether the optimizer's
    gradients are still scaled (the scaler's per-optimizer stage is not UNSCALED and
    the step was not issued by `scaler.step`).
    """

    code = "AMP104"
    name = "step-bypasses-scaler"
    message = "`{step}` bypasses the GradScaler after a scaled backward{detail}"
    # Pre-filter: a scaled backward is `.backward` of a `.scale` call (the word, not `.scale(`),
    # and the bypass is an optimizer `.step`.
    requires_any = (Attr("scale"),)  # `scaler.scale(loss).backward()`
    and_requires_any = ((Attr("backward"),), (Attr("step"),))
    imported_tokens = (2,)  # the plain step may sit in a project helper

    @staticmethod
    def _detail(graph, bw, ev, scaler_steps) -> str:
        stepped = any(graph.reaches_point(s, graph.point(ev), stop=lambda e: e.kind is Kind.ZERO_GRAD) for s in scaler_steps)
        if stepped:
            return ": `scaler.step` already applied this update (a double step)"
        unscaled = not graph.reaches_point(
            bw, graph.point(ev), stop=lambda e: e.kind is Kind.UNSCALE or e.kind is Kind.ZERO_GRAD
        )
        if unscaled:
            return ": steps with inf/NaN gradients are not skipped"
        return ": its gradients still carry the loss scale"

    def check(self) -> None:
        proto = protocol(self.model)
        code = self.model.module.code_for_node
        for graph in self.model.steps:
            scaler_steps = graph.of_kind(Kind.SCALER_STEP)
            reported: set[int] = set()
            for bw in graph.of_kind(Kind.BACKWARD):
                if not bw.scaled or bw.inside_library_backward or proto.scaler_disabled(bw.scaler):
                    continue  # NB: a library's backward goes with the library's optimizer step
                # The scaled gradients live until they are cleared or a new backward
                # starts the next micro-batch; scaler.step/update do not clear them.
                ends = lambda e: e.kind is Kind.ZERO_GRAD or e.kind is Kind.BACKWARD  # noqa: E731
                for ev in graph.reachable(bw, stop=ends):
                    if ev.kind is not Kind.OPT_STEP or id(ev) in reported:
                        continue
                    if proto.exclusive(bw, ev) or proto.scaler_off_where(bw.scaler, bw, ev):
                        continue
                    if any(proto.exclusive(ev, s) and proto.same(proto.key(s, graph, "optimizer"), proto.key(ev, graph, "optimizer")) for s in scaler_steps):
                        continue  # the no-AMP alternative of a scaler.step
                    reported.add(id(ev))
                    self.report_event(ev, step=code(ev.node.func) + "()", detail=self._detail(graph, bw, ev, scaler_steps))
