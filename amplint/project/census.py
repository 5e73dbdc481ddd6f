"""The files of a project, for the questions that look upward: who imports this module?

Most facts flow from a callee to its caller, and the caller's check reads the callee.
A few flow the other way: a `torch.autograd.Function` in `layers.py` runs under the
autocast that `engine.py` enters around the model that uses it (AMP205).  Answering
that for a file checked alone means looking at the rest of the project, so this module
lists it: the Python files under the project's boundary, skipping what is never the
project's own code.  The folders walked are reported with their mtimes, because a file
added to one of them can change the answer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from amplint import dirwalk

# Folders that are never a project's own code (virtual environments, build output,
# caches, vendored packages); hidden folders are skipped as well.
SKIPPED_FOLDERS = frozenset(
    {"__pycache__", "node_modules", "site-packages", "dist-packages", "build", "dist", "venv", "env", ".venv",
     ".tox", ".nox", ".eggs", ".mypy_cache", ".pytest_cache", ".amplint_cache"}
)
def holds_code(folder_name: str) -> bool:
    """Whether a folder of that name may hold the project's own code (not hidden, not skipped)."""
    return folder_name not in SKIPPED_FOLDERS and not folder_name.startswith(".")


# A project larger than this is not searched upward (the answer would cost more than
# the check); the facts that need it are then judged from the module alone.
MAX_PROJECT_FILES = 20_000
MAX_CONFIG_FILES = 2_000


@dataclass(frozen=True)
class Listing:
    files: tuple[str, ...]
    folders: tuple[tuple[str, int], ...]  # (folder, mtime_ns): what was walked
    complete: bool  # False when MAX_PROJECT_FILES was reached
    # Jupyter notebooks (.ipynb): no module imports one, but one imports modules (the
    # fixes that rename what a module binds must see it call them)
    notebooks: tuple[str, ...] = ()
    # YAML configuration files (.yaml, .yml): where Hydra and Lightning CLI projects set the
    # Trainer's precision
    configs: tuple[str, ...] = ()


@lru_cache(maxsize=16)
def list_project(boundary: str) -> Listing:
    """Every .py file (and .ipynb notebook) under `boundary` (cached per process: `clear()` after edits)."""
    files: list[str] = []
    notebooks: list[str] = []
    configs: list[str] = []
    folders: list[tuple[str, int]] = []
    complete = True
    for root, dirs, names in dirwalk.walk(boundary):
        try:
            folders.append((root, os.stat(root).st_mtime_ns))
        except OSError:
            continue
        dirs[:] = sorted(d for d in dirs if holds_code(d))
        for name in sorted(names):
            if name.endswith(".py"):
                files.append(os.path.join(root, name))
            elif name.endswith(".ipynb"):
                notebooks.append(os.path.join(root, name))
            elif name.endswith((".yaml", ".yml")) and len(configs) < MAX_CONFIG_FILES:
                configs.append(os.path.join(root, name))
        if len(files) > MAX_PROJECT_FILES:
            complete = False
            break
    return Listing(tuple(files), tuple(folders), complete, tuple(notebooks), tuple(configs))


def clear() -> None:
    list_project.cache_clear()
