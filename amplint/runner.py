"""Checking (and fixing) files on disk: discovery, reading, one result per file.

`check_paths` is what `amplint check` runs; each file yields a `FileResult` with its
diagnostics, or the reason it could not be analysed.  One bad file never stops the
run.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path

from amplint import sources
from amplint.config import Config
from amplint.diagnostics import Diagnostic
from amplint.engine import RuleCrash, SourceError, check_source
from amplint.fixes import FixOutcome, fix_text


@dataclass
class FileResult:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: SourceError | None = None
    crashes: list[RuleCrash] = field(default_factory=list)
    fixed: FixOutcome | None = None
    diff: str = ""
    written: bool = False


@dataclass
class RunResult:
    files: list[FileResult]
    missing: list[str] = field(default_factory=list)

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return [d for f in self.files for d in f.diagnostics]

    @property
    def errors(self) -> list[FileResult]:
        return [f for f in self.files if f.error is not None]

    @property
    def crashes(self) -> list[RuleCrash]:
        return [c for f in self.files for c in f.crashes]


def discover(paths: list[Path], config: Config, *, force_exclude: bool = False) -> tuple[list[Path], list[str]]:
    """Python files under `paths` (directories walked, excludes applied), sorted, deduplicated.

    Files named explicitly are checked even when excluded, as ruff does, unless
    `force_exclude` is set (pre-commit passes file names one by one).
    """
    found: dict[str, Path] = {}
    missing: list[str] = []
    for p in paths:
        if not p.exists() and not p.is_symlink():
            missing.append(str(p))
            continue
        if p.is_file() or (p.is_symlink() and not p.is_dir()):
            if force_exclude and config.is_excluded(p):
                continue
            found.setdefault(str(p), p)
            continue
        seen_dirs: set[tuple[int, int]] = set()
        for root, dirs, files in os.walk(p, followlinks=True):
            try:
                st = os.stat(root)
            except OSError:
                continue
            ident = (st.st_dev, st.st_ino)
            if ident in seen_dirs:  # a symlink loop: do not walk it twice
                dirs[:] = []
                continue
            seen_dirs.add(ident)
            dirs[:] = sorted(d for d in dirs if not config.is_excluded(Path(root) / d))
            for name in sorted(files):
                if name.endswith((".py", ".pyi")):
                    fp = Path(root) / name
                    if not config.is_excluded(fp):
                        found.setdefault(str(fp), fp)
    return sorted(found.values(), key=lambda q: str(q)), missing


def check_file(path: Path, config: Config, *, fix: bool = False, unsafe: bool = False, diff: bool = False) -> FileResult:
    result = FileResult(str(path))
    try:
        src = sources.read(path)
    except sources.UnreadableSource as exc:
        result.error = SourceError(str(path), 1, 0, str(exc).split(": ", 1)[-1])
        return result
    rel = str(path)
    try:
        if fix or diff:
            outcome = fix_text(src.text, lambda text: check_source(text, rel, config, crashes=result.crashes), unsafe=unsafe)
            result.fixed = outcome
            result.diagnostics = outcome.remaining
            if outcome.source != src.text:
                if diff:
                    result.diff = "".join(
                        difflib.unified_diff(
                            src.text.splitlines(keepends=True),
                            outcome.source.splitlines(keepends=True),
                            fromfile=f"a/{rel}",
                            tofile=f"b/{rel}",
                        )
                    )
                    result.diagnostics = check_source(src.text, rel, config)
                else:
                    _write_if_unchanged(path, src, outcome.source)
                    result.written = True
        else:
            result.diagnostics = check_source(src.text, rel, config, crashes=result.crashes)
    except SourceError as exc:
        result.error = exc
    except RecursionError:
        result.error = SourceError(rel, 1, 0, "too deeply nested to analyse")
    return result


def _write_if_unchanged(path: Path, src: sources.SourceFile, text: str) -> None:
    """Write the fix only if nobody changed the file since we read it."""
    try:
        now = path.read_bytes()
    except OSError:
        return
    if now != src.raw:
        raise SourceError(str(path), 1, 0, "file changed while it was being fixed; not written")
    sources.write_atomic(path, text, src.encoding, src.bom)


def check_paths(paths: list[Path], config: Config, *, fix: bool = False, unsafe: bool = False, diff: bool = False,
                force_exclude: bool = False) -> RunResult:
    files, missing = discover(paths, config, force_exclude=force_exclude)
    results = [check_file(p, config, fix=fix, unsafe=unsafe, diff=diff) for p in files]
    return RunResult(results, missing)
