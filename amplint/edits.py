"""A rule's fix (CST changes) as text edits: placed exactly where the parser put the node, or not at all.

libcst computes positions on the text it would print for the module, and that text is
not always the file's: it drops a form feed in some indentation and the last "\\r" of a
CR-only file, and a position is only as good as the line counting that reads it
(amplint/positions.py).  So no edit is trusted on positions alone: before a change is
placed, the text of the file at the node's whitespace-inclusive range must be exactly the
node's own code as libcst prints it at that indentation.  Where it is not, the fix is not
offered (the finding still is).

The pairing of ranges and texts is the other half of placing a fix right:

- a node replaced by a node covers the old node's whitespace-inclusive range (everything
  `code_for_node` prints for it: its parentheses, a small statement's `; `) and writes the
  new node's code in full, so nothing is dropped or doubled (`import x; ; y`);
- text that a rule wrote for a node replaces the node's syntactic range, what the rule
  read when it wrote the text;
- lines amplint adds end with the ending of the line they join and carry the statement's
  indentation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst._nodes.internal import CodegenState  # NB: what Module.code_for_node itself uses
from libcst._position import CodePosition, CodeRange
from libcst.metadata import PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from amplint.diagnostics import Edit, Fix
from amplint.positions import LINE_BREAK, LineIndex, newline_of
from amplint.rules._base import FixSpec, InsertBefore, RemoveStatement, Replace


def code_at_indent(module: cst.Module, node: cst.CSTNode, indent: str) -> str:
    """`module.code_for_node(node)` as printed inside a block indented by `indent`.

    libcst keeps indentation relative to the enclosing block, so a node printed on its
    own loses the block's indentation on its continuation lines; the printer adds it back
    from its indent stack, which is what this fills.
    """
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    if indent:
        state.increase_indent(indent)
    node._codegen(state)
    return "".join(state.tokens)


@dataclass
class _BothRangesState(PositionProvidingCodegenState):
    """PositionProvider's printer, also keeping every node's whitespace-inclusive range
    (what WhitespaceInclusivePositionProvider computes, in a second print of the module)."""

    inclusive: dict = field(default_factory=dict)

    def after_codegen(self, node: cst.CSTNode) -> None:
        # NB: the parent's after_codegen, inlined (it runs once per node of the module):
        # the range is the syntactic one too unless record_syntactic_position set that.
        whole = self.inclusive[node] = CodeRange(self._stack.pop(), CodePosition(self.line, self.column))
        computed = self.provider._computed
        if node not in computed:
            computed[node] = whole


def node_ranges(module: cst.Module, *, inclusive: bool) -> tuple[dict, dict | None]:
    """libcst's PositionProvider ranges of every node and, when asked, the whitespace-
    inclusive ones too, from one print of the module (half the cost of two providers)."""
    provider = PositionProvider()
    state_class = _BothRangesState if inclusive else PositionProvidingCodegenState
    state = state_class(default_indent=module.default_indent, default_newline=module.default_newline, provider=provider)
    module._codegen(state)
    return provider._computed, getattr(state, "inclusive", None)


class EditBuilder:
    """Builds the text edits of every fix of one module."""

    def __init__(self, module: cst.Module, source: str, positions, inclusive) -> None:
        self.module = module
        self.source = source
        self.index = LineIndex(source)
        self._positions = positions
        self.inclusive = inclusive

    def fix(self, spec: FixSpec) -> Fix | None:
        """The fix as edits, or None when one of its changes cannot be placed exactly."""
        edits = []
        for change in spec.changes:
            edit = self._edit(change)
            if edit is None:
                return None
            edits.append(edit)
        return Fix(spec.title, tuple(sorted(edits)), spec.applicability)

    # --- one change ------------------------------------------------------------------------
    def _edit(self, change) -> Edit | None:
        if isinstance(change, Replace):
            return self._replace(change)
        if isinstance(change, InsertBefore):
            return self._insert_before(change)
        if isinstance(change, RemoveStatement):
            return self._remove(change)
        return None

    def _replace(self, change: Replace) -> Edit | None:
        placed = self._verified(change.node)
        if placed is None:
            return None
        start, end, indent = placed
        if not isinstance(change.new, str):
            new = change.new
            if isinstance(change.node, cst.BaseStatement) and hasattr(new, "leading_lines"):
                # NB: the old node's comments and blank lines above it are inside the
                # range; a new statement without them would delete them.
                new = new.with_changes(leading_lines=change.node.leading_lines)
            return Edit(start, end, code_at_indent(self.module, new, indent))
        pos = self._positions.get(change.node)
        if pos is None:
            return None
        ending = self._ending_at(pos.start.line)
        lines = LINE_BREAK.split(change.new.rstrip("\r\n"))
        content = ending.join([lines[0], *((indent + line) if line.strip() else line for line in lines[1:])])
        return Edit((pos.start.line, pos.start.column), (pos.end.line, pos.end.column), content)

    def _insert_before(self, change: InsertBefore) -> Edit | None:
        placed = self._verified(change.statement)
        pos = self._positions.get(change.statement)
        if placed is None or pos is None:
            return None
        _, _, indent = placed
        if self.index.line_text(pos.start.line)[: pos.start.column] != indent:
            return None  # not at the start of its line (`if c: clip(...)`): a line before it is not "before"
        ending = self._ending_at(pos.start.line)
        content = "".join(line + ending + indent for line in LINE_BREAK.split(change.code.rstrip("\r\n")))
        at = (pos.start.line, pos.start.column)
        return Edit(at, at, content)

    def _remove(self, change: RemoveStatement) -> Edit | None:
        pos = self._positions.get(change.statement)
        if pos is None or self._verified(change.statement) is None:
            return None
        return Edit((pos.start.line, 0), (pos.end.line + 1, 0), "")

    # --- checks ------------------------------------------------------------------------
    def _verified(self, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int], str] | None:
        """(start, end, indentation) of `node`'s whitespace-inclusive range, if the file
        holds exactly the node's code there; None otherwise."""
        rng = self.inclusive.get(node)
        if rng is None:
            return None
        start, end = (rng.start.line, rng.start.column), (rng.end.line, rng.end.column)
        if not self.index.exists(*start):
            return None
        a = self.index.offset(*start)
        at_eof = not self.index.exists(*end)
        text = self.source[a:self.index.offset(*end)]
        line = self.index.line_text(rng.start.line)
        leading = line[: len(line) - len(line.lstrip(" \t"))]
        # The block's indentation is the start line's, or (an expression on a continuation
        # line) a prefix of it; a one-line node prints the same at any.
        for k in range(len(leading), -1, -1):
            indent = leading[:k]
            code = code_at_indent(self.module, node, indent)
            if text == code or (at_eof and not self.module.has_trailing_newline and code == text + self.module.default_newline):
                if at_eof:
                    end = self._end_of_text()
                return start, end, indent
            if "\n" not in code and "\r" not in code:
                return None  # no indentation changes a one-line node: the text is elsewhere
        return None

    def _end_of_text(self) -> tuple[int, int]:
        last = len(self.index.starts)
        return last, len(self.source) - self.index.starts[-1]

    def _ending_at(self, line: int) -> str:
        """The ending of `line`, or the file's (a last line without one)."""
        return self.index.ending(line) or newline_of(self.source)
