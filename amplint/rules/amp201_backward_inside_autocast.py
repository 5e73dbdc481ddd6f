"""AMP201 backward-inside-autocast."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.steps import Kind
from amplint.diagnostics import Applicability
from amplint.prefilter import CodeWord
from amplint.rules._base import FixAvailability, Replace, Rule


class BackwardInsideAutocast(Rule):
    """
    ## What it does
    Flags a backward pass (`loss.backward()`, `scaler.scale(loss).backward()`,
    `torch.autograd.backward(...)`, `accelerator.backward(loss)`) that runs lexically
    inside an autocast region that may be enabled, directly or through a helper
    called inside the region.

    ## Why is this bad?
    Autocast is meant for the forward pass and the loss. Backward ops run in the
    dtype autocast chose for the matching forward ops anyway; calling backward inside
    the region additionally autocasts any op that runs during backward (custom
    Functions, hooks, compiled backward graphs), which PyTorch's AMP docs call out as
    not recommended and which has caused silent gradient overflow in compiled code.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
        scaler.scale(loss).backward()
    ```

    Use instead:
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
    scaler.scale(loss).backward()
    ```

    ## Fix safety
    Unsafe: when the backward is the last statement of a single-item `with` block, the
    fix moves it just after the block. Code that relied on autocast during backward
    (rare, and usually the bug) behaves differently.

    ## Runtime confirmation
    `amplint verify` checks `torch.is_autocast_enabled(device)` at every backward call.
    """

    code = "AMP201"
    name = "backward-inside-autocast"
    message = "`{call}` runs inside an autocast region"
    fix_title = "Move the backward call out of the `with` block"
    fix_availability = FixAvailability.SOMETIMES
    safety = Applicability.UNSAFE
    # Pre-filter: backward events are `.backward`/`.manual_backward`/`autograd.backward`
    # (whole words in code, not `_backward_compatibility` or `norm="backward"`); every
    # autocast context (AUTOCAST_CONTEXTS, `accelerator.autocast`) has `autocast` as a
    # word of its name, in code (a message that says "use torch.autocast" is no context).
    requires_any = (CodeWord("backward"), CodeWord("manual_backward"))
    and_requires_any = ((CodeWord("autocast"),),)
    imported_tokens = (0,)  # the backward may sit in a project helper called in the region

    def check(self) -> None:
        for graph in self.model.steps:
            for event in graph.of_kind(Kind.BACKWARD):
                region = event.active_autocast
                if region is None:
                    continue
                call_text = self.model.module.code_for_node(event.anchor.func) + "()"
                self.report_event(event, changes=self._move_out(event, region), call=call_text)

    def _move_out(self, event, region) -> list[Replace] | None:
        """Dedent a trailing backward statement out of its `with` block."""
        with_node = region.with_node
        body = with_node.body
        if event.inlined or len(with_node.items) != 1 or not isinstance(body, cst.IndentedBlock):
            return None
        if len(body.body) < 2 or body.body[-1] is not event.statement:
            return None
        if region is not event.regions[-1]:
            return None
        moved = body.body[-1]
        shortened = with_node.with_changes(body=body.with_changes(body=body.body[:-1]))
        code = self.model.module.code_for_node
        with_text = code(shortened.with_changes(leading_lines=())).rstrip("\n")
        stmt_text = code(moved.with_changes(leading_lines=())).strip("\n")
        if '"""' in with_text or "'''" in with_text or '"""' in stmt_text or "'''" in stmt_text:
            return None  # NB: re-indenting would change the text of multi-line strings
        # The engine re-indents a replaced statement's continuation lines by its column.
        return [Replace(with_node, f"{with_text}\n{stmt_text}")]
