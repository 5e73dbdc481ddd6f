"""Parse only the definitions another module needs.

When `train.py` inlines `clip_gradients` from a 70 kB `utils.py`, libcst has to parse
the helper, the module's imports and the module-level names it reads, not the other
forty functions.  `partial_source` keeps every top-level statement that is not a
function or class definition, keeps the definitions asked for (and, through the text,
the same-module definitions they use), and turns every line of the other definitions
into an empty line.  Line numbers stay those of the file, so positions (and the notes
that name `utils.py:12`) are exact, and the result is valid Python whenever the file is.
"""

from __future__ import annotations

import re

from amplint.sources import STRINGS_AND_COMMENTS

_BRACKETS = re.compile(r"[(\[{]|[)\]}]")
_DEFINITION = re.compile(r"(?:async[ \t]+)?def[ \t]+(\w+)|class[ \t]+(\w+)")
_CONTINUES = ("else", "elif", "except", "finally", ")", "]", "}", "#")


def definitions(text: str) -> list[tuple[int, int, str]] | None:
    """(first line, last line, name) of each top-level `def`/`class`, decorators included
    (0-based, inclusive); None when the text has line breaks this reader does not follow
    (a lone carriage return)."""
    if "\r" in text.replace("\r\n", ""):
        return None
    # Strings and comments become placeholders with the same number of line breaks, so
    # brackets and line starts inside them are not mistaken for code.
    # (A comment becomes nothing: one at column 0 inside a function body is no statement.)
    stripped = STRINGS_AND_COMMENTS.sub(lambda m: "" if m.group("comment") else "0" + "\n" * m.group().count("\n"), text)
    lines = stripped.split("\n")
    starts: list[tuple[int, str | None]] = []  # (line, name of a def/class or None)
    depth = 0
    continued = False
    pending_decorator: int | None = None
    for i, line in enumerate(lines):
        body = line.rstrip("\r")
        if depth == 0 and not continued and body and body[0] not in " \t" and not body.startswith(_CONTINUES):
            if body.startswith("@"):
                if pending_decorator is None:
                    pending_decorator = i
            else:
                m = _DEFINITION.match(body)
                name = (m.group(1) or m.group(2)) if m else None
                first = pending_decorator if pending_decorator is not None and name is not None else i
                if pending_decorator is not None and name is None:
                    starts.append((pending_decorator, None))
                pending_decorator = None
                starts.append((first, name))
        for b in _BRACKETS.findall(body):
            depth += 1 if b in "([{" else -1
        depth = max(depth, 0)
        continued = body.endswith("\\")
    out = []
    for k, (first, name) in enumerate(starts):
        if name is None:
            continue
        last = (starts[k + 1][0] if k + 1 < len(starts) else len(lines)) - 1
        out.append((first, last, name))
    return out


def partial_source(text: str, keep: set[str]) -> str | None:
    """`text` with the lines of every top-level definition not in `keep` emptied;
    None when the text cannot be cut safely (then parse all of it)."""
    found = definitions(text)
    if found is None:
        return None
    lines = text.splitlines(keepends=True)
    for first, last, name in found:
        if name in keep:
            continue
        for i in range(first, min(last + 1, len(lines))):
            line = lines[i]
            ending = "\r\n" if line.endswith("\r\n") else "\n" if line.endswith("\n") else ""
            lines[i] = ending
    return "".join(lines)
