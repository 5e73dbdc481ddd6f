"""A module's top-level definitions and imports, read from its code text without parsing.

The pre-filter asks, for a file that calls `clip_gradients` from `utils.py`, whether
the code that call can run contains a rule's tokens.  Parsing every imported module
for that would cost more than the checks themselves, so this reads the code text
(comments and docstrings removed, amplint.prefilter.code_text) and cuts it at the
lines where a top-level `def`, `class`, decorator or assignment starts.  A segment is
everything from its definition to the next top-level definition: module-level
statements in between are kept with the one before, so a cut can only give a segment
more text, never less (a triple-quoted string holding a line that starts with `def `
is the one exception, and costs at most a missed file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from amplint.project.text_imports import imported_names

# Where a top-level definition (or a decorator, which belongs to the next one) starts.
_TOP = re.compile(r"^(?:@|(?:async[ \t]+)?def[ \t]+(?P<def>\w+)|class[ \t]+(?P<cls>\w+)|(?P<var>[A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=))", re.MULTILINE)
# A name called (`helper(`) or used as an attribute head (`utils.helper(`, `self.x`).
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)(?:[ \t]*\(|\.(\w+))")


@dataclass
class TextModule:
    """Top-level segments (name -> code text) and imported names of one module."""

    segments: dict[str, str] = field(default_factory=dict)
    # local name -> (module, name in that module or None for a module import)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)

    @classmethod
    def read(cls, code: str, package: str | None, *, segments: bool = True) -> "TextModule":
        out = cls()
        starts = [(m.start(), m.group("def") or m.group("cls") or m.group("var")) for m in _TOP.finditer(code)] if segments else []
        pending: list[str] = []
        for i, (start, name) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else len(code)
            if name is None:  # a decorator: its text belongs to the definition that follows
                pending.append(code[start:end])
                continue
            text = "".join(pending) + code[start:end]
            pending = []
            out.segments[name] = out.segments.get(name, "") + text
        for imp in imported_names(code, package):
            if imp.names:
                for n in imp.names:
                    out.imports.setdefault(n, (imp.module, n))
            else:
                head = imp.module.split(".")[0]
                out.imports.setdefault(head, (head, None))
        # `import a.b as c` and `from x import y as z` bind other names: read the aliases.
        for m in re.finditer(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+)?import[ \t]+([^\n]*\bas\b[^\n]*)", code, re.MULTILINE):
            module = m.group(1)
            for part in m.group(2).strip("()").split(","):
                bits = part.split()
                if len(bits) == 3 and bits[1] == "as" and bits[2].isidentifier():
                    if module is None:
                        out.imports[bits[2]] = (bits[0], None)
                    else:
                        from amplint.project.text_imports import _absolute

                        absolute = _absolute(module, package)
                        if absolute is not None:
                            out.imports[bits[2]] = (absolute, bits[0])
        return out


def used_names(code: str) -> dict[str, set[str]]:
    """Names the code calls or dereferences: name -> the attributes taken of it (`utils.clip` -> {"clip"})."""
    out: dict[str, set[str]] = {}
    for m in _CALLED.finditer(code):
        attrs = out.setdefault(m.group(1), set())
        if m.group(2):
            attrs.add(m.group(2))
    return out


def attributes_used(code: str, name: str) -> set[str]:
    """`{"clip", "save"}` for `utils.clip(...)`, `utils.save` in the code (name: `utils`)."""
    return set(re.findall(rf"(?<![\w.]){re.escape(name)}\.(\w+)", code))
