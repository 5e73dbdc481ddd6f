"""AMP204 scaler-with-bf16."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.bindings import call_arg
from amplint.analysis.precision import precision_of, scaler_only_for_bf16
from amplint.analysis.torch_api import HALF_DTYPES
from amplint.analysis.steps import Kind, constructions_seen_from_importers
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

    The finding points at the construction. A helper of another module that builds
    the scaler whatever the precision is reported at the call that takes it for a
    bfloat16-only module; one that builds it only for bfloat16 holds the mistake
    itself and is reported at its own construction (the caller as a related location),
    also when the helper's file is checked alone.

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
    # No autocast needed in the file itself: a helper that builds the scaler only for
    # bfloat16 runs is reported at its construction when an importer enters the autocast.
    imported_tokens = (0,)  # the scaler may be built by a project helper

    def check(self) -> None:
        always, sometimes = self._bf16_runs(self.model)
        reported: set[int] = set()
        if always or sometimes:
            for c in self.model.bindings.scaler_constructions:
                if c.enabled is False:
                    continue
                if not always and not scaler_only_for_bf16(c.call, c.scope, self.model):
                    continue
                enabled = call_arg(c.call, None, "enabled")
                if enabled is not None and not scaler_only_for_bf16(c.call, c.scope, self.model) and self._tests_fp16(enabled, self.model):
                    continue
                reported.add(id(c.call))
                self.report(c.call)
            # Built by a helper of another module (`scaler = build_scaler(cfg)`) that builds
            # it whatever the precision: reported at the call, where this module takes the
            # scaler it uses with bfloat16.  (A helper that builds it only for bfloat16 holds
            # the mistake itself: reported at its construction, when it is checked.)
            nearest: dict[int, object] = {}
            for graph in self.model.steps:
                for ev in graph.of_kind(Kind.SCALER_NEW):
                    if ev.scope.model is self.model or ev.enabled is False:
                        continue
                    if scaler_only_for_bf16(ev.node, ev.scope, ev.scope.model):
                        continue
                    if not always:
                        continue
                    enabled = call_arg(ev.node, None, "enabled")
                    if enabled is not None and self._tests_fp16(enabled, ev.scope.model):
                        continue
                    # `main()` at module level reaches the same construction through main's
                    # own call: one finding, at the call nearest to it.
                    known = nearest.get(id(ev.node))
                    if known is None or len(ev.via) < len(known.via):
                        nearest[id(ev.node)] = ev
            for ev in nearest.values():
                self.report_event(ev)
        self._check_built_for_bf16_importers(reported)

    @staticmethod
    def _bf16_runs(model) -> tuple[bool, bool]:
        """(every autocast of `model` is bfloat16, one may be)."""
        view = precision_of(model)
        dtypes = view.autocast_dtypes
        # Every autocast is bfloat16 (a float16 path that only older GPUs without bfloat16
        # take does not count) ...
        always = dtypes == frozenset({"bfloat16"}) or view.bf16_where_supported
        # ... or one may be, and the scaler exists or is enabled only when the run is in
        # bfloat16 (`if args.bf16: scaler = GradScaler()`, `enabled=dtype == torch.bfloat16`).
        sometimes = dtypes is None or "bfloat16" in dtypes
        return always, sometimes

    def _check_built_for_bf16_importers(self, reported: set[int]) -> None:
        """A function here builds its scaler only for bfloat16 runs (`GradScaler() if
        use_bf16 else None`) and a module that imports it trains under bfloat16 autocast
        with it: reported at the construction, with the call as a related location."""
        candidates = [
            c for c in self.model.bindings.scaler_constructions
            if c.enabled is not False and id(c.call) not in reported and c.scope is not None and not c.scope.is_module
            and scaler_only_for_bf16(c.call, c.scope, self.model)
        ]

        def scaler_events(other):
            if not any(self._bf16_runs(other)):
                return []
            return [ev for graph in other.steps for ev in graph.of_kind(Kind.SCALER_NEW)]

        for mine, other, ev in constructions_seen_from_importers(self.model, candidates, lambda text: "autocast" in text, scaler_events):
            reported.add(id(mine))
            called = other.module.code_for_node(ev.anchor.func)
            self.report(mine, related=((other, ev.anchor, f"`{called}()` takes this scaler for bfloat16 autocast here"),))

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
