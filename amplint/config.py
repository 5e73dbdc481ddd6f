"""`[tool.amplint]` in pyproject.toml, parsed once into a frozen `Config`.

Parsed with tomllib only: reading configuration never executes anything.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from amplint import registry

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
}


class ConfigError(ValueError):
    """Configuration that cannot be used: the message names the key or code."""


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    target_torch: str | None = None
    root: Path | None = field(default=None, compare=False)
    source: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # Validate selectors early: an unknown code is a clear error, not silence.
        for sel in (*self.select, *self.extend_select, *self.ignore, *(c for _, cs in self.per_file_ignores for c in cs)):
            try:
                registry.expand(sel)
            except registry.UnknownSelector as exc:
                raise ConfigError(str(exc)) from None

    @classmethod
    def all_rules(cls) -> "Config":
        """Every rule, opt-in ones included (the flake8 plugin lets flake8 filter)."""
        return cls(select=tuple(r.code for r in registry.ALL_RULES))

    def with_overrides(self, **kwargs) -> "Config":
        return replace(self, **{k: v for k, v in kwargs.items() if v is not None})

    def rules(self) -> tuple[type, ...]:
        return registry.resolve(self.select, self.ignore, self.extend_select)

    def rules_for(self, path: str | os.PathLike) -> tuple[type, ...]:
        rules = self.rules()
        ignored = self._per_file_ignored(path)
        if ignored:
            rules = tuple(r for r in rules if r.code not in ignored)
        return rules

    def _per_file_ignored(self, path) -> set[str]:
        if not self.per_file_ignores:
            return set()
        rel = self._relative(path)
        out: set[str] = set()
        for pattern, codes in self.per_file_ignores:
            if _match(rel, pattern):
                for c in codes:
                    out |= {r.code for r in registry.expand(c)} | ({r.code for r in registry.ALL_RULES if r.code.startswith(c.upper())})
        return out

    def is_excluded(self, path: str | os.PathLike) -> bool:
        rel = self._relative(path)
        parts = Path(rel).parts
        for pattern in (*self.exclude, *self.extend_exclude):
            pat = pattern.rstrip("/")
            if _match(rel, pat) or any(fnmatch.fnmatch(p, pat) for p in parts):
                return True
        return False

    def _relative(self, path) -> str:
        p = Path(path)
        if self.root is not None:
            try:
                return p.resolve().relative_to(self.root.resolve()).as_posix()
            except (ValueError, OSError):
                pass
        return p.as_posix()

    @property
    def cache_key(self) -> str:
        """What in the configuration can change findings (for the result cache)."""
        return repr((sorted(r.code for r in self.rules()), self.per_file_ignores, self.target_torch))


def _match(rel: str, pattern: str) -> bool:
    return fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, pattern.rstrip("/") + "/*") or rel.startswith(pattern.rstrip("/") + "/")


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.amplint] table, from `start` upward."""
    here = start if start.is_dir() else start.parent
    for d in (here, *here.parents):
        candidate = d / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
                continue
            if "amplint" in data.get("tool", {}):
                return candidate
    return None


def load(path: Path) -> Config:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    table = data.get("tool", {}).get("amplint", {}) if path.name == "pyproject.toml" else data
    return from_table(table, path)


def from_table(table: dict, path: Path | None = None) -> Config:
    where = f"{path}: " if path else ""
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{where}unknown [tool.amplint] key(s): {', '.join(unknown)} (known: {', '.join(sorted(KNOWN_KEYS))})")

    def strings(key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}[tool.amplint] {key} must be a list of strings")
        return tuple(value)

    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{where}[tool.amplint] per-file-ignores must be a table of pattern = [codes]")
    per_file = tuple((pattern, tuple(codes)) for pattern, codes in pfi.items())
    kwargs = dict(
        select=strings("select"),
        extend_select=strings("extend-select"),
        ignore=strings("ignore"),
        per_file_ignores=per_file,
        extend_exclude=strings("extend-exclude"),
        target_torch=table.get("target-torch"),
        root=path.parent if path else None,
        source=path,
    )
    if "exclude" in table:
        kwargs["exclude"] = strings("exclude")
    return Config(**kwargs)


def discover(paths: list[Path]) -> Config:
    """Configuration for a run: the pyproject.toml nearest the first path, else defaults."""
    for p in paths or [Path.cwd()]:
        found = find_pyproject(p.resolve())
        if found is not None:
            return load(found)
    return Config(root=Path.cwd())
