"""What an `assert` before a use says a name holds.

`assert precision_type == torch.float, "DeepSpeed needs float32 here"` followed by
`clip.to(precision_type)`: whatever the name may hold elsewhere, past the assert it holds
that value (DALLE2-pytorch's trainers). Only asserts that run before the use on every path
count: earlier in the same block, or in a block that encloses the use.
"""

from __future__ import annotations

import libcst as cst

_BLOCKS = (cst.IndentedBlock, cst.Module)


def asserted_values(name: str, use: cst.CSTNode, body: cst.CSTNode) -> list[cst.BaseExpression] | None:
    """The values `assert name == X` / `assert name is X` / `assert name in (X, Y)` allows
    at `use`, from the nearest such assert that runs before it on every path in `body`
    (a function or module); None when there is none."""
    finder = _AssertsBefore(name, use)
    body.visit(finder)
    return finder.allowed


class _AssertsBefore(cst.CSTVisitor):
    def __init__(self, name: str, use: cst.CSTNode) -> None:
        self.name, self.use = name, use
        self.blocks: list[int] = []
        self.seen: list[tuple[tuple[int, ...], list[cst.BaseExpression]]] = []
        self.allowed: list[cst.BaseExpression] | None = None
        self.done = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.done:
            return False
        if node is self.use:
            path = tuple(self.blocks)
            for block_path, values in reversed(self.seen):
                if path[: len(block_path)] == block_path:
                    self.allowed = values
                    break
            self.done = True
            return False
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and self.blocks:
            return False  # another scope: its asserts say nothing here
        if isinstance(node, _BLOCKS):
            self.blocks.append(id(node))
        elif isinstance(node, cst.Assert):
            values = _allowed(node.test, self.name)
            if values is not None:
                self.seen.append((tuple(self.blocks), values))
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, _BLOCKS) and self.blocks and self.blocks[-1] == id(original_node):
            self.blocks.pop()


def _allowed(test: cst.BaseExpression, name: str) -> list[cst.BaseExpression] | None:
    if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and test.left.value == name):
        return None
    if len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if isinstance(target.operator, (cst.Equal, cst.Is)):
        return [target.comparator]
    if isinstance(target.operator, cst.In) and isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set)):
        return [e.value for e in target.comparator.elements if not isinstance(e, cst.StarredElement)]
    return None
