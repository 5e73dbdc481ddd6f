"""`# noqa` and `# noqa: AMP101, AMP201` comments, for the CLI (flake8 handles its own).

Like flake8, a comment anywhere on a logical line (a statement spread over several
physical lines inside brackets) covers every physical line of it.
"""

from __future__ import annotations

import re
import tokenize
from dataclasses import dataclass

from amplint.diagnostics import Edit
from amplint.positions import lf_lines, split_lines

# flake8's own pattern (flake8/defaults.py), so both front ends agree on what a noqa
# comment is and which codes it names.  NB: `[A-Z]+`: a one-letter `[A-Z]` read
# `# noqa: AMP401` as a bare noqa that silenced every rule on the line.
_NOQA = re.compile(r"#\s*noqa(?::[\s]?(?P<codes>(?:[A-Z]+[0-9]+(?:[,\s]+)?)+))?", re.IGNORECASE)
_SEPARATORS = re.compile(r"[,\s]+")

ALL = "*"


def noqa_map(source: str) -> dict[int, frozenset[str]]:
    """Line -> codes suppressed there (`{"*"}` for a bare noqa)."""
    if "noqa" not in source.lower():
        return {}
    out: dict[int, set[str]] = {}
    try:
        # NB: lines as the parser counts them (a lone "\r" ends one), each ending in "\n":
        # StringIO's readline would give every comment after a lone CR the wrong line, and
        # tokenize would read a CR-only file as one logical line, all of it under one noqa.
        tokens = list(tokenize.generate_tokens(lf_lines(source).__next__))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return _by_physical_line(source)
    logical_start: int | None = None
    pending: set[str] = set()
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            codes = _codes(tok.string)
            if codes is None:
                continue
            if logical_start is None:  # a comment on a line of its own covers that line
                out.setdefault(tok.start[0], set()).update(codes)
            else:
                pending |= codes
        elif tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if logical_start is not None and pending:
                for line in range(logical_start, tok.start[0] + 1):
                    out.setdefault(line, set()).update(pending)
            logical_start, pending = None, set()
        elif tok.type not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            if logical_start is None:
                logical_start = tok.start[0]
    return {line: frozenset(codes) for line, codes in out.items()}


def _codes(comment: str) -> set[str] | None:
    m = _NOQA.search(comment)
    if m is None:
        return None
    if m.group("codes") is None:
        return {ALL}
    return set(_split_codes(m.group("codes")))


def _split_codes(text: str) -> list[str]:
    return [c for c in _SEPARATORS.split(text) if c]


def _by_physical_line(source: str) -> dict[int, frozenset[str]]:
    out = {}
    for i, line in enumerate(split_lines(source), start=1):
        if "#" in line:
            codes = _codes(line[line.index("#"):])
            if codes is not None:
                out[i] = frozenset(codes)
    return out


def is_suppressed(code: str, line: int, noqa: dict[int, frozenset[str]]) -> bool:
    codes = noqa.get(line)
    if not codes:
        return False
    # As flake8: a listed code suppresses itself and the codes it is a prefix of (`AMP1`).
    return ALL in codes or code in codes or code.startswith(tuple(codes))


# --- where a noqa comment goes, and which ones suppress nothing --------------------------
#
# `--add-noqa`, the language server's "suppress" action, JSON's `noqa_row` and the unused
# noqa rule (AMP001) all need the same two facts: the physical line that ends a logical
# line (a comment there covers every line of the statement, see `noqa_map`), and each
# noqa comment's codes with their position.  Both come from one tokenization.


@dataclass(frozen=True)
class Directive:
    """One `# noqa[: codes]` comment: where its match lies and which lines it covers."""

    line: int
    col0: int  # start of the `# noqa...` match inside the comment
    end_col0: int  # end of that match (text after it, an explanation, is kept by fixes)
    codes: tuple[str, ...]  # () for a bare `# noqa`
    covers: tuple[int, ...]
    comment_col0: int  # the whole comment token, `#` to the end of the line
    comment_end_col0: int


def directives(source: str) -> list[Directive]:
    """Every noqa comment, in source order, with the lines it suppresses on."""
    if "noqa" not in source.lower():
        return []
    out: list[Directive] = []
    logical_start: int | None = None
    pending: list[tuple[int, int, str]] = []  # (line, col0 of the comment, comment text)

    def flush(end_line: int, own_line: tuple[int, int, str] | None = None) -> None:
        for line, col, text in ([own_line] if own_line else pending):
            m = _NOQA.search(text)
            if m is None:
                continue
            codes = () if m.group("codes") is None else tuple(_split_codes(m.group("codes")))
            covers = (line,) if own_line else tuple(range(logical_start, end_line + 1))
            out.append(Directive(line, col + m.start(), col + m.end(), codes, covers, col, col + len(text)))

    try:
        tokens = list(tokenize.generate_tokens(lf_lines(source).__next__))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            if logical_start is None:
                flush(tok.start[0], (tok.start[0], tok.start[1], tok.string))
            else:
                pending.append((tok.start[0], tok.start[1], tok.string))
        elif tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if logical_start is not None:
                flush(tok.start[0])
            logical_start, pending = None, []
        elif tok.type not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            if logical_start is None:
                logical_start = tok.start[0]
    return out


def logical_line_ends(source: str, until: int | None = None) -> dict[int, int]:
    """Physical line -> the last physical line of its logical line (only where they differ).

    A noqa comment belongs there: it is always after the last token of the statement (never
    inside a multi-line string), and it covers every line of the statement.  `until`: only
    the logical lines that start at or before it are needed (the text is read no further).
    """
    out: dict[int, int] = {}
    try:
        tokens = tokenize.generate_tokens(lf_lines(source).__next__)
        logical_start: int | None = None
        for tok in tokens:
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if logical_start is not None:
                    end = tok.start[0]
                    for line in range(logical_start, end):
                        out[line] = end
                logical_start = None
                if until is not None and tok.start[0] >= until:
                    break
            elif tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
                if logical_start is None:
                    logical_start = tok.start[0]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return out
    return out


def noqa_row(line: int, ends: dict[int, int]) -> int:
    """Ruff's `noqa_row`: the line where a `# noqa` for a finding starting on `line` goes."""
    return ends.get(line, line)


def add_noqa_edits(source: str, found: list[tuple[int, str]]) -> list[Edit]:
    """Edits that suppress each (line, code) with a `# noqa: CODE` comment.

    The comment goes at the end of the finding's logical line; an existing noqa comment
    there gets the code added (a bare `# noqa` already covers everything); another
    comment (`# type: ignore`) is kept and the noqa follows it.
    """
    ends = logical_line_ends(source)
    lines = split_lines(source)
    existing = {d.line: d for d in directives(source)}
    wanted: dict[int, set[str]] = {}
    for line, code in found:
        wanted.setdefault(noqa_row(line, ends), set()).add(code)
    edits: list[Edit] = []
    for row, codes in sorted(wanted.items()):
        if not 0 < row <= len(lines):
            continue
        text = lines[row - 1].rstrip("\r\n")
        d = existing.get(row)
        if d is not None:
            if not d.codes:
                continue  # a bare noqa suppresses everything already
            new = sorted(set(d.codes) | codes)
            if new == sorted(d.codes):
                continue
            edits.append(Edit((row, d.col0), (row, d.end_col0), "# noqa: " + ", ".join(new)))
            continue
        end = len(text.rstrip())
        edits.append(Edit((row, end), (row, len(text)), "  # noqa: " + ", ".join(sorted(codes))))
    return edits
