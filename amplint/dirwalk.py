"""`os.walk` without recursion: a folder tree of any depth is listed, in the same order.

`os.walk` recurses once per level (Python 3.11), so a tree a thousand folders deep (a symlink
chain, a generated layout) raised RecursionError in the middle of a run. This walks with an
explicit stack: top-down, each folder before what is below it, subfolders in the order the
caller leaves them in `dirs` (prune or sort it in place, as with `os.walk`).
"""

from __future__ import annotations

import os
from typing import Callable, Iterator


def walk(top: str | os.PathLike, *, followlinks: bool = False,
         onerror: Callable[[OSError], None] | None = None) -> Iterator[tuple[str, list[str], list[str]]]:
    stack = [os.fspath(top)]
    while stack:
        root = stack.pop()
        try:
            with os.scandir(root) as listing:
                entries = list(listing)
        except OSError as exc:
            if onerror is not None:
                onerror(exc)
            continue
        dirs: list[str] = []
        files: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=followlinks)
            except OSError:
                is_dir = False
            (dirs if is_dir else files).append(entry.name)
        yield root, dirs, files
        stack.extend(os.path.join(root, d) for d in reversed(dirs))
