"""AMP201 backward-inside-autocast."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.steps import Kind
from amplint.analysis.walk import walk
from amplint.diagnostics import Applicability
from amplint.prefilter import AUTOCAST_IN_CODE, Use
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
    forward and backward on a copy of the model trains nothing. A region entered inside
    a helper is reported in that helper, once, not again at each call of it. The
    region may be entered through a context the class inherits (`with self.amp_cm():`
    where a base class of another module binds `self.amp_cm` to autocast).

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
    fix moves it just after the block. A backward that shares its line with other
    statements (`aux = f(x); loss.backward()`) is not moved: it would need a line of its
    own, and every later line would move (line numbers in logs and tracebacks); one that
    other statements follow in the block is not moved, since that would reorder them;
    nor is a statement that computes more than the backward (`crit(model(x), y).backward()`,
    `(loss := f(x)).backward()`), whose forward would leave autocast with it, nor one
    whose receiver is an attribute or a subscript (`out.loss.backward()`,
    `losses[i].backward()`: a property, `__getattr__` or `__getitem__` may run the model),
    nor `x.scale(loss).backward()` where `x` is not a GradScaler (built here, or a name
    such as a `scaler` parameter bound to nothing else): another object's `scale` may run
    a forward of its own.
    Code that relied on autocast during backward (rare, and usually the bug) behaves
    differently.

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
    and_requires_any = ((AUTOCAST_IN_CODE,),)
    # the backward may sit in a project helper called in the region, and the region may be
    # entered through a base class of another module (`with self.amp_cm():`)
    imported_tokens = (0, 1)

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
                    if id(region.with_node) not in own_withs:
                        continue  # entered in the helper too: the helper's own graph reports it, once
                    if not _trains(graph, event, True):
                        continue  # the function entering autocast never steps: a measurement (a memory probe)
                call_text = self.model.module.code_for_node(event.anchor.func) + "()"
                self.report_event(event, changes=self._move_out(event, region), call=call_text)

    def _move_out(self, event, region) -> list[Replace] | None:
        """Move a trailing backward out of its `with` block, to just after it.

        The backward must be the last thing the block runs, so that it runs at the same
        point relative to every other statement: the last small statement of the block's
        last line.  On a line of several (`aux = f(x); loss.backward()`), only the backward
        moves and the others stay in the block, in their order, with the line's comment;
        a backward followed by anything (`loss.backward(); aux = f(x)`) is not moved.
        """
        with_node = region.with_node
        body = with_node.body
        if event.inlined or len(with_node.items) != 1 or not isinstance(body, cst.IndentedBlock):
            return None
        item = with_node.items[0].item
        qual = self.model.qualify(item.func) if isinstance(item, cst.Call) else None
        if qual is None or not qual.startswith("torch.") or not qual.endswith("autocast"):
            # A project context manager that enters autocast may do more on exit (clip the
            # gradients, remove gradient hooks): moving the backward past it moves it past that.
            return None
        line = body.body[-1]
        if line is not event.statement or not isinstance(line, cst.SimpleStatementLine):
            return None
        if region is not event.regions[-1]:
            return None
        small = line.body[-1]
        b = self.model.bindings
        built = {b.key(cst.parse_expression(c.target), c.scope) for c in b.scaler_constructions if c.target is not None}

        def is_scaler(name: cst.Name) -> bool:
            """A GradScaler built here, or a name that says it is one and is bound to no other
            object here (a parameter `scaler`); not any object with a `scale` method."""
            if b.key(name, event.scope) in built:
                return True
            return "scaler" in name.value.lower() and not b.values.assigned(name, event.scope)
        if not _only_the_backward(small, event.node, is_scaler):
            # NB: `crit(model(x), y).backward()` or `(loss := f(x)).backward()` would take
            # the forward out of autocast with it: the statement must compute nothing else.
            return None
        if not _holds(small, event.node):
            # NB: what follows the backward on its line runs after it: moving the backward
            # alone would reorder them (the forward of `loss.backward(); aux = model(x)`
            # would run first), and moving the line would take that forward out of autocast.
            return None
        if len(line.body) > 1:
            # NB: `x = f(); loss.backward()`: the backward would need a line of its own, and a
            # new line moves every line below (`%(lineno)d` in logs; hostile pass 18).
            return None
        if len(line.body) == 1:
            if len(body.body) < 2:
                return None  # the block would be left empty
            kept, moved = body.body[:-1], line
        else:
            # NB: the line keeps its place, its comment and the statements before the backward;
            # the backward goes on a line of its own, its `; ` gone.
            before = (*line.body[:-2], line.body[-2].with_changes(semicolon=cst.MaybeSentinel.DEFAULT))
            trailing = line.trailing_whitespace
            if trailing.comment is not None and not trailing.whitespace.value:
                # NB: the space before the comment was the backward's (`f(); g() ;  # c`)
                trailing = trailing.with_changes(whitespace=cst.SimpleWhitespace("  "))
            kept = (*body.body[:-1], line.with_changes(body=before, trailing_whitespace=trailing))
            moved = cst.SimpleStatementLine(body=(small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT),))
        shortened = with_node.with_changes(body=body.with_changes(body=kept))
        # The block keeps its footer comments; the moved line keeps the comments above it and its own.
        return [Replace(with_node, cst.FlattenSentinel((shortened, moved)))]


def _only_the_backward(small: cst.CSTNode, call: cst.Call, is_scaler=lambda name: False) -> bool:
    """The statement is the backward call and runs nothing else: its receiver and arguments
    are names and literals, or `scaler.scale(<name>)` (no other call, no assignment
    expression). An attribute or a subscript may run code (a property, `__getattr__`,
    `__getitem__` that runs the forward), which would then leave autocast too."""
    if not isinstance(small, cst.Expr) or small.value is not call:
        return False
    ok = True
    methods: set[int] = set()  # `scaler.scale`: the method, not an attribute read that runs code

    class _Other(cst.CSTVisitor):
        def visit_NamedExpr(self, node: cst.NamedExpr) -> bool:
            nonlocal ok
            ok = False
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False  # defined, not run

        def visit_Call(self, node: cst.Call) -> bool:
            nonlocal ok
            if node is call:
                return True
            func = node.func
            # `scaler.scale(loss)` of a GradScaler (built here, used as one, or a name that says
            # so): another object's `scale` (an `nn.Module` weighing the loss) would run its
            # forward out of autocast
            scale = (isinstance(func, cst.Attribute) and func.attr.value == "scale"
                     and isinstance(func.value, cst.Name) and is_scaler(func.value)
                     and all(isinstance(a.value, cst.Name) for a in node.args))
            if not scale:
                ok = False
                return False
            methods.add(id(func))
            return True

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            nonlocal ok
            if node is call.func and (dotted(node) or "").startswith("torch."):
                return False  # `torch.autograd.backward(loss)`: a module path, read from torch
            if node is not call.func and id(node) not in methods:
                ok = False
            return True

        def visit_Subscript(self, node: cst.Subscript) -> bool:
            nonlocal ok
            ok = False
            return False

    walk(call, _Other())
    return ok


def _holds(node: cst.CSTNode, call: cst.Call) -> bool:
    """Whether `call` is `node` or one of its descendants."""
    finder = _CallFinder(call)
    walk(node, finder)
    return finder.found


class _CallFinder(cst.CSTVisitor):
    def __init__(self, call: cst.Call) -> None:
        self.call, self.found = call, False

    def visit_Call(self, node: cst.Call) -> bool:
        if node is self.call:
            self.found = True
        return not self.found


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
