"""The pre-filter never changes findings (issue 7).

`Rule.requires_any` / `and_requires_any` name the tokens without which a rule cannot
fire; `engine.rules_that_may_fire` runs only the rules whose tokens are all there and
skips the parse when none is.  These tests analyse files with and without the
pre-filter and require identical findings, and require every finding's rule to pass
its own pre-filter on that file (so each rule's tokens are checked separately, not
only the union).  The real-code corpus (`benchmarks/fetch_corpus.sh`) is where a
token that is not truly necessary shows up; CI has no corpus and skips that test.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
from pathlib import Path

import pytest

from amplint import registry
from amplint.config import Config
from amplint.engine import SourceError, check_source, may_fire, prefilter_tokens, rules_that_may_fire

ROOT = Path(__file__).resolve().parent.parent
# Opt-in: the corpus run takes many minutes, so it runs only when AMPLINT_CORPUS names it.
CORPUS = Path(os.environ.get("AMPLINT_CORPUS", "/nonexistent-amplint-corpus"))
ALL = Config.all_rules()


def _findings(source: str, path: str, prefilter: bool):
    try:
        return check_source(source, path, ALL, prefilter=prefilter)
    except SourceError:
        return []  # an unparsable file has no findings either way


def _compare(path: Path) -> list[str]:
    """Problems found on one file (empty: the pre-filter is exact here)."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    problems = []
    full = _findings(source, str(path), prefilter=False)
    filtered = _findings(source, str(path), prefilter=True)
    if full != filtered:
        problems.append(f"{path}: with pre-filter {filtered!r} != without {full!r}")
    for d in full:
        rule = registry.BY_CODE[d.code]
        if not rules_that_may_fire(source, (rule,), str(path)):
            problems.append(f"{path}:{d.span.line}: {d.code} fired but its pre-filter tokens are not all in the file")
    return problems


def _fixture_files() -> list[Path]:
    return sorted(p for p in (ROOT / "fixtures").rglob("*.py"))


@pytest.mark.parametrize("path", _fixture_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_prefilter_is_exact_on_fixtures(path: Path) -> None:
    assert _compare(path) == []


def test_every_rule_declares_tokens() -> None:
    for rule in registry.ALL_RULES:
        groups = (rule.requires_any, *rule.and_requires_any)
        assert all(groups), f"{rule.code}: an empty token group would never match"
        for group in groups:
            for token in group:
                for t in token if isinstance(token, tuple) else (token,):  # a tuple: all of them
                    assert isinstance(t, (str, re.Pattern)), f"{rule.code}: {t!r}"
                    if isinstance(t, re.Pattern):
                        assert t.pattern == t.pattern.lower(), f"{rule.code}: patterns run on lowercased text"


def test_file_without_tokens_is_not_parsed(monkeypatch) -> None:
    import amplint.engine as engine

    def no_parse(*a, **k):
        raise AssertionError("libcst parse of a file no rule can fire on")

    monkeypatch.setattr(engine, "parse", no_parse)
    assert check_source("def f(x):\n    return x + 1\n", "x.py", ALL) == []
    with pytest.raises(AssertionError):
        check_source("def f(x):\n    return x + 1\n", "x.py", ALL, prefilter=False)


def test_tokens_match_case_insensitively_and_across_groups() -> None:
    rule = registry.BY_CODE["AMP201"]
    assert may_fire("loss.backward()\nwith torch.AUTOCAST('cuda'):\n    pass\n", (rule,))
    assert not may_fire("loss.backward()\n", (rule,))  # `autocast` group missing
    assert "backward" in prefilter_tokens((rule,))


def test_relative_import_package_counts(tmp_path: Path) -> None:
    # In package `torch.cuda.amp`, `from . import autocast` is the deprecated API: the
    # `cuda` and `amp` tokens come from the path, not the text.
    pkg = tmp_path / "torch" / "cuda" / "amp"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "torch", tmp_path / "torch" / "cuda", pkg):
        (d / "__init__.py").write_text("")
    source = "from . import autocast\n\nwith autocast():\n    pass\n"
    f = pkg / "user.py"
    f.write_text(source)
    rule = registry.BY_CODE["AMP401"]
    assert not may_fire(source, (rule,))
    assert may_fire(source, (rule,), str(f))
    assert _compare(f) == []


@pytest.mark.skipif(not CORPUS.is_dir(), reason="set AMPLINT_CORPUS to a real-code corpus (benchmarks/fetch_corpus.sh) to run this")
def test_prefilter_is_exact_on_real_code() -> None:
    """Every file of the corpus, analysed with and without the pre-filter (minutes)."""
    files = sorted(CORPUS.rglob("*.py"))
    assert files
    workers = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    problems: list[str] = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        for found in pool.map(_compare, files, chunksize=8):
            problems.extend(found)
    assert problems == []
