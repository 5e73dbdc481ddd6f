"""Rule documentation pages, generated from the rule docstrings (never written by hand)."""

from __future__ import annotations

import inspect


def rule_page(rule) -> str:
    """The Markdown page for one rule: title, metadata line, then its docstring."""
    doc = inspect.cleandoc(rule.__doc__ or "")
    fix = {"none": "no fix", "sometimes": "fix sometimes available", "always": "fix always available"}[rule.fix_availability.value]
    if rule.fix_availability.value != "none":
        fix += f" ({rule.safety.value})"
    default = "on by default" if rule.default_enabled else "opt-in (select it explicitly)"
    return f"# {rule.code} {rule.name}\n\n*{default}; {fix}*\n\n{doc}\n"
