"""`[tool.amplint]` in pyproject.toml, parsed once into a frozen `Config`.

Parsed with tomllib only: reading configuration never executes anything.

Directory walks honour `.gitignore`: inside a git work tree, each path the walk
meets is asked of one long-lived `git check-ignore --stdin` process (answers
cached), so every git rule applies (nested .gitignore files, .git/info/exclude, the
global excludes file, negations), and tracked files are never treated as ignored,
as git itself does.  Outside a work tree, or without git on the
PATH, nothing is ignored that way.

NB: the checked tree's own `.git/config` is hostile input (a tarball unpacked with its
`.git`): git runs what `core.fsmonitor` names whenever it reads the index, so every git
command starts with `_GIT`, which switches off each setting that makes git run a program.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import subprocess
import sys
import weakref
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from amplint import registry
from amplint.rule_catalog import CATALOG
from amplint.parse_limits import DEFAULT_MAX_TOKENS

DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    ".tox",
    ".nox",
    ".venv",
    "venv",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    ".amplint_cache",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "site-packages",
)

KNOWN_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "per-file-ignores",
    "exclude",
    "extend-exclude",
    "target-torch",
    "respect-gitignore",
    "extend-include",
    "max-file-tokens",
    "preview",
}

# What a directory walk checks (Ruff's default `include`, less pyproject.toml); more with `extend-include`.
DEFAULT_INCLUDE = ("*.py", "*.pyi", "*.ipynb")


class ConfigError(ValueError):
    """Configuration that cannot be used: the message names the key or code."""


_TORCH_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?$")


def parse_torch_version(text: str) -> tuple[int, int] | None:
    """`"2.4"` or `"2.4.1"` -> (2, 4); anything else -> None."""
    m = _TORCH_VERSION.match(text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] | None = None  # None: the default rules; (): none (as in Ruff)
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    target_torch: str | None = None
    # No `target-torch` key: each file's floor is its own project's (`torch_version_for`), the
    # nearest pyproject.toml above the file that requires torch, which in a monorepo may be a
    # sub-project's rather than the file holding [tool.amplint].
    infer_torch_floor: bool = False
    respect_gitignore: bool = True
    extend_include: tuple[str, ...] = ()
    # Files with more tokens are not analysed (memory: about 4 KiB a token); 0: no limit.
    max_file_tokens: int = DEFAULT_MAX_TOKENS
    # Run the preview tier too (rules not yet measured at precision >= 0.90 on unseen code).
    preview: bool = False
    # The command line's `--extend-select` / `--ignore` without `--select`: a second layer,
    # applied after the file's selection as in Ruff (a flag overrides the file, whatever
    # selector is the more specific).
    then_extend_select: tuple[str, ...] = ()
    then_ignore: tuple[str, ...] = ()
    root: Path | None = field(default=None, compare=False)
    source: Path | None = field(default=None, compare=False)
    _gitignore: "GitIgnore" = field(default_factory=lambda: GitIgnore(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.target_torch is not None and parse_torch_version(self.target_torch) is None:
            raise ConfigError(f'target-torch must be a torch version like "2.4", got {self.target_torch!r}')
        # Validate selectors and patterns early: an unknown code is a clear error, not silence.
        for pattern, _ in self.per_file_ignores:
            _per_file_matcher(pattern)
        for key, patterns in (("exclude", self.exclude), ("extend-exclude", self.extend_exclude)):
            for pattern in patterns:
                try:
                    _glob_regex(pattern)
                except _BadGlob as exc:  # `"["` would silently exclude only a file named `[`
                    raise ConfigError(f"{key}: pattern {pattern!r} is not a valid glob: {exc}") from None
        for sel in (*(self.select or ()), *self.extend_select, *self.ignore, *(c for _, cs in self.per_file_ignores for c in cs)):
            try:
                registry.expand_codes(sel)
            except registry.UnknownSelector as exc:
                raise ConfigError(str(exc)) from None

    @classmethod
    def all_rules(cls) -> "Config":
        """Every rule, opt-in and preview ones included (the flake8 plugin lets flake8 filter)."""
        return cls(select=tuple(e.code for e in CATALOG), preview=True)

    @property
    def torch_version(self) -> tuple[int, int] | None:
        """The oldest torch the checked code must run on (`target-torch`), if known: a fix
        writes only what that torch has (AMP401)."""
        return parse_torch_version(self.target_torch) if self.target_torch is not None else None

    def torch_version_for(self, path: str | os.PathLike | None, reads=None) -> tuple[int, int] | None:
        """The oldest torch `path` must run on: `target-torch`, else its own project's floor.

        `reads` (project.index.Reads) records the pyproject.toml files the answer depends on,
        so a cached result is recomputed when a sub-project's requirement changes."""
        if not self.infer_torch_floor or path is None:
            return self.torch_version
        # standard input without --stdin-filename: the project of the working directory
        folder = Path.cwd() if str(path) in ("", "-", "<stdin>") else Path(os.path.abspath(path)).parent
        found = nearest_torch_requirement(folder, reads)
        if found is None:
            return self.torch_version
        return parse_torch_version(found) if found else None

    def with_overrides(self, **kwargs) -> "Config":
        return replace(self, **{k: v for k, v in kwargs.items() if v is not None})

    def rules(self) -> tuple[type, ...]:
        return registry.resolve(self.select, self.ignore, self.extend_select, self.preview,
                                self.then_extend_select, self.then_ignore)

    def codes(self) -> tuple[str, ...]:
        """The codes of `rules()`, found without importing a rule (a warm run needs no more)."""
        return registry.resolve_codes(self.select, self.ignore, self.extend_select, self.preview,
                                      self.then_extend_select, self.then_ignore)

    def rules_for(self, path: str | os.PathLike) -> tuple[type, ...]:
        rules = self.rules()
        ignored = self._per_file_ignored(path)
        if ignored:
            rules = tuple(r for r in rules if r.code not in ignored)
        return rules

    def _per_file_ignored(self, path) -> set[str]:
        if not self.per_file_ignores:
            return set()
        real = _resolve(Path(path))
        full, name = real.as_posix(), real.name
        base = self._resolved_root if self.root is not None else _resolve(Path.cwd())
        out: set[str] = set()
        for pattern, codes in self.per_file_ignores:
            if _per_file_matcher(pattern).matches(full, name, base):
                for c in codes:
                    out |= set(registry.expand_codes(c))
        return out

    def is_excluded(self, path: str | os.PathLike, *, below: str | os.PathLike | None = None) -> bool:
        """An exclude pattern matches the path (relative to the root) or one of its parts,
        or git ignores it.

        `below`: a directory the user named, which a walk found `path` in.  A named path
        is checked (as Ruff does), so then only the parts of `path` below it count
        (`amplint check build/proj` checks build/proj although `build` is excluded), and
        git is asked only when it does not ignore `below` itself: inside an ignored
        directory git calls every path ignored.
        """
        if below is not None:
            return self._excluded_below(Path(path), Path(below))
        rel = self._relative(path)
        whole, part, prefixes = self._exclude_matchers
        if whole is not None and (whole.match(rel) or rel.startswith(prefixes) or any(map(part.match, Path(rel).parts))):
            return True
        return self.respect_gitignore and self._gitignore.ignored(Path(path))

    def is_included(self, path: str | os.PathLike) -> bool:
        """A directory walk checks this file: its name matches an include pattern
        (`*.py`, `*.pyi`, `*.ipynb`, or `extend-include`), or its path relative to the root does."""
        return self._include_matcher.match(Path(path).name) is not None or (
            bool(self.extend_include) and self._include_matcher.match(self._relative(path)) is not None
        )

    @cached_property
    def _include_matcher(self) -> re.Pattern:
        return re.compile("|".join(f"(?:{_path_glob(p)})" for p in (*DEFAULT_INCLUDE, *self.extend_include)))
    def _excluded_below(self, path: Path, below: Path) -> bool:
        return self.walk_below(below).excluded(path)

    def walk_below(self, below: str | os.PathLike) -> "WalkFilter":
        """`is_excluded(path, below=below)` for the many paths of one walk of `below`."""
        return WalkFilter(self, below)

    @cached_property
    def _exclude_matchers(self) -> tuple[re.Pattern | None, re.Pattern | None, tuple[str, ...]]:
        """The exclude patterns as two regexes and a prefix tuple, compiled once: fnmatch per
        pattern and path part cost seconds on a tree of a few thousand files."""
        patterns = self._exclude_patterns
        if not patterns:
            return None, None, ()
        whole = "|".join(_path_glob(p) for p in patterns)
        part = "|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)
        return re.compile(whole), re.compile(part), tuple(p + "/" for p in patterns)

    @cached_property
    def _exact_matcher(self) -> re.Pattern:
        """A pattern matching a path itself (not what lies below it: a walk does not enter an excluded directory)."""
        return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in self._exclude_patterns) or r"(?!)")

    @cached_property
    def _exclude_patterns(self) -> tuple[str, ...]:
        return tuple(p.rstrip("/") for p in (*self.exclude, *self.extend_exclude))

    def _relative(self, path) -> str:
        p = Path(path)
        if self.root is not None:
            try:
                return _resolve(p).relative_to(self._resolved_root).as_posix()
            except (ValueError, OSError):
                pass
        return p.as_posix()

    @cached_property
    def _resolved_root(self) -> Path:
        return _resolve(self.root)

    @property
    def cache_key(self) -> str:
        """What in the configuration can change findings (for the result cache)."""
        return repr((sorted(self.codes()), self.per_file_ignores, self.target_torch,
                     self.infer_torch_floor, self.max_file_tokens))


