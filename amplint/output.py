"""Output formats. Each converts spans through `diagnostics` helpers, never by hand."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from amplint.diagnostics import Diagnostic, to_one_based, to_text

DOCS_URL = "https://github.com/amplint/amplint/blob/main/rules/{code}.md"


def rule_url(code: str) -> str:
    return DOCS_URL.format(code=code)


def _colour(enabled: bool):
    def paint(text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if enabled else text

    return paint


def format_text(diagnostics: list[Diagnostic], sources: dict[str, str] | None = None, *, colour: bool = False,
                show_fixes: bool = False) -> str:
    paint = _colour(colour)
    out = []
    for d in diagnostics:
        fixable = " [*]" if d.fix is not None else ""
        out.append(f"{paint(d.path, '1')}:{to_text(d.span)}: {paint(d.code, '1;31')}{fixable} {d.message}")
        text = (sources or {}).get(d.path)
        if text is not None:
            lines = text.splitlines()
            if 0 < d.span.line <= len(lines):
                line = lines[d.span.line - 1]
                width = (d.span.end_col0 if d.span.end_line == d.span.line else len(line)) - d.span.col0
                out.append(f"  {d.span.line:>4} | {line}")
                out.append(f"       | {' ' * d.span.col0}{paint('^' * max(width, 1), '31')}")
        if show_fixes and d.fix is not None:
            out.append(f"       = help: {d.fix.title}")
        for note in d.notes:
            out.append(f"       = note: {note}")
    return "\n".join(out)


def to_json_obj(d: Diagnostic) -> dict:
    """Ruff's JSON keys, 1-based rows and columns."""
    return {
        "code": d.code,
        "message": d.message,
        "filename": d.path,
        "location": to_one_based(d.span.line, d.span.col0),
        "end_location": to_one_based(d.span.end_line, d.span.end_col0),
        "fix": None
        if d.fix is None
        else {
            "message": d.fix.title,
            "applicability": d.fix.applicability.value,
            "edits": [
                {
                    "content": e.content,
                    "location": to_one_based(*e.start),
                    "end_location": to_one_based(*e.end),
                }
                for e in d.fix.edits
            ],
        },
        "url": rule_url(d.code),
        "noqa_row": d.span.line,
    }


def format_json(diagnostics: list[Diagnostic]) -> str:
    return json.dumps([to_json_obj(d) for d in diagnostics], indent=2)


def stream_is_tty(stream: TextIO = sys.stdout) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
