"""AMP204 scaler-with-bf16."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.bindings import call_arg
from amplint.analysis.precision import precision_of, scaler_only_for_bf16
from amplint.analysis.torch_api import HALF_DTYPES
from amplint.analysis.steps import Kind
from amplint.prefilter import CodeWord
from amplint.rules._base import Rule


class ScalerWithBf16(Rule):
    """
    ## What it does
    Flags a `GradScaler(...)` construction that may be enabled in a module whose
    autocast contexts all run in bfloat16 (an explicit `dtype=torch.bfloat16`, or cpu
    autocast's default, or a dtype picked by `torch.cuda.is_bf16_supported()`, which
    is bfloat16 on every GPU that supports it). A dtype option that can also be
    float16 keeps the scaler useful and is not reported, nor is a scaler whose
    `enabled=` tests for float16, unless the scaler exists or is enabled only in the
    bfloat16 runs: built under a bf16 flag (`if args.bf16: return GradScaler()`, in a
    helper of this or another module) or `enabled=amp_dtype == torch.bfloat16` (the
    condition turned the wrong way round), where a bfloat16 autocast may run.

    ## Why is this bad?
    bfloat16 has float32's exponent range: gradients do not underflow, so there is
    nothing to scale. The scaler still multiplies the loss, checks every gradient for
    inf/NaN on each step (a device sync and an extra pass over all gradients), and
    adds a moving part to checkpoints. It usually means the script was switched from
    fp16 to bf16 halfway.

    ## Example
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).mean()
    scaler.scale(loss).backward()
    ```

    Use instead:
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).mean()
    loss.backward()
    ```

    ## Runtime confirmation
    `amplint verify` sees `scaler.scale()` called while bf16 autocast is active.
    """

    code = "AMP204"
    name = "scaler-with-bf16"
    message = "`GradScaler` is used with bfloat16 autocast, which needs no loss scaling"
    requires_any = ("GradScaler",)
    and_requires_any = ((CodeWord("autocast"),),)  # as in AMP201
    imported_tokens = (0,)  # the scaler may be built by a project helper

    def check(self) -> None:
        view = precision_of(self.model)
        dtypes = view.autocast_dtypes
        # Every autocast is bfloat16 (a float16 path that only older GPUs without bfloat16
        # take does not count) ...
        always = dtypes == frozenset({"bfloat16"}) or view.bf16_where_supported
        # ... or one may be, and the scaler exists or is enabled only when the run is in
        # bfloat16 (`if args.bf16: scaler = GradScaler()`, `enabled=dtype == torch.bfloat16`).
        sometimes = dtypes is None or "bfloat16" in dtypes
        if not always and not sometimes:
            return  # no autocast, or only float16 (or float32) ones
        for c in self.model.bindings.scaler_constructions:
            if c.enabled is False:
                continue
            if not always and not scaler_only_for_bf16(c.call, c.scope, self.model):
                continue
            enabled = call_arg(c.call, None, "enabled")
            if enabled is not None and not scaler_only_for_bf16(c.call, c.scope, self.model) and self._tests_fp16(enabled, self.model):
                continue
            self.report(c.call)
        # Built by a helper of another module (`scaler = build_scaler(cfg)`): reported at
        # the call, where this module takes the scaler it uses with bfloat16.
        reported: set[int] = set()
        for graph in self.model.steps:
            for ev in graph.of_kind(Kind.SCALER_NEW):
                if ev.scope.model is self.model or ev.enabled is False or id(ev.anchor) in reported:
                    continue
                only_bf16 = scaler_only_for_bf16(ev.node, ev.scope, ev.scope.model)
                if not always and not only_bf16:
                    continue
                enabled = call_arg(ev.node, None, "enabled")
                if enabled is not None and not only_bf16 and self._tests_fp16(enabled, ev.scope.model):
                    continue
                reported.add(id(ev.anchor))
                self.report_event(ev)

    @staticmethod
    def _tests_fp16(expr: cst.BaseExpression, model) -> bool:
        """`enabled=args.fp16`, `enabled=(dtype == torch.float16)`: on only for float16."""
        found = False

        class V(cst.CSTVisitor):
            def visit_Attribute(self, node: cst.Attribute) -> bool:
                nonlocal found
                if HALF_DTYPES.get(model.qualify(node) or "") == "float16" or "fp16" in node.attr.value.lower():
                    found = True
                return True

            def visit_Name(self, node: cst.Name) -> None:
                nonlocal found
                if "fp16" in node.value.lower() or HALF_DTYPES.get(model.qualify(node) or "") == "float16":
                    found = True

            def visit_SimpleString(self, node: cst.SimpleString) -> None:
                nonlocal found
                if node.evaluated_value in ("fp16", "float16"):
                    found = True

        expr.visit(V())
        return found
