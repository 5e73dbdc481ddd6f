"""Monkeypatches with handles: every patch can be removed, and removal restores the original.

STYLE.md 2.10.9: no patch without a handle.  `remove()` is idempotent; if someone else patched
the same attribute after us, we restore theirs' inner reference by leaving their wrapper in
place but making ours a pass-through (never clobber a later patch).
"""

from __future__ import annotations

import functools
from typing import Any, Callable


class Patch:
    """Replace `owner.name` with `new`; `remove()` puts the original back."""

    def __init__(self, owner: Any, name: str, new: Any) -> None:
        self.owner, self.name = owner, name
        # NB: read from __dict__ where possible so a patched classmethod/staticmethod keeps its kind.
        self.had_own = name in getattr(owner, "__dict__", {})
        self.original = owner.__dict__[name] if self.had_own else getattr(owner, name, None)
        self.new = new
        self.active = True
        setattr(owner, name, new)

    def remove(self) -> None:
        if not self.active:
            return
        self.active = False
        current = self.owner.__dict__.get(self.name) if hasattr(self.owner, "__dict__") else None
        if current is not self.new and current is not None:
            # Someone patched over us: leave their wrapper; ours is disabled through `active`.
            return
        if self.had_own:
            setattr(self.owner, self.name, self.original)
        else:
            try:
                delattr(self.owner, self.name)
            except AttributeError:
                pass


def wrap(owner: Any, name: str, make: Callable[[Callable], Callable]) -> Patch:
    """Patch `owner.name` with `make(original)`; the wrapper calls the original when removed."""
    original = getattr(owner, name)
    holder: list[Patch] = []
    inner = make(original)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if holder and not holder[0].active:
            return original(*args, **kwargs)
        return inner(*args, **kwargs)

    wrapper.__amplint_original__ = original  # type: ignore[attr-defined]
    p = Patch(owner, name, wrapper)
    holder.append(p)
    return p


class Handle:
    """A removable callback (for hooks that are not torch handles)."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn: Callable[[], None] | None = fn

    def remove(self) -> None:
        fn, self._fn = self._fn, None
        if fn is not None:
            fn()
