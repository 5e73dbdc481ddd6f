"""Checking (and fixing) files on disk: discovery, reading, one result per file.

`check_paths` is what `amplint check` runs; each file yields a `FileResult` with its
diagnostics, or the reason it could not be analysed.  One bad file never stops the
run.

Speed (issue 7): files are checked in a process pool (`jobs`), results come back in
discovery order whatever order the workers finish in, and an optional `ResultCache`
skips files whose bytes, amplint and configuration are unchanged (amplint/cache.py).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from amplint import notebooks, sources
from amplint.cache import FileStates, ResultCache
from amplint.config import Config
from amplint import dirwalk
from amplint.diagnostics import Diagnostic, RuleCrash, SourceError
from amplint.fixes import FixOutcome, fix_text, unified_diff

if TYPE_CHECKING:
    from amplint import pool
    from amplint.project.index import Reads


@dataclass
class FileResult:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: SourceError | None = None
    crashes: list[RuleCrash] = field(default_factory=list)
    fixed: FixOutcome | None = None
    diff: str = ""
    diff_encoding: str = "utf-8"  # the file's: `git apply` compares the diff's bytes with the file's
    written: bool = False
    # Why a fix was not written (dropped, refused, raced); the findings stay reported.
    warnings: list[str] = field(default_factory=list)


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


def discover(paths: list[Path], config: Config, *, force_exclude: bool = False,
             unreadable: list[FileResult] | None = None) -> tuple[list[Path], list[str]]:
    """Python files under `paths` (directories walked, excludes applied), sorted, deduplicated.

    A path named on the command line is checked even when excluded, as Ruff does: a
    named file, and a named directory even when it lies in an excluded folder
    (`amplint check build/proj`); excludes apply to what lies below it.  `force_exclude`
    (pre-commit passes file names one by one) applies them to the named paths too.
    Anything named that is not a directory is checked as a file, so that a FIFO or a
    device named explicitly is reported (the reader refuses it without blocking); a
    walk skips what is not a regular file (`mkfifo x.py` would block the read forever)
    but keeps broken links, which the reader reports.

    `unreadable`: where a directory that cannot be listed (no permission), named or met
    in the walk, is put as a `FileResult` with its error: as an unreadable file, it is
    reported and makes the run exit 2, while the other files are still checked.
    """
    found: dict[str, Path] = {}
    missing: list[str] = []

    def cannot_list(exc: OSError) -> None:
        if unreadable is not None:
            where = Path(exc.filename) if exc.filename is not None else Path(".")  # spelt as the files found
            unreadable.append(directory_error(where, exc))

    for p in paths:
        if not _exists(p):
            missing.append(str(p))
            continue
        if force_exclude and config.is_excluded(p):
            continue
        if not is_directory(p):
            found.setdefault(str(p), p)
            continue
        seen_dirs: set[tuple[int, int]] = set()
        below = config.walk_below(p)
        for root, dirs, files in dirwalk.walk(p, followlinks=True, onerror=cannot_list):
            try:
                st = os.stat(root)
            except OSError:
                continue
            ident = (st.st_dev, st.st_ino)
            if ident in seen_dirs:  # a symlink loop: do not walk it twice
                dirs[:] = []
                continue
            seen_dirs.add(ident)
            dirs[:] = sorted(d for d in dirs if not below.excluded(Path(root) / d))
            for name in sorted(files):
                fp = Path(root) / name
                if config.is_included(fp) and not _walk_skips(fp) and not below.excluded(fp):
                    found.setdefault(str(fp), fp)
    return sorted(found.values(), key=lambda q: str(q)), missing


def directory_error(path: str | os.PathLike, exc: OSError) -> FileResult:
    """A directory that could not be listed, as the result of a file that could not be read."""
    reason = f"cannot read this directory: {exc.strerror or exc}; nothing in it was checked"
    return FileResult(str(path), error=SourceError(str(path), 1, 0, reason))


def is_directory(path: Path) -> bool:
    """`path.is_dir()`, False when it cannot be looked at (a folder on the way without search
    permission): the reader then says why it cannot be read."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _exists(path: Path) -> bool:
    """The path is there, or cannot be looked at (then the reader says why), or is a broken link."""
    try:
        return path.exists() or path.is_symlink()
    except OSError:
        return True