class WalkFilter:
    """`Config.is_excluded(path, below=...)` for the paths one walk of `below` meets.

    What they share is worked out once: whether git ignores `below`, and each directory's
    real path (a file's is its folder's plus its name unless it is a link itself).
    Resolving each of a few thousand paths from scratch, `os.path.realpath` walking every
    component in Python, cost more than the rest of a warm run.
    """

    def __init__(self, config: Config, below: str | os.PathLike) -> None:
        self.config = config
        self.below = Path(below)
        spelled = str(self.below)
        # What a path below it starts with (`Path` spells the paths of a walk of "." bare).
        self._prefix = "" if spelled == "." else os.path.join(spelled, "")
        self._real_dirs: dict[str, str] = {}
        self._in_work_tree: dict[str, bool] = {}
        self._git_ignores_below: bool | None = None

    def excluded(self, path: Path) -> bool:
        """As `Config.is_excluded(path, below=self.below)`."""
        config = self.config
        spelled = str(path)
        if not spelled.startswith(self._prefix) or spelled == self._prefix or (not self._prefix and os.path.isabs(spelled)):
            return config.is_excluded(path)  # not below it (or `below` itself)
        inner = spelled[len(self._prefix):].split(os.sep)
        rel = self._relative(spelled)
        suffix = "/".join(inner)
        if not rel.endswith(suffix):
            return config.is_excluded(path)  # a link on the way: judged by where it leads
        _, part, _ = config._exclude_matchers
        if part is not None:
            exact = config._exact_matcher
            base = rel[: len(rel) - len(suffix)]
            for i, name in enumerate(inner, 1):  # each level below `below`, the entry itself last
                if part.match(name) or exact.match(base + "/".join(inner[:i])):
                    return True
        if not config.respect_gitignore or not self._in_a_work_tree(os.path.dirname(spelled)):
            return False
        if self._git_ignores_below is None:
            self._git_ignores_below = config._gitignore.ignored(self.below)
        return not self._git_ignores_below and config._gitignore.ignored(path)

    def _in_a_work_tree(self, folder: str) -> bool:
        """Git has something to say about the entries of `folder` (asked once per folder)."""
        found = self._in_work_tree.get(folder)
        if found is None:
            found = self._in_work_tree[folder] = self.config._gitignore.work_tree_of(folder) is not None
        return found

    def _relative(self, path: str) -> str:
        """`config._relative(path)`, from the real path of the folder, found once per folder."""
        config = self.config
        folder, name = os.path.split(path)
        if config.root is None or os.sep != "/" or name in ("", ".", ".."):
            return config._relative(path)
        real_folder = self._real_dirs.get(folder)
        if real_folder is None:
            real_folder = self._real_dirs[folder] = str(_resolve(Path(folder)))
        real = str(_resolve(Path(path))) if os.path.islink(path) else os.path.join(real_folder, name)
        root = str(config._resolved_root)
        if real == root:
            return "."
        if real.startswith(os.path.join(root, "")):
            return real[len(os.path.join(root, "")):]
        return Path(path).as_posix()


