"""Where a project's modules live, found the way Python would find them for a script.

amplint never imports anything, so it has to answer `import utils` or `from .engine
import train_one_epoch` from the file system alone.  For a file being checked, the
places searched are, in order:

1. the importing file's own folder (`python train.py` puts it first on `sys.path`);
2. the import root of its package: the first folder above it without `__init__.py`
   (a module inside `pkg/sub/` is imported as `pkg.sub.mod` from there);
3. the project root: the nearest folder upward with `pyproject.toml`, `setup.cfg`,
   `setup.py` or `.git`;
4. `src/` under the project root (the src layout).

Relative imports are resolved from the importing file's package, as the interpreter
does.  Nothing outside these roots is ever read: installed packages are not the
project (a file inside `site-packages` is only its own project when it is what the
user checks).

Every lookup reports the paths it tried (`Resolution.probed`), found or not, because a
cached result depends on them: creating `utils.py` next to `train.py` changes what
`import utils` means.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PROJECT_MARKERS = ("pyproject.toml", "setup.cfg", "setup.py", ".git")
# Folders that are never part of a project's own code, even under its root.
_FOREIGN_PARTS = frozenset({"site-packages", "dist-packages", "node_modules", "__pycache__"})


@dataclass(frozen=True)
class Resolution:
    """The file a module name resolves to (None: not in the project) and what was tried."""

    path: Path | None
    probed: tuple[Path, ...]


@lru_cache(maxsize=4096)
def project_root(folder: Path) -> Path | None:
    """The nearest folder, from `folder` upward, that holds a project marker."""
    for d in (folder, *folder.parents):
        if any((d / marker).exists() for marker in PROJECT_MARKERS):
            return d
    return None


@lru_cache(maxsize=4096)
def package_root(folder: Path) -> Path:
    """The folder from which the package holding `folder` is imported (above its `__init__.py` chain)."""
    d = folder
    while (d / "__init__.py").is_file() and d.parent != d:
        d = d.parent
    return d


def package_parts(folder: Path) -> tuple[str, ...]:
    """`("pkg", "sub")` for a file in pkg/sub/ (each with `__init__.py`); () for a script folder."""
    root = package_root(folder)
    try:
        rel = folder.relative_to(root)
    except ValueError:
        return ()
    return tuple(p for p in rel.parts if p)


def module_name(path: Path) -> str:
    """The dotted name a file is imported as from its package root (`pkg.sub.mod`)."""
    path = Path(path)
    parts = package_parts(path.parent)
    stem = path.stem
    if stem == "__init__":
        return ".".join(parts) or stem
    return ".".join((*parts, stem))


def import_roots(path: Path) -> tuple[Path, ...]:
    """The folders searched for an absolute import written in `path`, in order."""
    folder = Path(os.path.abspath(path)).parent
    roots = [folder, package_root(folder)]
    top = project_root(folder)
    if top is not None:
        roots += [top, top / "src"]
    out: list[Path] = []
    for r in roots:
        if r not in out and r.is_dir():
            out.append(r)
    return tuple(out)


def boundary(path: Path) -> Path:
    """The folder that bounds the project of `path`: nothing above it is read."""
    folder = Path(os.path.abspath(path)).parent
    top = project_root(folder)
    base = package_root(folder)
    if top is not None and (top == base or top in base.parents):
        return top
    return base


def _candidates(root: Path, dotted: str) -> tuple[Path, Path]:
    rel = Path(*dotted.split("."))
    return root / rel.with_suffix(".py"), root / rel / "__init__.py"


def _inside(candidate: Path, limit: Path) -> bool:
    if _FOREIGN_PARTS.intersection(candidate.parts) and not _FOREIGN_PARTS.intersection(limit.parts):
        return False
    return candidate == limit or limit in candidate.parents


def resolve_module(dotted: str, importer: Path) -> Resolution:
    """The project file for absolute module `dotted` imported from `importer`."""
    if not dotted or not all(part.isidentifier() for part in dotted.split(".")):
        return Resolution(None, ())
    return _resolve_in(Path(os.path.abspath(importer)).parent, dotted)


@lru_cache(maxsize=65536)
def _resolve_in(folder: Path, dotted: str) -> Resolution:
    # NB: cached per folder (every file of a folder searches the same roots); a process
    # that lives across edits (the language server) calls `clear_caches()`.
    limit = boundary(folder / "_")
    probed: list[Path] = []
    for root in import_roots(folder / "_"):
        own_folder = root == folder
        if not own_folder and not _inside(root, limit):
            continue
        for candidate in _candidates(root, dotted):
            probed.append(candidate)
            if candidate.is_file() and _inside(candidate, root if own_folder and not _inside(root, limit) else limit):
                return Resolution(candidate, tuple(probed))
    return Resolution(None, tuple(probed))


def clear_caches() -> None:
    """Forget what the file system looked like (files created or removed since)."""
    for cached in (project_root, package_root, _resolve_in):
        cached.cache_clear()


def split_qualified(qualified: str, importer: Path) -> tuple[Resolution, str]:
    """(module file, attribute path) for a qualified name: the longest prefix that is a module.

    `utils.checkpoint.save` may be module `utils.checkpoint`, attribute `save`, or module
    `utils`, attribute `checkpoint.save` (a name defined or re-exported in utils/__init__.py).
    """
    parts = qualified.split(".")
    probed: list[Path] = []
    for cut in range(len(parts) - 1, 0, -1):
        found = resolve_module(".".join(parts[:cut]), importer)
        probed.extend(found.probed)
        if found.path is not None:
            return Resolution(found.path, tuple(probed)), ".".join(parts[cut:])
    return Resolution(None, tuple(probed)), ""
