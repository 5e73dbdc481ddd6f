"""AMP206 scaler-without-autocast."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.reduced_precision import class_constructed_in_program, program_evidence
from amplint.analysis.scaler_protocol import protocol
from amplint.analysis.steps import Kind
from amplint.analysis.wrappers import object_path
from amplint.rules._base import Rule


class ScalerWithoutAutocast(Rule):
    """
    ## What it does
    Flags a `GradScaler(...)` construction (not literally `enabled=False`) whose scaler
    scales a loss, in a program where nothing runs in reduced precision.

    Reduced precision is any of: an autocast region that may be enabled
    (`autocast(enabled=False)` is none), an autocast decorator on a `forward`, a module
    cast to half or bfloat16, a use of `torch.float16` / `torch.bfloat16`, a library told
    to use it (`mixed_precision="fp16"`, `precision="16-mixed"`), apex. The program is the module, the project modules it imports,
    and the project modules that import it with what they import: the autocast may sit
    on a model's `forward` in another file. A scaler built by a helper class (timm's
    `NativeScaler`) counts only when the program builds an instance of that class.

    ## Why is this bad?
    The scaler exists for float16 gradients, which underflow without it. With no
    reduced precision anywhere, training runs in float32 and the scaler only multiplies
    and divides by a power of two, checks every gradient for inf/NaN each step (a device
    sync) and skips the first steps while it calibrates. Usually the script believes it
    uses mixed precision and gets neither its speed nor its memory savings: the
    `autocast` was forgotten, or left at `enabled=False`.

    ## Example
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    Use instead:
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    No fix: either add autocast around the forward pass and the loss, or drop the
    scaler; which one is meant is not written in the code.

    ## Runtime confirmation
    `amplint verify` checks, when an enabled scaler first scales a loss, that no enabled
    float16/bfloat16 autocast region was entered and that no optimizer holds float16 or
    bfloat16 parameters.
    """

    code = "AMP206"
    name = "scaler-without-autocast"
    message = "`GradScaler` scales the loss, but nothing in this program runs in reduced precision"
    # Pre-filter: the construction is spelled in the file (`GradScaler`, `ShardedGradScaler`).
    requires_any = ("gradscaler",)

    def check(self) -> None:
        candidates = [c for c in self.model.bindings.scaler_constructions if c.enabled is not False and self._scales(c)]
        if not candidates:
            return
        evidence = program_evidence(self.model)
        if evidence is not None:
            return  # reduced precision somewhere, or a program too large to read through (False)
        for c in candidates:
            self.report(c.call, notes=("no enabled autocast, half/bfloat16 module or fp16 option in the modules this program reaches",))

    def _scales(self, construction) -> bool:
        """The scaler built here scales a loss in this program."""
        scope = construction.scope
        if construction.target is None:
            return False
        head = construction.target.split(".")[0]
        if scope.cls is not None and head == scope.self_name:
            attr = construction.target.split(".", 1)[1] if "." in construction.target else None
            return attr is not None and self._class_scales(scope.cls, attr) and class_constructed_in_program(self.model, scope.cls)
        key = self.model.bindings.key(cst.parse_expression(construction.target), scope)
        proto = protocol(self.model)
        for graph in self.model.steps:
            for e in graph.of_kind(Kind.BACKWARD):
                if e.scaled and proto.key(e, graph) == key:
                    return True
        return False

    def _class_scales(self, cls, attr: str) -> bool:
        """A method of the class calls `self.<attr>.scale(...)` (properties followed)."""
        for site in self.model.calls:
            func = site.node.func
            if site.scope.cls is not cls or not isinstance(func, cst.Attribute) or func.attr.value != "scale":
                continue
            path = object_path(func.value, site.scope)
            if path is not None and path.root[0] == "self" and path.attrs == (attr,):
                return True
        return False

