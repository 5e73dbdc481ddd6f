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
import re
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
# `class Trainer(BaseTrainer):` : a base class's code runs for the subclass too.
_CLASS_BASES = re.compile(r"^[ \t]*class[ \t]+\w+[ \t]*\(([^)]*)\)", re.MULTILINE)
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
        self._closures: dict = {}
        self._target_memo: dict = {}
        self._segments: dict = {}

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
    def imported_tokens(self, path: str, code: str, package: str | None, tokens, reads: Reads | None = None) -> frozenset:
        """Which of `tokens` the code of the project definitions `code` uses contains.

        For each name the file imports from the project and uses (calls, takes an
        attribute of, derives a class from): the text of its definition, and then of
        what that definition uses in turn, through re-exports and further imports, to
        IMPORT_TEXT_DEPTH levels.  Read from text only (amplint/project/text_index.py)
        and remembered per definition, so a helper imported by fifty files is read once;
        the files read and the paths probed in vain go into `reads`.
        """
        from amplint.project.text_index import TextModule, attributes_used

        origin = Path(_abs(path))
        own = TextModule.read(code, package, segments=False)
        tokens = frozenset(tokens)
        present: set = set()
        files: set[str] = set()
        missing: set[str] = set()
        for local, (module, name) in own.imports.items():
            # `from m import name` is imported to be used; of `import m`, the attributes taken.
            attrs = attributes_used(code, local) if name is None else set()
            for target in self._targets(module, name, attrs, origin, missing):
                found, read, probed = self._closure(target, IMPORT_TEXT_DEPTH, tokens)
                present |= found
                files |= read
                missing |= probed
        if reads is not None:
            for key in files:
                stat = self._texts.get(key, (None,))[0]
                if stat is not None:
                    reads.used[key] = stat
            reads.missing |= missing
        return frozenset(present)

    def _closure(self, target: tuple[Path, str], depth: int, tokens: frozenset):
        """(tokens present, files read, paths probed in vain) for one definition and what it uses."""
        memo_key = (target, depth, tokens)
        if memo_key in self._closures:
            return self._closures[memo_key]
        self._closures[memo_key] = (frozenset(), frozenset(), frozenset())  # a cycle reads as empty
        file, name = target
        present: set = set()
        files: set[str] = {_abs(file)}
        missing: set[str] = set()
        got = self._text_module(file)
        if got is not None:
            module_text = got
            following: list[tuple[Path, str]] = []
            if name in module_text.segments:
                segment_tokens, uses = self._segment(file, module_text, name, tokens)
                present |= segment_tokens
                for called, attrs in uses.items():
                    if called in module_text.segments and called != name:
                        following.append((file, called))
                    elif called in module_text.imports:
                        module, imported = module_text.imports[called]
                        following.extend(self._targets(module, imported, attrs, file, missing))
            elif name in module_text.imports:  # a re-export: `from .checkpoint import save`
                module, imported = module_text.imports[name]
                following.extend(self._targets(module, imported, {name} if imported is None else set(), file, missing))
            if depth > 0:
                for nxt in following:
                    found, read, probed = self._closure(nxt, depth - 1, tokens)
                    present |= found
                    files |= read
                    missing |= probed
        result = (frozenset(present), frozenset(files), frozenset(missing))
        self._closures[memo_key] = result
        return result

    def _segment(self, file: Path, module_text, name: str, tokens: frozenset):
        """(tokens in a definition's text, the names it uses), remembered per definition."""
        from amplint.prefilter import tokens_in
        from amplint.project.text_index import used_names

        key = (_abs(file), name, tokens)
        found = self._segments.get(key)
        if found is None:
            segment = module_text.segments[name]
            found = (tokens_in(segment.lower(), tokens), used_names(segment))
            self._segments[key] = found
        return found

    def _targets(self, module: str, name: str | None, attrs, importer: Path, missing: set) -> list[tuple[Path, str]]:
        """(file, name) to read for a name imported as `from module import name`
        (or `import module`, name None, whose attributes `attrs` are used)."""
        key = (os.path.dirname(_abs(importer)), module, name, frozenset(attrs))
        found = self._target_memo.get(key)
        if found is None:
            probed: set[str] = set()
            found = (self._find_targets(module, name, attrs, importer, probed), frozenset(probed))
            self._target_memo[key] = found
        missing |= found[1]
        return found[0]

    def _find_targets(self, module: str, name: str | None, attrs, importer: Path, missing: set) -> list[tuple[Path, str]]:
        from amplint.analysis.callees import is_external

        if is_external(module, importer):
            return []
        if name is not None:
            sub = layout.resolve_module(f"{module}.{name}", importer)
            missing.update(str(p) for p in sub.probed if p != sub.path)
            if sub.path is not None:  # `from utils import checkpoint`: a module
                return [(sub.path, a) for a in attrs]
            hit = layout.resolve_module(module, importer)
            missing.update(str(p) for p in hit.probed if p != hit.path)
            return [(hit.path, name)] if hit.path is not None else []
        hit = layout.resolve_module(module, importer)
        missing.update(str(p) for p in hit.probed if p != hit.path)
        return [(hit.path, a) for a in attrs] if hit.path is not None else []

    def _text_module(self, path: Path):
        """The TextModule of one file, cached by stat (None: unreadable or too large)."""
        from amplint import sources
        from amplint.prefilter import code_text, package_of
        from amplint.project.text_index import TextModule

        key = _abs(path)
        try:
            st = os.stat(key)
        except OSError:
            return None
        stat = (st.st_size, st.st_mtime_ns)
        cached = self._texts.get(key)
        if cached is not None and cached[0] == stat:
            return cached[1]
        if cached is not None:  # changed on disk: what was derived from it is stale
            self._closures.clear()
            self._target_memo.clear()
            self._segments = {k: v for k, v in self._segments.items() if k[0] != key}
        found = None
        if st.st_size <= MAX_DEPENDENCY_BYTES:
            try:
                found = TextModule.read(code_text(sources.read(Path(key)).text), package_of(key))
            except sources.UnreadableSource:
                found = None
        self._texts[key] = (stat, found)
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
