"""Output formats: text, json, json-lines, github, sarif, and `--statistics`.

Every format converts positions through the helpers in `amplint.diagnostics`
(`to_text`, `to_one_based`), never by adding 1 here.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import TextIO
from urllib.parse import quote

from amplint import __version__
from amplint.diagnostics import Applicability, Diagnostic, SourceError, to_location, to_one_based
from amplint.message_text import LINE_BREAKS, one_line
from amplint.positions import split_lines

FORMATS = ("text", "json", "json-lines", "github", "sarif")
# NB: amplint has no public home yet, so no finding names an address: a dead link is worse than
# none.  A rule's page is `amplint explain CODE` (and rules/CODE.md in the sources); SARIF
# carries the whole page as the rule's `help`.  Set these when the project is published.
REPO_URL: str | None = None


def rule_url(code: str) -> str | None:
    return None if REPO_URL is None else f"{REPO_URL}/blob/main/rules/{code}.md"


# `sources`: path -> the file's text, or for a notebook cell number -> the cell's text.
Sources = dict


def source_text(d: Diagnostic, sources: Sources | None) -> str | None:
    """The text a finding's rows count in: its file's, or its notebook cell's."""
    text = (sources or {}).get(d.path)
    if isinstance(text, dict):
        return text.get(d.cell)
    return text if d.cell is None else None


def source_line(d: Diagnostic, sources: Sources | None) -> str | None:
    text = source_text(d, sources)
    if text is None:
        return None
    lines = split_lines(text)  # NB: lines as the parser counts them (a lone "\r" ends one)
    return lines[d.span.line - 1].rstrip("\r\n") if 0 < d.span.line <= len(lines) else None


class _NoqaRows:
    """Ruff's `noqa_row` (where a `# noqa` for the finding goes).  The engine gives it with
    each rule's finding; for the others (AMP001's, a caller's own) one tokenization per
    text, read only as far as the findings need (a finding near the top of transformers'
    5,000-line trainer.py tokenized all of it)."""

    def __init__(self, sources: Sources | None) -> None:
        self._sources, self._ends = sources, {}

    def __call__(self, d: Diagnostic) -> int:
        from amplint.suppression import logical_line_ends, noqa_row

        if d.noqa_row is not None:
            return d.noqa_row  # the engine's, from the text it analysed
        key = (d.path, d.cell)
        reached, ends = self._ends.get(key, (0, {}))
        if d.span.line > reached:
            text = source_text(d, self._sources)
            reached = max(d.span.line, 2 * reached)
            ends = logical_line_ends(text, until=reached) if text is not None else {}
            self._ends[key] = (reached, ends)
        return noqa_row(d.span.line, ends)


# --- text --------------------------------------------------------------------------------

# What str.splitlines() ends a line at (a reader of the output may split there).
def escape_breaks(text: str) -> str:
    """A path (or other name that must stay exact) with its line breaks spelt as escapes (`\\n`)."""
    return text.translate(_ESCAPES) if any(c in text for c in LINE_BREAKS) else text


