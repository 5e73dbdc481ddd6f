"""Each buffer's configuration: the `[tool.amplint]` nearest its file, re-read when that file changes."""

from __future__ import annotations

import os
from pathlib import Path

from amplint.config import Config, defaults_for, find_pyproject, load


class Configs:
    """Configuration per file, cached by the pyproject.toml's path and mtime.

    An editor session outlives edits to pyproject.toml: the lookup is redone per
    directory only when asked again, and a pyproject whose mtime changed is reloaded, so
    a saved configuration applies at the next keystroke without a restart.
    """

    def __init__(self) -> None:
        self._nearest: dict[Path, Path | None] = {}
        self._loaded: dict[Path, tuple[int, Config]] = {}

    def for_path(self, path: Path) -> Config:
        """Raises ConfigError (with the key it names) for an invalid [tool.amplint]."""
        here = path.parent
        if here not in self._nearest:
            self._nearest[here] = find_pyproject(here)
        found = self._nearest[here]
        if found is None:
            return defaults_for(here)  # each file's torch floor is still its project's
        try:
            mtime = os.stat(found).st_mtime_ns
        except OSError:
            self._nearest.pop(here, None)
            return defaults_for(here)
        cached = self._loaded.get(found)
        if cached is not None and cached[0] != mtime:
            # Edited: it may have lost its [tool.amplint] (then a parent's applies) or a
            # nearer one may have appeared meanwhile; the editor need not report either.
            self._loaded.pop(found, None)
            self._nearest[here] = find_pyproject(here)
            if self._nearest[here] != found:
                return self.for_path(path)
        if cached is None or cached[0] != mtime:
            cached = (mtime, load(found))
            self._loaded[found] = cached
        return cached[1]

    def forget(self) -> None:
        """A pyproject.toml was created or deleted somewhere: look again."""
        self._nearest.clear()
