"""The project index: other modules of the project, read, parsed and modelled on demand.

A training step is spread over files: `train.py` calls `save_checkpoint` from
`utils.py`, `train_one_epoch` from `engine.py` builds the GradScaler, an optimizer
wrapper in `optim.py` owns it.  The semantic model of the file being checked asks this
index what a name imported from the project is (`resolve`), and gets back the other
module's own `ModuleModel` and the definition, so the same analyses (step graphs,
payloads, values) run over it as over local code.  Nothing is imported or executed.

One index serves every check of a process (a pool worker, flake8, the language
server): a module imported by fifty files is parsed once.  Models are kept while the
file's size and mtime are unchanged, least recently used first out when the bytes held
pass a budget (a libcst tree costs several hundred times its source in memory).

Every check records what it read (`Reads`): the files whose models it used and the
paths it probed and found missing.  The result cache stores them with the result, so
changing `utils.py` recomputes `train.py`'s findings (amplint/cache.py).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from amplint.project import layout

# Source bytes of parsed modules kept per process (a libcst tree takes ~700x that).
MODEL_BUDGET_BYTES = 1_500_000
# A module larger than this is not parsed for another file's sake: its facts are lost,
# which costs recall, never a wrong finding (generated or vendored code, mostly).
MAX_DEPENDENCY_BYTES = 400_000
# How many levels of imports the pre-filter follows (train.py -> engine.py -> utils.py).
IMPORT_TEXT_DEPTH = 3
# How many re-exports (`from .checkpoint import save` in `__init__.py`) are followed.
MAX_REEXPORT_HOPS = 4


@dataclass(frozen=True)
class Symbol:
    """What a qualified name refers to inside the project."""

    model: object  # the defining module's ModuleModel
    kind: str  # "function", "class", "value" or "module"
    name: str  # the name inside that module ("" for a module)
    node: object = None  # FunctionDef / ClassInfo; None for values and modules

    @property
    def path(self) -> str:
        return self.model.path


@dataclass
class Reads:
    """What one check looked at beyond its own file (for the cache and for notes)."""

    used: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (size, mtime_ns)
    missing: set[str] = field(default_factory=set)

    def merge(self, other: "Reads") -> None:
        self.used.update(other.used)
        self.missing |= other.missing


@dataclass
class _Entry:
    model: object | None  # None: unreadable, unparsable or too large
    size: int
    mtime_ns: int


class ProjectIndex:
    """Models of project modules, keyed by absolute path."""

    def __init__(self, budget: int = MODEL_BUDGET_BYTES) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._held = 0
        self._budget = budget
        self._overlay: dict[str, object] = {}
        self._reads: list[Reads] = []
        self._resolved: dict[tuple[str, str], Symbol | None] = {}
        self._texts: dict[str, tuple] = {}

    # --- one check at a time -------------------------------------------------------------
    @contextmanager
    def checking(self, model) -> "Reads":
        """Around one check: `model` stands for its file (unsaved text wins over the disk)."""
        reads = Reads()
        key = _abs(model.path)
        previous = self._overlay.get(key)
        self._overlay[key] = model
        self._reads.append(reads)
        self._resolved.clear()
        try:
            yield reads
        finally:
            self._reads.pop()
            if previous is None:
                self._overlay.pop(key, None)
            else:
                self._overlay[key] = previous
            self._resolved.clear()

    def _note_used(self, path: str, size: int, mtime_ns: int) -> None:
        for reads in self._reads:
            reads.used[path] = (size, mtime_ns)

    def _note_missing(self, paths) -> None:
        for reads in self._reads:
            reads.missing.update(str(p) for p in paths)

    # --- modules -------------------------------------------------------------------------
    def model_at(self, path: Path | str):
        """The ModuleModel of the project file at `path`, or None if it cannot be had."""
        key = _abs(path)
        if key in self._overlay:
            return self._overlay[key]
        try:
            st = os.stat(key)
        except OSError:
            self._note_missing([key])
            return None
        entry = self._entries.get(key)
        if entry is None or entry.size != st.st_size or entry.mtime_ns != st.st_mtime_ns:
            if entry is not None:
                self._drop(key)
            entry = _Entry(self._load(key, st.st_size), st.st_size, st.st_mtime_ns)
            self._entries[key] = entry
            if entry.model is not None:
                self._held += entry.size
                self._evict()
        else:
            self._entries.move_to_end(key)
        self._note_used(key, entry.size, entry.mtime_ns)
        return entry.model

    def _load(self, path: str, size: int):
        from amplint import sources
        from amplint.analysis.model import ModuleModel
        from amplint.engine import SourceError, parse
        from amplint.prefilter import package_of

        if size > MAX_DEPENDENCY_BYTES:
            return None
        try:
            src = sources.read(Path(path))
            module = parse(src.text, path)
        except (sources.UnreadableSource, SourceError, RecursionError, MemoryError):
            return None
        try:
            return ModuleModel.build(module, path, package_of(path), project=self)
        except RecursionError:
            return None

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None and entry.model is not None:
            self._held -= entry.size

    def _evict(self) -> None:
        while self._held > self._budget and len(self._entries) > 1:
            key, entry = next(iter(self._entries.items()))
            self._drop(key)

    # --- texts, for the pre-filter --------------------------------------------------------
    def imported_code(self, path: str, code: str, package: str | None, reads: Reads | None = None) -> str:
        """The lowercased code texts of the project files `code` imports, transitively
        (IMPORT_TEXT_DEPTH levels), each once; their stats go into `reads`."""
        from amplint.project.text_imports import imported_files

        origin = Path(_abs(path))
        seen: set[str] = {str(origin)}
        texts: list[str] = []
        missing: set[str] = set()
        frontier = imported_files(code, origin, package, missing)
        for _level in range(IMPORT_TEXT_DEPTH):
            following: list[Path] = []
            for dep in frontier:
                key = _abs(dep)
                if key in seen:
                    continue
                seen.add(key)
                got = self._code_of(key)
                if got is None:
                    continue
                lowered, imports, stat, dep_missing = got
                if reads is not None:
                    reads.used[key] = stat
                missing |= dep_missing
                texts.append(lowered)
                following.extend(imports)
            frontier = following
        if reads is not None:
            reads.missing |= missing
        return "\n".join(texts)

    def _code_of(self, key: str):
        """(lowercased code text, imported project files, (size, mtime_ns)) of one file, cached by stat."""
        from amplint import sources
        from amplint.prefilter import code_text, package_of
        from amplint.project.text_imports import imported_files

        try:
            st = os.stat(key)
        except OSError:
            return None
        stat = (st.st_size, st.st_mtime_ns)
        cached = self._texts.get(key)
        if cached is not None and cached[2] == stat:
            return cached
        if st.st_size > MAX_DEPENDENCY_BYTES:
            found = ("", [], stat, frozenset())
        else:
            try:
                code = code_text(sources.read(Path(key)).text)
            except sources.UnreadableSource:
                code = ""
            dep_missing: set[str] = set()
            found = (code.lower(), imported_files(code, Path(key), package_of(key), dep_missing), stat, frozenset(dep_missing))
        self._texts[key] = found
        return found

    # --- names ---------------------------------------------------------------------------
    def resolve(self, qualified: str, importer) -> Symbol | None:
        """The project definition that `qualified` (as `importer`'s imports spell it) names."""
        memo = (importer.path, qualified)
        if memo in self._resolved:
            return self._resolved[memo]
        found = self._resolve(qualified, Path(_abs(importer.path)), 0)
        self._resolved[memo] = found
        return found

    def _resolve(self, qualified: str, importer: Path, hops: int) -> Symbol | None:
        if hops > MAX_REEXPORT_HOPS:
            return None
        module_hit = layout.resolve_module(qualified, importer)
        self._note_missing(p for p in module_hit.probed if p != module_hit.path)
        if module_hit.path is not None:
            model = self.model_at(module_hit.path)
            return Symbol(model, "module", "") if model is not None else None
        found, attr = layout.split_qualified(qualified, importer)
        self._note_missing(p for p in found.probed if p != found.path)
        if found.path is None:
            return None
        model = self.model_at(found.path)
        if model is None:
            return None
        return self.member(model, attr, hops)

    def member(self, model, attr: str, hops: int = 0) -> Symbol | None:
        """`attr` (dotted) looked up inside `model`: a definition, a value or a re-export."""
        head, _, rest = attr.partition(".")
        if head in model.functions and not rest:
            return Symbol(model, "function", head, model.functions[head])
        if head in model.classes:
            info = model.classes[head]
            if not rest:
                return Symbol(model, "class", head, info)
            method = model.enclosing_class_method(info, rest)
            return Symbol(model, "function", f"{head}.{rest}", method) if method is not None else None
        if head in model.module_scope.assignments and not rest:
            return Symbol(model, "value", head)
        target = model.imports.qualify_text(attr)
        if target is not None and target != attr:
            return self._resolve(target, Path(_abs(model.path)), hops + 1)
        return None

    def resolve_module_file(self, dotted: str, importer) -> Path | None:
        hit = layout.resolve_module(dotted, Path(_abs(importer.path)))
        if hit.path is None:
            self._note_missing(hit.probed)
        return hit.path


def _abs(path) -> str:
    return os.path.abspath(str(path))


# `check_source(project=AUTO)`: find the index from the path (a sentinel, since None
# means "analyse the module alone").
AUTO = object()

# One index per process: every check of a worker, flake8 run or server shares it.
_SHARED: ProjectIndex | None = None


def shared_index() -> ProjectIndex:
    global _SHARED
    if _SHARED is None:
        _SHARED = ProjectIndex()
    return _SHARED


def for_path(path: str) -> ProjectIndex | None:
    """The index for a file on disk; None for text that has no place (`<string>`, `-`)."""
    if not path or path.startswith("<") or path == "-":
        return None
    folder = os.path.dirname(_abs(path))
    if not os.path.isdir(folder):
        return None
    return shared_index()


def reset_shared() -> None:
    """Start from an empty index (tests; a long-lived process after files moved)."""
    global _SHARED
    _SHARED = None
    layout.clear_caches()
