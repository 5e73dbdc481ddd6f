"""`# noqa` and `# noqa: AMP101, AMP201` comments, for the CLI (flake8 handles its own).

Like flake8, a comment anywhere on a logical line (a statement spread over several
physical lines inside brackets) covers every physical line of it.
"""

from __future__ import annotations

import re
import tokenize

from amplint.positions import lf_lines, split_lines

# flake8's own pattern, so both front ends agree on what a noqa comment is.
_NOQA = re.compile(r"#\s*noqa(?::[\s]?(?P<codes>[A-Z][0-9]+(?:[,\s]+)?)+)?", re.IGNORECASE)
_CODE = re.compile(r"[A-Z]+[0-9]+")

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
    return set(_CODE.findall(comment[m.start():]))


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
    return ALL in codes or code in codes
