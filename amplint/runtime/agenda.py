"""The static agenda: `amplint check` findings for the script and the project files it imports.

Project files are those under the script's directory that its imports resolve to (followed
transitively); installed packages are never analysed.  No torch, no code run.
"""

from __future__ import annotations

import ast
from pathlib import Path

from amplint.config import discover
from amplint.engine import SourceError, check_source


def imported_files(script: Path, limit: int = 200) -> list[Path]:
    script = script.resolve()
    root = script.parent
    seen: list[Path] = []
    todo = [script]
    while todo and len(seen) < limit:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.append(path)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            for target in _targets(node, path, root):
                if target not in seen and target not in todo:
                    todo.append(target)
    return seen


def _targets(node, path: Path, root: Path) -> list[Path]:
    names: list[tuple[Path, str]] = []
    if isinstance(node, ast.Import):
        names = [(root, a.name) for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = root
        if node.level:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
        mod = node.module or ""
        names = [(base, mod)] + [(base, f"{mod}.{a.name}" if mod else a.name) for a in node.names]
    out = []
    for base, dotted in names:
        if not dotted:
            continue
        rel = Path(*dotted.split("."))
        for cand in (base / rel.with_suffix(".py"), base / rel / "__init__.py"):
            try:
                cand = cand.resolve()
            except OSError:
                continue
            if cand.is_file() and root in cand.parents:
                out.append(cand)
    return out


def static_agenda(script: Path):
    """(diagnostics, files checked, errors) for the script and its project imports."""
    files = imported_files(script)
    config = discover([script])
    diagnostics, errors = [], []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(f"{f}: {exc}")
            continue
        try:
            diagnostics.extend(check_source(text, str(f), config))
        except SourceError as exc:
            errors.append(str(exc))
    return diagnostics, files, errors