def _path_glob(pattern: str) -> str:
    """Regex source for a path matching `pattern` itself or anything below it (`pattern/*`)."""
    return f"(?:{fnmatch.translate(pattern)})|(?:{fnmatch.translate(pattern.rstrip('/') + '/*')})"


class _PerFileMatcher:
    """A `per-file-ignores` pattern, matched as Ruff matches it (flake8 agrees where both are defined).

    The pattern is a glob relative to the configuration's directory (`./x.py`, `../x.py`
    and absolute paths too) that matches the file's path; or, as a bare glob, the file's
    name (`"__init__.py"` anywhere).  `*` and `?` also match `/`; `**/` is zero or more
    folders (`**/foo.py` matches a `foo.py` at the top); `[abc]`, `[!abc]` and `{a,b}`
    as in Ruff's globs.  A pattern naming a folder also covers what lies below it.  A
    leading `!` negates the pattern, as in Ruff: `"!tests/**" = [...]` ignores the codes
    in every file outside `tests/`.
    """

    def __init__(self, pattern: str) -> None:
        self._negated = pattern.startswith("!")
        if self._negated:
            pattern = pattern[1:]
        if not pattern.strip():
            raise ConfigError(f"per-file-ignores: pattern {pattern!r} is an empty pattern, which matches no file")
        if "\0" in pattern:
            raise ConfigError(f"per-file-ignores: pattern {pattern!r} holds a NUL character, which no path can")
        try:
            self._name = re.compile(_glob_regex(pattern), re.S)
            normal = posixpath.normpath(pattern)
            ups = 0
            if not normal.startswith("/"):
                while normal == ".." or normal.startswith("../"):
                    ups, normal = ups + 1, normal[3:] or "."
            self._ups, self._absolute = ups, normal.startswith("/")
            self._path = "" if normal == "." else _glob_regex(normal)
        except _BadGlob as exc:
            raise ConfigError(f"per-file-ignores: pattern {pattern!r} is not a valid glob: {exc}") from None
        self._compiled: dict[str, re.Pattern] = {}

    def matches(self, full: str, name: str, base: Path) -> bool:
        """`full`: the file's real absolute path (posix); `name`: its file name; `base`: the
        (real) directory the pattern is relative to."""
        return self._matches(full, name, base) != self._negated

    def _matches(self, full: str, name: str, base: Path) -> bool:
        if self._name.fullmatch(name):
            return True
        regex = self._compiled.get(str(base))
        if regex is None:
            if self._absolute:
                prefix = ""
            else:
                anchor = base
                for _ in range(self._ups):
                    anchor = anchor.parent
                prefix = re.escape(anchor.as_posix().rstrip("/") + "/")
            # NB: the folder's own name is never a glob (a project in `a[1]/` is not a class)
            body = f"(?:{self._path})(?:/.*)?" if self._path else ".*"
            regex = self._compiled[str(base)] = re.compile(prefix + body, re.S)
        return regex.fullmatch(full) is not None


