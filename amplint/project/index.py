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
from functools import lru_cache
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from amplint.prefilter import Attr, Word
from amplint.project import layout
from amplint.project.census import holds_code

# Source bytes of parsed modules kept per process (a libcst tree takes ~700x that).
MODEL_BUDGET_BYTES = 1_500_000
# A module larger than this is not parsed for another file's sake: its facts are lost,
# which costs recall, never a wrong finding (generated or vendored code, mostly).
MAX_DEPENDENCY_BYTES = 400_000
# A notebook holds its outputs (images, tables): read for its code cells up to this size.
MAX_NOTEBOOK_BYTES = 64_000_000
# How many levels of imports the pre-filter follows (train.py -> engine.py -> utils.py).
IMPORT_TEXT_DEPTH = 3
# A method that sets the state other methods read (`self.scaler = ...`): kept with them.
_SETS_STATE = re.compile(r"self\.\w*(?:scaler|optim|autocast|dtype|fp16|amp)\w*\s*=(?!=)", re.IGNORECASE)
# `class Trainer(BaseTrainer):` : a base class's code runs for the subclass too.
_CLASS_BASES = re.compile(r"^[ \t]*class[ \t]+\w+[ \t]*\(([^)]*)\)", re.MULTILINE)
# How many levels of importers are searched (layers.py <- model.py <- engine.py <- main.py).
IMPORTER_DEPTH = 4
# Module names looked for in every project text before the whole import graph is built instead.
_WORDS_BEFORE_GRAPH = 8
# How far the relevance check follows what a definition calls.
RELEVANCE_DEPTH = 1
# How far a class's bases are followed by text.
MAX_BASE_DEPTH = 6
# What a function must mention (in its own code or in what it calls) to be worth parsing
# for another module's step graph: the events and contexts the graphs are made of.
CALLEE_VOCABULARY = frozenset(
    {Attr("backward"), Word("manual_backward"), Word("unscale_"), "clip_grad", re.compile(r"\.[\s\\]*step[\s\\]*\("),
     Word("zero_grad"), "gradscaler", "scaler", re.compile(r"\bsave[\s\\]*\("), "load_state_dict", "save_state_dict", "autocast",
     # a gradient norm (`p.grad.norm()`, amplint/analysis/grad_norms.py) computed in a helper
     Attr("grad")}
)
# What a module-level value must mention to be worth parsing: dtypes, devices, contexts.
VALUE_VOCABULARY = frozenset({"float16", "bfloat16", "half", "float32", "autocast", "fp16", "bf16", "dtype", "scaler", "cuda", "cpu"})
# How many re-exports (`from .checkpoint import save` in `__init__.py`) are followed.
MAX_REEXPORT_HOPS = 4


@dataclass(frozen=True)
class Symbol:
    """What a qualified name refers to inside the project, found from the text alone.

    The defining module is parsed only when `model` or `node` is asked for, and callers
    ask only after `relevant()`: most names a training script imports (loggers, config
    helpers, model classes) never touch the scaler, the optimizer or autocast.
    """

    index: "ProjectIndex"
    path: str  # the defining file, absolute
    kind: str  # "function", "class", "value" or "module"
    name: str  # inside that module: "f", "Cls", "Cls.method" ("" for a module)

    @property
    def model(self):
        # A method needs its class's own statements and that method (`Cls.fit`); a
        # function or a class itself is needed whole.
        need = self.name if self.kind in ("function", "class") else None
        return self.index.model_at(self.path, need)

    @property
    def node(self):
        """The FunctionDef / ClassInfo (None for values and modules, or when unparsable)."""
        model = self.model
        if model is None:
            return None
        head, _, method = self.name.partition(".")
        if self.kind == "class":
            return model.classes.get(head)
        if self.kind == "function":
            if method:
                info = model.classes.get(head)
                return info.methods.get(method) if info is not None else None
            return model.functions.get(head)
        return None

    def relevant(self, vocabulary: frozenset | None = None) -> bool:
        """`vocabulary`: what the definition must mention (by default the values' or the
        step graphs' vocabulary, by kind)."""
        if vocabulary is None:
            vocabulary = VALUE_VOCABULARY if self.kind == "value" else CALLEE_VOCABULARY
        return self.index.relevant(self.path, self.name, vocabulary)


@dataclass
class Reads:
    """What one check looked at beyond its own file (for the cache and for notes)."""

    used: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (size, mtime_ns)
    missing: set[str] = field(default_factory=set)
    folders: dict[str, int] = field(default_factory=dict)  # folder -> mtime_ns (a file added changes it)
    # What many checks depend on together: a project's whole listing (root -> (its files'
    # stats, its folders)), which the cache stores once, not in each file's entry.
    shared: dict[str, tuple[dict[str, tuple[int, int]], tuple[tuple[str, int], ...]]] = field(default_factory=dict)

    def merge(self, other: "Reads") -> None:
        self.used.update(other.used)
        self.missing |= other.missing
        self.folders.update(other.folders)
        self.shared.update(other.shared)


