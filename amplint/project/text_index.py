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
# `name.attribute`, the name not itself an attribute (`utils.clip`, not `a.utils.clip`).
_ATTRIBUTE = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\.(\w+)")


# A method inside a class segment: `def` indented once more than the `class` line.
_METHOD = re.compile(r"^(?P<indent>[ \t]+)(?:@|(?:async[ \t]+)?def[ \t]+(?P<name>\w+))", re.MULTILINE)
_CLASS_HEADER = re.compile(r"class[ \t]+\w+[ \t]*(?:\((?P<bases>[^)]*)\))?")


@dataclass
class TextModule:
    """Top-level segments (name -> code text), their kinds, and imported names of one module."""

    segments: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)  # "def", "class" or "var"
    # local name -> (module, name in that module or None for a module import)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    _methods: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def read(cls, code: str, package: str | None, *, segments: bool = True, kinds: bool = False) -> "TextModule":
        """`segments=False`: imports only; `kinds=True` with it: also which top-level names
        are functions and classes (their text is not kept)."""
        out = cls()
        starts = []
        if kinds and not segments:
            for m in _TOP.finditer(code):
                name = m.group("def") or m.group("cls") or m.group("var")
                if name is not None:
                    out.kinds.setdefault(name, "def" if m.group("def") else "class" if m.group("cls") else "var")
        if segments:
            for m in _TOP.finditer(code):
                kind = "def" if m.group("def") else "class" if m.group("cls") else "var" if m.group("var") else None
                starts.append((m.start(), m.group("def") or m.group("cls") or m.group("var"), kind))
        pending: list[str] = []
        for i, (start, name, kind) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else len(code)
            if name is None:  # a decorator: its text belongs to the definition that follows
                pending.append(code[start:end])
                continue
            text = "".join(pending) + code[start:end]
            pending = []
            out.segments[name] = out.segments.get(name, "") + text
            out.kinds.setdefault(name, kind)
        for imp in imported_names(code, package):
            if imp.names:
                for name, local in zip(imp.names, imp.locals_):
                    out.imports.setdefault(local, (imp.module, name))
            else:
                # `import a.b` binds `a` (attributes reach a.b); `import a.b as c` binds c to a.b
                local = imp.locals_[0] if imp.locals_ else imp.module.split(".")[0]
                target = imp.module if imp.locals_ and local != imp.module.split(".")[0] else imp.module.split(".")[0]
                out.imports.setdefault(local, (target, None))
        return out

    def bases(self, cls_name: str) -> list[str]:
        """The base expressions of a top-level class, as written (`nn.Module`, `Base`)."""
        header = _CLASS_HEADER.search(self.segments.get(cls_name, ""))
        if header is None or not header.group("bases"):
            return []
        out = []
        for part in header.group("bases").split(","):
            part = part.strip()
            if part and "=" not in part and re.fullmatch(r"[A-Za-z_][\w.]*", part):
                out.append(part)
        return out

    def methods(self, cls_name: str) -> dict[str, str]:
        """Method name -> its text, for a top-level class (decorators kept with the method)."""
        found = self._methods.get(cls_name)
        if found is None:
            found = {}
            body = self.segments.get(cls_name, "")
            marks = list(_METHOD.finditer(body))
            indent = min((len(m.group("indent")) for m in marks if m.group("name")), default=None)
            cuts = [m for m in marks if len(m.group("indent")) == indent]
            pending = ""
            for i, m in enumerate(cuts):
                end = cuts[i + 1].start() if i + 1 < len(cuts) else len(body)
                if m.group("name") is None:
                    pending += body[m.start():end]
                    continue
                found[m.group("name")] = found.get(m.group("name"), "") + pending + body[m.start():end]
                pending = ""
            self._methods[cls_name] = found
        return found


def used_names(code: str) -> dict[str, set[str]]:
    """Names the code calls or dereferences: name -> the attributes taken of it (`utils.clip` -> {"clip"})."""
    out: dict[str, set[str]] = {}
    for m in _CALLED.finditer(code):
        attrs = out.setdefault(m.group(1), set())
        if m.group(2):
            attrs.add(m.group(2))
    return out


def attributes_used(code: str, names: list[str]) -> dict[str, set[str]]:
    """`{"utils": {"clip", "save"}}` for `utils.clip(...)`, `utils.save` in the code (one scan)."""
    out: dict[str, set[str]] = {}
    if not names:
        return out
    wanted = set(names)
    # NB: one pattern for every name, filtered here: an alternation of these names compiled
    # per file cost more than the scan (0.5 s of sre compiling on transformers)
    for m in _ATTRIBUTE.finditer(code):
        if m.group(1) in wanted:
            out.setdefault(m.group(1), set()).add(m.group(2))
    return out