class _BadGlob(ValueError):
    """A glob that does not compile (Ruff refuses it too)."""


def _glob_regex(pattern: str) -> str:
    """Regex source (for `fullmatch`) of a glob as Ruff's globset reads it by default."""
    out: list[str] = []
    i, n, in_braces = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i) and (i == 0 or pattern[i - 1] == "/") and (i + 2 == n or pattern[i + 2] == "/"):
                if i + 2 == n:  # `a/**`: everything below
                    out.append(".*")
                    i += 2
                else:  # `**/`: zero or more folders
                    out.append("(?:.*/)?")
                    i += 3
                continue
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                raise _BadGlob(f"unclosed character class starting at {pattern[i:]!r}")
            body = pattern[i + 1 : j]
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[") + "]")
            i = j
        elif c == "{":
            if in_braces:
                raise _BadGlob("nested alternatives ({...{...}...}) are not allowed")
            in_braces = True
            out.append("(?:")
        elif c == "}" and in_braces:
            in_braces = False
            out.append(")")
        elif c == "," and in_braces:
            out.append("|")
        elif c == "\\":
            if i + 1 == n:
                raise _BadGlob("a dangling backslash at the end")
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    if in_braces:
        raise _BadGlob("unclosed alternatives: a '{' without its '}'")
    source = "".join(out)
    try:
        re.compile(source)
    except re.error as exc:  # e.g. a class range the wrong way round: [z-a]
        raise _BadGlob(str(exc)) from None
    return source


