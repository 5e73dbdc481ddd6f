"""AMP001 (unused `# noqa: AMPnnn`), computed by the engine after suppression.

Every other rule is a query over the semantic model; this one is a fact about the
other rules' results: which noqa codes matched a finding that suppression dropped.
So the engine runs it last, with the (line, code) pairs it suppressed, the way Ruff
checks RUF100 after its noqa pass.  Only amplint's own codes (`AMP...`) are judged.
"""

from __future__ import annotations

import re

from amplint.positions import split_lines
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix, Span
from amplint.rules.amp001_unused_noqa import UnusedNoqa
from amplint.suppression import Directive, directives

CODE = UnusedNoqa.code


def findings(source: str, path: str, suppressed: list[tuple[int, str]], enabled: set[str]) -> list[Diagnostic]:
    """One AMP001 per noqa comment with AMP codes that suppress nothing on its lines."""
    from amplint.registry import BY_CODE

    used = set(suppressed)
    raw_lines = split_lines(source)  # as the parser counts lines
    lines = [line.rstrip("\r\n") for line in raw_lines]
    out = []
    for d in directives(source):
        ours = [c for c in dict.fromkeys(d.codes) if c.upper().startswith("AMP")]
        if not ours or CODE in ours:  # `# noqa: ..., AMP001` keeps the comment as it is
            continue
        kinds: dict[str, list[str]] = {}
        for c in ours:
            # A listed code also stands for the codes it is a prefix of (`AMP1`), as in flake8.
            if not any(known.startswith(c) for known in BY_CODE):
                kinds.setdefault("unknown", []).append(c)
            elif not any(e.startswith(c) for e in enabled):
                kinds.setdefault("non-enabled", []).append(c)
            elif not any(line in d.covers and s.startswith(c) for line, s in used):
                kinds.setdefault("unused", []).append(c)
        if not kinds:
            continue
        stale = {c for cs in kinds.values() for c in cs}
        detail = "; ".join(f"{k}: {', '.join(f'`{c}`' for c in cs)}" for k, cs in sorted(kinds.items(), key=lambda kv: _ORDER[kv[0]]))
        line_text = lines[d.line - 1] if d.line <= len(lines) else ""
        has_ending = d.line <= len(raw_lines) and raw_lines[d.line - 1] != line_text
        edit = _removal(d, [c for c in dict.fromkeys(d.codes) if c not in stale], line_text, has_ending, lines)
        fix = Fix(UnusedNoqa.fix_title, (edit,), Applicability.SAFE)
        span = Span(d.line, d.col0, d.line, d.end_col0)
        out.append(Diagnostic(CODE, UnusedNoqa.message.format(detail=detail), path, span, fix))
    return out


_ORDER = {"unused": 0, "non-enabled": 1, "unknown": 2}
# A coding declaration as Python looks for it on lines 1-2 (PEP 263).
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+")


def _pulls_into_header(line: int, lines: list[str]) -> bool:
    """Deleting `line` (1-based) moves a coding declaration into lines 1-2, or a shebang
    into line 1."""
    for old in range(line + 1, 4):  # each line below moves up by one
        text = lines[old - 1] if old <= len(lines) else ""
        new = old - 1
        if (new <= 2 and _CODING.match(text)) or (new == 1 and text.startswith("#!")):
            return True
    return False


def _removal(d: Directive, keep: list[str], line_text: str, has_ending: bool, lines: list[str]) -> Edit:
    """The edit that drops the stale codes: the codes kept stay, else the directive goes.

    What is left of the comment is written as a person would: another comment after the
    directive (`# noqa: AMP401  # type: ignore`) keeps its own `#`, an explanation
    (`# noqa: AMP401 - why`) stays a comment, and a comment left empty goes entirely, with
    the spaces before it; a comment that had a line of its own leaves that line empty (line
    numbers do not move).  No trailing spaces are left behind.
    """
    if keep:
        return Edit((d.line, d.col0), (d.line, d.end_col0), "# noqa: " + ", ".join(keep) + _tail(d, line_text))
    before = line_text[d.comment_col0:d.col0]  # the comment's text before the directive, if any
    after = line_text[d.end_col0:].strip()
    if before.strip():
        left = before.rstrip() + (" " + after if after else "")
    else:
        left = after if after.startswith("#") or not after else "# " + after
    end = (d.line, len(line_text))
    if left.strip("#").strip():
        return Edit((d.line, d.comment_col0), end, left)
    code = line_text[: d.comment_col0].rstrip()
    if not code:
        # NB: the comment was the whole line: the line is emptied, not deleted. Deleting it
        # moves every line below up one, and line numbers are behaviour: `%(lineno)d` in
        # log records, tracebacks, `warnings` filters by line, a coding declaration pulled
        # up into the first two lines (hostile pass 13).
        neighbours = [lines[i].strip() for i in (d.line - 2, d.line) if 0 <= i < len(lines)]
        if any(n.startswith("#") for n in neighbours):
            # NB: inside a block of comments an empty line would end the block:
            # `inspect.getcomments` of the `def` below then reads only its last part
            # (hostile pass 18); a bare `#` keeps it one block.
            indent = line_text[: len(line_text) - len(line_text.lstrip(" \t"))]
            return Edit((d.line, 0), (d.line, len(line_text)), indent + "#")
        return Edit((d.line, 0), (d.line, len(line_text)), "")
    return Edit((d.line, len(code)), end, "")


def _tail(d: Directive, line_text: str) -> str:
    """The separator the directive's match swallowed before the text that follows it."""
    match = line_text[d.col0:d.end_col0]
    return match[len(match.rstrip()):] if d.end_col0 < len(line_text.rstrip()) else ""
