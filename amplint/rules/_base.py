"""The rule base class: owns messages, reporting, fixes and the checks every rule must pass.

A rule is a small query over the `ModuleModel`.  It never reads source text, computes
positions or parses comments: it calls `self.report(node, ...)` with format arguments
and, optionally, a fix expressed on CST nodes.  The engine turns nodes into spans and
fixes into text edits, in one place.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import ClassVar

import libcst as cst

from amplint.diagnostics import Applicability

_CODE = re.compile(r"^AMP[1-9][0-9]{2}$")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
REQUIRED_SECTIONS = ("## What it does", "## Why is this bad?", "## Example")


class FixAvailability(enum.Enum):
    NONE = "none"
    SOMETIMES = "sometimes"
    ALWAYS = "always"


# --- fix building blocks: CST-level, converted to text edits by the engine --------------


@dataclass(frozen=True, eq=False)
class Replace:
    """Replace `node` with `new` (a CST node or source text for an expression/statement)."""

    node: cst.CSTNode
    new: cst.CSTNode | str


@dataclass(frozen=True, eq=False)
class InsertBefore:
    """Insert `code` as its own line(s) before `statement`, at the statement's indentation."""

    statement: cst.CSTNode
    code: str


@dataclass(frozen=True, eq=False)
class RemoveStatement:
    """Delete a whole statement line (its trailing newline included)."""

    statement: cst.CSTNode


@dataclass(frozen=True, eq=False)
class FixSpec:
    title: str
    changes: tuple[Replace | InsertBefore | RemoveStatement, ...]
    applicability: Applicability


@dataclass(frozen=True)
class RuleOptions:
    """What the configuration tells rules (`self.options`)."""

    # `target-torch`: the oldest torch the code must run on; None when unknown (then a
    # fix may write any modern spelling).
    target_torch: tuple[int, int] | None = None


@dataclass(eq=False)
class Report:
    code: str
    message: str
    node: cst.CSTNode
    fix: FixSpec | None = None
    inner: cst.CSTNode | None = None  # the node inside a helper when reported at a call site
    notes: tuple[str, ...] = field(default=())


class Rule:
    """Base for every AMP rule; subclasses implement `check()`.

    Class attributes:
      code, name          AMPnnn and a kebab-case name that reads "allow <name>"
      message             what is wrong, a format string over `report()` keywords
      fix_title           how to fix, imperative, same keywords (None: no fix)
      fix_availability    NONE / SOMETIMES / ALWAYS; tests check it matches behaviour
      safety              applicability of the fixes this rule offers
      default_enabled     False for opt-in (noisy) rules
      requires_any        pre-filter tokens: the rule cannot fire on a file whose code (its
                          lowercased text without comments and docstrings, plus for relative
                          imports its package) contains none of them; see amplint/prefilter.py
      and_requires_any    further token groups; the file must contain one token of each as well
                          (a token: a substring, a prefilter.Word / CodeWord / Attr (the last
                          two outside string literals), a re.Pattern on the
                          lowercased text, a tuple of tokens that must all be present, or a
                          hashable object with `search(text) -> bool`, optionally marked
                          `outside_strings` to be given the code with string contents emptied)
    """

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    fix_title: ClassVar[str | None] = None
    fix_availability: ClassVar[FixAvailability] = FixAvailability.NONE
    safety: ClassVar[Applicability] = Applicability.SAFE
    default_enabled: ClassVar[bool] = True
    requires_any: ClassVar[tuple[object, ...]] = ()
    and_requires_any: ClassVar[tuple[tuple[object, ...], ...]] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__name__.startswith("_"):
            return
        if not _CODE.match(getattr(cls, "code", "")):
            raise TypeError(f"{cls.__name__}: code must look like AMP101, got {getattr(cls, 'code', None)!r}")
        if not _NAME.match(getattr(cls, "name", "")):
            raise TypeError(f"{cls.__name__}: name must be kebab-case, got {getattr(cls, 'name', None)!r}")
        doc = cls.__doc__ or ""
        missing = [s for s in REQUIRED_SECTIONS if s not in doc]
        if missing:
            raise TypeError(f"{cls.__name__} ({cls.code}): docstring lacks {', '.join(missing)}")
        if not getattr(cls, "message", None) or cls.message.endswith("."):
            raise TypeError(f"{cls.__name__}: message must be set and must not end with a period")
        if cls.fix_availability is not FixAvailability.NONE and not cls.fix_title:
            raise TypeError(f"{cls.__name__}: a rule that fixes needs a fix_title")
        if not cls.requires_any:
            raise TypeError(f"{cls.__name__}: declare requires_any tokens for the pre-filter")

    def __init__(self, model, options: RuleOptions | None = None) -> None:
        self.model = model
        self.options = options or RuleOptions()
        self.reports: list[Report] = []

    def check(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # --- reporting -----------------------------------------------------------------------
    def report(self, node: cst.CSTNode, *, fix: bool = True, changes=None, inner=None, notes=(), **fmt) -> None:
        """Report `node`; `changes` (CST edits) become a fix titled by `fix_title`."""
        message = self.message.format(**fmt)
        spec = None
        if changes and self.fix_title and fix:
            spec = FixSpec(self.fix_title.format(**fmt), tuple(changes), self.safety)
        self.reports.append(Report(self.code, message, node, spec, inner, tuple(notes)))

    def report_event(self, event, *, changes=None, **fmt) -> None:
        """Report at the call the event was reached through (a helper call site, or itself)."""
        notes = (f"via {' -> '.join(event.via)}",) if event.inlined and event.via else ()
        self.report(
            event.anchor,
            changes=changes if not event.inlined else None,
            inner=event.node if event.inlined else None,
            notes=notes,
            **fmt,
        )

    def finish(self) -> list[Report]:
        """Drop call-site reports whose inner node is already reported directly.

        A helper that holds the whole bug is reported inside the helper; the callers
        that inline it would only repeat the finding at each call site.
        """
        direct = {id(r.node) for r in self.reports if r.inner is None}
        seen: set[tuple[int, str]] = set()
        kept = []
        for r in self.reports:
            if r.inner is not None and id(r.inner) in direct:
                continue
            key = (id(r.node), r.message)
            if key in seen:
                continue
            seen.add(key)
            kept.append(r)
        return kept
