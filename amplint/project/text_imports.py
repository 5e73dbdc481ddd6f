"""The project files a source text imports, read from its text without parsing it.

Two users need this before (or instead of) a libcst parse:

- the pre-filter decides whether a file is worth parsing at all, and with the project
  model a rule may fire on `train.py` because of what `utils.py` does (the clip is in
  the helper, not in the file): the tokens of the files it imports count too;
- `verify` builds its static agenda from the script and the project files it reaches.

A regular expression over the code text (comments and strings removed) finds `import`
and `from ... import` statements at any depth; parenthesised and backslash-continued
name lists included.  It can only over-approximate (a statement in a string that the
lexer missed), which costs time, never a finding.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from amplint.project import layout

_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<module>\.*[\w.]*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|(?:[^\n\\]|\\\n)*)"
    r"|import[ \t]+(?P<plain>(?:[^\n\\]|\\\n)*))",
    re.MULTILINE,
)
_NAME = re.compile(r"[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class ImportedName:
    module: str  # absolute dotted module (relative imports resolved against the package)
    names: tuple[str, ...]  # what `from module import ...` takes; () for `import module`
    # The local names they are bound to (`import a.b as c` binds c to a.b; plain `import a.b`
    # binds a): one per entry of `names`, or one for a module import.
    locals_: tuple[str, ...] = ()


def import_statements(code: str):
    """The matches of `_IMPORT` in `code`, as `_IMPORT.finditer(code)` gives them.

    Only lines that hold the word `import` are tried: every match starts at a line start,
    and the keyword is on that first line (`[ \\t]+` never crosses a line).  The regex
    engine has no literal to skip to in `_IMPORT` (it begins at every line), and a module
    is mostly other lines: this costs a third of the plain scan on real code.  A match
    may span lines (`from x import (\\n a,\\n)`); lines it covers are not tried again,
    as `finditer` resumes after a match.
    """
    covered = 0  # code[:covered] is inside matches already given
    tried = -1  # the last line start tried
    at = code.find("import")
    while at != -1:
        start = code.rfind("\n", 0, at) + 1
        if start >= covered and start != tried:
            tried = start
            if (m := _IMPORT.match(code, start)) is not None:
                yield m
                covered = max(m.end(), start + 1)
        at = code.find("import", max(at + 1, covered))


def imported_names(code: str, package: str | None) -> list[ImportedName]:
    """Every import statement of a code text (comments and strings already removed)."""
    out: list[ImportedName] = []
    for m in import_statements(code):
        if m.group("plain") is not None:
            for part in m.group("plain").replace("\\\n", " ").split(","):
                words = part.split()
                if words and _NAME.fullmatch(words[0]):
                    bound = words[2] if len(words) == 3 and words[1] == "as" else words[0].split(".")[0]
                    module = words[0] if len(words) == 3 and words[1] == "as" else words[0]
                    out.append(ImportedName(module, (), (bound,)))
            continue
        module = _absolute(m.group("module"), package)
        if module is None:
            continue
        names, bound = [], []
        for part in m.group("names").strip("()").replace("\\\n", " ").split(","):
            words = part.split()
            if words and words[0] != "*" and words[0].isidentifier():
                names.append(words[0])
                bound.append(words[2] if len(words) == 3 and words[1] == "as" else words[0])
        out.append(ImportedName(module, tuple(names), tuple(bound)))
    return out


def _absolute(module: str, package: str | None) -> str | None:
    level = len(module) - len(module.lstrip("."))
    return absolute_module(module[level:] or None, level, package)


def absolute_module(base: str | None, level: int, package: str | None) -> str | None:
    """The absolute module of `from <level dots><base> import ...` written in `package`
    (None for a relative import outside any package, or one that climbs above it)."""
    if level == 0:
        return base
    if package is None:
        return None
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    parent = parts[: len(parts) - (level - 1)]
    if base:
        parent.append(base)
    return ".".join(parent) or None


def imported_files(code: str, path: Path, package: str | None, missing: set | None = None) -> list[Path]:
    """The project files `path`'s code imports: modules, and submodules named in `from X import y`.

    `missing` collects the paths looked for in vain (creating one changes the answer).
    Well-known libraries (`torch`, the standard library) are not looked for.
    """
    from amplint.project.layout import is_external

    found: dict[Path, None] = {}  # NB: ordered, and a set's lookup: a file may import hundreds of names
    own = os.path.abspath(path)
    for imp in imported_names(code, package):
        if is_external(imp.module, path):
            continue
        module = _found(imp.module, path, missing, found, own)
        if module is not None and module.name != "__init__.py":
            continue  # a plain module has no submodules: `from .x import y` takes y from x.py
        for name in imp.names:
            _found(f"{imp.module}.{name}", path, missing, found, own)
    return list(found)


def _found(dotted: str, path: Path, missing: set | None, found: dict, own: str) -> Path | None:
    """The project file of module `dotted` (noted in `found` unless it is `path` itself)."""
    hit = layout.resolve_module(dotted, path)
    if missing is not None:
        missing.update(p for p in hit.probed if p != str(hit.path))
    if hit.path is not None and hit.path not in found and os.path.abspath(hit.path) != own:
        found[hit.path] = None
    return hit.path