def _walk_skips(path: Path) -> bool:
    """A walk checks regular files (and broken links, to report them), nothing else."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False  # a broken link: the reader names its missing target
    except OSError:
        return False  # unreadable for another reason: the reader says which


def check_file(path: Path, config: Config, *, fix: bool = False, unsafe: bool = False, diff: bool = False,
               cache: ResultCache | None = None, roots: tuple[str, ...] | None = None,
               states: FileStates | None = None) -> FileResult:
    """One file's findings, or why it could not be checked; never raises for a bad file.

    `roots`: real paths of what the user named; `--fix` writes only inside them.
    `states`: what the cache's dependencies look like, shared by the files of a run that
    writes none of them (see `ResultCache.lookup`).
    """
    try:
        return _check_file(path, config, fix=fix, unsafe=unsafe, diff=diff, cache=cache, roots=roots, states=states)
    except Exception as exc:  # noqa: BLE001 - a bug of ours on one file must not end the run
        import traceback

        result = FileResult(str(path))
        result.crashes.append(RuleCrash("amplint", str(path), f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        # Nothing of the file was analysed: every report must say so (an AMP000 row, SARIF's
        # executionSuccessful false), never show the file as clean.
        result.error = SourceError(str(path), 1, 0, f"not analysed: internal error ({type(exc).__name__})")
        return result


# How often a fix is recomputed when the file changes under it (another `--fix`, an editor).
FIX_ATTEMPTS = 3


def _check_file(path: Path, config: Config, *, fix: bool, unsafe: bool, diff: bool, cache: ResultCache | None,
                roots: tuple[str, ...] | None, states: FileStates | None = None) -> FileResult:
    result = FileResult(str(path))
    probe = None
    if cache is not None:
        hit, probe = cache.lookup(path, states)
        # A fix or diff run may use a stored result only when it holds no fix at all: then
        # fixing changes nothing and the findings are exactly the stored ones.
        if hit is not None and (not (fix or diff) or all(d.fix is None for d in hit.diagnostics)):
            result.diagnostics = hit.diagnostics
            if hit.error is not None:
                result.error = SourceError(str(path), *hit.error)
            return result
    try:
        if probe is not None and probe.raw is not None:  # the cache lookup already read it
            text, encoding, bom = sources.decode(probe.raw, str(path))
            src = sources.SourceFile(path, text, encoding, bom, probe.raw)
        else:
            src = sources.read(path)
    except sources.UnreadableSource as exc:
        result.error = SourceError(str(path), 1, 0, str(exc).split(": ", 1)[-1])
        return result
    rel = str(path)
    from amplint.project.index import Reads  # NB: here, so that a run the cache answers never loads the index

    reads = Reads()
    if notebooks.is_notebook(path):
        _check_notebook(path, src, config, fix=fix, unsafe=unsafe, diff=diff, result=result, roots=roots, reads=reads)
        if cache is not None and not (fix or diff) and not result.crashes:
            cache.store(path, probe, src.raw, result.diagnostics, result.error, reads=reads)
        return result
    try:
        if fix and not diff:
            _fix_in_place(path, src, config, unsafe, result, roots)
        elif diff:
            outcome = fix_text(src.text, lambda text: check_source(text, rel, config, crashes=result.crashes), unsafe=unsafe)
            result.crashes = unique_crashes(result.crashes)
            result.fixed = outcome
            result.diagnostics = outcome.remaining
            result.warnings.extend(fix_warnings(outcome))
            if outcome.source != src.text:
                if diff:
                    bom = "\ufeff" if src.bom else ""  # NB: part of line 1's bytes, so part of its context
                    result.diff = unified_diff(bom + src.text, bom + outcome.source, f"a/{rel}", f"b/{rel}")
                    result.diff_encoding = src.encoding
                    result.diagnostics = check_source(src.text, rel, config, crashes=[])
        else:
            result.diagnostics = check_source(src.text, rel, config, crashes=result.crashes, reads=reads)
    except SourceError as exc:
        result.error = exc
    except RecursionError:
        result.error = SourceError(rel, 1, 0, "too deeply nested to analyse")
    if cache is not None and not (fix or diff) and not result.crashes:
        cache.store(path, probe, src.raw, result.diagnostics, result.error, reads=reads)
    return result


def check_source(*args, **kwargs) -> list[Diagnostic]:
    """engine.check_source, imported on the first file that is analysed: a run that the
    cache answers whole never imports the engine, the rules or libcst."""
    from amplint.engine import check_source as analyse

    return analyse(*args, **kwargs)


def unique_crashes(crashes: list[RuleCrash]) -> list[RuleCrash]:
    """Fixing lints a file once per pass; a rule that crashes does so each time: report it once."""
    seen, out = set(), []
    for c in crashes:
        if (c.code, c.error) not in seen:
            seen.add((c.code, c.error))
            out.append(c)
    return out


def fix_warnings(outcome: FixOutcome) -> list[str]:
    """What fix_text dropped, in words (the findings themselves stay reported)."""
    out = [
        f"fix for {d.code} at line {d.span.line} dropped: the fixed text would not parse" for d in outcome.rejected
    ]
    if not outcome.converged:
        out.append("fixes dropped: they did not converge (a second pass still found something to fix)")
    return out


def _fix_in_place(path: Path, src: sources.SourceFile, config: Config, unsafe: bool, result: FileResult,
                  roots: tuple[str, ...] | None) -> None:
    """Fix, then write atomically: only a text that parses, only inside `roots`, only over what was read.

    If the file changed between reading and writing (another `amplint check --fix` on the
    same tree, an editor), the fix is recomputed from the new content, a few times at most.
    """
    rel = str(path)
    for _attempt in range(FIX_ATTEMPTS):
        crashes: list[RuleCrash] = []
        outcome = fix_text(src.text, lambda text: check_source(text, rel, config, crashes=crashes), unsafe=unsafe)
        result.fixed, result.diagnostics, result.crashes = outcome, outcome.remaining, unique_crashes(crashes)
        result.warnings = fix_warnings(outcome)
        if outcome.source == src.text:
            return
        refusal = _refuse_write(path, src, outcome.source, roots)
        if refusal:
            result.warnings.append(f"fix not written: {refusal}")
            result.fixed.applied = []
            result.diagnostics = check_source(src.text, rel, config, crashes=[])
            return
        try:
            replaced = sources.replace_if_unchanged(path, src.raw, outcome.source, src.encoding, src.bom)
        except OSError as exc:  # disk full, read-only directory: the old file is intact
            result.warnings.append(f"fix not written: {exc.strerror or exc}")
            result.fixed.applied = []
            result.diagnostics = check_source(src.text, rel, config, crashes=[])  # every finding stays
            return
        if replaced:
            result.written = True
            return
        try:  # changed under us: start again from what is there now
            src = sources.read(path)
        except sources.UnreadableSource as exc:
            result.warnings.append(f"fix not written: {str(exc).split(': ', 1)[-1]}")
            result.fixed.applied = []
            result.diagnostics = check_source(src.text, rel, config, crashes=[])  # the last text read: nothing fixed
            return
    result.warnings.append(f"fix not written: the file kept changing while it was being fixed ({FIX_ATTEMPTS} tries)")
    result.fixed.applied = []
    result.diagnostics = check_source(src.text, rel, config, crashes=[])  # the last text read: nothing fixed


def _check_notebook(path: Path, src: sources.SourceFile, config: Config, *, fix: bool, unsafe: bool, diff: bool,
                    result: FileResult, roots: tuple[str, ...] | None, reads: Reads | None = None) -> None:
    """A notebook's code cells as one module (amplint/notebooks.py): findings by cell, fixes into cells.

    The project's modules its cells import are read as for a script in the notebook's folder."""
    rel = str(path)

    def lint(text: str) -> list[Diagnostic]:
        return check_source(text, rel, config, crashes=result.crashes, reads=reads)

    try:
        nb = notebooks.load(src.text, rel)
        if not (fix or diff):
            result.diagnostics = notebooks.check(nb, lint)
            return
        outcome, new_text, warnings = notebooks.fix(nb, lint, unsafe=unsafe)
    except notebooks.NotebookError as exc:
        result.error = SourceError(rel, 1, 0, str(exc))
        return
    except SourceError as exc:  # a cell does not parse: say which
        cell = nb.cell_at(exc.line)
        where = f"cell {cell.index}: line {exc.line - cell.first_line + 1}: " if cell else ""
        result.error = SourceError(rel, 1, 0, where + exc.reason)
        return
    result.crashes = unique_crashes(result.crashes)
    result.fixed, result.diagnostics = outcome, outcome.remaining
    result.warnings = fix_warnings(outcome) + warnings
    if new_text is None:
        return
    if diff:
        result.diff = notebooks.cell_diff(nb, new_text)
        result.diagnostics = notebooks.check(nb, lambda text: check_source(text, rel, config, crashes=[]))
        return
    refusal = _outside_roots(path, roots)
    if refusal is None:
        try:
            if sources.replace_if_unchanged(path, src.raw, new_text, "utf-8", src.bom):
                result.written = True
                return
            refusal = "the file changed while it was being fixed"
        except OSError as exc:
            refusal = exc.strerror or str(exc)
    result.warnings.append(f"fix not written: {refusal}")
    result.fixed.applied = []
    result.diagnostics = notebooks.check(nb, lambda text: check_source(text, rel, config, crashes=[]))


def _outside_roots(path: Path, roots: tuple[str, ...] | None) -> str | None:
    """Why `--fix` must not write `path` for the paths named (a link out of them), or None."""
    real = os.path.realpath(path)
    if roots is not None and not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
        return f"it is a link to {real}, outside the paths being checked"
    return None


def _refuse_write(path: Path, src: sources.SourceFile, text: str, roots: tuple[str, ...] | None) -> str | None:
    """Why the fixed `text` must not replace `path`, or None."""
    from amplint.engine import parse

    try:
        parse(text, str(path))  # NB: fix_text checks this too; a file is the last place to find out
    except SourceError as exc:
        return f"the fixed text would not parse ({exc.reason})"
    try:
        sources.encode(text, src.encoding, src.bom)
        same = sources.encode(src.text, src.encoding, src.bom) == src.raw
    except UnicodeEncodeError:
        return f"the fixed text cannot be written in the file's encoding ({src.encoding})"
    if not same:  # NB: e.g. a codec with two spellings of one character: writing would change other lines
        return f"the file's bytes do not survive decoding and encoding as {src.encoding}"
    return _outside_roots(path, roots)


def check_paths(paths: list[Path], config: Config, *, fix: bool = False, unsafe: bool = False, diff: bool = False,
                force_exclude: bool = False, jobs: int | None = 1, cache_dir: Path | None = None,
                named: list[Path] | None = None) -> RunResult:
    """Check (or fix) every Python file under `paths`.

    `jobs`: worker processes (None: one per available core; 1: in this process).
    `cache_dir`: where the result cache lives (None: no cache).
    `named`: what the user named, when `paths` are files found in it (`--fix` writes only
    inside what was named: a file found through a link to elsewhere is not inside).
    """
    unreadable: list[FileResult] = []
    files, missing = discover(paths, config, force_exclude=force_exclude, unreadable=unreadable)
    cache = ResultCache(cache_dir, config) if cache_dir is not None else None
    if cache is not None and files:
        cache.prepare()
    options = dict(fix=fix, unsafe=unsafe, diff=diff)
    if fix:
        options["roots"] = tuple(_root(p) for p in (paths if named is None else named))
    results = check_files(files, config, jobs=jobs, cache=cache, **options)
    return RunResult(unreadable + results, missing)


def _root(p: Path) -> str:
    """Where `--fix` may write for a named path: a directory's real location, or the named file itself.

    NB: a named file that is a symlink is not resolved: its target lies outside unless
    another named path holds it.
    """
    if is_directory(p):
        return os.path.realpath(p)
    return os.path.join(os.path.realpath(p.parent), p.name)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


def check_files(files: list[Path], config: Config, *, jobs: int | None = 1, cache: ResultCache | None = None,
                **options) -> list[FileResult]:
    """One `FileResult` per file, in the order of `files`, however many processes ran."""
    jobs = available_cores() if jobs is None or jobs < 1 else jobs
    results: list[FileResult | None] = [None] * len(files)
    todo = list(range(len(files)))
    # The files that cache entries depend on, looked at once for all the lookups of this run
    # made before anything is written (a run that fixes writes: each of its lookups looks again).
    states = FileStates() if cache is not None else None
    writes = options.get("fix") or options.get("diff")
    if cache is not None and jobs > 1:
        # Answer what the cache knows here: a warm run then never starts a pool.
        for i in todo:
            hit_result = _cached_only(files[i], cache, options, states)
            if hit_result is not None:
                results[i] = hit_result
        todo = [i for i in todo if results[i] is None]
    if jobs > 1 and todo:
        from amplint import engine  # noqa: F401 - imported once here, before the workers fork, not in each
        from amplint.pool import PoolUnavailable  # NB: multiprocessing loads only for a pool

        # Even one file goes to a worker: if libcst's native code crashes or aborts on it (out
        # of memory under `ulimit -v`), that is reported as the file's error, not a dead run.
        order = _largest_first(files, todo)
        try:
            for i, r in _run_pool([files[i] for i in order], order, config, cache, options, min(jobs, len(todo))):
                results[i] = r
        except PoolUnavailable:
            pass  # no process could be started at all: what is left is checked here
    for i in todo:
        if results[i] is None:  # in-process: --jobs 1, or no worker could be started
            results[i] = check_file(files[i], config, cache=cache, states=None if writes else states, **options)
    return results  # type: ignore[return-value]


def _largest_first(files: list[Path], todo: list[int]) -> list[int]:
    """`todo` with the largest files first: the pool's last chunks are then small files,
    so no worker is left parsing a 300 kB module while the others idle (results are put
    back in discovery order by index)."""

    def size(i: int) -> int:
        try:
            return os.stat(files[i]).st_size
        except OSError:
            return 0  # checked anyway; the worker reports why it cannot be read

    return sorted(todo, key=size, reverse=True)


def _cached_only(path: Path, cache: ResultCache, options: dict, states: FileStates) -> FileResult | None:
    hit, _ = cache.lookup(path, states)
    if hit is None:
        return None
    if (options.get("fix") or options.get("diff")) and any(d.fix is not None for d in hit.diagnostics):
        return None
    result = FileResult(str(path), diagnostics=hit.diagnostics)
    if hit.error is not None:
        result.error = SourceError(str(path), *hit.error)
    return result


# Worker state, set once per process by the pool initializer (not pickled per file).
_WORKER: dict = {}


def _init_worker(config: Config, cache: ResultCache | None, options: dict) -> None:
    _WORKER.update(config=config, cache=cache, options=options)


def _work(path: Path) -> FileResult:
    return check_file(path, _WORKER["config"], cache=_WORKER["cache"], **_WORKER["options"])


def _run_pool(paths: list[Path], indexes: list[int], config: Config, cache, options: dict, workers: int):
    """(index, result) pairs from isolated worker processes, a dead worker's file included."""
    # Small chunks: a few files (AMP-dense modules) cost a thousand times the others; the
    # largest come first (`_largest_first`), so the chunks left at the end are cheap.
    chunksize = max(1, min(16, len(paths) // (workers * 32)))
    from amplint import pool

    for pos, result in pool.run_isolated(_work, paths, workers=workers, initializer=_init_worker,
                                         initargs=(config, cache, options), chunksize=chunksize):
        if isinstance(result, pool.WorkerDied):
            result = FileResult(str(paths[pos]), error=SourceError(str(paths[pos]), 1, 0, _death_reason(result)))
        yield indexes[pos], result


def _death_reason(death: pool.WorkerDied) -> str:
    """What a worker's death on a file means, in words (the other files were still checked)."""
    likely = {
        "SIGSEGV": "a crash in native code, most likely libcst's parser: please report this file",
        "SIGBUS": "a crash in native code, most likely libcst's parser: please report this file",
        "SIGABRT": "an allocation failed under a memory limit such as ulimit -v, or native code gave up",
        "SIGKILL": "by the kernel's out-of-memory killer, or by hand; max-file-tokens in [tool.amplint] "
                   "sets how large a file amplint tries",
    }.get(death.signal_name or "", "")
    return f"not analysed: the process checking it {death}" + (f" ({likely})" if likely else "")
