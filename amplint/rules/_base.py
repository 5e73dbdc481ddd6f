"""The rule base class: owns messages, reporting, fixes and the checks every rule must pass.

A rule is a small query over the `ModuleModel`.  It never reads source text, computes
positions or parses comments: it calls `self.report(node, ...)` with format arguments
and, optionally, a fix expressed on CST nodes.  The engine turns nodes into spans and
fixes into text edits, in one place.  How to add a rule, step by step: CONTRIBUTING.md.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import ClassVar

import libcst as cst

from amplint.changes import InsertBefore, RemoveStatement, Replace
from amplint.diagnostics import Applicability
from amplint.message_text import code_in_message

# AMP0xx: meta rules about amplint's own comments (AMP001); AMP1xx-AMP9xx: see DESIGN.md.
_CODE = re.compile(r"^AMP(?:00[1-9]|0[1-9][0-9]|[1-9][0-9]{2})$")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
REQUIRED_SECTIONS = ("## What it does", "## Why is this bad?", "## Example")


class FixAvailability(enum.Enum):
    NONE = "none"
    SOMETIMES = "sometimes"
    ALWAYS = "always"


# --- fix building blocks: CST-level, converted to text edits by the engine --------------


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
    # The helpers the finding was reached through, outermost first (`train_step`, `_clip`).
    via: tuple[str, ...] = field(default=())
    # Evidence in other modules: (their ModuleModel, the node, what it is); the engine turns
    # each into a located note ("via utils.save_checkpoint (utils.py:12)").
    related: tuple[tuple[object, cst.CSTNode, str], ...] = field(default=())


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
      imported_tokens     indexes of the token groups that may be met by the code of the project
                          functions the file calls (other modules); see amplint/prefilter.py
    """

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    fix_title: ClassVar[str | None] = None
    fix_availability: ClassVar[FixAvailability] = FixAvailability.NONE
    safety: ClassVar[Applicability] = Applicability.SAFE
    default_enabled: ClassVar[bool] = True
    # One finding per reference (AMP401: each name of `from torch.cuda.amp import autocast,
    # GradScaler`): findings of one line stay apart by column.  Otherwise the engine keeps
    # one diagnostic per (path, line, code) with every reason (engine.merge_same_line).
    one_per_reference: ClassVar[bool] = False
    requires_any: ClassVar[tuple[object, ...]] = ()
    and_requires_any: ClassVar[tuple[tuple[object, ...], ...]] = ()
    # Token groups (0: requires_any, 1...: and_requires_any) that may be met by the
    # project code the file calls rather than by the file itself (AMP101's clip inside a
    # `clip_gradients` helper of utils.py).  The others must be in the file.
    imported_tokens: ClassVar[tuple[int, ...]] = ()
    # Token groups that may be met by the project files that import this one (AMP205: the
    # autocast is entered in the training loop that uses the model that applies the
    # Function).  Looking upward reads the whole project, so only for rare local shapes.
    importer_tokens: ClassVar[tuple[int, ...]] = ()
    # For a group of either: the only tokens of it that count when met in another module
    # (AMP501: an imported autocast decorator, not the word float16 in any imported utility).
    elsewhere_tokens: ClassVar[dict[int, tuple[object, ...]]] = {}

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
    def report(self, node: cst.CSTNode, *, fix: bool = True, changes=None, inner=None, notes=(), via=(), related=(),
               message: str | None = None, safety: Applicability | None = None, **fmt) -> None:
        """Report `node`; `changes` (CST edits) become a fix titled by `fix_title`.

        `message` replaces the rule's message template (a rule with a second finding
        shape, e.g. AMP106's loading side); it is formatted with the same keywords.
        `safety` lowers one fix below the rule's own (`Applicability.UNSAFE` where this
        fix's effect reaches code amplint cannot read).
        """
        fmt = {k: code_in_message(v) if isinstance(v, str) else v for k, v in fmt.items()}
        text = (message or self.message).format(**fmt)
        spec = None
        if changes and self.fix_title and fix:
            spec = FixSpec(self.fix_title.format(**fmt), tuple(changes), safety or self.safety)
        self.reports.append(Report(self.code, text, node, spec, inner, tuple(notes), tuple(via), tuple(related)))

    def report_event(self, event, *, changes=None, witnesses=(), notes=(), **fmt) -> None:
        """Report at the call the event was reached through (a helper call site, or itself).

        `witnesses` are the other events that make the finding (the scaled backward a
        clip follows).  When the event and all of them were reached through the same
        helper call, the helper holds the whole finding and its own graph reports it
        (in this module or, for a helper from another module, when that module is
        checked): the caller stays silent instead of repeating it at every call site.
        """
        if event.inlined and witnesses and all(w.inlined and w.anchor is event.anchor for w in witnesses):
            return
        via_note = (f"via {' -> '.join(event.via)}",) if event.inlined and event.via else ()
        related = ()
        home = self.model
        origin = getattr(event.scope, "model", None)
        if event.inlined and origin is not None and origin is not home:
            related = ((origin, event.node, f"via {' -> '.join(event.via)}"),)
            via_note = ()  # the engine writes the note with the place in the other module
        self.report(
            event.anchor,
            changes=changes if not event.inlined else None,
            inner=event.node if event.inlined else None,
            notes=(*via_note, *notes),
            via=event.via if event.inlined else (),
            related=related,
            **fmt,
        )

    def finish(self) -> list[Report]:
        """Drop call-site reports of a finding that a helper's own graph reports.

        A helper that holds the whole bug is reported inside the helper; the callers
        that inline it would only repeat the finding at each call site.  A report of
        the same inner node reached through a shorter chain of helpers (a suffix of
        this one's) is that helper's own report: `Trainer.train_step -> _clip` from the
        module body repeats what `train_step`'s graph found through `_clip`.
        """
        direct = {id(r.node) for r in self.reports if r.inner is None}
        chains: dict[int, list[tuple[str, ...]]] = {}
        for r in self.reports:
            if r.inner is not None:
                chains.setdefault(id(r.inner), []).append(r.via)
        seen: set[tuple[int, str]] = set()
        kept = []
        for r in self.reports:
            if r.inner is not None and id(r.inner) in direct:
                continue
            if r.inner is not None and any(
                len(other) < len(r.via) and r.via[len(r.via) - len(other):] == other for other in chains.get(id(r.inner), ())
            ):
                continue
            key = (id(r.node), r.message)
            if key in seen:
                continue
            seen.add(key)
            kept.append(r)
        return kept
