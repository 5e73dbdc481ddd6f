"""Where a project's modules live, found the way Python would find them for a script.

amplint never imports anything, so it has to answer `import utils` or `from .engine
import train_one_epoch` from the file system alone.  For a file being checked, the
places searched are, in order:

1. the importing file's own folder (`python train.py` puts it first on `sys.path`);
2. the import root of its package: the first folder above it without `__init__.py`
   (a module inside `pkg/sub/` is imported as `pkg.sub.mod` from there);
3. the project root: the nearest folder upward with `pyproject.toml`, `setup.cfg`,
   `setup.py` or `.git`;
4. `src/` under the project root (the src layout);
5. for `import pkg.mod` written inside a folder `pkg/` (at any depth), the folder above
   that `pkg/`: a namespace package (no `__init__.py`) imported by a script run from there.

Relative imports are resolved from the importing file's package, as the interpreter
does.  Nothing outside these roots is ever read: installed packages are not the
project (a file inside `site-packages` is only its own project when it is what the
user checks).

Every lookup reports the paths it tried (`Resolution.probed`), found or not, because a
cached result depends on them: creating `utils.py` next to `train.py` changes what
`import utils` means, and so does creating a project marker below the root or the
root's `src/` (they change the roots searched).
"""

from __future__ import annotations

import os
import sys
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
    probed: tuple[str, ...]  # absolute paths, as strings (cheap to make by the thousand)


@lru_cache(maxsize=4096)
def project_root(folder: Path) -> Path | None:
    """The nearest folder, from `folder` upward, that holds a project marker."""
    found = _project_root(str(folder))
    return Path(found) if found is not None else None


@lru_cache(maxsize=4096)
def _project_root(folder: str) -> str | None:
    d = folder
    while True:
        if any(os.path.exists(os.path.join(d, marker)) for marker in PROJECT_MARKERS) or _unpacked_wheel(d):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


@lru_cache(maxsize=4096)
def _unpacked_wheel(folder: str) -> bool:
    """A folder that holds a `<name>-<version>.dist-info`: an unpacked wheel (or a
    `pip install --target` folder), whose top is what Python imports from: torchtune's
    `recipes/dev/*.py` import `torchtune` from there, with no pyproject.toml to say so.
    Not site-packages itself (`_FOREIGN_PARTS`): everything installed is no one project."""
    if os.path.basename(folder) in _FOREIGN_PARTS:
        return False
    try:
        with os.scandir(folder) as entries:
            return any(e.name.endswith(".dist-info") and e.is_dir() for e in entries)
    except OSError:
        return False


@lru_cache(maxsize=4096)
def package_root(folder: Path) -> Path:
    """The folder from which the package holding `folder` is imported (above its `__init__.py` chain)."""
    return Path(_package_root(str(folder)))


@lru_cache(maxsize=4096)
def _package_root(folder: str) -> str:
    d = folder
    while os.path.isfile(os.path.join(d, "__init__.py")) and os.path.dirname(d) != d:
        d = os.path.dirname(d)
    return d


def package_parts(folder: Path) -> tuple[str, ...]:
    """`("pkg", "sub")` for a file in pkg/sub/ (each with `__init__.py`); () for a script folder."""
    return _package_parts(str(folder))


@lru_cache(maxsize=4096)
def _package_parts(folder: str) -> tuple[str, ...]:
    root = _package_root(folder)
    rel = os.path.relpath(folder, root)
    return () if rel == "." else tuple(p for p in rel.split(os.sep) if p)


def module_name(path: Path) -> str:
    """The dotted name a file is imported as from its package root (`pkg.sub.mod`)."""
    path = Path(path)
    parts = package_parts(Path(os.path.abspath(path.parent)))
    stem = path.stem
    if stem == "__init__":
        return ".".join(parts) or stem
    return ".".join((*parts, stem))


def import_roots(path: Path) -> tuple[Path, ...]:
    """The folders searched for an absolute import written in `path`, in order."""
    return tuple(Path(r) for r in _import_roots(os.path.dirname(os.path.abspath(path))))


@lru_cache(maxsize=4096)
def _import_roots(folder: str) -> tuple[str, ...]:
    roots = [folder, _package_root(folder)]
    top = _project_root(folder)
    if top is not None:
        roots += [top, os.path.join(top, "src")]
    out: list[str] = []
    for r in roots:
        if r not in out and os.path.isdir(r):
            out.append(r)
    return tuple(out)


@lru_cache(maxsize=4096)
def _root_probes(folder: str) -> tuple[str, ...]:
    """The absent paths whose creation would change the roots searched from `folder`:
    each project marker in every folder below the project root (or up to the top of the
    file system when there is none: a pyproject.toml created there makes a new root),
    and the root's `src/` while it does not exist.  Every resolution reports them as
    probed, so a cached result that depends on them is recomputed when one appears."""
    top = _project_root(folder)
    out: list[str] = []
    d = folder
    while d != top:
        out += [os.path.join(d, marker) for marker in PROJECT_MARKERS]
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    if top is not None and not os.path.isdir(os.path.join(top, "src")):
        out.append(os.path.join(top, "src"))
    return tuple(out)


def boundary(path: Path) -> Path:
    """The folder that bounds the project of `path`: nothing above it is read."""
    return Path(_boundary(os.path.dirname(os.path.abspath(path))))


@lru_cache(maxsize=4096)
def _boundary(folder: str) -> str:
    top = _project_root(folder)
    base = _package_root(folder)
    if top is not None and (top == base or base.startswith(top.rstrip(os.sep) + os.sep)):
        return top
    return base


