"""Fuzzing the checker and the fixer (issue 8, item 3).

Inputs: valid Python from hypothesmith's grammar strategy, and mutations of the
fixtures and of real files (deleted lines, swapped statements, inserted autocast and
scaler calls).  Properties: the checker never raises anything but SourceError (a parse
error with a position), no rule crashes, and `--fix --unsafe-fixes` output parses and
has nothing fixable left (or the fix was dropped and reported).

This is the bounded run (a few seconds); `benchmarks/fuzz_long.py` runs the same
properties for longer and writes its figures into BENCHMARKS.md.
"""

from __future__ import annotations

from pathlib import Path

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amplint import sources
from amplint.engine import SourceError, check_source, parse
from amplint.fixes import fix_text, is_applicable

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


def check_all(text: str, path: str = "fuzz.py"):
    """(diagnostics, crashes) with every rule and no pre-filter; SourceError propagates."""
    crashes: list = []
    found = check_source(text, path, select=["ALL"], crashes=crashes, prefilter=False)
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
        if outcome.converged:
            left = [d for d in outcome.remaining if is_applicable(d.fix, True)]
            rejected = {(d.code, d.fix.title) for d in outcome.rejected}
            assert all((d.code, d.fix.title) in rejected for d in left), left
        else:
            assert outcome.source == text  # dropped entirely
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
