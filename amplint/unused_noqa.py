"""AMP001 (unused `# noqa: AMPnnn`), computed by the engine after suppression.

Every other rule is a query over the semantic model; this one is a fact about the
other rules' results: which noqa codes matched a finding that suppression dropped.
So the engine runs it last, with the (line, code) pairs it suppressed, the way Ruff
checks RUF100 after its noqa pass.  Only amplint's own codes (`AMP...`) are judged.
"""

from __future__ import annotations

from amplint.positions import split_lines
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix, Span
from amplint.rules.amp001_unused_noqa import UnusedNoqa
from amplint.suppression import Directive, directives

CODE = UnusedNoqa.code


def findings(source: str, path: str, suppressed: list[tuple[int, str]], enabled: set[str]) -> list[Diagnostic]:
    """One AMP001 per noqa comment with AMP codes that suppress nothing on its lines."""
    from amplint.registry import BY_CODE

    used = set(suppressed)
    lines = [line.rstrip("\r\n") for line in split_lines(source)]  # as the parser counts lines
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
        edit = _removal(d, [c for c in dict.fromkeys(d.codes) if c not in stale], line_text)
        fix = Fix(UnusedNoqa.fix_title, (edit,), Applicability.SAFE)
        span = Span(d.line, d.col0, d.line, d.end_col0)
        out.append(Diagnostic(CODE, UnusedNoqa.message.format(detail=detail), path, span, fix))
    return out


_ORDER = {"unused": 0, "non-enabled": 1, "unknown": 2}


def _removal(d: Directive, keep: list[str], line_text: str) -> Edit:
    """The edit that drops the stale codes: the codes kept stay, else the comment goes."""
    if keep:
        return Edit((d.line, d.col0), (d.line, d.end_col0), "# noqa: " + ", ".join(keep) + _tail(d, line_text))
    if d.col0 == d.comment_col0 and d.end_col0 >= len(line_text.rstrip()):
        # The comment is only this directive: remove it and the spaces before it.
        start = len(line_text[: d.comment_col0].rstrip())
        return Edit((d.line, start), (d.line, len(line_text.rstrip())), "")
    # An explanation follows (`# noqa: AMP101 - why`), or the directive is inside a longer
    # comment: keep the rest of the comment, still a comment.
    return Edit((d.line, d.col0), (d.line, d.end_col0), "# " if d.col0 == d.comment_col0 else "")


def _tail(d: Directive, line_text: str) -> str:
    """The separator the directive's match swallowed before the text that follows it."""
    match = line_text[d.col0:d.end_col0]
    return match[len(match.rstrip()):] if d.end_col0 < len(line_text.rstrip()) else ""
