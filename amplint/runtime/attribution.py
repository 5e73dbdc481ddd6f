"""Stack frame -> (file, line) in the user's code: the one place that decides what "user" means.

A frame belongs to the user when its file is not part of torch, amplint, the standard library or an
installed package.  `AMPLINT_ROOT` (the script's directory) is preferred when it is set, so a
helper library vendored next to the script still counts as the user's.

Observations keep the whole user part of the stack (innermost first, a few frames), so a static
finding anchored at a helper's call site is matched as well as one at the call itself.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from dataclasses import dataclass

_LIB_DIRS = tuple(
    sorted(
        {
            os.path.realpath(p) + os.sep
            for p in (
                sysconfig.get_paths().get("stdlib"),
                sysconfig.get_paths().get("platstdlib"),
                sysconfig.get_paths().get("purelib"),
                sysconfig.get_paths().get("platlib"),
            )
            if p
        }
    )
)
_AMPLINT_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep
_ROOT = os.environ.get("AMPLINT_ROOT")
_ROOT = os.path.realpath(_ROOT) + os.sep if _ROOT else None
_cache: dict[str, bool] = {}


@dataclass(frozen=True)
class Site:
    file: str
    line: int
    end_line: int

    def as_list(self) -> list:
        return [self.file, self.line, self.end_line]


def is_user_file(filename: str) -> bool:
    hit = _cache.get(filename)
    if hit is not None:
        return hit
    if filename.startswith("<"):
        result = False
    else:
        real = os.path.realpath(filename)
        if _ROOT and real.startswith(_ROOT):
            result = not real.startswith(_AMPLINT_DIR)
        else:
            result = not (
                real.startswith(_AMPLINT_DIR)
                or any(real.startswith(d) for d in _LIB_DIRS)
                or "site-packages" + os.sep in real
                or "dist-packages" + os.sep in real
            )
    _cache[filename] = result
    return result


_positions: dict = {}
_real: dict[str, str] = {}


def _site(frame) -> Site:
    code, lasti = frame.f_code, frame.f_lasti
    line = frame.f_lineno or code.co_firstlineno
    end = line
    try:
        # 3.11+: the instruction's source range (a call spanning lines covers them all).
        table = _positions.get(code)
        if table is None:
            table = _positions[code] = list(code.co_positions())
        pos = table[lasti // 2]
        if pos[0] is not None:
            line, end = pos[0], pos[1] or pos[0]
    except (AttributeError, IndexError, ValueError):
        pass
    fn = code.co_filename
    real = _real.get(fn)
    if real is None:
        real = _real[fn] = os.path.realpath(fn)
    return Site(real, line, end)


def user_stack(skip: int = 1, limit: int = 6) -> list[Site]:
    """User frames from the caller outwards (innermost first), at most `limit`."""
    out: list[Site] = []
    try:
        frame = sys._getframe(skip + 1)
    except ValueError:
        return out
    while frame is not None and len(out) < limit:
        if is_user_file(frame.f_code.co_filename):
            out.append(_site(frame))
        frame = frame.f_back
    return out


def user_site(skip: int = 1) -> Site | None:
    stack = user_stack(skip + 1, limit=1)
    return stack[0] if stack else None