_ESCAPES = {ord(c): repr(c)[1:-1] for c in LINE_BREAKS}


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal; NO_COLOR turns it off, FORCE_COLOR on (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return stream_is_tty(stream)


def _colour(enabled: bool):
    def paint(text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if enabled else text

    return paint


def shows_fix_marker(d: Diagnostic, unsafe_fixes: bool = False) -> bool:
    """ruff's `[*]`: the fix is one that `--fix` would apply with the current flags."""
    return d.fix is not None and (unsafe_fixes or d.fix.applicability is Applicability.SAFE)


def format_text(diagnostics: list[Diagnostic], sources: dict[str, str] | None = None, *, colour: bool = False,
                show_fixes: bool = False, unsafe_fixes: bool = False) -> str:
    """ruff-like: `path:row:col: CODE message`, then the source line with a caret under the span."""
    paint = _colour(colour)
    out = []
    for d in diagnostics:
        fixable = " [*]" if shows_fix_marker(d, unsafe_fixes) else ""
        out.append(f"{paint(escape_breaks(d.path), '1')}:{to_location(d)}: {paint(d.code, '1;31')}{fixable} {one_line(d.message)}")
        line = source_line(d, sources)
        if line is not None:
            end = d.span.end_col0 if d.span.end_line == d.span.line else len(line.rstrip())
            # Keep tabs so the caret lines up under tab-indented code.
            pad = "".join(ch if ch == "\t" else " " for ch in line[: d.span.col0])
            out.append(f"  {d.span.line:>4} | {line}")
            out.append(f"       | {pad}{paint('^' * max(end - d.span.col0, 1), '31')}")
        if show_fixes and d.fix is not None:
            note = "" if d.fix.applicability is Applicability.SAFE else " (unsafe: needs --unsafe-fixes)"
            out.append(f"       = help: {one_line(d.fix.title)}{note}")
        for note in d.notes:
            out.append(f"       = note: {one_line(note)}")
    return "\n".join(out)


def summary(remaining: int, fixed: int, fixable: int, hidden_unsafe: int, unchecked: int = 0) -> str:
    """The closing line(s) of text output, in Ruff's words: `Found 5 errors (4 fixed, 1 remaining).`"""
    if not remaining and not fixed and unchecked:
        # Never "All checks passed!" next to error lines: some files were not checked at all.
        return f"No findings, but {unchecked} path{'s' if unchecked != 1 else ''} could not be checked (see the errors above)."
    total = remaining + fixed
    if fixed:
        parts = [f"Found {total} error{'s' if total != 1 else ''} ({fixed} fixed, {remaining} remaining)."]
    elif remaining:
        parts = [f"Found {remaining} error{'s' if remaining != 1 else ''}."]
    else:
        parts = ["All checks passed!"]
    if fixable:
        hidden = f" ({hidden_unsafe} hidden fix{'es' if hidden_unsafe != 1 else ''} can be enabled with the `--unsafe-fixes` option)" if hidden_unsafe else ""
        parts.append(f"[*] {fixable} fixable with the `--fix` option{hidden}.")
    elif hidden_unsafe:
        parts.append(f"No fixes available ({hidden_unsafe} hidden fix{'es' if hidden_unsafe != 1 else ''} can be enabled with the `--unsafe-fixes` option).")
    return "\n".join(parts)


def fix_only_summary(fixed: int) -> str:
    """`--fix-only` reports what it fixed, not what is left (Ruff's wording); empty when nothing was."""
    return f"Fixed {fixed} error{'s' if fixed != 1 else ''}." if fixed else ""


# --- files that were not analysed ---------------------------------------------------------

# Not a rule: the file was not analysed (the flake8 plugin reports the same code).  The
# machine-readable formats carry it with the findings, so that a run with --exit-zero (a
# code-scanning job) still shows which files it could not check; text prints it on stderr.
NOT_ANALYSED = "AMP000"


def not_analysed_message(e: SourceError) -> str:
    return f"amplint did not analyse this file: {e.reason.removeprefix('not analysed: ')}"


def _not_analysed_json(e: SourceError) -> dict:
    """A Ruff-shaped row (as Ruff's for a file it cannot parse: no fix, no url) for a file not analysed."""
    at = to_one_based(e.line, e.col0)
    return {
        "cell": None, "code": NOT_ANALYSED, "end_location": at, "filename": e.path, "fix": None, "location": at,
        "message": not_analysed_message(e), "noqa_row": None, "notes": [], "related": [], "url": None,
    }


# --- json / json-lines -------------------------------------------------------------------


def to_json_obj(d: Diagnostic, noqa_row=None) -> dict:
    """Ruff's JSON keys, in Ruff's (alphabetical) order, 1-based rows and columns.

    `cell` is the notebook cell (1-based) or null; in a notebook, rows count within the
    cell.  `noqa_row` is the row where a `# noqa` for the finding goes (the last row of
    its statement); `url` the rule's page.
    """
    return {
        "cell": d.cell,
        "code": d.code,
        "end_location": to_one_based(d.span.end_line, d.span.end_col0),
        "filename": d.path,
        "fix": None
        if d.fix is None
        else {
            "applicability": d.fix.applicability.value,
            "edits": [
                {
                    "content": e.content,
                    "end_location": to_one_based(*e.end),
                    "location": to_one_based(*e.start),
                    **({"cell": e.cell} if e.cell is not None else {}),  # a notebook: rows count within that cell
                }
                for e in d.fix.edits
            ],
            "message": d.fix.title,
        },
        "location": to_one_based(d.span.line, d.span.col0),
        "message": d.message,
        "noqa_row": noqa_row(d) if noqa_row is not None else d.span.line,
        "notes": list(d.notes),  # amplint's own: facts about the finding
        "related": [  # amplint's own: evidence in other modules (SARIF relatedLocations)
            {
                "end_location": to_one_based(r.span.end_line, r.span.end_col0),
                "filename": r.path,
                "location": to_one_based(r.span.line, r.span.col0),
                "message": r.message,
            }
            for r in d.related
        ],
        "url": rule_url(d.code),
    }


def format_json(diagnostics: list[Diagnostic], sources: Sources | None = None, errors=()) -> str:
    """`errors`: files not analysed (SourceError), one AMP000 row each, before the findings."""
    rows = _NoqaRows(sources)
    return json.dumps([*map(_not_analysed_json, errors), *(to_json_obj(d, rows) for d in diagnostics)], indent=2)


def format_json_lines(diagnostics: list[Diagnostic], sources: Sources | None = None, errors=()) -> str:
    """One compact JSON object per line: streams well into `jq -c` and log shippers."""
    rows = _NoqaRows(sources)
    objs = [*map(_not_analysed_json, errors), *(to_json_obj(d, rows) for d in diagnostics)]
    return "\n".join(json.dumps(o, separators=(",", ":")) for o in objs)


# --- GitHub workflow annotations ---------------------------------------------------------


def _gh_data(text: str) -> str:
    # NB: %0A is GitHub's own line break inside one annotation; the other characters that
    # str.splitlines() breaks at are spelt as escapes, so each annotation stays one line
    return escape_breaks(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(diagnostics: list[Diagnostic], errors=()) -> str:
    """`::error file=...,line=...,col=...::message` lines that GitHub Actions turns into annotations.

    `errors`: files not analysed (SourceError), an AMP000 annotation each."""
    out = []
    for e in errors:
        start = to_one_based(e.line, e.col0)
        props = ",".join(f"{k}={_gh_property(str(v))}" for k, v in (
            ("title", f"amplint ({NOT_ANALYSED})"), ("file", e.path), ("line", start["row"]), ("col", start["column"])))
        out.append(f"::error {props}::{_gh_data(not_analysed_message(e))}")
    for d in diagnostics:
        start = to_one_based(d.span.line, d.span.col0)
        end = to_one_based(d.span.end_line, d.span.end_col0)
        props = ",".join(
            f"{k}={_gh_property(str(v))}"
            for k, v in (
                ("title", f"amplint ({d.code})" if d.cell is None else f"amplint ({d.code}, cell {d.cell})"),
                ("file", d.path),
                ("line", start["row"]),
                ("col", start["column"]),
                ("endLine", end["row"]),
                ("endColumn", end["column"]),
            )
        )
        out.append(f"::error {props}::{_gh_data(f'{to_location(d)}: {d.code} {d.message}')}")
    return "\n".join(out)


# --- SARIF 2.1.0 -------------------------------------------------------------------------

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def repository_root(start: Path | None = None) -> Path:
    """The work tree holding `start` (default: the working directory), else `start` itself.

    SARIF URIs are relative to it (`%SRCROOT%`), as code scanning resolves them against
    the checkout, whichever directory amplint ran in.
    """
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / ".git").exists():
            return d
    return here


def fingerprint(d: Diagnostic, uri: str, line_text: str | None, occurrence: int) -> str:
    """Stable across commits: the rule, the file, the finding's line without its whitespace
    (not its number, which moves when code above it changes), and which occurrence of
    that same triple it is."""
    import hashlib

    text = "".join((line_text or "").split())
    return hashlib.sha256(f"{d.code}\0{uri}\0{text}\0{occurrence}".encode()).hexdigest()[:32]


def _artifact(path: str, root: Path) -> dict:
    """A URI relative to %SRCROOT% (the repository root) when possible, else an absolute file URI."""
    p = Path(path)
    try:
        rel = p.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return {"uri": p.resolve().as_uri()}
    # NB: bytes: a file name that is not UTF-8 (surrogate escapes) is percent-encoded as it is on disk
    return {"uri": quote(os.fsencode(rel.as_posix())), "uriBaseId": "%SRCROOT%"}


def _region(start: dict, end: dict) -> dict:
    return {"startLine": start["row"], "startColumn": start["column"], "endLine": end["row"], "endColumn": end["column"]}


def sarif_rule(rule) -> dict:
    from amplint.docs import rule_page, summary_line

    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": summary_line(rule)},
        "fullDescription": {"text": rule_page(rule)},
        "help": {"text": rule_page(rule), "markdown": rule_page(rule)},
        **({"helpUri": rule_url(rule.code)} if rule_url(rule.code) else {}),
        "defaultConfiguration": {"enabled": bool(rule.default_enabled), "level": "error"},
        "properties": {
            "tags": ["mixed-precision", "pytorch", "correctness"],
            "fix": rule.fix_availability.value,
            "precision": "high" if rule.default_enabled else "medium",
        },
    }


def to_sarif(diagnostics: list[Diagnostic], root: Path | None = None, sources: Sources | None = None,
             errors=()) -> dict:
    """A SARIF 2.1.0 log: one run, every rule's metadata, one result per finding.

    `root`: what artifact URIs are relative to (default: the repository root);
    `sources`: the checked texts, for each result's `partialFingerprints`;
    `errors`: files not analysed (SourceError): the run's invocation says it did not succeed,
    with a `toolExecutionNotifications` entry for each (what code scanning shows as tool errors).
    """
    from amplint.registry import ALL_RULES

    root = root or repository_root()
    rules = sorted(ALL_RULES, key=lambda r: r.code)
    index = {r.code: i for i, r in enumerate(rules)}
    results = []
    seen: Counter = Counter()
    for d in diagnostics:
        artifact = _artifact(d.path, root)
        location = {
            "physicalLocation": {
                "artifactLocation": artifact,
                "region": _region(to_one_based(d.span.line, d.span.col0), to_one_based(d.span.end_line, d.span.end_col0)),
            }
        }
        if d.cell is not None:  # a notebook: the region counts lines within this cell
            location["message"] = {"text": f"cell {d.cell}"}
        line_text = source_line(d, sources)
        key = (d.code, artifact["uri"], "".join((line_text or "").split()))
        result = {
            "ruleId": d.code,
            "level": "error",
            "message": {"text": d.message},
            "locations": [location],
            "partialFingerprints": {"amplint/v1": fingerprint(d, artifact["uri"], line_text, seen[key])},
        }
        seen[key] += 1
        if d.cell is not None:
            result["properties"] = {"cell": d.cell}
        if d.code in index:
            result["ruleIndex"] = index[d.code]
        if d.related:
            # Evidence in another module (the helper that saves no scaler state).
            result["relatedLocations"] = [
                {
                    "id": i,
                    "physicalLocation": {
                        "artifactLocation": _artifact(r.path, root),
                        "region": _region(to_one_based(r.span.line, r.span.col0), to_one_based(r.span.end_line, r.span.end_col0)),
                    },
                    "message": {"text": r.message},
                }
                for i, r in enumerate(d.related)
            ]
        # NB: a SARIF replacement cannot name a notebook cell: a fix that changes other cells
        # than its finding's is left out (its rows would land in the finding's cell).
        if d.fix is not None and all(e.cell in (None, d.cell) for e in d.fix.edits):
            result["fixes"] = [
                {
                    "description": {"text": d.fix.title},
                    "artifactChanges": [
                        {
                            "artifactLocation": location["physicalLocation"]["artifactLocation"],
                            "replacements": [
                                {
                                    "deletedRegion": _region(to_one_based(*e.start), to_one_based(*e.end)),
                                    "insertedContent": {"text": e.content},
                                }
                                for e in d.fix.edits
                            ],
                        }
                    ],
                    "properties": {"applicability": d.fix.applicability.value},
                }
            ]
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "amplint",
                        "version": __version__,
                        "semanticVersion": __version__,
                        **({"informationUri": REPO_URL} if REPO_URL else {}),
                        "rules": [sarif_rule(r) for r in rules],
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": root.resolve().as_uri() + "/"}},
                # libcst columns count code points, not UTF-16 units (SARIF's default).
                "columnKind": "unicodeCodePoints",
                "invocations": [_sarif_invocation(errors, root)],
                "results": results,
            }
        ],
    }


