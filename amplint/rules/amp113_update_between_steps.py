"""AMP113 update-between-steps."""

from __future__ import annotations

from typing import Callable

from amplint.analysis.scaler_protocol import SCALER_TOKENS, event_is, protocol, training_loop
from amplint.analysis.steps import Event, Kind, StepGraph
from amplint.prefilter import Attr
from amplint.rules._base import Rule


class UpdateBetweenSteps(Rule):
    """
    ## What it does
    Flags `scaler.update()` when, in the same iteration, another `scaler.step(...)` of
    the same scaler still follows it: one scaler shared by several optimizers (a GAN's
    generator and discriminator, the heads of a multi-task model) updated after each
    optimizer's step instead of once, after the last one. The diagnostic points at the
    update that runs too early.

    Not flagged: one update per iteration after all the steps; a scaler per optimizer,
    each updated after its own step; optimizers stepped in different iterations
    (`if i % 2 == 0: ... else: ...`), each followed by the update; the same optimizer
    stepped again after the update (a helper doing one whole step, called twice): that is
    its next iteration; a loop over the
    optimizers whose passes may skip the step (`if i != optim_idx: continue`), which may
    step only the one chosen for this pass.

    ## Why is this bad?
    `update()` ends the scaler's iteration: it moves the scale (halves it after an
    overflow, doubles it after `growth_interval` clean updates) and forgets which
    optimizers were unscaled and checked for inf/NaN. A `scaler.step` after it starts
    afresh: gradients backpropagated before the update (one loss for both optimizers)
    are unscaled with the new scale, and gradients an earlier `unscale_(opt)` already
    unscaled are divided by the scale a second time. Every update also counts toward
    growth, so the scale grows as many times faster as there are updates per
    iteration. PyTorch's AMP examples ("Working with Multiple Models, Losses, and
    Optimizers") call `update()` once, after every optimizer stepped.

    ## Example
    ```python
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss_d = loss_fn_d(disc, gen, x)
            loss_g = loss_fn_g(disc, gen, x)
        scaler.scale(loss_d).backward(retain_graph=True)
        scaler.scale(loss_g).backward()
        scaler.step(opt_d)
        scaler.update()
        scaler.step(opt_g)
        scaler.update()
        opt_d.zero_grad()
        opt_g.zero_grad()
    ```

    Use instead:
    ```python
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss_d = loss_fn_d(disc, gen, x)
            loss_g = loss_fn_g(disc, gen, x)
        scaler.scale(loss_d).backward(retain_graph=True)
        scaler.scale(loss_g).backward()
        scaler.step(opt_d)
        scaler.step(opt_g)
        scaler.update()
        opt_d.zero_grad()
        opt_g.zero_grad()
    ```

    ## Fix safety
    No fix: removing the early update moves the scale's change to the end of the
    iteration, which changes which steps an overflow skips; a scaler per optimizer is
    the other way out, and the choice is the author's.

    ## Runtime confirmation
    `amplint verify` records an `update()` after which the same scaler steps an
    optimizer it had not stepped since the update before: the update ran between the
    steps of one scaler's optimizers. It confirms a static finding at that update and
    reports nothing alone (optimizers stepped in alternate iterations look the same at
    run time).
    """

    code = "AMP113"
    name = "update-between-steps"
    message = "`{update}` runs before `{step}` of the same scaler in the same iteration; update once, after the last step"
    requires_any = SCALER_TOKENS
    and_requires_any = ((Attr("update"),),)

    def check(self) -> None:
        proto = protocol(self.model)
        code = self.model.module.code_for_node
        for graph in self.model.steps:
            steps = graph.of_kind(Kind.SCALER_STEP)
            if len(steps) < 1:
                continue
            for update in graph.of_kind(Kind.UPDATE):
                if proto.scaler_disabled(update.scaler):
                    continue
                key = proto.key(update, graph)
                if key is None:
                    continue
                mine = [s for s in steps if proto.key(s, graph) == key]

                def is_mine(e: Event, mine=mine) -> bool:
                    return any(e is s for s in mine)

                # A step of this scaler precedes the update in its iteration, and another
                # one follows it before the iteration ends.
                before = [s for s in mine if _in_iteration(graph, s, lambda e, u=update: e is u)]
                if not before or not _in_iteration(graph, update, is_mine):
                    continue
                following = next(e for e in graph.reachable(update) if is_mine(e))
                # The same optimizer stepped again after the update is its next iteration (a
                # helper doing one whole step, called twice with no loop around), not two
                # optimizers sharing one iteration of the scaler.
                # (The same step call reached again is a loop over optimizers: `for opt in ...`.)
                stepped = proto.key(following, graph, "optimizer")
                if stepped is not None and not any(following is s for s in before) \
                        and stepped in {proto.key(s, graph, "optimizer") for s in before}:
                    continue
                self.report_event(update, update=code(update.node), step=code(following.node))


def _in_iteration(graph: StepGraph, event: Event, pred: Callable[[Event], bool]) -> bool:
    """From `event`, a `pred` event is reachable before the iteration ends.

    The iteration is one pass of the training loop around `event` (the innermost loop
    that also runs a backward).  Where the graph sees no backward (the loss is computed
    and backpropagated in a helper it does not read), which loop is the training loop is
    unknown: every loop around `event` ends the search, so that the step of the next
    batch is never taken for a second step of this one."""
    loop = training_loop(graph, event)
    if loop is not None:
        headers = {id(loop.header)}
        inner = event.loops[event.loops.index(loop) + 1:] if loop in event.loops else ()
    else:
        headers = {id(lp.header) for lp in graph.loops if lp in event.loops}
        inner = ()
    # A loop over the optimizers whose passes may skip the step (`if i != optim_idx:
    # continue`) may step only one of them: its next pass is no second step for sure.
    headers |= {id(lp.header) for lp in inner if _may_skip(graph, lp, pred)}
    # A `for` loop entered later in the iteration runs its body (`StepGraph.runs_in_loop`);
    # a loop around `event` does not count: reaching its header again means its next pass.
    around = {id(lp.header) for lp in graph.loops if lp in event.loops}
    return graph.search(
        graph.point(event),
        found=lambda p: event_is(p, pred) or (id(p) not in around and graph.runs_in_loop(p, pred)),
        blocked=lambda p: id(p) in headers,
    )


def _may_skip(graph: StepGraph, loop, pred: Callable[[Event], bool]) -> bool:
    """A pass of `loop` can go from its header back to it without a `pred` event."""
    return graph.search(
        loop.header,
        found=lambda p: p is loop.header,
        blocked=lambda p: id(p) not in loop.body or event_is(p, pred),
    )