@lru_cache(maxsize=256)
def _per_file_matcher(pattern: str) -> _PerFileMatcher:
    return _PerFileMatcher(pattern)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.amplint] table, from `start` upward.

    One without [tool.amplint] is passed over; one that cannot be read or is not valid
    TOML raises ConfigError naming it (as Ruff does): passing over it would silently
    apply a parent's configuration, or none, to a project whose own cannot be read.  A
    folder that cannot be searched (no permission) is passed over: whatever lies in it
    cannot be read either, and the walk reports that.
    """
    try:
        here = start if start.is_dir() else start.parent
    except OSError:
        here = start.parent
    for d in (here, *here.parents):
        candidate = d / "pyproject.toml"
        try:
            if not candidate.is_file():
                continue
        except OSError:
            continue
        if _amplint_table(_read_toml(candidate), candidate) is not None:
            return candidate
    return None


# A configuration is a few kilobytes; more is not one (`--config /dev/zero` would read forever).
MAX_CONFIG_BYTES = 4 * 1024 * 1024
# A pipe (`--config <(generate-config)`) is read as its writer writes; one nobody opens for
# writing would block the run for good.
PIPE_WAIT_SECONDS = 10.0


def _config_text(path: Path) -> str:
    """The text of a regular file or a pipe, bounded in size and, for a pipe, in waiting."""
    import stat
    import threading

    st = os.stat(path)
    too_big = ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MB: not a configuration file")
    if stat.S_ISREG(st.st_mode):
        if st.st_size > MAX_CONFIG_BYTES:
            raise too_big
        return path.read_text(encoding="utf-8")
    if not stat.S_ISFIFO(st.st_mode):
        raise ConfigError(f"{path}: not a configuration file (a directory or a device)")

    def read() -> str:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise too_big
        return data.decode("utf-8")

    outcome: list = []

    def run() -> None:
        try:
            outcome.append(read())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(exc)

    reader = threading.Thread(target=run, daemon=True)  # NB: a blocked open cannot be cancelled
    reader.start()
    reader.join(PIPE_WAIT_SECONDS)
    if not outcome:
        raise ConfigError(f"{path}: a pipe nothing wrote to in {PIPE_WAIT_SECONDS:.0f} s")
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _read_toml(path: Path) -> dict:
    """The TOML document in `path`, or ConfigError saying why it cannot be had."""
    try:
        return tomllib.loads(_config_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _amplint_table(data: dict, path: Path) -> dict | None:
    """A pyproject's [tool.amplint] (None without one); ConfigError when `tool` or it is not a table."""
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table ([tool.amplint]), got {_toml_type(tool)}")
    table = tool.get("amplint")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.amplint] must be a table, got {_toml_type(table)}")
    return table