def _sarif_invocation(errors, root: Path) -> dict:
    notes = [
        {
            "level": "error",
            "message": {"text": not_analysed_message(e)},
            "descriptor": {"id": NOT_ANALYSED},
            "locations": [{"physicalLocation": {
                "artifactLocation": _artifact(e.path, root),
                "region": {"startLine": max(e.line, 1), "startColumn": e.col0 + 1},
            }}],
        }
        for e in errors
    ]
    invocation: dict = {"executionSuccessful": not notes}
    if notes:
        invocation["toolExecutionNotifications"] = notes
    return invocation


def format_sarif(diagnostics: list[Diagnostic], root: Path | None = None, sources: Sources | None = None,
                 errors=()) -> str:
    return json.dumps(to_sarif(diagnostics, root, sources, errors), indent=2)


# --- statistics --------------------------------------------------------------------------


def statistics(diagnostics: list[Diagnostic], unsafe_fixes: bool = False) -> list[dict]:
    """Counts per code, most frequent first (ruff's `--statistics`); `fixable`: all fixable by --fix."""
    from amplint.registry import BY_CODE

    counts = Counter(d.code for d in diagnostics)
    fixable = Counter(d.code for d in diagnostics if shows_fix_marker(d, unsafe_fixes))
    rows = []
    for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        rule = BY_CODE.get(code)
        rows.append({"code": code, "name": rule.name if rule else "", "count": n, "fixable": fixable[code] == n})
    return rows