@dataclass
class _Entry:
    model: object | None  # None: unreadable, unparsable or too large
    size: int
    mtime_ns: int
    kept: frozenset[str] | None = None  # the definitions a partial model holds (None: all)
    parsed_bytes: int = 0  # what the model's tree was parsed from (its memory, roughly)
    text: str | None = None  # the text a whole model was parsed from (None for a partial one)



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
        self._raw: dict = {}
        self._autocast_memo: dict = {}
        self._listing_stats: dict = {}
        self._forward: dict = {}  # (file, depth) -> (stat, {module: distance})
        self._reverse: dict = {}
        self._raw_imported: dict = {}  # path -> (stat, imported project files)
        self._raw_tokens: dict = {}
        self._closure_memo: dict = {}
        self._setters: dict = {}
        self._target_memo: dict = {}
        self._segments: dict = {}
        self._notebook_code: dict = {}  # path -> (stat, lowercased code of its cells, or None)

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
    def model_at(self, path: Path | str, need: str | frozenset[str] | None = None):
        """The ModuleModel of the project file at `path`, or None if it cannot be had.

        `need`: the top-level name the caller wants (a function or class): then only it,
        the same-module definitions it uses and the module-level statements are parsed
        (amplint/project/partial.py); a later need for another name parses again with
        both.  None parses the whole module.
        """
        key = _abs(path)
        if key in self._overlay:
            return self._overlay[key]
        try:
            st = os.stat(key)
        except OSError:
            self._note_missing([key])
            return None
        entry = self._entries.get(key)
        stale = entry is None or entry.size != st.st_size or entry.mtime_ns != st.st_mtime_ns
        keep = None
        needs = frozenset({need}) if isinstance(need, str) else need
        if not stale and entry.kept is not None and (needs is None or not needs <= entry.kept):
            # A partial model that lacks what is asked for now: parse the whole module
            # once, rather than again and again as each caller needs one more method.
            keep = None
            stale = True
        elif stale and needs is not None:
            keep = self._same_module_closure(key, needs)
        if stale:
            if entry is not None:
                self._drop(key)
            model, parsed, nbytes, text = self._load(key, st.st_size, keep)
            entry = _Entry(model, st.st_size, st.st_mtime_ns, keep if parsed == "partial" else None, nbytes,
                           text if parsed == "full" else None)
            self._entries[key] = entry
            if entry.model is not None:
                self._held += entry.parsed_bytes
                self._evict()
        else:
            self._entries.move_to_end(key)
        self._note_used(key, entry.size, entry.mtime_ns)
        return entry.model

    def _same_module_closure(self, key: str, needs: frozenset[str]) -> frozenset[str]:
        """The names in `needs` and the definitions of the same file their text uses,
        transitively: helpers it calls, base classes, and for a method (`Cls.fit`) the
        class's `__init__`, the methods it calls on `self` and those that set a scaler or
        optimizer attribute.  Module-level statements are always kept."""
        from amplint.project.text_index import used_names

        text = self._text_module(Path(key))
        if text is None:
            return frozenset(needs)
        memo = self._closure_memo.get((key, needs))
        if memo is not None and memo[0] is text:
            return memo[1]
        keep = set(needs)
        todo = list(needs)
        while todo:
            name = todo.pop()
            cls, _, method = name.partition(".")
            if method:
                methods = text.methods(cls)
                segment = methods.get(method, "")
                wanted = {"__init__", *self._state_setters(key, text, cls)}
                wanted |= {a for a in used_names(segment).get("self", ()) if a in methods}
                for m in wanted:
                    if f"{cls}.{m}" not in keep:
                        keep.add(f"{cls}.{m}")
                        todo.append(f"{cls}.{m}")
                for base in text.bases(cls):
                    base = base.split(".")[0]
                    if base in text.segments and base not in keep:
                        keep.add(base)
                        todo.append(base)
                continue
            segment = text.segments.get(name, "")
            for used in (*used_names(segment), *text.bases(name)):
                used = used.split(".")[0]
                if used in text.segments and used not in keep:
                    keep.add(used)
                    todo.append(used)
        found = frozenset(keep)
        self._closure_memo[(key, needs)] = (text, found)
        return found

    def _state_setters(self, key: str, text, cls: str) -> tuple[str, ...]:
        """Methods of `cls` that set a scaler, optimizer or precision attribute."""
        memo = self._setters.get((key, cls))
        if memo is None or memo[0] is not text:
            memo = (text, tuple(m for m, body in text.methods(cls).items() if _SETS_STATE.search(body)))
            self._setters[(key, cls)] = memo
        return memo[1]

    def _load(self, path: str, size: int, keep: frozenset | None = None):
        """(model or None, "full" / "partial" / None, bytes parsed, the file's text): the
        module, whole or in part."""
        from amplint import sources
        from amplint.analysis.model import ModuleModel
        from amplint.diagnostics import SourceError
        from amplint.parsing import parse
        from amplint.prefilter import package_of
        from amplint.project.partial import partial_source

        if size > MAX_DEPENDENCY_BYTES:
            return None, None, 0, None
        try:
            src = sources.read(Path(path))
        except sources.UnreadableSource:
            return None, None, 0, None
        text = partial_source(src.text, set(keep)) if keep is not None else None
        for attempt, how in ((text, "partial"), (src.text, "full")):
            if attempt is None:
                continue
            try:
                module = parse(attempt, path)
                nbytes = sum(len(line) for line in attempt.splitlines() if line.strip())
                return ModuleModel.build(module, path, package_of(path), project=self), how, nbytes, src.text
            except (SourceError, RecursionError, MemoryError):
                continue  # a cut the parser refuses: parse the whole file instead
        return None, None, 0, None

    def parsed_tree(self, path: str, text: str):
        """The libcst tree of `text` when this index already parsed exactly that text, whole,
        for the module at `path` (a helper read for another file, now checked itself);
        else None.  A tree is immutable, so the check builds its own model over it."""
        entry = self._entries.get(_abs(path))
        if entry is None or entry.model is None or entry.text is None or len(entry.text) != len(text):
            return None
        return entry.model.module if entry.text == text else None

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None and entry.model is not None:
            self._held -= entry.parsed_bytes

    def _evict(self) -> None:
        while self._held > self._budget and len(self._entries) > 1:
            key, entry = next(iter(self._entries.items()))
            self._drop(key)

    # --- texts, for the pre-filter --------------------------------------------------------
    def imported_tokens(self, path: str, code: str, package: str | None, tokens, reads: Reads | None = None,
                        uses=None) -> frozenset:
        """Which of `tokens` the code of the project definitions `code` uses contains.

        For each name the file imports from the project and uses (calls, takes an
        attribute of, derives a class from): the text of its definition, and then of
        what that definition uses in turn, through re-exports and further imports, to
        IMPORT_TEXT_DEPTH levels.  Read from text only (amplint/project/text_index.py)
        and remembered per definition, so a helper imported by fifty files is read once;
        the files read and the paths probed in vain go into `reads`.

        `uses()`, where given, is the file's code with string contents emptied (in any
        case): a name `from m import name` brings is read only if that text spells it
        outside import statements.  The analysis meets an imported definition only where
        the code names it, so a re-export (a package's `__init__.py` imports a thousand
        names under TYPE_CHECKING and runs none) reads nothing.
        """
        from amplint.project.text_index import TextModule, attributes_used

        origin = Path(_abs(path))
        own = TextModule.read(code, package, segments=False)
        tokens = frozenset(tokens)
        present: set = set()
        files: set[str] = set()
        missing: set[str] = set()
        # `from m import name` is imported to be used; of `import m`, the attributes taken,
        # and so of `from pkg import mod` where that is a module (`optim.FairseqOptimizer`
        # after `from fairseq import optim`: the base class lives in a submodule).
        from amplint.analysis.callees import is_external

        modules = [local for local, (module, name) in own.imports.items() if not is_external(module, origin)]
        attrs_of = attributes_used(code, modules)
        named = _outside_imports(uses()) if uses is not None else None
        for local, (module, name) in own.imports.items():
            if name is not None and named is not None and not Word(local.lower()).search(named):
                continue
            attrs = attrs_of.get(local, set())
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
            cls, _, method = name.partition(".")
            if _segment_text(module_text, name) is not None:
                segment_tokens, uses = self._segment(file, module_text, name, tokens)
                present |= segment_tokens
                for called, attrs in uses.items():
                    if called in module_text.segments and called != name:
                        following.append((file, called))
                    elif called in module_text.imports:
                        module, imported = module_text.imports[called]
                        following.extend(self._targets(module, imported, attrs, file, missing))
                    elif called == "self" and method:  # `self.helper()` in a method: the class's own
                        following.extend((file, f"{cls}.{a}") for a in attrs if a in module_text.methods(cls) and a != method)
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
        from amplint.prefilter import code_text, tokens_in
        from amplint.project.text_index import used_names

        key = (_abs(file), name, tokens)
        found = self._segments.get(key)
        if found is None:
            segment = _segment_text(module_text, name) or ""
            found = (tokens_in(segment.lower(), tokens, lambda: code_text(segment, strings=False).lower()),
                     used_names(segment))
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
            hit = layout.resolve_module(module, importer)
            missing.update(p for p in hit.probed if p != str(hit.path))
            if hit.path is not None and hit.path.name != "__init__.py":
                return [(hit.path, name)]  # a plain module has no submodules
            sub = layout.resolve_module(f"{module}.{name}", importer)
            missing.update(p for p in sub.probed if p != str(sub.path))
            if sub.path is not None:  # `from utils import checkpoint`: a module
                return [(sub.path, a) for a in attrs]
            return [(hit.path, name)] if hit.path is not None else []
        hit = layout.resolve_module(module, importer)
        missing.update(p for p in hit.probed if p != str(hit.path))
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
                raw = sources.read(Path(key)).text
            except sources.UnreadableSource:
                raw = None
            if raw is not None:
                if _interesting(raw.lower()):
                    found = TextModule.read(code_text(raw), package_of(key))
                else:
                    # Nothing any analysis looks for: its definitions cannot matter, only
                    # where its names come from (an `__init__.py` of re-exports).
                    found = TextModule.read(raw, package_of(key), segments=False, kinds=True)
        self._texts[key] = (stat, found)
        return found

    # --- names ---------------------------------------------------------------------------
    def resolve(self, qualified: str, importer) -> Symbol | None:
        """The project definition that `qualified` (as `importer`'s imports spell it) names."""
        memo = (importer.path, qualified)
        if memo in self._resolved:
            return self._resolved[memo]
        found = self._locate(qualified, Path(_abs(importer.path)), 0)
        self._resolved[memo] = found
        return found

    def _locate(self, qualified: str, importer: Path, hops: int) -> Symbol | None:
        if hops > MAX_REEXPORT_HOPS:
            return None
        module_hit = layout.resolve_module(qualified, importer)
        self._note_missing(p for p in module_hit.probed if p != str(module_hit.path))
        if module_hit.path is not None:
            return Symbol(self, _abs(module_hit.path), "module", "")
        found, attr = layout.split_qualified(qualified, importer)
        self._note_missing(p for p in found.probed if p != str(found.path))
        if found.path is None:
            return None
        return self._member(_abs(found.path), attr, hops)

    def _member(self, path: str, attr: str, hops: int) -> Symbol | None:
        """`attr` (dotted) inside the module at `path`: a definition, a value or a re-export."""
        text = self._text_of(path)
        if text is None:
            return None
        head, _, rest = attr.partition(".")
        kind = text.kinds.get(head)
        if kind == "def" and not rest:
            return Symbol(self, path, "function", head)
        if kind == "class":
            if not rest:
                return Symbol(self, path, "class", head)
            return self.method_in_class(path, head, rest)
        if kind == "var" and not rest:
            return Symbol(self, path, "value", head)
        if head in text.imports:  # a re-export: `from .checkpoint import save_checkpoint`
            module, name = text.imports[head]
            target = module if name is None else f"{module}.{name}"
            return self._locate(f"{target}.{rest}" if rest else target, Path(path), hops + 1)
        return None

    def method_in_class(self, path: str, cls: str, method: str, depth: int = 0) -> Symbol | None:
        """`method` of class `cls` defined at `path`, or inherited from its bases (by text)."""
        text = self._text_of(path)
        if text is None or depth > MAX_BASE_DEPTH:
            return None
        if method in text.methods(cls):
            return Symbol(self, path, "function", f"{cls}.{method}")
        for base in text.bases(cls):
            head, _, rest = base.partition(".")
            if not rest and text.kinds.get(base) == "class":
                found = self.method_in_class(path, base, method, depth + 1)
            elif head in text.imports:
                module, name = text.imports[head]
                target = module if name is None else f"{module}.{name}"
                symbol = self._locate(f"{target}.{rest}" if rest else target, Path(path), 0)
                found = self.method_in_class(symbol.path, symbol.name, method, depth + 1) if symbol is not None and symbol.kind == "class" else None
            else:
                found = None
            if found is not None:
                return found
        return None

    def external_bases(self, path: str, cls: str, depth: int = 0) -> list[str]:
        """The qualified names of the classes from outside the project that class `cls` of
        `path` derives from, through its project bases (by text): `["transformers.Trainer"]`
        for trl's `SFTTrainer(_BaseTrainer)` with `class _BaseTrainer(Trainer)` elsewhere."""
        text = self._text_of(path)
        if text is None or depth > MAX_BASE_DEPTH:
            return []
        out: list[str] = []
        for base in text.bases(cls):
            head, _, rest = base.partition(".")
            # NB: an import before a local class of the same name (a fallback stand-in).
            if head not in text.imports:
                if not rest and text.kinds.get(base) == "class" and base != cls:
                    out += self.external_bases(path, base, depth + 1)
                continue
            module, name = text.imports[head]
            target = module if name is None else f"{module}.{name}"
            qualified = f"{target}.{rest}" if rest else target
            symbol = self._locate(qualified, Path(path), 0)
            if symbol is None:
                out.append(qualified)
            elif symbol.kind == "class":
                out += self.external_bases(symbol.path, symbol.name, depth + 1)
        return out

    def _text_of(self, path: str):
        got = self._text_module(Path(path))
        if got is not None:
            stat = self._texts.get(path, (None,))[0]
            if stat is not None:
                self._note_used(path, *stat)
        return got

    # --- looking upward: who imports a module ---------------------------------------------
    def importers(self, path: str, depth: int = IMPORTER_DEPTH) -> list[str]:
        """Project files that import the module at `path`, directly or through others
        (breadth first, nearest first), from the project's import graph read as text."""
        key = _abs(path)
        listing = self._whole_project(key)
        if listing is None:
            return []
        level = {key}
        seen = {key}
        found: list[str] = []
        for _ in range(depth):
            # A file can import a module only if its text spells the module's name (`mod` of
            # `pkg.mod`, `from . import mod`, `from .mod import x`; a package's folder name for
            # its __init__): only those files' imports are worked out, not the whole project's.
            # Past a few modules (a utility everything imports), the project's whole import
            # graph, built once, is cheaper than scanning every text for each name.
            words = {_module_word(p) for p in level}
            if len(words) > _WORDS_BEFORE_GRAPH:
                reverse = self._reverse_imports(listing)
                following = {f for p in level for f in reverse.get(p, ()) if f not in seen}
            else:
                following = set()
                for f in listing.files:
                    if f in seen:
                        continue
                    entry = self._raw_text(f)
                    if entry is None or not any(w in entry for w in words):
                        continue
                    if self._imports_of(f) & level:
                        following.add(f)
            if not following:
                break
            found.extend(sorted(following))
            seen |= following
            level = following
        return found

    def importers_among(self, path: str, wanted, depth: int = IMPORTER_DEPTH) -> list[str]:
        """The project files whose lowercased text satisfies `wanted(text)` and that import the
        module at `path`, directly or through others (nearest first).

        Answered from those files forward (their imports, then those modules' imports, ...),
        so only the modules on the way are read for their imports: the rules ask for the
        few files that enter autocast, not for every importer of a module."""
        key = _abs(path)
        listing = self._whole_project(key)
        if listing is None:
            return []
        found: list[tuple[int, str]] = []
        for f in listing.files:
            text = self._raw_text(f)
            if f == key or text is None or not wanted(text):
                continue
            distance = self._import_distance(f, key, depth)
            if distance is not None:
                found.append((distance, f))
        return [f for _, f in sorted(found)]

    def may_import_unresolved(self, path: str, names) -> bool:
        """Whether a file near the module at `path` may import it in a way `importers` does
        not follow, and names one of `names` (lowercase words) after doing so.

        `importers` resolves import statements as Python would for a script; code also
        reaches a module through `sys.path.insert(0, "../lib")` then `from utils import
        autocast`, through `importlib.import_module("utils")`, `__import__`, `runpy` or a
        file loader.  A fix that renames what the module binds must not be made on a guess
        that nobody does: this answers by text, erring towards yes.  The files read are
        the project's, and, for a folder with no project marker above it (nothing says
        where the project ends), the folders beside it as well (a `scripts/` next to a
        `lib/`); too many files to read there also answers yes."""
        key = _abs(path)
        word = _module_word(key)
        names = sorted({n.lower() for n in names})
        if not names:
            return False
        uses = re.compile("|".join(rf"\b{re.escape(n)}\b" for n in names))
        # a module imported by a string is a value: its names are read as attributes (of
        # anything but torch's own modules) or by name
        read_from_module = re.compile("|".join(rf"(?<!torch)(?<!amp)(?<!cuda)(?<!cpu)\.\s*{re.escape(n)}\b|[\"':]{re.escape(n)}[\"']"
                                               for n in names))
        # the module named in a string the call is given (`import_module("lib.utils")`,
        # `spec_from_file_location("u", "../lib/utils.py")`)
        # NB: a name computed whole (`import_module(name)`, `run_path(str(path))`) is not followed
        loads_it = re.compile(_DYNAMIC_IMPORT.pattern + rf"[^)]*?[\"'][^\"'\n]*\b{re.escape(word)}\b")
        files = self._nearby_files(key)
        if files is None:
            return True
        for f in files:
            if f == key:
                continue
            if f.endswith(".ipynb"):
                text = self._cells_code(f, word)
                if text is None:
                    return True  # a notebook that names the module and cannot be read may import it
            else:
                text = self._raw_text(f)
            if text is None or not uses.search(text):
                continue
            if _imports_names_of(text, word, names) or (loads_it.search(text) and read_from_module.search(text)):
                return True
        return False

    def _cells_code(self, key: str, word: str) -> str | None:
        """A notebook's code cells joined and lowercased, where its text names `word` (a
        module's name); "" where it does not (the cheap test: only such notebooks are
        parsed), None where it does and is no notebook amplint can read.  Noted as read;
        the code is cached by stat (a notebook once parsed is not searched for a word
        again).  Outputs make a notebook large: it is read whatever its size, up to
        MAX_NOTEBOOK_BYTES (past that, None)."""
        from amplint import sources

        try:
            st = os.stat(key)
        except OSError:
            return ""
        stat = (st.st_size, st.st_mtime_ns)
        self._note_used(key, *stat)
        memo = self._notebook_code.get(key)
        if memo is not None and memo[0] == stat and memo[1] is not None:
            return memo[1]  # NB: its cells, whichever module they name (the patterns read them)
        if st.st_size > MAX_NOTEBOOK_BYTES:
            return None
        try:
            text = sources.read(Path(key)).text
        except sources.UnreadableSource:
            return None
        lowered = text.lower()
        if word not in lowered:
            return ""
        code = _notebook_cells(lowered)
        self._notebook_code[key] = (stat, code)
        return code

    def _nearby_files(self, key: str) -> list[str] | None:
        """The project's files, and beside a project with no marker its neighbours' (None:
        more than can be read)."""
        listing = self._whole_project(key)
        if listing is None:
            return None
        files = [*listing.files, *listing.notebooks]
        if layout.project_root(Path(os.path.dirname(key))) is not None:
            return files
        boundary = str(layout.boundary(Path(key)))
        parent = os.path.dirname(boundary)
        if parent == boundary or parent in (os.path.expanduser("~"), os.sep):
            return files  # NB: nothing above a home folder or the root is one project
        for folder in [parent] + sorted(_subfolders(parent)):
            if folder == boundary:
                continue
            try:
                names = sorted(os.listdir(folder))
                mtime = os.stat(folder).st_mtime_ns
            except OSError:
                continue
            for reads in self._reads:
                reads.folders[folder] = mtime  # a script added beside the module changes the answer
            files += [os.path.join(folder, n) for n in names if n.endswith((".py", ".ipynb"))]
            if len(files) > _MAX_NEIGHBOUR_FILES:
                return None
        return files

    def named_elsewhere(self, path: str, word: str, skip_package_inits: bool = False) -> bool:
        """Whether a project file other than `path` has `word` (lowercase) in its text:
        `ScaledMatmul` applied in a model file, or loaded by a registry string.  True when
        the project is too large to list (it may be).  `skip_package_inits`: a package's
        `__init__.py` does not count (it re-exports; a user of the name names it too)."""
        key = _abs(path)
        listing = self._whole_project(key)
        if listing is None:
            return True
        # A whole word: `QuickCumsumCuda` is no use of `QuickCumsum`.
        pattern = re.compile(rf"(?<![\w]){re.escape(word)}(?![\w])")
        return any(f != key and not (skip_package_inits and os.path.basename(f) == "__init__.py")
                   and word in (text := self._raw_text(f) or "") and pattern.search(text) for f in listing.files)

    def may_be_imported(self, path: str) -> bool:
        """Whether some project file imports the module at `path` (True when the project is
        too large to list): its module-level code may then run inside an importer's `try`."""
        if self._whole_project(_abs(path)) is None:
            return True
        return bool(self.importers(path, depth=1))

    def may_be_run_in_process(self, path: str) -> bool:
        """Whether some other project file may run the module at `path` inside its own
        process other than by an import statement: it names the module's file stem and
        runs code by name or path (`runpy`, `importlib`, `__import__`, `exec`).  True when
        the project is too large to list.  (A subprocess is no such run: its errors end
        it, not the launcher.)"""
        key = _abs(path)
        listing = self._whole_project(key)
        if listing is None:
            return True
        stem = os.path.splitext(os.path.basename(key))[0].lower()
        for f in listing.files:
            text = self._raw_text(f) if f != key else None
            if text and stem in text and any(w in text for w in _IN_PROCESS_LAUNCHERS):
                return True
        return False

    def loaded_by_name_where(self, path: str, pattern: re.Pattern) -> bool:
        """Whether a project file that may load the module at `path` by name (it names the
        module by its dotted path in a string, `"models.attention"`, and loads by name:
        `importlib`, `runpy`, `__import__`) also matches `pattern`: an export tool that scripts a model it imports
        by string.  True when the project is too large to list."""
        key = _abs(path)
        listing = self._whole_project(key)
        if listing is None:
            return True
        stem = os.path.splitext(os.path.basename(key))[0]
        # a dotted module path in a string (`"nets.attn"`, a registry's `"nets.attn:Attn"`):
        # a bare `"attn"` is too common a string to mean the module
        named = re.compile(rf"[\"'](?:\w+\.)+{re.escape(stem)}(?::\w+)?[\"']")
        for f in listing.files:
            text = self._raw_text(f) if f != key else None
            if (text and stem in text and any(w in text for w in _IN_PROCESS_LAUNCHERS)
                    and named.search(text) and pattern.search(text)):
                return True
        return False

    def named_by_importers(self, path: str, word: str) -> bool:
        """Whether a project file that imports the module at `path` (directly or through
        others) has `word` (lowercase) in its text: the only files that can call a function
        of the module or reach its module-level objects by name.  True when the project is
        too large to list."""
        if self._whole_project(_abs(path)) is None:
            return True
        return any(word in (self._raw_text(f) or "") for f in self.importers(path))

    def _import_distance(self, start: str, target: str, depth: int) -> int | None:
        """How many imports lead from `start` to the module `target` (None: more than `depth`)."""
        return self._forward_closure(start, depth).get(target)

    def _forward_closure(self, start: str, depth: int) -> dict[str, int]:
        """module -> the fewest imports that lead from `start` to it (at most `depth`); once
        per version of `start` (the modules on the way are stat-checked when first read)."""
        stat = self._raw.get(start, (None,))[0]
        memo = self._forward.get((start, depth))
        if memo is not None and memo[0] == stat:
            return memo[1]
        distances: dict[str, int] = {}
        level = {start}
        for distance in range(1, depth + 1):
            following = set()
            for f in level:
                if f not in self._raw:
                    self._raw_text(f)
                following |= self._imports_of(f)
            level = {f for f in following if f not in distances and f != start}
            for f in level:
                distances[f] = distance
            if not level:
                break
        self._forward[(start, depth)] = (stat, distances)
        return distances

    def _reverse_imports(self, listing) -> dict[str, set[str]]:
        """module file -> the project files that import it, for the whole listing (once)."""
        reverse = self._reverse.get(id(listing))
        if reverse is None or reverse[0] is not listing:
            graph: dict[str, set[str]] = {}
            for f in listing.files:
                if self._raw_text(f) is not None:
                    for imported in self._imports_of(f):
                        graph.setdefault(imported, set()).add(f)
            reverse = (listing, graph)
            self._reverse[id(listing)] = reverse
        return reverse[1]

    def _whole_project(self, key: str):
        """The listing of the project of `key`, every file of it noted as read; None when
        the project is too large to list (nothing upward is then looked at)."""
        from amplint.project import census

        listing = census.list_project(str(layout.boundary(Path(key))))
        for reads in self._reads:
            reads.folders.update(listing.folders)
        if not listing.complete:
            return None
        self._note_listing(listing)
        return listing

    def _note_listing(self, listing) -> None:
        """The upward answer depends on every file of the project (any may start importing
        the module): note them all as read, for the result cache."""
        stats = self._listing_stats.get(id(listing))
        if stats is None or stats[0] is not listing:
            for f in listing.files:
                self._raw_text(f)
            stats = (listing, {f: self._raw[f][0] for f in listing.files if f in self._raw})
            self._listing_stats[id(listing)] = stats
        root = listing.folders[0][0] if listing.folders else ""
        for reads in self._reads:
            reads.used.update(stats[1])
            reads.shared[root] = (stats[1], listing.folders)

    def importer_tokens(self, path: str, tokens, reads: Reads | None = None) -> frozenset:
        """Which of `tokens` the project files that may run the module at `path` contain.

        As `precision.autocast_from_importers` answers: the files that import it, directly
        or not, and failing those any file of the project (a library's training loop runs
        the models users plug in), so every file of the project is looked at, as text."""
        from amplint.prefilter import tokens_in

        tokens = frozenset(tokens)
        present: set = set()
        self._reads.append(reads if reads is not None else Reads())
        try:
            key = _abs(path)
            listing = self._whole_project(key)
            for f in (listing.files if listing is not None else ()):
                if f == key:
                    continue
                text = self._raw_text(f)
                if text is None:
                    continue
                memo = self._raw_tokens.get((id(text), tokens))
                if memo is None or memo[0] is not text:  # NB: one text object per version of a file
                    memo = (text, tokens_in(text, tokens))
                    self._raw_tokens[(id(text), tokens)] = memo
                present |= memo[1]
                if present == tokens:
                    break
        finally:
            self._reads.pop()
        return frozenset(present)

    def project_files(self, path: str) -> tuple[str, ...]:
        """Every file of the project `path` belongs to (empty when it is too large to list)."""
        from amplint.project import census

        listing = census.list_project(str(layout.boundary(Path(_abs(path)))))
        for reads in self._reads:
            reads.folders.update(listing.folders)
        return listing.files if listing.complete else ()

    def config_files(self, path: str) -> tuple[str, ...]:
        """The YAML configuration files of the project `path` belongs to."""
        from amplint.project import census

        listing = census.list_project(str(layout.boundary(Path(_abs(path)))))
        for reads in self._reads:
            reads.folders.update(listing.folders)
        return listing.configs

    def runs_autocast(self, path: str) -> bool:
        """The module enters autocast that may be enabled, or builds an enabled scaler;
        its text is looked at first, and it is parsed only if it names either."""
        from amplint.analysis.precision import may_run_autocast, runs_autocast
        from amplint.prefilter import code_text

        key = _abs(path)
        text = self.raw_text(key)
        if text is None or not may_run_autocast(text):
            return False
        stat = self._raw.get(key, (None,))[0]
        memo = self._autocast_memo.get(key)
        if memo is not None and memo[0] == stat:
            return memo[1]
        if not may_run_autocast(code_text(text, strings=False)):
            # named only in comments and strings (transformers' `PreTrainedModel` tells users
            # to use `torch.autocast` in a message): nothing there enters it
            self._autocast_memo[key] = (stat, False)
            return False
        # Only the definitions that spell either need parsing (and the module's own code).
        module_text = self._text_module(Path(key))
        needs = frozenset(
            name for name, segment in (module_text.segments.items() if module_text is not None else ())
            if may_run_autocast(lowered := segment.lower()) and may_run_autocast(code_text(lowered, strings=False))
        )
        other = self.model_at(key, needs if module_text is not None and module_text.segments else None)
        found = other is not None and runs_autocast(other)
        self._autocast_memo[key] = (stat, found)
        return found

    def imported_files(self, path: str) -> frozenset[str]:
        """The project files a project file imports (absolute paths; read from its text,
        cached by stat; noted as read)."""
        entry = self._raw_imports(_abs(path))
        return entry[1] if entry is not None else frozenset()

    def data_file(self, importer: str, relative: str) -> tuple[str, str] | None:
        """(path, text) of a data file the code at `importer` names by a literal relative path
        (a DeepSpeed `ds_config.json`), looked for as a script run from its own folder or from
        the project root would find it; noted as read (or as missing), so a cached result is
        recomputed when the file changes or appears.  None when it is in neither place, too
        large or unreadable."""
        if not relative or os.path.isabs(relative) or "\0" in relative:
            return None
        folder = os.path.dirname(_abs(importer))
        root = layout.project_root(Path(folder))
        candidates = [os.path.normpath(os.path.join(folder, relative))]
        if root is not None:
            candidates.append(os.path.normpath(os.path.join(str(root), relative)))
        for candidate in dict.fromkeys(candidates):
            try:
                st = os.stat(candidate)
            except OSError:
                continue
            self._note_used(candidate, st.st_size, st.st_mtime_ns)
            if st.st_size > MAX_DEPENDENCY_BYTES:
                return None
            try:
                with open(candidate, encoding="utf-8") as f:
                    return candidate, f.read()
            except (OSError, UnicodeDecodeError):
                return None
        self._note_missing(candidates)
        return None

    def raw_text(self, path: str) -> str | None:
        """A project file's text, lowercased (cached by stat; noted as read)."""
        return self._raw_text(_abs(path))

    def _raw_imports(self, key: str):
        """(lowercased text, imported project files) of one file, cached by stat; noted as read."""
        text = self._raw_text(key)
        return None if text is None else (text, self._imports_of(key))

    def _raw_text(self, key: str) -> str | None:
        """The lowercased text of one file, cached by stat; noted as read."""
        from amplint import sources

        try:
            st = os.stat(key)
        except OSError:
            return None
        stat = (st.st_size, st.st_mtime_ns)
        self._note_used(key, *stat)
        cached = self._raw.get(key)
        if cached is not None and cached[0] == stat:
            return cached[1]
        text = None
        if st.st_size <= MAX_DEPENDENCY_BYTES:
            try:
                text = sources.read(Path(key)).text.lower()
            except sources.UnreadableSource:
                text = None
        self._raw[key] = (stat, text)
        self._raw_imported.pop(key, None)
        return text

    def _imports_of(self, key: str) -> frozenset[str]:
        """The project files one file imports (absolute paths), worked out from its text once
        per version of it (`_raw_text` must have read it)."""
        from amplint import sources
        from amplint.prefilter import package_of
        from amplint.project.text_imports import imported_files

        cached = self._raw.get(key)
        if cached is None or cached[1] is None:
            return frozenset()
        memo = self._raw_imported.get(key)
        if memo is not None and memo[0] == cached[0]:
            return memo[1]
        try:
            text = sources.read(Path(key)).text  # NB: the original case: module names are case-sensitive
            found = frozenset(_abs(p) for p in imported_files(text, Path(key), package_of(key)))
        except sources.UnreadableSource:
            found = frozenset()
        self._raw_imported[key] = (cached[0], found)
        return found

    # --- relevance ------------------------------------------------------------------------
    def relevant(self, path: str, name: str, vocabulary: frozenset = CALLEE_VOCABULARY) -> bool:
        """Whether a definition (and what it calls directly) can matter to an analysis:
        its text names a scaler, an optimizer step, a backward, a clip, autocast, a
        checkpoint (CALLEE_VOCABULARY), or for a value a dtype or device
        (VALUE_VOCABULARY).  Others are never parsed for another module's sake."""
        found, read, probed = self._closure((Path(path), name), RELEVANCE_DEPTH, vocabulary)
        for key in read:
            stat = self._texts.get(key, (None,))[0]
            if stat is not None:
                self._note_used(key, *stat)
        self._note_missing(probed)
        return bool(found)

    def resolve_module_file(self, dotted: str, importer) -> Path | None:
        hit = layout.resolve_module(dotted, Path(_abs(importer.path)))
        if hit.path is None:
            self._note_missing(hit.probed)
        return hit.path