def _toml_type(value: object) -> str:
    """What TOML calls the type of `value`, for messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return "a date or time"


def load(path: Path) -> Config:
    data = _read_toml(path)
    if path.name != "pyproject.toml" and "tool" not in data:
        # A bare table (amplint.toml).  One with a `tool` key is pyproject-shaped whatever
        # its name (`tool` is no amplint key): read its [tool.amplint] as pyproject.toml's.
        return from_table(data, path)
    return from_pyproject(data, path)


def from_pyproject(data: dict, path: Path) -> Config:
    """The Config of a parsed pyproject.toml at `path` (its [tool.amplint], else the defaults)."""
    return from_table(_amplint_table(data, path) or {}, path, inferred_target_torch=torch_floor(data))


def torch_floor(pyproject: dict) -> str | None:
    """The oldest torch the project itself allows, from its `[project]` requirements.

    `torch>=2.1` (or `~=2.1`, `==2.1.*`, `>2.1`) -> "2.1".  The `dependencies` decide;
    only when torch is not among them do the optional dependencies.  Several requirements
    (per platform, per extra): the oldest of their floors.  None without a lower bound.
    """
    project = pyproject.get("project", {}) if isinstance(pyproject, dict) else {}
    if not isinstance(project, dict):
        return None  # not ours to judge: packaging tools report a malformed [project]
    groups = [project.get("dependencies", [])]
    extras = project.get("optional-dependencies", {})
    if isinstance(extras, dict):
        groups.append([r for reqs in extras.values() if isinstance(reqs, list) for r in reqs])
    for reqs in groups:
        if not isinstance(reqs, list):
            continue
        floors = [f for f in (_torch_requirement_floor(r) for r in reqs if isinstance(r, str)) if f is not False]
        if floors:
            known = [f for f in floors if f is not None]
            return f"{min(known)[0]}.{min(known)[1]}" if known and len(known) == len(floors) else None
    return None


def requires_torch(pyproject: dict) -> bool:
    """Does the project name torch among its requirements (dependencies or extras)?"""
    project = pyproject.get("project", {}) if isinstance(pyproject, dict) else {}
    if not isinstance(project, dict):
        return False
    reqs = list(project.get("dependencies", []) or []) if isinstance(project.get("dependencies", []), list) else []
    extras = project.get("optional-dependencies", {})
    if isinstance(extras, dict):
        reqs += [r for group in extras.values() if isinstance(group, list) for r in group]
    return any(isinstance(r, str) and _torch_requirement_floor(r) is not False for r in reqs)


# torch 1.6 brought torch.cuda.amp (autocast and GradScaler): the floor of code that names it.
OLDEST_AMP_TORCH = (1, 6)
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^;@]*)")
_SPECIFIER = re.compile(r"(~=|===|==|!=|<=|>=|<|>)\s*v?(\d+)(?:\.(\d+))?")


def _torch_requirement_floor(requirement: str):
    """(major, minor) lower bound of a torch requirement, None if it has none, False if not torch."""
    m = _REQUIREMENT.match(requirement)
    if m is None or re.sub(r"[-_.]+", "-", m.group(1)).lower() != "torch":
        return False
    if "@" in requirement.split(";")[0]:
        # a direct reference (`torch @ <url of torch-2.3.0+cu121-...whl>`): the wheel's own
        # version, else unknown, read as the oldest torch with torch.cuda.amp (hostile pass 26)
        pinned = re.search(r"torch-(\d+)\.(\d+)", requirement.split("@", 1)[1])
        return (int(pinned.group(1)), int(pinned.group(2))) if pinned else OLDEST_AMP_TORCH
    specifiers = _SPECIFIER.findall(m.group(2))
    floors = [(int(major), int(minor or 0)) for op, major, minor in specifiers if op in ("~=", "===", "==", ">=", ">")]
    if floors:
        return max(floors)
    if any(op in ("<", "<=") for op, _, _ in specifiers):
        # `torch<2.4`: no floor, but not any torch either; the newest spelling may be one no
        # allowed torch has (hostile pass 25).  The code names torch.cuda.amp, so the oldest
        # torch it can run on is the one that brought it.
        return OLDEST_AMP_TORCH
    return None


def from_table(table: dict, path: Path | None = None, *, inferred_target_torch: str | None = None) -> Config:
    where = f"{path}: " if path else ""
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{where}unknown [tool.amplint] key(s): {', '.join(unknown)} (known: {', '.join(sorted(KNOWN_KEYS))})")

    def strings(key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}[tool.amplint] {key} must be a list of strings, got {_toml_type(value)}"
                              + (" holding other values" if isinstance(value, list) else ""))
        return tuple(value)

    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict) or not all(
        isinstance(codes, list) and all(isinstance(c, str) for c in codes) for codes in pfi.values()
    ):
        raise ConfigError(f"{where}[tool.amplint] per-file-ignores must be a table of pattern = [codes]")
    per_file = tuple((pattern, tuple(codes)) for pattern, codes in pfi.items())
    target = table.get("target-torch")
    if target is not None and (not isinstance(target, str) or parse_torch_version(target) is None):
        raise ConfigError(f'{where}[tool.amplint] target-torch must be a torch version like "2.4", got {target!r}')
    infer = target is None
    if target is None:
        target = inferred_target_torch
    gitignore = table.get("respect-gitignore", True)
    if not isinstance(gitignore, bool):
        raise ConfigError(f"{where}[tool.amplint] respect-gitignore must be true or false")
    preview = table.get("preview", False)
    if not isinstance(preview, bool):
        raise ConfigError(f"{where}[tool.amplint] preview must be true or false, got {_toml_type(preview)}")
    max_tokens = table.get("max-file-tokens", DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise ConfigError(f"{where}[tool.amplint] max-file-tokens must be a whole number (0: no limit)")
    kwargs = dict(
        max_file_tokens=max_tokens,
        preview=preview,
        select=strings("select") if "select" in table else None,
        extend_select=strings("extend-select"),
        ignore=strings("ignore"),
        per_file_ignores=per_file,
        extend_exclude=strings("extend-exclude"),
        extend_include=strings("extend-include"),
        target_torch=target,
        infer_torch_floor=infer,
        respect_gitignore=gitignore,
        root=path.parent if path else None,
        source=path,
    )
    if "exclude" in table:
        kwargs["exclude"] = strings("exclude")
    try:
        return Config(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{where}[tool.amplint]: {exc}") from None


def _resolve(p: Path) -> Path:
    """`p.resolve()`, or its absolute path when it is a symlink loop (resolve raises RuntimeError)."""
    try:
        return p.resolve()
    except (RuntimeError, OSError):
        return Path(os.path.abspath(p))


def discover(paths: list[Path]) -> Config:
    """Configuration for a run: the pyproject.toml nearest the first path, else defaults."""
    for p in paths or [Path.cwd()]:
        found = find_pyproject(_resolve(p))
        if found is not None:
            return load(found)
    return defaults_for(_resolve((paths or [Path.cwd()])[0]))


def defaults_for(start: Path) -> Config:
    """The defaults for files with no `[tool.amplint]` above them.  `target-torch` is still each
    file's own project's torch floor (`torch_version_for`: the nearest pyproject.toml that
    requires torch, as ruff reads `requires-python`); there is no floor for the whole run, so a
    file outside any project does not take the floor of whichever path came first."""
    return Config(root=Path.cwd(), infer_torch_floor=True)


def nearest_torch_requirement(folder: Path, reads=None) -> str | None:
    """The torch floor of the nearest pyproject.toml at or above `folder` that requires torch:
    "2.1" for `torch>=2.1`, "" for torch without a lower bound, None where none requires it.

    A pyproject.toml that names no torch (a docs or tooling sub-project) is passed over: the
    code beside it still runs on the torch its enclosing project allows."""
    for d in (folder, *folder.parents):
        candidate = d / "pyproject.toml"
        try:
            st = candidate.stat()
        except OSError:
            if reads is not None:
                reads.missing.add(str(candidate))
            continue
        if reads is not None:
            reads.used[str(candidate)] = (st.st_size, st.st_mtime_ns)
        names_torch, floor = _torch_requirement_of(candidate, st.st_mtime_ns)
        if names_torch:
            return floor or ""
    return None


@lru_cache(maxsize=256)
def _torch_requirement_of(pyproject: Path, _mtime: int | None) -> tuple[bool, str | None]:
    """(does it require torch, its floor); cached by path and modification time: a long-lived
    server sees edits."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError):
        return False, None
    return requires_torch(data), torch_floor(data)