# `--statistics` prints counts, not findings: formats made for findings cannot carry them.
STATISTICS_FORMATS = ("text", "json", "json-lines")


def format_statistics(diagnostics: list[Diagnostic], fmt: str = "text", unsafe_fixes: bool = False) -> str:
    if fmt not in STATISTICS_FORMATS:
        raise ValueError(f"--statistics cannot be written as {fmt}")
    rows = statistics(diagnostics, unsafe_fixes)
    if fmt == "json":
        return json.dumps(rows, indent=2)
    if fmt == "json-lines":
        return "\n".join(json.dumps(r, separators=(",", ":")) for r in rows)
    width = max((len(str(r["count"])) for r in rows), default=1)
    return "\n".join(f"{r['count']:>{width}}\t{r['code']}\t{'[*] ' if r['fixable'] else '    '}{r['name']}" for r in rows)


# --- dispatch ----------------------------------------------------------------------------


def render(fmt: str, diagnostics: list[Diagnostic], *, sources=None, colour=False, show_fixes=False,
           unsafe_fixes=False, root: Path | None = None, errors=()) -> str:
    """`errors`: files not analysed (SourceError); every format but text carries them (text
    prints them on stderr, where the CLI puts them)."""
    if fmt == "json":
        return format_json(diagnostics, sources, errors)
    if fmt == "json-lines":
        return format_json_lines(diagnostics, sources, errors)
    if fmt == "github":
        return format_github(diagnostics, errors)
    if fmt == "sarif":
        return format_sarif(diagnostics, root, sources, errors)
    return format_text(diagnostics, sources, colour=colour, show_fixes=show_fixes, unsafe_fixes=unsafe_fixes)


def stream_is_tty(stream: TextIO = sys.stdout) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
