"""How code quoted in a message reads: on one line, without its comments.

A finding's message quotes the code it is about (`` `(loss).backward()` runs inside an
autocast region ``).  Every output (text, JSON, SARIF, GitHub annotations, flake8, the
language server) shows a message as one line, so a multi-line call is quoted in its
one-line form, and a comment inside it, which would swallow the rest of that line, is
dropped.
"""

from __future__ import annotations

import io
import re
import tokenize

LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAK = re.compile(f"[ \t]*(?:\r\n|[{LINE_BREAKS}])\\s*")


def one_line(text: str) -> str:
    """`text` on one line: a line break and the indentation around it become one space, so a
    multi-line expression quoted in a message reads as its one-line form, and each finding
    stays one line of text or github output."""
    if not any(c in text for c in LINE_BREAKS):
        return text

    def join(m: re.Match) -> str:  # `f(\n    x\n)` reads `f(x)`, not `f( x )`
        before, after = text[m.start() - 1: m.start()], text[m.end(): m.end() + 1]
        return "" if before in ("(", "[", "{") or after in (")", "]", "}") else " "

    return _LINE_BREAK.sub(join, text).strip()


def code_in_message(code: str) -> str:
    """A code snippet as a message quotes it: comments removed, then on one line."""
    if not any(c in code for c in LINE_BREAKS):
        return code
    return one_line(_without_comments(code))


def _without_comments(code: str) -> str:
    """`code` less its comments (found by the tokenizer, so a `#` in a string stays)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return code
    lines = code.splitlines(keepends=True)
    for tok in reversed([t for t in tokens if t.type == tokenize.COMMENT]):
        row, col = tok.start
        line = lines[row - 1]
        lines[row - 1] = line[:col].rstrip(" \t") + line[col + len(tok.string):]
    return "".join(lines)