# Ways of running a module by name or path in the running process.
_IN_PROCESS_LAUNCHERS = ("runpy", "importlib", "__import__", "exec(", "run_path", "run_module")


def _outside_imports(code: str) -> str:
    """`code` (lowercased, string contents emptied) with its import statements blanked out."""
    from amplint.project.text_imports import import_statements

    parts, kept = [], 0
    for m in import_statements(code):
        parts.append(code[kept : m.start()])
        parts.append(" ")
        kept = m.end()
    parts.append(code[kept:])
    return "".join(parts)


# The rules' `imported_tokens` groups, handed in by amplint.registry when it loads a rule
# (`take_rule_tokens`): the index must not import the rules, whose analyses ask the index.
_rule_tokens = None


def take_rule_tokens(tokens) -> None:
    """`tokens()`: every token of the groups the rules say an imported module may hold."""
    global _rule_tokens
    _rule_tokens = tokens


def _interesting(lowered: str) -> bool:
    """The text holds a word of some vocabulary the project index reads for."""
    return any(word in lowered for word in _interesting_words(_rule_tokens))


@lru_cache(maxsize=1)
def _interesting_words(rule_tokens=None) -> tuple[str, ...]:
    """Literal words without which no token of the vocabularies, nor of a rule's
    `imported_tokens` groups, can be in a text (checked by tests/test_projects.py)."""
    from amplint.analysis.casts import OPTIMIZER_VOCABULARY
    from amplint.analysis.tensor_flow import RESHAPE_VOCABULARY

    words = {"step", "save"}  # the two patterns of CALLEE_VOCABULARY
    tokens = [*CALLEE_VOCABULARY, *VALUE_VOCABULARY, *RESHAPE_VOCABULARY, *OPTIMIZER_VOCABULARY]
    if rule_tokens is not None:
        tokens.extend(rule_tokens())
    todo = list(tokens)
    while todo:
        t = todo.pop()
        if isinstance(t, tuple):
            todo.extend(t)
        elif isinstance(t, str):
            words.add(t.lower())
        elif isinstance(t, Word):
            words.add(t.word)
        elif isinstance(t, re.Pattern) and t in CALLEE_VOCABULARY:
            continue  # covered by "step" / "save" above
        elif isinstance(t, re.Pattern) and t.pattern in _PATTERN_LITERALS:
            if _PATTERN_LITERALS[t.pattern] is not None:
                words.add(_PATTERN_LITERALS[t.pattern])
        else:
            return ("",)  # a token without a literal: every text is interesting
    return tuple(sorted(words))


