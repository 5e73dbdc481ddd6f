"""Applying fixes to text: non-overlapping edits, repeated until nothing fixable is left.

A fix is only kept if the text it produces still parses; a fix that breaks the parse
is dropped and reported (`FixOutcome.rejected`), never written.  Fixes that do not
converge within MAX_PASSES are all dropped (`converged=False`, the original text kept).
Edits carry their final text (amplint/edits.py chose each added line's ending); offsets
come from `positions.LineIndex`, which counts lines as the parser does.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from amplint.diagnostics import Applicability, Diagnostic, Fix
from amplint.positions import LineIndex

MAX_PASSES = 10


@dataclass
class FixOutcome:
    source: str
    applied: list[Diagnostic] = field(default_factory=list)
    rejected: list[Diagnostic] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)
    converged: bool = True


def is_applicable(fix: Fix | None, unsafe: bool) -> bool:
    return fix is not None and (unsafe or fix.applicability is Applicability.SAFE)


def apply_fixes(source: str, fixes: list[Fix]) -> tuple[str, list[Fix]]:
    """Apply every fix whose edits do not overlap an earlier accepted one."""
    index = LineIndex(source)

    def offset(pos: tuple[int, int]) -> int:
        return index.offset(*pos)

    accepted: list[Fix] = []
    taken: list[tuple[int, int]] = []
    seen_edits: set = set()
    edits: list[tuple[int, int, str]] = []
    for fix in sorted(fixes, key=lambda f: f.edits[0].start if f.edits else (0, 0)):
        if fix.edits in seen_edits:
            accepted.append(fix)  # the same fix shared by several diagnostics
            continue
        ranges = [(offset(e.start), offset(e.end)) for e in fix.edits]
        if any(_overlaps(r, t) for r in ranges for t in taken):
            continue
        seen_edits.add(fix.edits)
        taken.extend(ranges)
        edits.extend((a, b, e.content) for (a, b), e in zip(ranges, fix.edits))
        accepted.append(fix)
    parts = []
    end = len(source)
    for a, b, content in sorted(edits, key=lambda t: (t[0], t[1]), reverse=True):
        parts.append(source[b:end])
        parts.append(content)
        end = a
    parts.append(source[:end])
    return "".join(reversed(parts)), accepted


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    if a[0] == a[1] and b[0] == b[1]:
        return a[0] == b[0]  # two insertions at one point: order would be ambiguous
    return a[0] < b[1] and b[0] < a[1] or (a[0] == a[1] and b[0] < a[0] < b[1]) or (b[0] == b[1] and a[0] < b[0] < a[1])


def _needs_python_312(source: str) -> bool:
    """The original already needs Python 3.12 (or does not parse: nothing to hold the fix to)."""
    from amplint.engine import SourceError, parse
    from amplint.python_versions import needs_python_312

    try:
        return needs_python_312(parse(source, "<fix>"))
    except SourceError:
        return True


def fix_text(source: str, lint, *, unsafe: bool = False) -> FixOutcome:
    """Fix repeatedly: `lint(text) -> diagnostics`; stops when nothing fixable is left.

    A fix is kept only if its text parses, here and on every Python the original parsed
    on (python_versions.py: a fix run under 3.12 must not write 3.12-only f-strings)."""
    from amplint.engine import SourceError, parse
    from amplint.python_versions import needs_python_312

    outcome = FixOutcome(source)
    current = source
    rejected_titles: set[tuple[str, str]] = set()
    needs_312 = _needs_python_312(source)

    def parses(text: str) -> bool:
        """The text parses here, and on every Python the original parsed on."""
        try:
            module = parse(text, "<fix>")
        except SourceError:
            return False
        return needs_312 or not needs_python_312(module)

    for _ in range(MAX_PASSES):
        diagnostics = lint(current)
        fixable = [
            d for d in diagnostics if is_applicable(d.fix, unsafe) and (d.code, d.fix.title) not in rejected_titles
        ]
        if not fixable:
            outcome.remaining = diagnostics
            outcome.source = current
            return outcome
        candidate, accepted = apply_fixes(current, [d.fix for d in fixable])
        if not parses(candidate):
            # Find the culprit(s) one by one; keep the ones that parse on their own.
            candidate, accepted = current, []
            for d in fixable:
                trial, ok = apply_fixes(candidate, [d.fix])
                if not parses(trial):
                    outcome.rejected.append(d)
                    rejected_titles.add((d.code, d.fix.title))
                    continue
                candidate = trial
                accepted.extend(ok)
                break  # positions of the rest are stale now; re-lint
        outcome.applied.extend(d for d in fixable if d.fix in accepted)
        if candidate == current:
            outcome.remaining = diagnostics
            outcome.source = current
            return outcome
        current = candidate
    # Still something to fix after MAX_PASSES: the fixes fight each other.  Nothing is
    # kept (a half-applied set is not something a user asked for); the caller reports it.
    outcome.converged = False
    outcome.applied = []
    outcome.source = source
    outcome.remaining = lint(source)
    return outcome


NO_NEWLINE_MARKER = "\\ No newline at end of file\n"


def unified_diff(old: str, new: str, fromfile: str, tofile: str) -> str:
    """`old` -> `new` as a unified diff that `git apply` and `patch` accept.

    Lines are split at "\\n" only, as git and patch read a diff (not as the parser counts
    them): a "\\r" stays inside its line, so CR-only and mixed files round-trip exactly.
    A last line without "\\n" is followed by git's "\\ No newline at end of file"; without
    it the next line of the output (another file's header) would be glued onto it.
    """
    out = []
    for line in difflib.unified_diff(_lf_lines(old), _lf_lines(new), fromfile=fromfile, tofile=tofile):
        out.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE_MARKER)
    return "".join(out)


def _lf_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