def _inside(candidate: str, limit: str) -> bool:
    if _FOREIGN_PARTS.intersection(candidate.split(os.sep)) and not _FOREIGN_PARTS.intersection(limit.split(os.sep)):
        return False
    return candidate == limit or candidate.startswith(limit.rstrip(os.sep) + os.sep)


def resolve_module(dotted: str, importer: Path | str) -> Resolution:
    """The project file for absolute module `dotted` imported from `importer`."""
    return _resolve_in(os.path.dirname(os.path.abspath(importer)), dotted)


@lru_cache(maxsize=65536)
def _resolve_in(folder: str, dotted: str) -> Resolution:
    # NB: cached per folder (every file of a folder searches the same roots); a process
    # that lives across edits (the language server) calls `clear_caches()`.
    if not dotted or not all(part.isidentifier() for part in dotted.split(".")):
        return Resolution(None, ())
    limit = _boundary(folder)
    probed: list[str] = list(_root_probes(folder))
    for root in _import_roots(folder):
        own_folder = root == folder
        if not own_folder and not _inside(root, limit):
            continue
        bound = root if own_folder and not _inside(root, limit) else limit
        tried, hit = _find(root, dotted)
        probed.extend(tried)
        if hit is not None and _inside(hit, bound):
            return Resolution(Path(hit), tuple(probed))
    above = _namespace_root(folder, dotted.split(".")[0])
    if above is not None:
        tried, hit = _find(above, dotted)
        probed.extend(tried)
        if hit is not None:
            return Resolution(Path(hit), tuple(probed))
    return Resolution(None, tuple(probed))


def _namespace_root(folder: str, first: str) -> str | None:
    """The folder above the nearest enclosing folder named `first`, when the importing file
    lives inside it: `src/train.py` importing `src.helper` from a `src/` without
    `__init__.py` (a namespace package) is run from the folder above (`python main.py`
    there puts it on `sys.path`), the only place from which that import can work."""
    d = folder
    while True:
        if os.path.basename(d) == first:
            return os.path.dirname(d)
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


@lru_cache(maxsize=65536)
def _find(root: str, dotted: str) -> tuple[tuple[str, ...], str | None]:
    """(paths tried, the one found) for module `dotted` directly under `root`: `a/b.py`,
    then `a/b/__init__.py`.

    Shared by every folder whose search passes through `root` (the package root, the
    project root): a large package asks the same question from hundreds of folders.
    Folder listings answer most lookups (the importing file's own folder rarely holds the
    package it imports from); a file is stat-ed only when its name is there.  Like the
    interpreter's own finder, a name matches in its exact case.
    """
    parts = dotted.split(".")
    rel = os.path.join(*parts)
    module_file, package_init = os.path.join(root, rel + ".py"), os.path.join(root, rel, "__init__.py")
    folder = root
    for part in parts[:-1]:
        if part not in _names_in(folder):
            return (module_file, package_init), None
        folder = os.path.join(folder, part)
    names, last = _names_in(folder), parts[-1]
    if last + ".py" in names and os.path.isfile(module_file):
        return (module_file,), module_file
    if last in names and "__init__.py" in _names_in(os.path.join(folder, last)) and os.path.isfile(package_init):
        return (module_file, package_init), package_init
    return (module_file, package_init), None


@lru_cache(maxsize=16384)
def _names_in(folder: str) -> frozenset[str]:
    """The entries of a folder (none when it is no folder or cannot be listed)."""
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


def clear_caches() -> None:
    """Forget what the file system looked like (files created or removed since)."""
    for cached in (project_root, _project_root, _unpacked_wheel, package_root, _package_root, _package_parts, _import_roots, _root_probes, _boundary, _resolve_in, _find, _names_in):
        cached.cache_clear()


def split_qualified(qualified: str, importer: Path) -> tuple[Resolution, str]:
    """(module file, attribute path) for a qualified name: the longest prefix that is a module.

    `utils.checkpoint.save` may be module `utils.checkpoint`, attribute `save`, or module
    `utils`, attribute `checkpoint.save` (a name defined or re-exported in utils/__init__.py).
    """
    parts = qualified.split(".")
    probed: list[str] = []
    for cut in range(len(parts) - 1, 0, -1):
        found = resolve_module(".".join(parts[:cut]), importer)
        probed.extend(found.probed)
        if found.path is not None:
            return Resolution(found.path, tuple(probed)), ".".join(parts[cut:])
    return Resolution(None, tuple(probed)), ""


# Roots that are never the project's own modules: asking the file system about every
# `torch.nn.functional` call would only cost time.
EXTERNAL_ROOTS = frozenset(getattr(sys, "stdlib_module_names", ())) | frozenset(
    {"torch", "torchvision", "torchaudio", "numpy", "np", "scipy", "apex", "accelerate", "lightning",
     "pytorch_lightning", "deepspeed", "transformers", "diffusers", "timm", "peft", "einops", "tqdm",
     "wandb", "tensorboard", "pandas", "PIL", "cv2", "sklearn", "matplotlib", "yaml", "omegaconf", "hydra"}
)


def is_external(qualified: str, importer) -> bool:
    """A well-known library (`torch`, the standard library), unless it is the importer's own
    package (transformers' modules import `transformers.utils`)."""
    root = qualified.split(".")[0]
    if root not in EXTERNAL_ROOTS:
        return False
    text = str(importer)
    return text[:1] == "<" or _own_top_package(os.path.dirname(os.path.abspath(text))) != root


@lru_cache(maxsize=4096)
def _own_top_package(folder: str) -> str | None:
    parts = package_parts(Path(folder))
    return parts[0] if parts else None
