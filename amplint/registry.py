"""Codes, names and prefixes -> rule classes, derived from `rules.ALL_RULES`."""

from __future__ import annotations

from amplint.rules import ALL_RULES

BY_CODE = {r.code: r for r in ALL_RULES}
BY_NAME = {r.name: r for r in ALL_RULES}


class UnknownSelector(ValueError):
    """A code, prefix or name that matches no rule."""


def expand(selector: str) -> list[type]:
    """`AMP101`, `AMP1`, `AMP`, `ALL` or a rule name -> the matching rules, in code order."""
    sel = selector.strip()
    if sel in BY_NAME:
        return [BY_NAME[sel]]
    if sel.upper() in BY_CODE:
        return [BY_CODE[sel.upper()]]
    # NB: a prefix (or ALL) leaves opt-in rules off, as flake8 does when a longer
    # default-ignore entry matches; name the full code to turn one on.
    if sel.upper() == "ALL":
        return sorted((r for r in ALL_RULES if r.default_enabled), key=lambda r: r.code)
    matched = [r for r in ALL_RULES if r.code.startswith(sel.upper())] if sel.upper().startswith("AMP") else []
    if not matched:
        raise UnknownSelector(f"unknown rule selector {selector!r} (expected a code like AMP101, a prefix like AMP1, or a rule name)")
    return sorted((r for r in matched if r.default_enabled), key=lambda r: r.code)


def resolve(select=None, ignore=(), extend_select=()) -> tuple[type, ...]:
    """Rules enabled by ruff-style selection: explicit select wins over defaults; ignore removes."""
    if select:
        chosen = {r for s in select for r in expand(s)}
    else:
        chosen = {r for r in ALL_RULES if r.default_enabled}
    chosen |= {r for s in extend_select for r in expand(s)}
    chosen -= {r for s in ignore for r in expand(s)}
    return tuple(sorted(chosen, key=lambda r: r.code))
