"""Per-file result cache: an unchanged file is not analysed (or even read) twice.

Layout (`.amplint_cache/` next to the configuration, or `--cache-dir DIR`):

    .amplint_cache/
      CACHEDIR.TAG          backup and indexing tools skip the directory
      .gitignore            `*`: never committed by accident
      v2/<run>/<xx>/<file>.json
      v2/<run>/sets/<root>-<content>.json   files many entries depend on together

`<run>` is a digest of the amplint version, a fingerprint of amplint's own source files
(size and mtime of each: an edited rule in a development checkout must not be answered
from results of the old code), the Python and the libcst that check (`interpreter_key`:
a PEP 695 alias compiles on 3.12, not on 3.11), `Config.cache_key` (the rules in force, per-file ignores,
target torch) and the configuration's root (per-file ignores match paths relative to it),
so another version, code or configuration never sees these entries.  `<file>` is a digest of the file's path
as given (diagnostics carry it) and of where that is (`t.py` run from two folders is two files:
per-file ignores and the modules beside it differ, even where the bytes are the same).  An entry holds the file's size, `mtime_ns`, SHA-256 of
its bytes, and the result: diagnostics (fixes included) or the reason the file could
not be analysed.

Lookup is two-level, so an unchanged file costs one `stat` and one small read:

1. size and `mtime_ns` equal to the entry's, and the entry written more than
   `RACY_NS` after that mtime -> the stored result (the file is not opened);
2. otherwise the file is read and hashed: same SHA-256 -> the stored result
   (a `touch`, a checkout that rewrote identical bytes).

The racy-write rule is git's: a file modified within the timestamp granularity of the
moment its entry was written might have changed without changing `mtime_ns`, so its
stat is not trusted and level 2 decides.

Entries are JSON, never pickle (a cache directory can come from an untrusted checkout),
and are written atomically (temporary file + `os.replace`), so a crash or a concurrent
run leaves either the old entry or the new one.  Anything unreadable, malformed or of
an unexpected shape is a miss, never an error.  Results that contain rule crashes are
not stored: an internal error should be seen (and reproduced) every time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from amplint.version import __version__
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix, Related, Span
# NB: only a regular file is read: a dependency path may have become a FIFO (a read waits
# forever) or a link to /dev/zero (one never ends)
from amplint.sources import read_bytes

CACHE_DIR_NAME = ".amplint_cache"
FORMAT = "v2"  # v2: entries record the project files they depend on
# A file modified less than this before its entry was written is re-hashed, not trusted by
# stat (filesystems with coarse timestamps: FAT 2 s, some network mounts 1 s).
RACY_NS = 2_000_000_000

CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by amplint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


@dataclass(frozen=True)
class Hit:
    diagnostics: list[Diagnostic]
    error: tuple[int, int, str] | None  # (line, col0, reason) of a SourceError


@dataclass
class Probe:
    """What a lookup learnt about the file, so a miss does not stat or hash it twice."""

    entry_path: Path
    size: int | None = None
    mtime_ns: int | None = None
    raw: bytes | None = None  # the bytes, when level 2 had to read them
    sha: str | None = None


class ResultCache:
    def __init__(self, directory: Path, config, version: str = __version__) -> None:
        self.root = Path(directory)
        key = f"{version}\0{code_fingerprint()}\0{interpreter_key()}\0{config.cache_key}\0{config.root}"
        run = hashlib.sha256(key.encode()).hexdigest()[:16]
        self.dir = self.root / FORMAT / run
        self._prepared = False
        self._set_names: dict[tuple, str] = {}

    # --- lookup --------------------------------------------------------------------------
    def lookup(self, path: Path, states: FileStates | None = None) -> tuple[Hit | None, Probe]:
        """The stored result for `path` if it and every file it depends on are unchanged.

        `states`: what the dependencies look like, shared by the lookups of one pass in
        which nothing is written (entries of a project depend on the same files: a warm
        run over transformers stat-ed 140,000 paths for 2,912 entries)."""
        probe = Probe(self._entry_path(path))
        try:
            st = os.stat(path)
        except OSError:
            return None, probe
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read below; the reader says why
            return None, probe
        probe.size, probe.mtime_ns = st.st_size, st.st_mtime_ns
        entry = self._load(probe.entry_path, str(path))
        if entry is None:
            return None, probe
        if not _deps_unchanged(entry, states or FileStates(), self._load_set):
            return None, probe
        if entry["size"] == st.st_size and entry["mtime_ns"] == st.st_mtime_ns and entry["written_ns"] - st.st_mtime_ns > RACY_NS:
            return self._hit(entry), probe
        try:
            probe.raw = Path(path).read_bytes()
        except OSError:
            return None, probe
        probe.sha = hashlib.sha256(probe.raw).hexdigest()
        if probe.sha == entry["sha256"]:
            hit = self._hit(entry)
            if hit is not None:
                # Refresh the stat so the next run stops at level 1.
                self._write(probe.entry_path, {**entry, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
            return hit, probe
        return None, probe

    # --- store ---------------------------------------------------------------------------
    def store(self, path: Path, probe: Probe, raw: bytes, diagnostics: list[Diagnostic], error=None, reads=None) -> None:
        """Remember the result for `raw`, the bytes that were analysed.

        `reads` (amplint.project.index.Reads): the other project files the result
        depends on, and the paths probed for imports that did not exist; the entry is
        only valid while all of them stay as they were.
        """
        if probe.size is None or probe.mtime_ns is None:
            return
        deps = _dependencies(reads, str(path), self._store_set)
        if deps is None:
            return  # a dependency changed while we read it: do not remember a mixed state
        sha = probe.sha if probe.raw is raw and probe.sha else hashlib.sha256(raw).hexdigest()
        entry = {
            "path": str(path),
            "size": probe.size,
            "mtime_ns": probe.mtime_ns,
            "sha256": sha,
            "diagnostics": [_dump_diagnostic(d) for d in diagnostics],
            "error": None if error is None else [error.line, error.col0, error.reason],
            "deps": deps,
        }
        # NB: the stat is the one taken before reading; if the file changed in between, the
        # hash no longer matches the next time and level 2 re-checks it.
        self._write(probe.entry_path, entry)

    # --- dependency sets ---------------------------------------------------------------
    # A project's whole listing (what an upward look at the importers of a module depends
    # on) is a few thousand files: stored in each entry that needs it, it made a cache of
    # transformers 29 MB and a warm run parse 10 MB of JSON.  It is stored once, as
    # sets/<root digest>-<content digest>.json, and entries name it.
    def _store_set(self, root: str, used: dict, folders) -> str | None:
        """The name of the stored set of `used` files and `folders` (written if new);
        None when a file changed since the check read it."""
        signature = (root, tuple(sorted(used.items())), tuple(folders))
        name = self._set_names.get(signature)
        if name is not None:
            return name
        files = []
        for dep, (size, mtime_ns) in signature[1]:
            sha = _digest_if_unchanged(dep, size, mtime_ns)
            if sha is None:
                return None
            files.append([dep, size, mtime_ns, sha])
        body = {"files": files, "folders": [list(f) for f in folders]}
        prefix = hashlib.sha256(os.fsencode(root)).hexdigest()[:16]
        name = f"{prefix}-{hashlib.sha256(json.dumps(body, separators=(',', ':')).encode()).hexdigest()[:32]}"
        target = self.dir / "sets" / f"{name}.json"
        if not target.exists() or self._load_set(name) is None:  # NB: a damaged set is written anew
            if not self._write(target, body):
                return None  # not stored: the entries that need it are not stored either
            try:
                for older in target.parent.glob(f"{prefix}-*.json"):
                    if older != target:
                        older.unlink(missing_ok=True)  # the project changed since: entries naming it miss anyway
            except OSError:
                pass  # an old set left behind costs disk, never a result
        self._set_names[signature] = name
        return name

    def _load_set(self, name: str) -> dict | None:
        if not _SET_NAME.fullmatch(name):
            return None  # an entry names only what `_store_set` wrote
        try:
            stored = json.loads((self.dir / "sets" / f"{name}.json").read_bytes())
        except (OSError, ValueError, RecursionError):
            return None
        return stored if _valid_set(stored) else None

    # --- internals -----------------------------------------------------------------------
    def _entry_path(self, path: Path) -> Path:
        where = os.fsencode(os.path.abspath(path)) + b"\0" + os.fsencode(str(path))
        digest = hashlib.sha256(where).hexdigest()[:32]
        return self.dir / digest[:2] / f"{digest}.json"

    @staticmethod
    def _load(entry_path: Path, path: str) -> dict | None:
        """The entry for `path`, or None when it is missing, unreadable or of any shape
        `store` does not write (a cache directory can come from anywhere)."""
        try:
            entry = json.loads(entry_path.read_bytes())
        except (OSError, ValueError, RecursionError):
            return None
        return entry if _valid_entry(entry) and entry["path"] == path else None

    @staticmethod
    def _hit(entry: dict) -> Hit | None:
        try:
            diagnostics = [_load_diagnostic(d) for d in entry["diagnostics"]]
        except ValueError:
            return None  # malformed: a miss, and the entry is rewritten after the check
        error = entry["error"]
        return Hit(diagnostics, None if error is None else tuple(error))

    def prepare(self) -> None:
        """Create the cache's folder before anything is checked.  Created by the first
        write, it changed the mtime of the project folder it sits in after the check had
        listed that folder (to find a module's importers), so the next run saw the project
        changed and missed every entry that depends on the listing."""
        try:
            self._prepare()
        except OSError:
            pass  # a read-only disk costs speed, never the result

    def _prepare(self) -> None:
        if self._prepared:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        for name, text in (("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", "# Created by amplint automatically.\n*\n")):
            target = self.root / name
            if not target.exists():
                _write_atomic(target, text.encode())
        self._prepared = True

    def _write(self, entry_path: Path, entry: dict) -> bool:
        """Write an entry or a set, with the time it was written; False when the disk refused
        (a read-only or full disk costs speed, never the result)."""
        try:
            self._prepare()
            entry_path.parent.mkdir(exist_ok=True)
            entry = {**entry, "written_ns": time.time_ns()}
            _write_atomic(entry_path, json.dumps(entry, separators=(",", ":")).encode())
        except OSError:
            return False
        return True


def _dependencies(reads, own: str, store_set=None) -> dict | None:
    """{"files": [[path, size, mtime_ns, sha256]], "missing": [path], "folders": [[path, mtime_ns]],
    "sets": [name]}.

    Hashes are taken now, from the bytes on disk; a file whose stat no longer matches
    what the check saw changed in between, and the result is not stored (None).  What
    many entries share (`reads.shared`: a project's whole listing) is stored once by
    `store_set`, which names it; the entry names the set instead of repeating its files.
    """
    if reads is None:
        return {"files": [], "missing": []}
    in_sets: dict[str, tuple[int, int]] = {}
    set_folders: set[tuple[str, int]] = set()
    sets = []
    if store_set is not None:
        for root, (used, folders) in sorted(reads.shared.items()):
            name = store_set(root, used, folders)
            if name is None:
                return None
            sets.append(name)
            in_sets.update(used)
            set_folders.update(folders)
    files = []
    for dep, (size, mtime_ns) in sorted(reads.used.items()):
        if dep == own or in_sets.get(dep) == (size, mtime_ns):
            continue
        sha = _digest_if_unchanged(dep, size, mtime_ns)
        if sha is None:
            return None
        files.append([dep, size, mtime_ns, sha])
    folders = sorted([f, m] for f, m in reads.folders.items() if (f, m) not in set_folders)
    out = {"files": files, "missing": sorted(reads.missing - {own}), "folders": folders}
    if sets:
        out["sets"] = sets
    return out


# (path, size, mtime_ns) -> SHA-256 of the bytes, for this process: a helper imported by a
# thousand files is hashed once per run, not once per entry that depends on it.
_DIGESTS: dict[tuple[str, int, int], str] = {}


def _digest_if_unchanged(path: str, size: int, mtime_ns: int) -> str | None:
    """The file's SHA-256 if its stat is still (size, mtime_ns), else None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if (st.st_size, st.st_mtime_ns) != (size, mtime_ns):
        return None
    key = (path, size, mtime_ns)
    sha = _DIGESTS.get(key)
    if sha is None:
        try:
            sha = hashlib.sha256(read_bytes(path)).hexdigest()
        except OSError:
            return None
        if len(_DIGESTS) >= 100_000:  # a long-lived process (the language server) forgets
            _DIGESTS.clear()
        _DIGESTS[key] = sha
    return sha


_UNSEEN = object()


class FileStates:
    """The stat and digest of each path, asked of the system once.

    For one pass of lookups during which amplint writes nothing (a fix does, so a pass
    that may fix uses a fresh one per file)."""

    def __init__(self) -> None:
        self._stats: dict[str, os.stat_result | None] = {}
        self._digests: dict[str, str | None] = {}
        self._sets: dict[str, bool] = {}

    def set_unchanged(self, name: str, load_set) -> bool:
        """A stored dependency set (`ResultCache._load_set`) is as it was: judged once per pass."""
        if name not in self._sets:
            stored = load_set(name) if load_set is not None else None
            self._sets[name] = stored is not None and _files_unchanged(stored, stored["written_ns"], self)
        return self._sets[name]

    def stat(self, path: str) -> os.stat_result | None:
        if path not in self._stats:
            try:
                self._stats[path] = os.stat(path)
            except (OSError, ValueError):  # ValueError: a NUL in a path read from an entry
                self._stats[path] = None
        return self._stats[path]

    def all_absent(self, paths) -> bool:
        """None of `paths` exists (an entry's probes: tens of thousands in a warm run)."""
        known = self._stats
        for path in paths:
            st = known.get(path, _UNSEEN)
            if st is _UNSEEN:
                st = self.stat(path)
            if st is not None:
                return False
        return True

    def digest(self, path: str) -> str | None:
        if path not in self._digests:
            try:
                self._digests[path] = hashlib.sha256(read_bytes(path)).hexdigest()
            except (OSError, ValueError):
                self._digests[path] = None
        return self._digests[path]


def _deps_unchanged(entry: dict, states: FileStates, load_set=None) -> bool:
    """Every file the result was computed from is as it was, and no probed path appeared.

    `entry` passed `_valid_entry`."""
    deps = entry["deps"]
    if not _files_unchanged(deps, entry["written_ns"], states):
        return False
    for name in deps.get("sets", ()):
        if not states.set_unchanged(name, load_set):
            return False
    return states.all_absent(deps["missing"])


def _files_unchanged(deps: dict, written: int, states: FileStates) -> bool:
    """The "files" and "folders" of `deps` are as they were when written (at `written` ns)."""
    for dep, size, mtime_ns, sha in deps["files"]:
        st = states.stat(dep)
        if st is None:
            return False
        if st.st_size == size and st.st_mtime_ns == mtime_ns and written - mtime_ns > RACY_NS:
            continue
        if st.st_size != size or states.digest(dep) != sha:
            return False
    for folder, mtime_ns in deps.get("folders", ()):
        st = states.stat(folder)
        if st is None or st.st_mtime_ns != mtime_ns:
            return False  # a file was added, removed or renamed there
    return True


# --- the shapes `store` writes: anything else read back is a miss ---------------------------
# NB: `type(v) is int`, not isinstance: JSON's true and false are bools, and no size,
# time or position is one.
_SET_NAME = re.compile(r"[0-9a-f]{16}-[0-9a-f]{32}")


def _row(*kinds):
    """A check for a JSON array of exactly these items: a type (`int`, `str`) or another check."""
    def check(value) -> bool:
        return type(value) is list and len(value) == len(kinds) and all(
            type(v) is k if isinstance(k, type) else k(v) for v, k in zip(value, kinds)
        )
    return check


def _list_of(item):
    def check(value) -> bool:
        return type(value) is list and all(type(v) is item if isinstance(item, type) else item(v) for v in value)
    return check


def _is_set_name(value) -> bool:
    return type(value) is str and _SET_NAME.fullmatch(value) is not None


_FILES, _FOLDERS = _list_of(_row(str, int, int, str)), _list_of(_row(str, int))
_SPAN, _POSITION = _row(int, int, int, int), _row(int, int)
_ERROR = _row(int, int, str)
_RELATED = _list_of(_row(str, _SPAN, str))
_EDIT, _EDIT_IN_CELL = _row(_POSITION, _POSITION, str), _row(_POSITION, _POSITION, str, int)
_EDITS = _list_of(lambda v: _EDIT(v) or _EDIT_IN_CELL(v))


def _valid_entry(entry) -> bool:
    return (
        type(entry) is dict
        and all(type(entry.get(k)) is t for k, t in (
            ("path", str), ("size", int), ("mtime_ns", int), ("written_ns", int), ("sha256", str), ("diagnostics", list),
        ))
        and (entry.get("error", 0) is None or _ERROR(entry.get("error")))
        and _valid_deps(entry.get("deps"))
    )


def _valid_deps(deps) -> bool:
    return (
        type(deps) is dict
        and _FILES(deps.get("files"))
        and _list_of(str)(deps.get("missing"))
        and _FOLDERS(deps.get("folders", []))
        and _list_of(_is_set_name)(deps.get("sets", []))
    )


def _valid_set(stored) -> bool:
    return type(stored) is dict and _FILES(stored.get("files")) and _FOLDERS(stored.get("folders")) and (
        type(stored.get("written_ns")) is int
    )


def _write_atomic(target: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _dump_diagnostic(d: Diagnostic) -> dict:
    out = {
        "code": d.code,
        "message": d.message,
        "path": d.path,
        "span": [d.span.line, d.span.col0, d.span.end_line, d.span.end_col0],
        "notes": list(d.notes),
        "related": [[r.path, [r.span.line, r.span.col0, r.span.end_line, r.span.end_col0], r.message] for r in d.related],
        "fix": None,
        "cell": d.cell,
        "noqa_row": d.noqa_row,
    }
    if d.fix is not None:
        out["fix"] = {
            "title": d.fix.title,
            "applicability": d.fix.applicability.value,
            "edits": [[list(e.start), list(e.end), e.content, *(() if e.cell is None else (e.cell,))] for e in d.fix.edits],
        }
    return out


def _load_diagnostic(d) -> Diagnostic:
    """What `_dump_diagnostic` wrote; ValueError for any other shape."""
    fix = d.get("fix", 0) if type(d) is dict else 0
    if not (
        type(d) is dict
        and all(type(d.get(k)) is str for k in ("code", "message", "path"))
        and _SPAN(d.get("span"))
        and _list_of(str)(d.get("notes"))
        and _RELATED(d.get("related", []))
        and all(d.get(k) is None or type(d.get(k)) is int for k in ("cell", "noqa_row"))
        and (fix is None or (
            type(fix) is dict and type(fix.get("title")) is str and _EDITS(fix.get("edits"))
            and fix.get("applicability") in [a.value for a in Applicability]
        ))
    ):
        raise ValueError("not a stored diagnostic")
    if fix is not None:
        edits = tuple(Edit(tuple(s), tuple(e), content, *cell) for s, e, content, *cell in fix["edits"])
        fix = Fix(fix["title"], edits, Applicability(fix["applicability"]))
    related = tuple(Related(path, Span(*span), message) for path, span, message in d.get("related", ()))
    return Diagnostic(
        d["code"], d["message"], d["path"], Span(*d["span"]), fix, tuple(d["notes"]), related, d.get("cell"), d.get("noqa_row"),
    )


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Digest of (name, size, mtime_ns) of every module of the amplint package."""
    package = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".py"):
                fp = os.path.join(dirpath, name)
                try:
                    st = os.stat(fp)
                except OSError:
                    continue
                h.update(f"{os.path.relpath(fp, package)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def interpreter_key() -> str:
    """What a result depends on besides amplint, the file and the configuration: the Python
    that compiles the file (engine.syntax_check; `type X = int` is valid on 3.12 only) and
    the libcst that parses it (its grammar and its limits change between releases)."""
    return f"{sys.implementation.cache_tag}\0{sys.version}\0{libcst_version()}"


@functools.lru_cache(maxsize=1)
def libcst_version() -> str:
    """libcst's `_version.py` (version and commit), read without importing libcst: a warm
    run imports no libcst.  The copy already imported, if any, else the first on sys.path."""
    module = sys.modules.get("libcst")
    folders = [os.path.dirname(module.__file__)] if getattr(module, "__file__", None) else []
    folders += [os.path.join(entry or os.curdir, "libcst") for entry in sys.path if isinstance(entry, str)]
    for folder in folders:
        try:
            text = Path(folder, "_version.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found = re.search(r"""__version__\s*=.*?['"]([^'"]+)['"]""", text)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return f"{found.group(1) if found else '?'}+{digest}"
    return "not found"


def default_directory(config_root: Path | None) -> Path:
    """`.amplint_cache` beside the configuration file, else in the working directory."""
    return (config_root or Path.cwd()) / CACHE_DIR_NAME
