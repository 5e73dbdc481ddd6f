"""amplint's diagnostics and edits as LSP objects; every position goes through one function."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from lsprotocol import types

from amplint.diagnostics import Diagnostic, Edit, to_lsp
from amplint.output import rule_url
from amplint.positions import split_lines

SOURCE = "amplint"


def position(lines: Sequence[str], codec, line: int, col0: int) -> types.Position:
    """amplint's (1-based line, code-point column) -> the client's position units."""
    lsp_line, character = to_lsp(line, col0)
    return codec.position_to_client_units(lines, types.Position(line=lsp_line, character=character))


def lsp_range(lines, codec, start: tuple[int, int], end: tuple[int, int]) -> types.Range:
    return types.Range(start=position(lines, codec, *start), end=position(lines, codec, *end))


def diagnostic(d: Diagnostic, lines, codec) -> types.Diagnostic:
    return types.Diagnostic(
        range=lsp_range(lines, codec, (d.span.line, d.span.col0), (d.span.end_line, d.span.end_col0)),
        message=d.message,
        severity=types.DiagnosticSeverity.Warning,
        code=d.code,
        code_description=types.CodeDescription(href=url) if (url := rule_url(d.code)) else None,
        source=SOURCE,
    )


def parse_error(line: int, col0: int, reason: str, lines, codec) -> types.Diagnostic:
    """Why nothing else is reported for this buffer: it does not parse (yet)."""
    start = position(lines, codec, line, col0)
    return types.Diagnostic(range=types.Range(start=start, end=start), message=reason,
                            severity=types.DiagnosticSeverity.Error, source=SOURCE)


def text_edits(edits: Sequence[Edit], lines, codec) -> list[types.TextEdit]:
    return [types.TextEdit(range=lsp_range(lines, codec, e.start, e.end), new_text=e.content) for e in edits]


def whole_text_edits(old: str, new: str, lines, codec) -> list[types.TextEdit]:
    """The few line-level edits that turn `old` into `new` (not one replace-all, which
    moves the cursor and folds in most editors).  Lines end at \n, \r\n or \r only, as
    in LSP and libcst: `str.splitlines` also breaks at a form feed, \x1c-\x1e, \x85 and
    \u2028, which moved every edit after one of them down a line in the client."""
    a, b = split_lines(old), split_lines(new)
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        start, end = _line_start(a, i1), _line_start(a, i2)
        out.append(types.TextEdit(range=lsp_range(lines, codec, start, end), new_text="".join(b[j1:j2])))
    return out


def _line_start(lines: list[str], index: int) -> tuple[int, int]:
    """(1-based line, col0) where line `index` (0-based) starts; past a last line without
    a newline, that line's end."""
    if index < len(lines) or not lines or lines[-1].endswith(("\n", "\r")):
        return index + 1, 0
    return len(lines), len(lines[-1])


def overlaps(a: types.Range, b: types.Range) -> bool:
    """Closed intervals: a cursor (an empty range) at either end of a finding touches it."""
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and (
        b.start.line, b.start.character) <= (a.end.line, a.end.character)
