"""Every fixture is a specification: its `# expect:` comments are exactly what it produces."""

from __future__ import annotations

from pathlib import Path

import pytest

from amplint.engine import check_source, parse
from amplint.fixes import fix_text, is_applicable
from amplint.registry import BY_CODE
from amplint.rules._base import FixAvailability
from amplint.testing import expectations, fixture_cases, fixture_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CASES = fixture_cases(FIXTURES)


def _lint(path: Path, source: str):
    return check_source(source, str(path), fixture_config(path, source))


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    found = sorted((d.span.line, d.code) for d in _lint(path, source))
    assert found == expectations(source)
    if path.name.startswith("bad_"):
        assert found, "a bad_ fixture must produce at least one finding"
    else:
        assert path.name.startswith("good_"), "fixtures are named bad_* or good_*"
        assert not [f for f in found if f[1] == path.parent.name]


@pytest.mark.parametrize("path", [p for p in CASES if p.name.startswith("bad_")], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fix_converges_and_parses(path: Path) -> None:
    """Ruff's fix checks: fixed text parses, a second run has nothing fixable, .fixed.py matches."""
    source = path.read_text(encoding="utf-8")
    code = path.parent.name
    outcome = fix_text(source, lambda text: _lint(path, text), unsafe=True)
    parse(outcome.source, str(path))
    assert outcome.converged
    assert not outcome.rejected
    assert not [d for d in outcome.remaining if is_applicable(d.fix, True)]
    expected = path.with_name(path.stem + ".fixed.py")
    if expected.exists():
        assert outcome.source == expected.read_text(encoding="utf-8")
    rule = BY_CODE[code]
    offered = any(d.fix is not None for d in _lint(path, source))
    if rule.fix_availability is FixAvailability.NONE:
        assert not offered, f"{code} declares no fix but offered one"
    if rule.fix_availability is FixAvailability.ALWAYS:
        assert all(d.fix is not None for d in _lint(path, source) if d.code == code)


def test_all_rules_over_all_fixtures_do_not_crash() -> None:
    """Smoke: every rule on every fixture, to catch crashes and cross-rule surprises."""
    crashes = []
    for path in CASES:
        check_source(path.read_text(encoding="utf-8"), str(path), select=["ALL"], crashes=crashes)
    assert crashes == []
