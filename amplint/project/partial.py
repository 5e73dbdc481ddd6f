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

from amplint.positions import split_lines
from amplint.sources import replace_strings_and_comments

_BRACKETS = re.compile(r"[(\[{]|[)\]}]")
_DEFINITION = re.compile(r"(?:async[ \t]+)?def[ \t]+(\w+)|class[ \t]+(\w+)")
_CONTINUES = ("else", "elif", "except", "finally", ")", "]", "}", "#")


def definitions(text: str) -> list[tuple[int, int, str]] | None:
    """(first line, last line, name) of each top-level `def`/`class`, decorators included
    (0-based, inclusive); None when the text has line breaks this reader does not follow
    (a lone carriage return)."""
    lines = _code_lines(text)
    if lines is None:
        return None
    return _definitions_at(lines, 0, len(lines) - 1, "")


def methods(text: str, first: int, last: int) -> list[tuple[int, int, str]]:
    """(first line, last line, name) of the methods of the class statement on lines
    first..last (0-based), at the indentation of its body."""
    lines = _code_lines(text)
    if lines is None:
        return []
    indent = None
    for line in lines[first + 1:last + 1]:
        body = line.rstrip("\r")
        if body.strip():
            indent = body[: len(body) - len(body.lstrip())]
            break
    if not indent:
        return []
    return _definitions_at(lines, first + 1, last, indent)


def _code_lines(text: str) -> list[str] | None:
    if "\r" in text.replace("\r\n", ""):
        return None
    # Strings and comments become placeholders with the same number of line breaks, so
    # brackets and line starts inside them are not mistaken for code.
    # (A comment becomes nothing: one at column 0 inside a function body is no statement.)
    stripped = replace_strings_and_comments(text, lambda m: "" if m.group("comment") else "0" + "\n" * m.group().count("\n"))
    return stripped.split("\n")


def _definitions_at(lines: list[str], first: int, last: int, indent: str) -> list[tuple[int, int, str]]:
    """The `def`/`class` statements among lines first..last that start exactly at `indent`."""
    starts: list[tuple[int, str | None]] = []  # (line, name of a def/class or None)
    depth = 0
    continued = False
    pending_decorator: int | None = None
    width = len(indent)
    for i in range(first, last + 1):
        body = lines[i].rstrip("\r")
        at_indent = body.startswith(indent) and body[width:width + 1] not in ("", " ", "\t")
        if depth == 0 and not continued and at_indent and not body[width:].startswith(_CONTINUES):
            rest = body[width:]
            if rest.startswith("@"):
                if pending_decorator is None:
                    pending_decorator = i
            else:
                m = _DEFINITION.match(rest)
                name = (m.group(1) or m.group(2)) if m else None
                start = pending_decorator if pending_decorator is not None and name is not None else i
                if pending_decorator is not None and name is None:
                    starts.append((pending_decorator, None))
                pending_decorator = None
                starts.append((start, name))
        elif depth == 0 and not continued and body.strip() and not body.startswith(indent):
            starts.append((i, None))  # dedented: the block ended
        for b in _BRACKETS.findall(body):
            depth += 1 if b in "([{" else -1
        depth = max(depth, 0)
        continued = body.endswith("\\")
    out = []
    for k, (begin, name) in enumerate(starts):
        if name is None:
            continue
        end = (starts[k + 1][0] if k + 1 < len(starts) else last + 1) - 1
        out.append((begin, end, name))
    return out


def partial_source(text: str, keep: set[str]) -> str | None:
    """`text` with the lines of every top-level definition not in `keep` emptied;
    None when the text cannot be cut safely (then parse all of it).

    `keep` holds top-level names (`clip_gradients`, `Trainer`: kept whole) and methods
    (`Trainer.fit`): a class named only through its methods keeps its own statements and
    those methods, and each other method becomes a `pass` at its indentation (its other
    lines empty), so the class stays valid Python and line numbers stay the file's.
    """
    found = definitions(text)
    if found is None:
        return None
    # NB: lines end at \n or \r\n only, as in `_code_lines`: str.splitlines also breaks
    # at a form feed or \u2028, and every cut after one emptied the line above its own
    lines = split_lines(text)
    partial_classes: dict[str, set[str]] = {}
    for entry in keep:
        cls, _, method = entry.partition(".")
        if method:
            partial_classes.setdefault(cls, set()).add(method)
    for first, last, name in found:
        if name in keep:
            continue
        if name in partial_classes:
            for m_first, m_last, method in methods(text, first, min(last, len(lines) - 1)):
                if method not in partial_classes[name]:
                    _blank(lines, m_first, m_last, keep_pass=True)
            continue
        _blank(lines, first, last)
    return "".join(lines)


def _blank(lines: list[str], first: int, last: int, keep_pass: bool = False) -> None:
    for i in range(first, min(last + 1, len(lines))):
        line = lines[i]
        ending = "\r\n" if line.endswith("\r\n") else "\n" if line.endswith("\n") else ""
        if keep_pass and i == first:
            indent = line[: len(line) - len(line.lstrip(" \t"))]
            lines[i] = f"{indent}pass{ending}"
        else:
            lines[i] = ending