# Code that imports a module named by a string, which no import statement shows.
_DYNAMIC_IMPORT = re.compile(r"\b(?:import_module|__import__|spec_from_file_location|run_path|run_module|sourcefileloader"
                             r"|load_source|load_module|resolve_name|locate|import_string)\s*\(")
# Beside a folder with no project marker: how many files are read before answering "maybe".
_MAX_NEIGHBOUR_FILES = 2_000


def _imports_names_of(text: str, word: str, names) -> bool:
    """Whether `text` (lowercase) imports one of `names` from a module whose last part is
    `word` (`from utils import autocast`, `from lib.utils import *`), or imports that
    module and reads one of them from it (`import lib.utils as u` ... `u.autocast`)."""
    w = re.escape(word)
    for m in re.finditer(rf"^[ \t]*from[ \t]+\.*(?:[\w.]*\.)?{w}[ \t]+import[ \t]*(\([^)]*\)|[^\n]*)", text, re.MULTILINE):
        imported = m.group(1)
        if "*" in imported or any(re.search(rf"\b{re.escape(n)}\b", imported) for n in names):
            return True
    aliases = set()
    for m in re.finditer(rf"^[ \t]*import[ \t]+([^\n]*)", text, re.MULTILINE):
        for part in m.group(1).split(","):
            module, _, alias = part.strip().partition(" as ")
            if module.strip().split(".")[-1] == word:
                aliases.add(alias.strip() or module.strip())
    for m in re.finditer(rf"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]*(\([^)]*\)|[^\n]*)", text, re.MULTILINE):
        for part in m.group(1).strip("()").split(","):
            module, _, alias = part.strip().partition(" as ")
            if module.strip() == word:
                aliases.add(alias.strip() or word)
    return any(re.search(rf"\b{re.escape(a)}\s*\.\s*{re.escape(n)}\b", text) for a in aliases if a for n in names)


