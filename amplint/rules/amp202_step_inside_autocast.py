"""AMP202 step-inside-autocast."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.precision import precision_of
from amplint.analysis.steps import Kind
from amplint.prefilter import AUTOCAST_IN_CODE, Attr
from amplint.rules._base import Rule


class StepInsideAutocast(Rule):
    """
    ## What it does
    Flags `optimizer.step()` and `scaler.step(optimizer)` that run inside an autocast
    region that may be enabled, written in the block itself or reached through a
    same-module helper called there.

    ## Why is this bad?
    Autocast belongs around the forward pass and the loss only. An optimizer step
    inside the region runs its arithmetic under autocast's op rules: fused and
    foreach kernels, `torch.compile`d optimizers and optimizers written with matmuls
    (Shampoo, SOAP, Muon's Newton-Schulz iterations) then compute the update of the
    fp32 master weights in float16 or bfloat16, losing the small updates that mixed
    precision keeps fp32 weights for. PyTorch's AMP recipe exits the region before
    `backward()` and `step()`.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
    scaler.update()
    ```

    Use instead:
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Runtime confirmation
    `amplint verify` checks `torch.is_autocast_enabled(device)` in an optimizer step
    pre-hook.
    """

    code = "AMP202"
    name = "step-inside-autocast"
    message = "`{call}` runs inside an autocast region"
    requires_any = (Attr("step"),)  # `optimizer.step()`, `scaler.step(optimizer)`
    and_requires_any = ((AUTOCAST_IN_CODE,),)  # as in AMP201
    imported_tokens = (0,)  # the step may sit in a project helper called in the region

    def check(self) -> None:
        # NB: an event is inside a region only if its graph's own body enters one (a
        # region inside an inlined helper is reported in the helper's graph), so only
        # the scopes that write an autocast `with` need a step graph: on large files
        # building every graph costs more than everything else together.
        scopes = {id(r.scope): r.scope for r in precision_of(self.model).regions if isinstance(r.node, cst.With)}
        for scope in scopes.values():
            graph = self.model.steps.graph(scope)
            own = {id(r.node) for r in precision_of(self.model).regions if r.scope is scope}
            for event in graph.of_kind(Kind.OPT_STEP, Kind.SCALER_STEP):
                region = event.active_autocast
                if region is None or (event.inlined and id(region.with_node) not in own):
                    continue  # a region entered in an inlined helper: the helper's graph reports it
                call_text = self.model.module.code_for_node(event.anchor.func) + "()"
                self.report_event(event, call=call_text)
