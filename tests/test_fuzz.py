"""Fuzzing the checker and the fixer (issue 8, item 3).

Inputs: valid Python from hypothesmith's grammar strategy, and mutations of the
fixtures and of real files (deleted lines, swapped statements, inserted autocast and
scaler calls).  Properties: the checker never raises anything but SourceError (a parse
error with a position), no rule crashes, and `--fix --unsafe-fixes` output parses and
has nothing fixable left (or the fix was dropped and reported).

Issue 17 widened them: every rule (the opt-in ones too), and each input also written
with other line endings (CRLF, CR, mixed), a BOM or a latin-1 coding cookie, through
check, the fixer, the diff writer and the flake8 plugin: the same findings at the same
places, the same fixes, a diff that patches into what `--fix` writes, every fix on its
finding's statement, and the pre-filter changing nothing.

This is the bounded run (seconds); `benchmarks/fuzz_long.py` runs the same
properties for longer and writes its figures into BENCHMARKS.md.
"""

from __future__ import annotations

import io
from pathlib import Path

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amplint import sources
from amplint.engine import SourceError, check_source, parse
from amplint.fixes import fix_text, is_applicable
from amplint.positions import newline_of
from amplint.registry import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(p for p in (ROOT / "fixtures").glob("AMP*/*.py") if not p.name.endswith(".fixed.py"))
# Real code: amplint's own sources.
REAL = sorted((ROOT / "amplint").rglob("*.py"))
SEEDS = [p.read_text(encoding="utf-8") for p in FIXTURES + REAL]

# Statements a mutation inserts: the AMP vocabulary the rules look for.
SNIPPETS = [
    "scaler = torch.amp.GradScaler('cuda')",
    "scaler = torch.cuda.amp.GradScaler()",
    "scaler = torch.amp.GradScaler(enabled=False)",
    "with torch.autocast('cuda', dtype=torch.float16):",
    "with torch.cuda.amp.autocast():",
    "with torch.autocast(device_type='cpu', dtype=torch.bfloat16):",
    "scaler.scale(loss).backward()",
    "loss.backward()",
    "scaler.unscale_(optimizer)",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "scaler.step(optimizer)",
    "optimizer.step()",
    "scaler.update()",
    "optimizer.zero_grad()",
    "model.half()",
    "model = model.to(torch.float16)",
    "torch.save({'model': model.state_dict(), 'opt': optimizer.state_dict()}, 'ckpt.pt')",
    "for step in range(10):",
    "if args.fp16:",
    "def train_step(model, batch, optimizer, scaler):",
    "return loss",
    "pass",
]


# Every rule, the opt-in ones too (what `ALL` selects), named one by one.
EVERY_RULE = [r.code for r in ALL_RULES]


def check_all(text: str, path: str = "fuzz.py", *, prefilter: bool = False):
    """(diagnostics, crashes) with every rule and no pre-filter; SourceError propagates."""
    crashes: list = []
    found = check_source(text, path, select=EVERY_RULE, crashes=crashes, prefilter=prefilter)
    return found, crashes


def assert_holds(text: str) -> str:
    """The properties, for one input; returns "findings", "clean" or "parse-error"."""
    try:
        found, crashes = check_all(text)
    except SourceError as exc:
        assert exc.line >= 1 and exc.reason
        return "parse-error"
    assert crashes == [], crashes[0].trace
    fixable = [d for d in found if is_applicable(d.fix, True)]
    if fixable:
        outcome = fix_text(text, lambda t: check_all(t)[0], unsafe=True)
        parse(outcome.source, "fixed.py")  # the fixed text always parses
        assert outcome.converged, "the fixes fight each other"
        # every advertised fix applies (issue 17: a `[*]` whose text cannot parse is a broken promise)
        assert not outcome.rejected, [(d.code, d.span, d.fix.title) for d in outcome.rejected]
        left = [d for d in outcome.remaining if is_applicable(d.fix, True)]
        assert not left, left
    return "findings" if found else "clean"


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


@st.composite
def mutated(draw, seeds=SEEDS):
    """A seed file with a few line-level mutations."""
    lines = draw(st.sampled_from(seeds)).splitlines(keepends=True) or ["\n"]
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "swap", "insert", "insert", "duplicate"]))
        i = draw(st.integers(0, len(lines) - 1))
        if kind == "delete" and len(lines) > 1:
            del lines[i]
        elif kind == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        else:
            snippet = draw(st.sampled_from(SNIPPETS))
            indent = _indent_of(lines[i]) if draw(st.booleans()) else draw(st.sampled_from(["", "    ", "        "]))
            body = f"\n{indent}    pass" if snippet.endswith(":") and draw(st.booleans()) else ""
            lines.insert(i, f"{indent}{snippet}{body}\n")
    return "".join(lines)