# An IPython line magic ahead of a statement (`%time from utils import x`, `%timeit -n1 -r1 f()`).
_LINE_MAGIC = re.compile(r"^([ \t]*)%%?\w+(?:[ \t]+-\w+(?:[ \t]*\d+)?)*[ \t]*", re.MULTILINE)


def _notebook_cells(text: str) -> str | None:
    """The code cells of a notebook's JSON `text`, joined (a line magic's statement kept as a
    line of its own); None when it is not a notebook.  Read here, not through
    amplint.notebooks, which sits above the project index (it fixes through the engine)."""
    import json

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    cells = data.get("cells")
    if cells is None:  # nbformat 3: cells live in worksheets
        worksheets = data.get("worksheets")
        if not isinstance(worksheets, list):
            return None
        cells = [c for ws in worksheets if isinstance(ws, dict) for c in (ws.get("cells") or [])]
    if not isinstance(cells, list):
        return None
    parts = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", cell.get("input", ""))
        if isinstance(source, list):
            source = "".join(line for line in source if isinstance(line, str))
        if not isinstance(source, str):
            return None
        parts.append(_LINE_MAGIC.sub(r"\1", source))
    return "\n".join(parts) + "\n"


def _subfolders(folder: str) -> list[str]:
    """The folders directly in `folder` that may hold a project's code."""
    try:
        with os.scandir(folder) as entries:
            return [e.path for e in entries
                    if e.is_dir(follow_symlinks=False) and holds_code(e.name)]
    except OSError:
        return []


def _module_word(path: str) -> str:
    """The word an import of the module at `path` must contain (`layers` for layers.py,
    the package's name for an `__init__.py`)."""
    p = Path(path)
    return (p.parent.name if p.name == "__init__.py" else p.stem).lower()


# Patterns among the rules' imported tokens, and a literal each cannot match without
# (None: not looked for in other modules; AMP501's string escape can spell "fp16" in a
# string of the file itself, and nothing reads another module's strings that way).
_PATTERN_LITERALS = {r"float16(?<!bfloat16)": "float16", r"\\(?:x|u|n\{|[0-7])": None}


def _segment_text(module_text, name: str) -> str | None:
    """The text of top-level `name`, or of method `Cls.method`."""
    cls, _, method = name.partition(".")
    if not method:
        return module_text.segments.get(name)
    return module_text.methods(cls).get(method)


def _abs(path) -> str:
    return os.path.abspath(str(path))


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
    from amplint.project import census

    global _SHARED
    _SHARED = None
    layout.clear_caches()
    census.clear()
