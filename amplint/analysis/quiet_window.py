"""Whether anything can interrupt the code between two points of a function.

An inserted `scaler.unscale_(optimizer)` leaves the scaler half-way until the
`scaler.step(optimizer)` that follows: if control leaves in between (an exception that some
caller handles, a generator abandoned at a `yield`, an `await` that is cancelled), the
optimizer stays "unscaled" and the next iteration's `unscale_` raises, where the code as
written ran on.  Whether a caller anywhere handles the exception cannot be known from one
module, so a fix that opens such a window asks for positive evidence instead: between the
two points there is nothing that can raise or suspend.

"Nothing" is judged by shape, conservatively: statements that only bind names to names
and constants (`clipped = True`), `pass`, and `if` tests made of names, constants,
comparisons and `not`/`and`/`or`.  Any call other than the ones the caller allows (the
clips and steps of the protocol itself), any attribute (a property may raise), subscript,
arithmetic, `raise`, `assert`, `yield`, `await`, `del`, import, loop, `with`, `try`,
`return`, `break` or `continue` in the window, or a nested definition, is evidence of a way
out; so is leaving a `with`, `try` or loop that holds the start but not the end (its
`__exit__`, `finally` or next iteration runs in between).  Inside an allowed call, only its
callee and `<name>.parameters()` arguments (also gathered by `itertools.chain`, `list` or
`tuple`) are taken as quiet (`clip_grad_norm_(model.parameters(), 1.0)`): a helper there
(`params_to_clip()`) runs after the insertion.
"""

from __future__ import annotations

import libcst as cst

# Nodes that may leave the window early, or run code we cannot see (a call, an operator
# overload, `__getitem__`, a context manager's `__enter__`).
_INTERRUPTING = (
    cst.Call, cst.Subscript, cst.BinaryOperation, cst.Raise, cst.Assert, cst.Yield, cst.Await, cst.Del,
    cst.Import, cst.ImportFrom, cst.For, cst.While, cst.With, cst.Try, cst.Return, cst.Break, cst.Continue,
    cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp,
    cst.FormattedString, cst.NamedExpr, cst.Match, cst.Attribute,
)
# Compound statements whose end runs code: a context manager's `__exit__`, a `finally`, the
# loop's next iteration.
_EXITING = (cst.With, cst.Try, cst.For, cst.While)


class _Window(cst.CSTVisitor):
    """Walks a function in source order: before `start` (a statement), inside it, after it
    and until every node of `ends` has been seen; records whether anything in between
    (outside `allowed` subtrees) may interrupt."""

    def __init__(self, start: cst.CSTNode, ends: frozenset[int], allowed: frozenset[int]) -> None:
        self.start = start
        self.ends = set(ends)
        self.allowed = allowed
        self.state = 0  # 0 before start, 1 inside start, 2 between, 3 after the last end
        self.interrupted = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.state == 0:
            if node is self.start:
                self.state = 1
            return True
        if self.state == 3 or self.interrupted:
            return False
        if id(node) in self.allowed or id(node) in self.ends:
            if self.state == 2:
                self.ends.discard(id(node))
                if not self.ends:
                    self.state = 3
            self.interrupted = not _quiet_arguments(node)
            return False
        if isinstance(node, _INTERRUPTING) and not (self.state == 1 and isinstance(node, _STATEMENT_PARTS)):
            self.interrupted = True
            return False
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if original_node is self.start and self.state == 1:
            self.state = 2
        elif self.state == 2 and isinstance(original_node, _EXITING):
            self.interrupted = True  # a `with`/`try`/loop around the start ends before the end


# Inside the start statement, what binds the clip's result is no way out (`norm = clip(...)`,
# `self.norm = clip(...)`); its other calls are.
_STATEMENT_PARTS = (cst.Attribute,)


def _quiet_arguments(node: cst.CSTNode) -> bool:
    """An allowed call's arguments run nothing but `<dotted>.parameters()` (or another
    allowed protocol call's own callee): `clip_grad_norm_(model.parameters(), max_norm)`."""
    if not isinstance(node, cst.Call):
        return True
    finder = _ArgumentCalls()
    for arg in node.args:
        arg.visit(finder)
    return not finder.loud


class _ArgumentCalls(cst.CSTVisitor):
    def __init__(self) -> None:
        self.loud = False

    def visit_Call(self, node: cst.Call) -> bool:
        func = node.func
        if (isinstance(func, cst.Attribute) and func.attr.value in ("parameters", "named_parameters") and not node.args
                and _dotted_only(func.value)):
            return False
        if _dotted_text(func) in _COLLECTING:
            return True  # `itertools.chain(a.parameters(), b.parameters())`: its arguments decide
        self.loud = True
        return False

    def visit_Yield(self, node: cst.Yield) -> None:
        self.loud = True

    def visit_Await(self, node: cst.Await) -> None:
        self.loud = True

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self.loud = True

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.loud = True


# Builtins and itertools functions that only gather the parameters they are given.
_COLLECTING = frozenset({"itertools.chain", "chain", "itertools.chain.from_iterable", "list", "tuple"})


def _dotted_text(expr: cst.BaseExpression) -> str | None:
    parts = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if not isinstance(expr, cst.Name):
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


def _dotted_only(expr: cst.BaseExpression) -> bool:
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return isinstance(expr, cst.Name)


def quiet_between(function: cst.CSTNode, start: cst.CSTNode, ends, allowed=()) -> bool:
    """True when, in `function` (a FunctionDef or a Module), every node after the statement
    `start` and before the last of the nodes `ends` (in source order) is quiet: it can
    neither raise nor suspend nor run unseen code.  The subtrees of `ends` and of `allowed`
    are not looked into (they are the protocol calls the caller reasons about).  False when
    `start` or some end is not found after it."""
    visitor = _Window(start, frozenset(id(e) for e in ends), frozenset(id(a) for a in allowed))
    body = function.body if isinstance(function, cst.FunctionDef) else function
    body.visit(visitor)
    return visitor.state == 3 and not visitor.interrupted
