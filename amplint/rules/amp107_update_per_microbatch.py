"""AMP107 update-per-microbatch."""

from __future__ import annotations

from amplint.analysis.scaler_protocol import SCALER_TOKENS, protocol, runs_without, training_loop
from amplint.analysis.steps import Kind
from amplint.rules._base import Rule


class UpdatePerMicrobatch(Rule):
    """
    ## What it does
    With gradient accumulation, flags `scaler.update()` and `scaler.unscale_(...)`
    calls that run on every micro-batch of a training loop while `scaler.step(...)`
    runs only on some iterations (every N micro-batches).

    Correct accumulation, where `unscale_`, `step` and `update` sit together under
    the "every N micro-batches" condition, is not flagged. Nor is a step skipped on
    purpose: `scaler.step` only when the loss is finite (or after a warm-up, or under a
    per-iteration flag) while every iteration clears the gradients with `zero_grad()`
    and calls `update()`; nothing accumulates there. A step under a periodic condition
    (a modulo, a counter named for accumulation) is accumulation either way. An
    iteration that an exception ended (a batch an `except` skipped after running out
    of memory) is not a micro-batch, and `scaler.update(new_scale)`, a scale set by
    hand, is no adaptive update: neither is judged.

    ## Why is this bad?
    One effective batch must be seen with one loss scale: its micro-batch gradients
    are summed while scaled, and `unscale_` divides the sum by the scale once.
    Updating per micro-batch changes the scale between micro-batches of the same
    accumulated gradient (the sum then mixes scales, and an overflow only lowers the
    scale without skipping anything), and `update()` without a preceding `step()`
    raises "No inf checks were recorded prior to update". An `unscale_` per
    micro-batch divides the partial sums repeatedly, and the second one before an
    update raises "unscale_() has already been called on this optimizer".

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y) / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            optimizer.zero_grad()
        scaler.update()
    ```

    Use instead:
    ```python
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y) / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    ```

    ## Fix safety
    No fix: moving the call under the step's condition is a change of block
    structure that needs a human look (the condition may not be a simple `if`).

    ## Runtime confirmation
    `amplint verify` counts `update` (and `unscale_`) calls against `scaler.step`
    calls per scaler. An update with no step and no inf check since the last one
    confirms the finding at once (torch's `update` raises on it). An update with no
    step after `unscale_` (a skipped step) confirms it only when the next backward
    still finds those gradients on the parameters (`gradients_kept`: accumulation);
    when `zero_grad()` cleared them first it was a skipped step, and nothing is reported.
    """

    code = "AMP107"
    name = "update-per-microbatch"
    message = "`{call}` runs on every micro-batch, but `{step}` only on some"
    requires_any = SCALER_TOKENS

    def check(self) -> None:
        proto = protocol(self.model)
        code = self.model.module.code_for_node
        for graph in self.model.steps:
            steps = graph.of_kind(Kind.SCALER_STEP)
            if not steps:
                continue
            for ev in graph.of_kind(Kind.UPDATE, Kind.UNSCALE):
                if proto.scaler_disabled(ev.scaler):
                    continue
                if ev.kind is Kind.UPDATE and ev.node.args:
                    # `scaler.update(new_scale)` sets the scale by hand (icefall's periodic
                    # bump of a small scale): it needs no step and adapts nothing.
                    continue
                loop = training_loop(graph, ev)
                if loop is None:
                    continue
                mine = [
                    s
                    for s in steps
                    # The same micro-batch loop: an update after the batch loop that
                    # steps is AMP102's "update once per epoch", not this.
                    if training_loop(graph, s) is loop
                    and proto.same(proto.key(s, graph), proto.key(ev, graph))
                    and (ev.kind is Kind.UPDATE or proto.same(proto.key(s, graph, "optimizer"), proto.key(ev, graph, "optimizer")))
                ]
                if not mine:
                    continue  # the step is elsewhere (a caller, a hook): not our pattern
                if proto.periodic_tests(ev) & set().union(*(proto.periodic_tests(s) for s in mine)):
                    # Under the same accumulation test as the step (HF Trainer's loop: unscale_
                    # and an `if deepspeed / elif tpu / elif use_amp: scaler.step` chain inside
                    # `if (step + 1) % accum == 0`): it runs on the stepping micro-batch only.
                    continue
                # An iteration with no step at all: a plain `optimizer.step()` on the
                # path is the no-AMP branch of a split, not a skipped micro-batch.  Nor is
                # it accumulation when that iteration clears the gradients (`zero_grad()`
                # every iteration): the step was skipped on purpose (a non-finite loss, a
                # warm-up gate) and nothing carries over to the next one; unless the
                # step's own condition is periodic (`(i + 1) % accum == 0`).
                clears = not any(proto.periodic(s) for s in mine)
                is_step = lambda e, mine=mine, clears=clears: (  # noqa: E731
                    e.kind is Kind.OPT_STEP or any(e is s for s in mine) or (clears and e.kind is Kind.ZERO_GRAD)
                )
                if not runs_without(graph, loop, ev, is_step):
                    continue
                step = mine[0]
                self.report_event(ev, call=code(ev.node.func) + "()", step=code(step.node.func) + "()")

