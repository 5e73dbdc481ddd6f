"""The one assignment of a name that reaches a use, where the code's shape says so.

`Values.assigned` gives every value a name is ever bound to in its scope, which is what
most questions need ("may `dtype` be float16?").  A question of the form "is this value
safe here?" needs the value the name holds *at* the use:

    norm_weight = torch.zeros_like(labels)          # the default
    if normalise:
        norm_weight = 1 / (labels.sum(0) + eps)     # reaches the use below
        norm_weight = norm_weight / norm_weight.sum()

`dominating_value` answers it only where the answer is certain from the statements'
nesting alone: the last assignment before the use in the use's own block or a block that
encloses it (so every path to the use passes it), with no other assignment of the name
in between, nor after the use inside a loop that repeats the use but not the assignment
(its value would come round again).  Elsewhere it says None and the caller falls back to
every value.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.walk import walk

_LOOPS = (cst.For, cst.While)
_BLOCK_NODES = (cst.IndentedBlock, cst.SimpleStatementSuite)


def dominating_value(body: cst.CSTNode, use: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    """The value of the assignment to `name` that every path from the start of `body` to
    `use` passes last, or None when the nesting does not make it certain."""
    finder = _Finder(use, name)
    walk(body, finder)
    if finder.use_path is None or finder.dominator is None:
        return None
    value, path = finder.dominator
    # a loop around the use but not around the assignment brings later assignments round
    loops_around_use_only = [n for n in finder.use_path if isinstance(n, _LOOPS) and n not in path]
    if any(loop in after_path for loop in loops_around_use_only for after_path in finder.later):
        return None
    return value


class _Finder(cst.CSTVisitor):
    def __init__(self, use: cst.CSTNode, name: str) -> None:
        self.use, self.name = use, name
        self.stack: list[cst.CSTNode] = []  # blocks and loops around the current node
        self.use_path: tuple[cst.CSTNode, ...] | None = None
        # the last assignment seen before the use, with its path; None once one is not on the use's path
        self.dominator: tuple[cst.BaseExpression, tuple] | None = None
        self.candidates: list[tuple[cst.BaseExpression, tuple]] = []
        self.later: list[tuple] = []  # paths of the assignments after the use

    def on_visit(self, node: cst.CSTNode) -> bool:
        if node is self.use:
            self.use_path = tuple(self.stack)
            self.dominator = self._dominator()
            return False
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and self.stack:
            return False  # another scope's names
        if isinstance(node, (*_BLOCK_NODES, *_LOOPS)):
            self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self.stack and self.stack[-1] is original_node:
            self.stack.pop()
        elif isinstance(original_node, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            # NB: on leaving: `w = w / w.sum()` reads the `w` of before, then binds
            self._assignment(original_node)

    def _assignment(self, node) -> None:
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        if not any(dotted(t) == self.name for t in targets):
            if any(self.name in _names(t) for t in targets):  # `a, w = ...`: a value not read here
                self._record(None)
            return
        value = node.value if isinstance(node, (cst.Assign, cst.AnnAssign)) and len(targets) == 1 else None
        self._record(value)

    def _record(self, value) -> None:
        path = tuple(self.stack)
        if self.use_path is None:
            self.candidates.append((value, path))
        else:
            self.later.append(path)

    def _dominator(self):
        if not self.candidates:
            return None
        value, path = self.candidates[-1]
        on_path = len(path) <= len(self.use_path) and self.use_path[: len(path)] == path
        return (value, path) if on_path and value is not None else None


def _names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for e in target.elements for n in _names(e.value)}
    if isinstance(target, cst.StarredElement):
        return _names(target.value)
    text = dotted(target)
    return {text} if text else set()
