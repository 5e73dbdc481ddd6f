"""Which Pythons a text parses on, where that differs by version in ways a fix can cause.

A fix is checked by parsing its output with the Python that runs amplint (fixes.py).  That
is not enough: since Python 3.12 (PEP 701) a replacement field of an f-string may hold the
f-string's own quote (`f"{GradScaler("cuda")}"`) or a backslash; 3.10 and 3.11 refuse
both.  A fix written under 3.12 must not make a file that parsed on 3.11 stop parsing
there, so the fixed text is held to the rules of the oldest Python the original met.

libcst reads both spellings on every Python, so the test reads the tree, not the running
interpreter: it answers the same whatever Python runs `--fix`.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.walk import walk


def needs_python_312(module: cst.Module) -> bool:
    """The module holds an f-string that only Python 3.12 and later can parse: a
    replacement field that contains the f-string's closing quote or a backslash."""
    finder = _Pep701Finder(module)
    walk(module, finder)
    return finder.found


class _Pep701Finder(cst.CSTVisitor):
    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.found = False

    def visit_FormattedString(self, node: cst.FormattedString) -> bool:
        if self.found:
            return False
        # Before 3.12 the whole f-string was first read as a plain string literal: its
        # closing quote ends it wherever it appears, inside a replacement field too.
        inside = self.module.code_for_node(node)[len(node.start):-len(node.end)]
        if node.end in inside:
            self.found = True
            return False
        for part in node.parts:
            if isinstance(part, cst.FormattedStringExpression) and "\\" in self.module.code_for_node(part.expression):
                self.found = True
                return False
        return True
