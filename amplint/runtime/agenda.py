"""The static agenda: `amplint check` findings for the script and the project files it imports.

The files are found as `check` finds a module's imports (amplint/project: the script's
folder, its package root, the project root, `src/`), followed transitively; installed
packages are never analysed.  Each file is checked with the project model, so a
finding whose evidence lies in another module (a `save_checkpoint` helper in utils.py)
is on the agenda too.  No torch, no code run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from amplint.config import discover
from amplint.prefilter import code_text, package_of
from amplint.project.text_imports import imported_files as imports_of
from amplint.runner import check_file

# A script that reaches more project files than this is not followed further; the
# agenda says so (an error line), it is never cut silently.
MAX_AGENDA_FILES = 2000


def imported_files(script: Path, limit: int = MAX_AGENDA_FILES) -> tuple[list[Path], bool]:
    """(the script and the project files it reaches through imports, breadth first;
    whether the walk stopped at `limit`)."""
    script = script.resolve()
    seen: list[Path] = [script]
    queue = [script]
    while queue:
        path = queue.pop(0)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for target in imports_of(code_text(text), path, package_of(str(path))):
            target = Path(target).resolve()
            if target in seen:
                continue
            if len(seen) >= limit:
                return seen, True
            seen.append(target)
            queue.append(target)
    return seen, False


def config_for(file: Path, *, preview: bool = False):
    """The configuration `check` gives `file`: the [tool.amplint] nearest the file itself (a
    sub-package's own, not the script's), as `amplint check FILE` would read it."""
    config = discover([file])
    return dataclasses.replace(config, preview=True) if preview else config


def selection(script: Path):
    """`(file, code) -> bool`: does the configuration of `file` run `code` on it (its select,
    ignore and per-file-ignores)?  A runtime finding of a rule the user turned off there is
    theirs to have turned off, not a miss of `check`.  The preview tier counts as on: a
    preview rule was not turned off by anyone, and what it would have found stays a finding.
    (`script`: the command's script; each file is judged by its own configuration.)"""
    cache: dict[str, frozenset[str]] = {}

    def selects(file: str, code: str) -> bool:
        if not code_is_static(code):
            return True
        if file not in cache:
            try:
                config = config_for(Path(file), preview=True)
                cache[file] = frozenset(r.code for r in config.rules_for(file))
            except Exception:  # noqa: BLE001 - an unreadable configuration: the finding counts
                return True
        return code in cache[file]

    return selects


def code_is_static(code: str) -> bool:
    from amplint import registry

    try:
        return bool(registry.expand_codes(code))
    except registry.UnknownSelector:
        return False


def static_agenda(script: Path, *, preview: bool = False):
    """(diagnostics, files checked, errors) for the script and its project imports, each file
    checked with its own nearest [tool.amplint] (as `check` does).  `preview=True` runs the preview tier whatever the configuration says (the fixtures
    specify preview rules like any other)."""
    files, truncated = imported_files(script)
    diagnostics, errors = [], []
    if truncated:
        errors.append(f"{script}: imports more than {MAX_AGENDA_FILES} project files; the agenda covers the first {MAX_AGENDA_FILES}")
    configs: dict[Path, object] = {}  # per folder: files of one package share theirs
    for f in files:
        folder = Path(f).parent
        if folder not in configs:
            configs[folder] = config_for(Path(f), preview=preview)
        result = check_file(f, configs[folder])
        diagnostics.extend(result.diagnostics)
        if result.error is not None:
            errors.append(str(result.error))
        for crash in result.crashes:
            errors.append(f"{f}: internal error in {crash.code}: {crash.error}")
    return diagnostics, files, errors
