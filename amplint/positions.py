"""Lines and offsets as the parser counts them: the one place a (line, column) becomes an offset.

libcst's PositionProvider breaks lines at "\\r\\n", "\\r" and "\\n" (its `NEWLINE_RE`), and
so does CPython's tokenizer.  Two other ways of counting disagree with it on real files:
counting only "\\n" misses a lone "\\r" (old Mac files, a stray CR in a comment), and
`str.splitlines` also breaks at form feeds, "\\x1c"-"\\x1e", "\\x85", U+2028 and U+2029, which
are ordinary characters to the parser.  Either way a fix computed for one line is written
onto another.  Everything that turns libcst's (1-based line, 0-based column) into an offset
into the text, or shows "line N", goes through `LineIndex` or `split_lines`.

Columns are code points, as libcst counts them (not bytes, not UTF-16 units).
"""

from __future__ import annotations

import re

LINE_BREAK = re.compile(r"\r\n?|\n")


def split_lines(text: str) -> list[str]:
    """The lines of `text`, each with its own ending; a last line without one is kept."""
    out: list[str] = []
    start = 0
    for m in LINE_BREAK.finditer(text):
        out.append(text[start:m.end()])
        start = m.end()
    if start < len(text):
        out.append(text[start:])
    return out


def lf_lines(text: str):
    """`split_lines(text)` with every ending written "\\n": what `tokenize` understands.

    tokenize (CPython's pure-Python one) ends a logical line only at "\\n" and reads a
    lone "\\r" after code as an error token, so in a CR-only file one comment would cover
    every later line.  Line numbers and columns are unchanged.
    """
    for line in split_lines(text):
        yield line[:-2] + "\n" if line.endswith("\r\n") else line[:-1] + "\n" if line.endswith("\r") else line


def newline_of(source: str) -> str:
    """The file's line ending, judged by its first line (as libcst does): \\n, \\r\\n or \\r."""
    i = source.find("\n")
    j = source.find("\r")
    if j == -1 or (i != -1 and i < j):
        return "\n"
    return "\r\n" if source.startswith("\r\n", j) else "\r"


class LineIndex:
    """Offsets of the line starts of one text."""

    __slots__ = ("text", "starts")

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0, *(m.end() for m in LINE_BREAK.finditer(text))]

    def offset(self, line: int, col0: int) -> int:
        """The offset of (line, col0); a position past the end of the text is its end."""
        if line < 1:
            return 0
        if line > len(self.starts):
            return len(self.text)
        return min(self.starts[line - 1] + col0, len(self.text))

    def exists(self, line: int, col0: int) -> bool:
        """Whether (line, col0) is a position inside the text (the end of the text included)."""
        if line < 1 or col0 < 0 or line > len(self.starts):
            return False
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        return self.starts[line - 1] + col0 <= end

    def line_text(self, line: int) -> str:
        """Line `line` (1-based) without its ending; "" past the end."""
        if not 1 <= line <= len(self.starts):
            return ""
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def ending(self, line: int) -> str:
        """The line's own ending ("\\n", "\\r\\n", "\\r"), or "" for a last line without one."""
        if not 1 <= line < len(self.starts):
            return ""
        end = self.starts[line]
        return "\r\n" if self.text.startswith("\r\n", end - 2) else self.text[end - 1]