def group_by_config(paths: list[Path]) -> list[tuple[Config, list[Path]]]:
    """Each path with the configuration found from it upward, paths sharing one grouped.

    `amplint check a/ b/x.py` where a/ and b/ are separate projects checks each with
    its own `[tool.amplint]`, in the order the paths were given.
    """
    by_source: dict[object, tuple[Config, list[Path]]] = {}
    nearest: dict[Path, Path | None] = {}  # pre-commit passes thousands of files from few directories
    defaults: dict[Path, Config] = {}
    for p in paths:
        resolved = _resolve(p)
        try:
            here = resolved if resolved.is_dir() else resolved.parent
        except OSError:  # a folder on the way cannot be searched: the reader says so
            here = resolved.parent
        if here not in nearest:
            nearest[here] = find_pyproject(here)
        found = nearest[here]
        if found is None and here not in defaults:
            defaults[here] = defaults_for(here)
        key = found if found is not None else ("defaults",)
        if key not in by_source:
            by_source[key] = (load(found) if found is not None else defaults[here], [])
        by_source[key][1].append(p)
    return list(by_source.values())


class GitIgnore:
    """Answers "does git ignore this path?" for directory walks.

    One long-lived `git check-ignore --stdin -z -v -n` per work tree answers path by
    path (git flushes each answer on a pipe), so a walk of thousands of directories
    costs one process, not thousands.  If that process dies (a path beyond a symlink
    makes git exit), it falls back to a one-shot `git check-ignore` for that path and
    restarts on the next question.  Pickles as an empty cache (worker processes).
    """

    def __init__(self) -> None:
        self._answers: dict[Path, bool] = {}
        self._tops: dict[Path, Path | None] = {}
        self._procs: dict[Path, _CheckIgnore] = {}

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def ignored(self, path: Path) -> bool:
        path = Path(os.path.abspath(path))
        top = self._work_tree(path.parent)
        if top is None:
            return False
        # A file inside an ignored directory is ignored too (git never descends there).
        node = path
        while node != top and node.parent != node:
            if self._ask(top, node):
                return True
            node = node.parent
        return False

    def work_tree_of(self, folder: str | os.PathLike) -> Path | None:
        """The git work tree `folder` lies in, if any (what `ignored` asks first)."""
        return self._work_tree(Path(os.path.abspath(folder)))

    def _work_tree(self, d: Path) -> Path | None:
        if d in self._tops:
            return self._tops[d]
        top = None
        for cand in (d, *d.parents):
            try:
                if (cand / ".git").exists():
                    top = cand
                    break
            except OSError:  # a folder that cannot be searched: git cannot look there either
                continue
        self._tops[d] = top
        return top

    def _ask(self, top: Path, node: Path) -> bool:
        answer = self._answers.get(node)
        if answer is None:
            rel = os.path.relpath(node, top)
            proc = self._procs.get(top)
            if proc is None or not proc.alive:
                proc = self._procs[top] = _CheckIgnore(top)
            answer = proc.ask(rel)
            if answer is None:
                answer = _check_ignore_once(top, rel)
            self._answers[node] = answer
        return answer


