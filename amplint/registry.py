"""Codes, names and prefixes -> rules.

Selection works on `rule_catalog.CATALOG` (codes, names, defaults), so configuring a run and
keying its cache import no rule; the classes (`ALL_RULES`, `BY_CODE`, `BY_NAME`, and what
`expand` / `resolve` return) are imported on first use, when a file is analysed.
"""

from __future__ import annotations

from functools import lru_cache

from amplint.rule_catalog import CATALOG, RuleEntry

_BY_CODE = {e.code: e for e in CATALOG}
_BY_NAME = {e.name: e for e in CATALOG}
PREVIEW_CODES = frozenset(e.code for e in CATALOG if e.tier == "preview")


class UnknownSelector(ValueError):
    """A code, prefix or name that matches no rule."""


def expand_codes(selector: str) -> list[str]:
    """`AMP101`, `AMP1`, `AMP`, `ALL` or a rule name -> the matching codes, in code order."""
    sel = selector.strip()
    if sel in _BY_NAME:
        return [_BY_NAME[sel].code]
    if sel.upper() in _BY_CODE:
        return [sel.upper()]
    # NB: as in Ruff, a selector selects every rule it names, opt-in ones included: an
    # opt-in rule is only off by default (a preview tier would stay behind its own switch).
    if sel.upper() == "ALL":
        return sorted(e.code for e in CATALOG)
    matched = [e for e in CATALOG if e.code.startswith(sel.upper())] if sel.upper().startswith("AMP") else []
    if not matched:
        raise UnknownSelector(f"unknown rule selector {selector!r} (expected a code like AMP101, a prefix like AMP1, or a rule name)")
    return sorted(e.code for e in matched)


def resolve_codes(select=None, ignore=(), extend_select=(), preview: bool = False,
                  then_extend_select=(), then_ignore=()) -> tuple[str, ...]:
    """Codes enabled by ruff-style selection: explicit select wins over defaults; ignore removes.

    `select` None: the default rules; an empty `select` selects nothing (as in Ruff).
    Where a code is both selected and ignored, the more specific selector wins, as in Ruff
    (`select = ["AMP401"]` with `ignore = ["AMP4"]` keeps AMP401; `select = ["AMP4"]` with
    `ignore = ["AMP401"]` drops it); on a tie the ignore wins. The defaults are weaker than
    any ignore. `then_extend_select` / `then_ignore` are a later layer (the command line's
    flags over the file): they add to and remove from what the first layer chose, the more
    specific of the two winning between them. Preview rules run only with `preview`, however
    they are selected (as in Ruff).
    """
    if select is not None:
        enabled = _strongest(select)
    else:
        enabled = {e.code: -1 for e in CATALOG if e.default_enabled}
    for code, spec in _strongest(extend_select).items():
        enabled[code] = max(enabled.get(code, -1), spec)
    chosen = _winners(enabled, _strongest(ignore))
    if then_extend_select or then_ignore:
        removed = _strongest(then_ignore)
        chosen = (chosen - set(removed)) | _winners(_strongest(then_extend_select), removed)
    if not preview:
        chosen -= PREVIEW_CODES
    return tuple(sorted(chosen))


def _strongest(selectors) -> dict[str, int]:
    """code -> the specificity of the most specific selector that names it."""
    out: dict[str, int] = {}
    for s in selectors:
        spec = _specificity(s)
        for c in expand_codes(s):
            out[c] = max(out.get(c, -1), spec)
    return out


def _winners(enabled: dict[str, int], ignored: dict[str, int]) -> set[str]:
    """The enabled codes that no ignore names as specifically (on a tie the ignore wins)."""
    return {c for c, spec in enabled.items() if c not in ignored or spec > ignored[c]}


def _specificity(selector: str) -> int:
    """How narrowly a selector names rules: `ALL` 0, a prefix its length, a code or a rule
    name the most."""
    sel = selector.strip()
    if sel in _BY_NAME or sel.upper() in _BY_CODE:
        return 100
    if sel.upper() == "ALL":
        return 0
    return len(sel)


def named_preview_codes(selectors) -> list[str]:
    """The preview rules that `selectors` name by code or name (what a run without preview
    leaves off although the user asked for it: worth a warning)."""
    out = []
    for sel in selectors:
        entry = _BY_NAME.get(sel.strip()) or _BY_CODE.get(sel.strip().upper())
        if entry is not None and entry.code in PREVIEW_CODES:
            out.append(entry.code)
    return sorted(set(out))


def rule(code: str) -> type:
    """The rule class of `code` (its module imported now, if not yet)."""
    return _load(_BY_CODE[code])


def expand(selector: str) -> list[type]:
    """`expand_codes`, as rule classes."""
    return [rule(c) for c in expand_codes(selector)]


def resolve(select=None, ignore=(), extend_select=(), preview: bool = False,
            then_extend_select=(), then_ignore=()) -> tuple[type, ...]:
    """`resolve_codes`, as rule classes."""
    return _classes(resolve_codes(select, ignore, extend_select, preview, then_extend_select, then_ignore))


@lru_cache(maxsize=256)
def _classes(codes: tuple[str, ...]) -> tuple[type, ...]:
    return tuple(rule(c) for c in codes)


@lru_cache(maxsize=None)
def _load(entry: RuleEntry) -> type:
    # NB: through the package, which imports every rule by name (no import by string on
    # the static side: tests/test_no_execution.py)
    from amplint import rules
    from amplint.project import index

    # NB: the project index reads a module's definitions for the words the rules look for in
    # imported code; it may not import the rules, so they are handed in when one is loaded
    index.take_rule_tokens(imported_tokens_of_rules)
    return getattr(rules, entry.class_name)


def imported_tokens_of_rules() -> list:
    """Every token of every rule's `imported_tokens` groups (the project index's relevance words)."""
    tokens = []
    for rule in _tables()["ALL_RULES"]:
        groups = (rule.requires_any, *rule.and_requires_any)
        for i in rule.imported_tokens:
            tokens.extend(groups[i])
    return tokens


@lru_cache(maxsize=1)
def _tables() -> dict:
    classes = tuple(_load(e) for e in CATALOG)
    return {"ALL_RULES": classes, "BY_CODE": {r.code: r for r in classes}, "BY_NAME": {r.name: r for r in classes}}


def __getattr__(name: str):
    # ALL_RULES, BY_CODE and BY_NAME import every rule: only callers that need the classes ask
    if name in ("ALL_RULES", "BY_CODE", "BY_NAME"):
        return _tables()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