FAST = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@FAST
@given(hypothesmith.from_grammar())
def test_generated_python_never_crashes_the_checker(source: str) -> None:
    assert_holds(source)


@FAST
@given(mutated())
def test_mutated_fixtures_and_real_files(source: str) -> None:
    assert_holds(source)


@FAST
@given(st.binary(max_size=400), st.sampled_from([b"", b"\xef\xbb\xbf", b"# coding: latin-1\n", b"# coding: utf-16\n"]))
def test_arbitrary_bytes_decode_or_say_why(raw: bytes, prefix: bytes) -> None:
    try:
        text, encoding, bom = sources.decode(prefix + raw, "fuzz.py")
    except sources.UnreadableSource as exc:
        assert str(exc).startswith("fuzz.py: ")
        return
    assert_holds(text)
    # What is read can be written back byte for byte.
    assert sources.encode(text, encoding, bom) == prefix + raw


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_fixture_with_every_rule_holds(path: Path) -> None:
    assert assert_holds(path.read_text(encoding="utf-8")) in ("findings", "clean")


# --- line endings, BOM and encodings (issue 17) ------------------------------------------------
#
# The same module written with other line endings, a BOM or a coding cookie must give the same
# findings at the same places and the same fixes, through `check`, `--fix`, `--diff` and the
# flake8 plugin; every fix lands on its finding's statement; the pre-filter changes nothing.

ENDINGS = ("lf", "crlf", "cr", "mixed")
ENCODINGS = ("utf-8", "utf-8-bom", "latin-1-cookie")
_MIXED = ("\n", "\r\n", "\r")


def with_endings(text: str, kind: str) -> str:
    """`text` (LF endings) with each line ending replaced: one kind, or LF, CRLF and CR in turn."""
    lines = text.split("\n")
    if kind == "lf":
        return text
    if kind in ("crlf", "cr"):
        return ("\r\n" if kind == "crlf" else "\r").join(lines)
    out = []
    for i, line in enumerate(lines[:-1]):
        end = _MIXED[i % 3]
        if end == "\r" and not lines[i + 1] and i + 1 < len(lines) - 1 and _MIXED[(i + 1) % 3] == "\n":
            end = "\r\n"  # NB: "\r" then an empty "\n" line would be one CRLF, one line less
        out.append(line + end)
    return "".join(out) + lines[-1]


def as_lf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def encoded(text: str, kind: str) -> tuple[bytes, int] | None:
    """(file bytes, lines added in front) for an encoding variant; None if `text` cannot be written so."""
    if kind == "utf-8":
        return text.encode("utf-8"), 0
    if kind == "utf-8-bom":
        return b"\xef\xbb\xbf" + text.encode("utf-8"), 0
    try:
        return ("# -*- coding: latin-1 -*-" + newline_of(text) + text).encode("latin-1"), 1
    except UnicodeEncodeError:
        return None


def _key(d, shift: int = 0) -> tuple:
    return (d.span.line - shift, d.span.col0, d.span.end_line - shift, d.span.end_col0, d.code, d.message,
            d.fix.title if d.fix else None)


def _fixed(text: str) -> str:
    return fix_text(text, lambda t: check_all(t)[0], unsafe=True).source


def _apply_unified_diff(old: str, diff: str) -> str:
    """Apply a unified diff the way patch reads one (lines split at LF, "\\\\ No newline" markers)."""
    lines = old.split("\n")
    old_lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    out: list[str] = []
    pos = 0
    rows = diff.split("\n")[:-1] if diff else []
    i = 2 if rows else 0  # the ---/+++ headers
    while i < len(rows):
        header = rows[i]
        assert header.startswith("@@ "), header
        start = int(header.split()[1].split(",")[0][1:])
        start = start - 1 if start else 0
        out.extend(old_lines[pos:start])
        pos = start
        i += 1
        while i < len(rows) and not rows[i].startswith("@@ "):
            tag, body = rows[i][:1], rows[i][1:] + "\n"
            if i + 1 < len(rows) and rows[i + 1] == "\\ No newline at end of file":
                body = body[:-1]
                i += 1
            if tag in (" ", "-"):
                assert old_lines[pos] == body, (old_lines[pos], body)
                pos += 1
            if tag in (" ", "+"):
                out.append(body)
            i += 1
    out.extend(old_lines[pos:])
    return "".join(out)