# git with every setting that makes it run a program switched off: the checked repository's
# config names them (`-c` outranks every config file).  `core.fsmonitor` is run on each read
# of the index (check-ignore reads it for tracked files); hooks (`post-index-change`) only
# run when the index is written, which GIT_OPTIONAL_LOCKS=0 also stops; a pager only on a
# terminal.  check-ignore uses no remote, filter, diff or merge driver, editor or credential
# helper.  `safe.directory` is left alone: git refusing a repository someone else owns is
# the protection working (then nothing is ignored by git).
_GIT = ("git", "--no-pager", "-c", "core.fsmonitor=", "-c", f"core.hooksPath={os.devnull}")


def _git_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "GIT_OPTIONAL_LOCKS": "0", **extra}


class _CheckIgnore:
    """A `git check-ignore --stdin` coprocess: write one path, read its verdict."""

    def __init__(self, top: Path) -> None:
        self._buf = b""
        try:
            self._proc = subprocess.Popen(
                [*_GIT, "check-ignore", "--stdin", "-z", "--verbose", "--non-matching"],
                cwd=top, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=_git_env(GIT_FLUSH="1"),
            )
        except OSError:
            self._proc = None
            return
        weakref.finalize(self, _close, self._proc)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def ask(self, rel: str) -> bool | None:
        """True/False, or None when git could not answer (then the caller asks another way)."""
        if not self.alive:
            return None
        try:
            self._proc.stdin.write(rel.encode("utf-8", "surrogateescape") + b"\0")
            self._proc.stdin.flush()
            # -v -z: four NUL-terminated fields: source, line, pattern, path (empty first
            # three with -n when nothing matched).
            while self._buf.count(b"\0") < 4:
                chunk = os.read(self._proc.stdout.fileno(), 65536)
                if not chunk:
                    return None
                self._buf += chunk
        except OSError:
            return None
        source, _, pattern, _, self._buf = self._buf.split(b"\0", 4)
        # A match on a negated pattern (`!keep.py`) means "not ignored".
        return bool(source) and not pattern.startswith(b"!")


def _close(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
        proc.wait(timeout=5)
    except Exception:  # noqa: BLE001 - best effort at interpreter exit
        proc.kill()


def _check_ignore_once(top: Path, rel: str) -> bool:
    try:
        proc = subprocess.run([*_GIT, "check-ignore", "-q", "--", rel], cwd=top, capture_output=True,
                              timeout=60, env=_git_env())
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0
