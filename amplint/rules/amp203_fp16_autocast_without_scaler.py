"""AMP203 fp16-autocast-without-scaler."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.precision import may_run_fp16, precision_of
from amplint.analysis.steps import Kind
from amplint.prefilter import Attr, CodeWord, Use
from amplint.rules._base import Rule


class Fp16AutocastWithoutScaler(Rule):
    """
    ## What it does
    Flags a float16 autocast region (an explicit `dtype=torch.float16`, a dtype option
    that can be float16, or cuda autocast's default dtype) entered by code that trains
    (a plain `backward()` and an `optimizer.step()` in the same function, helpers
    inlined) in a module that builds or uses no enabled GradScaler (a project's own
    wrapper such as timm's `NativeScaler`, or a `loss_scaler` parameter, counts as
    one). A region in a
    model's `forward` (`with autocast():` or `@autocast()`) counts when the module
    trains without a scaler. The diagnostic points at the autocast `with` (or
    decorator).

    ## Why is this bad?
    float16's smallest subnormal is about 6e-8. Gradients of real networks are often
    smaller; without loss scaling they flush to zero in the float16 backward and the
    corresponding weights never learn, with no error and a loss that still goes down
    a little. `torch.amp.GradScaler` multiplies the loss before backward and divides
    the gradients before the step. bfloat16 has float32's exponent range and needs no
    scaler; a library that manages precision (`accelerator.autocast()`,
    `accelerator.backward`) scales for you and is not reported.

    ## Example
    ```python
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    ```

    Use instead:
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    ```

    ## Runtime confirmation
    `amplint verify` sees a backward under float16 autocast with no scaler and counts
    the gradients flushed to zero.
    """

    code = "AMP203"
    name = "fp16-autocast-without-scaler"
    message = "float16 autocast is used for training without a GradScaler"
    # Pre-filter (as in AMP201): an autocast, an unmanaged backward (`.backward`,
    # `autograd.backward`) and an optimizer or scaler `.step` in the same function.
    requires_any = (CodeWord("autocast"),)
    and_requires_any = ((Use("backward"),), (Attr("step"),))
    imported_tokens = (1, 2)  # the training (backward, step) may run in project helpers

    def check(self) -> None:
        precision = precision_of(self.model)
        if precision.enabled_scaler or precision.scaler_wrapper or not any(may_run_fp16(info) for _, _, info in precision.autocast_sites):
            return
        reported: set[int] = set()
        trains = False
        for scope in self._training_scopes():
            graph = self.model.steps.graph(scope)
            events = graph.events
            # NB: with no enabled scaler in the module, `scaler.scale(loss)` of a
            # literally disabled one returns the loss unchanged: still an unscaled backward.
            backward = any(e.kind is Kind.BACKWARD and not e.managed for e in events)
            stepped = any(e.kind in (Kind.OPT_STEP, Kind.SCALER_STEP) for e in events)
            if not (backward and stepped):
                continue
            trains = True
            if self._scales_through_helpers(events):
                continue  # an optimizer wrapper of the project scales (`self.optim.backward(loss)`)
            for region in graph.regions:
                if region.no_grad:
                    continue  # a validation helper inlined into train(): nothing is trained there
                if may_run_fp16(region.info) and id(region.with_node) not in reported:
                    reported.add(id(region.with_node))
                    self.report(region.with_node)
        if not trains:
            return
        # A model whose forward enters autocast itself (the DataParallel recipe).
        for region in precision.regions:
            scope = region.scope
            method = getattr(getattr(scope, "node", None), "name", None)
            in_forward = scope.cls is not None and method is not None and method.value == "forward"
            if in_forward and may_run_fp16(region.info) and id(region.node) not in reported:
                reported.add(id(region.node))
                self.report(region.node)

    @staticmethod
    def _scales_through_helpers(events) -> bool:
        """A scaled backward or a scaler step reached through a helper or a wrapper's method."""
        return any(
            e.inlined and ((e.kind is Kind.BACKWARD and e.scaled) or e.kind in (Kind.SCALER_STEP, Kind.UNSCALE))
            for e in events
        )

    def _training_scopes(self) -> list:
        """Scopes that call backward, and those that call them (a `train_step` helper).

        Only their graphs can hold a backward event; building the others is wasted.
        """
        model = self.model
        found = {}
        for site in model.calls:
            func = site.node.func
            if (isinstance(func, cst.Attribute) and func.attr.value == "backward") or model.qualify(func) == "torch.autograd.backward":
                found[id(site.scope)] = site.scope
        names = {s.node.name.value for s in found.values() if not s.is_module}
        for site in model.calls:
            func = site.node.func
            called = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
            if called in names:
                found.setdefault(id(site.scope), site.scope)
        return list(found.values())