def _statement_lines(text: str):
    """(start, end) line ranges of every statement, from libcst's own positions."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    positions = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True).resolve(PositionProvider)
    return sorted((p.start.line, p.end.line) for n, p in positions.items()
                  if isinstance(n, (cst.SimpleStatementLine, cst.BaseCompoundStatement)))


def assert_fixes_land_on_their_statements(text: str, found) -> None:
    """Each fix touches the statement its finding is in (or, inserting, starts the one after it)."""
    statements = None
    for d in found:
        if d.fix is None:
            continue
        if statements is None:
            statements = _statement_lines(text)
        around = [s for s in statements if s[0] <= d.span.line <= s[1]]
        assert around, d
        first, last = min(around, key=lambda s: s[1] - s[0])
        following = min((s[0] for s in statements if s[0] > last), default=None)
        touched = set()
        for e in d.fix.edits:
            end_line = e.end[0] - 1 if e.end[1] == 0 and e.end[0] > e.start[0] else e.end[0]
            touched.update(range(e.start[0], max(end_line, e.start[0]) + 1))
        inserts_after = all(e.start == e.end for e in d.fix.edits) and following in touched
        assert touched & set(range(first, last + 1)) or inserts_after, (d.code, d.span, d.fix, (first, last))


def assert_variants_hold(text: str, ending: str, encoding: str) -> str:
    """The properties of this section for one LF module and one variant of it."""
    try:
        base, crashes = check_all(text)
    except SourceError:
        return "parse-error"
    assert crashes == [], crashes[0].trace
    # the pre-filter changes nothing
    assert [_key(d) for d in check_all(text, prefilter=True)[0]] == [_key(d) for d in base]
    assert_fixes_land_on_their_statements(text, base)
    variant = encoded(with_endings(text, ending), encoding)
    if variant is None:
        return "not-encodable"
    raw, shift = variant
    decoded, codec, bom = sources.decode(raw, "fuzz.py")
    found, crashes = check_all(decoded)
    assert crashes == [], crashes[0].trace
    assert [_key(d, shift) for d in found] == [_key(d) for d in base]  # same places, same fixes
    assert_fixes_land_on_their_statements(decoded, found)
    fixed_variant = _fixed(decoded)
    parse(fixed_variant, "fixed.py")
    lf_fixed = _fixed(text)
    assert as_lf(fixed_variant).split("\n", shift)[-1] == lf_fixed  # --fix: the same edits, whatever the endings
    if ending != "mixed":
        assert sources.encode(fixed_variant, codec, bom) == encoded(with_endings(lf_fixed, ending), encoding)[0]
    if fixed_variant != decoded:  # --diff is a patch that gives what --fix writes
        from amplint.fixes import unified_diff

        assert _apply_unified_diff(decoded, unified_diff(decoded, fixed_variant, "a/f.py", "b/f.py")) == fixed_variant
    # flake8 reads the file with universal newlines and without the BOM
    from amplint.flake8_plugin import Flake8Plugin

    lines = io.TextIOWrapper(io.BytesIO(raw), encoding=codec.replace("utf-8", "utf-8-sig")).readlines()
    from amplint.registry import PREVIEW_CODES

    # flake8 without preview = true in [tool.amplint]: the default, stable tier
    default_on = {r.code for r in ALL_RULES if r.default_enabled and r.code not in PREVIEW_CODES}
    via_flake8 = {(line, col, message.split()[0]) for line, col, message, _ in Flake8Plugin(None, lines, "fuzz.py").run()}
    assert via_flake8 == {(d.span.line, d.span.col0, d.code) for d in found if d.code in default_on}
    return "findings" if base else "clean"


VARIANT_SETTINGS = settings(max_examples=20, deadline=None, derandomize=True,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                   HealthCheck.filter_too_much])
FIXABLE_SEEDS = [p.read_text(encoding="utf-8") for p in FIXTURES if p.name.startswith("bad_")]


@VARIANT_SETTINGS
@given(mutated(seeds=FIXABLE_SEEDS), st.sampled_from(ENDINGS), st.sampled_from(ENCODINGS))
def test_line_endings_and_encodings_change_nothing(source: str, ending: str, encoding: str) -> None:
    assert_variants_hold(source, ending, encoding)


def test_every_fixable_fixture_in_some_line_ending_and_encoding() -> None:
    """Not left to chance: each bad fixture once, the endings and encodings taking turns
    (every fixture in every variant: benchmarks/fuzz_long.py)."""
    for i, source in enumerate(FIXABLE_SEEDS):
        assert_variants_hold(source, ENDINGS[i % len(ENDINGS)], ENCODINGS[(i // len(ENDINGS)) % len(ENCODINGS)])


def test_the_variant_properties_catch_a_fix_on_the_wrong_line(monkeypatch) -> None:
    """The properties can fail: with `\\r` not counted as a line break (the defect of issue 17),
    the CR variant of a fixture is fixed differently from its LF original."""
    import re

    from amplint import positions

    source = (FIXTURES[0].parent.parent / "AMP401" / "bad_torch_alias_th.py").read_text(encoding="utf-8")
    monkeypatch.setattr(positions, "LINE_BREAK", re.compile(r"\n"))
    with pytest.raises(AssertionError):
        assert_variants_hold(source, "cr", "utf-8")
