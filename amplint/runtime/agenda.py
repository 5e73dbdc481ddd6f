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


def agenda_config(script: Path, *, preview: bool = False):
    """The configuration the agenda is checked with: the script's nearest [tool.amplint]."""
    config = discover([script])
    return dataclasses.replace(config, preview=True) if preview else config


def selection(script: Path):
    """`(file, code) -> bool`: does the agenda's configuration run `code` on `file` (its
    select, ignore and per-file-ignores)?  A runtime finding of a rule the user
    turned off there is theirs to have turned off, not a miss of `check`.  The preview tier
    counts as on: a preview rule was not turned off by anyone, and what it would have found
    stays a finding."""
    config = agenda_config(script, preview=True)
    known = set(config.codes())
    cache: dict[str, frozenset[str]] = {}

    def selects(file: str, code: str) -> bool:
        if not code_is_static(code):
            return True
        if file not in cache:
            cache[file] = frozenset(r.code for r in config.rules_for(file)) if known else frozenset()
        return code in cache[file]

    return selects


def code_is_static(code: str) -> bool:
    from amplint import registry

    try:
        return bool(registry.expand_codes(code))
    except registry.UnknownSelector:
        return False


def static_agenda(script: Path, *, preview: bool = False):
    """(diagnostics, files checked, errors) for the script and its project imports.
    `preview=True` runs the preview tier whatever the configuration says (the fixtures
    specify preview rules like any other)."""
    files, truncated = imported_files(script)
    config = agenda_config(script, preview=preview)
    diagnostics, errors = [], []
    if truncated:
        errors.append(f"{script}: imports more than {MAX_AGENDA_FILES} project files; the agenda covers the first {MAX_AGENDA_FILES}")
    for f in files:
        result = check_file(f, config)
        diagnostics.extend(result.diagnostics)
        if result.error is not None:
            errors.append(str(result.error))
        for crash in result.crashes:
            errors.append(f"{f}: internal error in {crash.code}: {crash.error}")
    return diagnostics, files, errors
