"""AMP201 backward-inside-autocast."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.steps import Kind
from amplint.analysis.walk import walk
from amplint.diagnostics import Applicability
from amplint.prefilter import CodeWord, Use
from amplint.rules._base import FixAvailability, Replace, Rule


class BackwardInsideAutocast(Rule):
    """
    ## What it does
    Flags a backward pass (`loss.backward()`, `scaler.scale(loss).backward()`,
    `torch.autograd.backward(...)`, `accelerator.backward(loss)`) that runs lexically
    inside an autocast region that may be enabled, directly or through a helper
    called inside the region. A helper's backward is not flagged when the function
    entering autocast never steps an optimizer (nor updates a scaler, nor zeroes
    gradients): a memory or speed probe such as an auto-batch-size search that runs
    forward and backward on a copy of the model trains nothing.

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
    requires_any = (Use("backward"), Use("manual_backward"))
    and_requires_any = ((CodeWord("autocast"),),)
    imported_tokens = (0,)  # the backward may sit in a project helper called in the region

    def check(self) -> None:
        for graph in self.model.steps:
            own_withs: set[int] | None = None
            for event in graph.of_kind(Kind.BACKWARD):
                region = event.active_autocast
                if region is None:
                    continue
                if event.inlined:
                    if own_withs is None:
                        own_withs = _with_statements(graph.scope.node)
                    if not _trains(graph, event, id(region.with_node) in own_withs):
                        continue  # the function entering autocast never steps: a measurement (a memory probe)
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


_TRAINING_KINDS = (Kind.OPT_STEP, Kind.SCALER_STEP, Kind.UPDATE, Kind.ZERO_GRAD)


def _trains(graph, backward, own_region: bool) -> bool:
    """Whether the function that enters the backward's autocast region also steps (or
    updates a scaler, or zeroes gradients): the graph's own function when it enters the
    region itself, else the helper reached through the same call as the backward."""
    steps = graph.of_kind(*_TRAINING_KINDS)
    if own_region:
        return bool(steps)
    return any(e.inlined and e.anchor is backward.anchor for e in steps)


def _with_statements(node: cst.CSTNode) -> set[int]:
    """The `with` statements of a function's (or the module's) own code, not of nested defs."""
    finder = _WithFinder()
    walk(node.body if isinstance(node, cst.FunctionDef) else node, finder)
    return finder.found


class _WithFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: set[int] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # its own step graph

    def visit_With(self, node: cst.With) -> None:
        self.found.add(id(node))
