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

from dataclasses import dataclass

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


class _NoRange:
    """What `record_syntactic_position` returns outside the nodes asked for: nothing recorded."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        return False


_NO_RANGE = _NoRange()


class _SyntacticRange:
    """libcst's `record_syntactic_position`, as a plain context manager (the generator-based
    one costs several calls per node)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state, node, start_node, end_node) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = CodePosition(self.state.line, self.state.column)

    def __exit__(self, exc_type, *exc) -> bool:
        if exc_type is not None:
            return False  # the print failed (a tree too deep): nothing half-done is recorded
        state = self.state
        computed = state.provider._computed
        start = computed[self.start_node].start if self.start_node is not None else self.start
        end = computed[self.end_node].end if self.end_node is not None else CodePosition(state.line, state.column)
        computed[self.node] = CodeRange(start, end)
        return False


@dataclass
class _RangesState(PositionProvidingCodegenState):
    """PositionProvider's printer, recording the ranges of the nodes in `wanted` (and of
    their descendants, whose ranges theirs may be hoisted from), or of every node when
    `wanted` is None; with `inclusive`, the whitespace-inclusive ranges too (what
    WhitespaceInclusivePositionProvider computes, in a second print of the module).

    Line and column are followed through every token as libcst does; only the per-node
    bookkeeping is skipped outside the nodes asked for, which is most of the cost of a
    position map (about six times a plain print of the module)."""

    wanted: frozenset | None = None
    inclusive: dict | None = None
    _depth: int = 0  # > 0 inside a node of `wanted` (always, when `wanted` is None)

    def __post_init__(self) -> None:
        if self.wanted is None:
            self._depth = 1

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if "\n" in value or "\r" in value:
            self._update_position(value)
        else:
            self.column += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if self._depth or node in self.wanted:
            self._depth += 1
            self._stack.append(CodePosition(self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        if not self._depth:
            return
        if self.wanted is not None:
            self._depth -= 1
        whole = CodeRange(self._stack.pop(), CodePosition(self.line, self.column))
        if self.inclusive is not None:
            self.inclusive[node] = whole
        computed = self.provider._computed
        if node not in computed:  # NB: the syntactic range, unless record_syntactic_position set it
            computed[node] = whole

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        if not self._depth:
            return _NO_RANGE
        return _SyntacticRange(self, node, start_node, end_node)


class NodeRanges:
    """The ranges of a module's nodes, from one print of it: of the nodes named when it
    was made, and of any other node once asked for (the whole module is printed again then).

    A finding needs the positions of a handful of nodes, and a position map of a large
    module (transformers' trainer.py) cost more than its analysis."""

    def __init__(self, module: cst.Module, *, inclusive: bool, wanted=None) -> None:
        self._module = module
        self._wanted = None if wanted is None else frozenset(wanted)
        self.syntactic, self.inclusive = _print_ranges(module, inclusive, self._wanted)
        self._with_inclusive = inclusive

    def want(self, nodes) -> None:
        """Make sure the ranges of `nodes` are at hand (one more print, if any is new)."""
        if self._wanted is not None and not self._wanted.issuperset(nodes):
            self._wanted = self._wanted.union(nodes)
            self.syntactic, self.inclusive = _print_ranges(self._module, self._with_inclusive, self._wanted)

    def get(self, node: cst.CSTNode) -> CodeRange | None:
        return self._lookup(node, inclusive=False)

    def get_inclusive(self, node: cst.CSTNode) -> CodeRange | None:
        return self._lookup(node, inclusive=True)

    def _lookup(self, node, *, inclusive: bool) -> CodeRange | None:
        if inclusive and not self._with_inclusive:
            raise ValueError("these ranges were made without the whitespace-inclusive ones")
        table = self.inclusive if inclusive else self.syntactic
        found = table.get(node)
        if found is None and self._wanted is not None and node not in self._wanted:
            self._wanted = None
            self.syntactic, self.inclusive = _print_ranges(self._module, self._with_inclusive, None)
            found = (self.inclusive if inclusive else self.syntactic).get(node)
        return found


def _print_ranges(module: cst.Module, inclusive: bool, wanted: frozenset | None) -> tuple[dict, dict | None]:
    """The syntactic ranges and, when asked, the whitespace-inclusive ones, from one print
    of the module (half the cost of libcst's two providers)."""
    provider = PositionProvider()
    state = _RangesState(default_indent=module.default_indent, default_newline=module.default_newline,
                         provider=provider, wanted=wanted, inclusive={} if inclusive else None)
    module._codegen(state)
    return provider._computed, state.inclusive


def fix_nodes(spec: FixSpec) -> tuple[cst.CSTNode, ...]:
    """The nodes whose ranges placing `spec`'s changes reads."""
    out = []
    for change in spec.changes:
        if isinstance(change, Replace):
            out.append(change.node)
        elif isinstance(change, (InsertBefore, RemoveStatement)):
            out.append(change.statement)
    return tuple(out)


class EditBuilder:
    """Builds the text edits of every fix of one module."""

    def __init__(self, module: cst.Module, source: str, ranges: NodeRanges) -> None:
        self.module = module
        self.source = source
        self.index = LineIndex(source)
        self._positions = ranges

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
        if isinstance(change.new, cst.FlattenSentinel):
            # Statements in place of one (a statement moved out of a block to just after
            # it): each printed at the old statement's indentation, one after the other.
            content = "".join(code_at_indent(self.module, n, indent) for n in change.new.nodes)
            if not self.module.has_trailing_newline and end == self._end_of_text():
                content = content.removesuffix(self.module.default_newline)  # the file ended without one
            return Edit(start, end, content)
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
        """The statement's lines are left empty, not deleted: every later line keeps its
        number (a logged `%(lineno)d`, a traceback; hostile pass 18)."""
        pos = self._positions.get(change.statement)
        if pos is None or self._verified(change.statement) is None:
            return None
        before = self.index.ending(pos.start.line - 1) if pos.start.line > 1 else ""
        empty = ""
        for line in range(pos.start.line, pos.end.line + 1):
            ending = self._ending_at(line)
            if ending == "\n" and (empty or before).endswith("\r"):
                ending = "\r\n"  # NB: a `\n` right after a `\r` would join two lines into one break
            empty += ending
        return Edit((pos.start.line, 0), (pos.end.line + 1, 0), empty)

    # --- checks ------------------------------------------------------------------------
    def _verified(self, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int], str] | None:
        """(start, end, indentation) of `node`'s whitespace-inclusive range, if the file
        holds exactly the node's code there; None otherwise."""
        rng = self._positions.get_inclusive(node)
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
