"""The pre-filter never changes findings (issue 7).

`Rule.requires_any` / `and_requires_any` name the tokens without which a rule cannot
fire; `prefilter.rules_that_may_fire` runs only the rules whose tokens are all there and
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
from amplint.engine import SourceError, check_source
from amplint.prefilter import Attr, Word, code_text, may_fire, prefilter_tokens, rules_that_may_fire

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
                    # a substring, a Word/Attr, a pattern, or a rule's own token object
                    assert isinstance(t, str) or callable(getattr(t, "search", None)), f"{rule.code}: {t!r}"
                    hash(t)  # evaluated once per file and token: tokens are memo keys
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


# --- the code text: what stage 2 reads --------------------------------------------------------


def test_code_text_drops_comments_and_docstrings_only() -> None:
    source = (
        '"""Module docstring: GradScaler, float16, -1e9."""\n'
        "import torch  # autocast in a comment\n"
        'x = "# not a comment: scaler"\n'
        "def f():\n"
        "    r'''A raw docstring: half.'''\n"
        "    y = (\n"
        '        "an argument string, kept: autocast"\n'
        "    )\n"
        "    z = \\\n"
        '        "the value of z, kept: fp16"\n'
        "    s = f\"{a['#']} kept\"  # gone\n"
        "    return '''a returned string, kept: # and 1e9'''\n"
    )
    code = code_text(source)
    assert "Module docstring" not in code and "A raw docstring" not in code
    assert "comment" not in code.replace("not a comment", "") and "# gone" not in code
    for kept in ('"# not a comment: scaler"', "an argument string, kept", "the value of z, kept",
                 "f\"{a['#']} kept\"", "a returned string, kept: # and 1e9", "import torch"):
        assert kept in code, kept


def test_code_text_handles_crlf_and_unterminated_text() -> None:
    assert code_text('"""doc"""\r\nx = 1  # c\r\n') == ' \r\nx = 1  \r\n'
    assert "y" in code_text("x = '''unterminated\ny = 1\n")  # a syntax error: nothing is lost


def test_words_and_attributes_need_whole_identifiers() -> None:
    assert Word("function").search("class f(torch.autograd.function):")
    assert not Word("function").search("import torch.nn.functional as f")
    assert Attr("scale").search("scaler . scale(loss)") and Attr("scale").search("s.\\\n    scale(l)")
    assert not Attr("scale").search("attention(q, k, scale=scale)")
    assert not Word("unscale_").search("unscale_lora_layers(model)")


def test_reduced_dtype_tokens_cover_every_spelling_the_analysis_knows() -> None:
    from amplint.analysis.torch_api import DTYPE_STRINGS, FP16_DTYPE_TOKENS, HALF_CAST_METHODS, HALF_DTYPES, REDUCED_DTYPE_TOKENS

    spellings = [q.rsplit(".", 1)[-1] for q in HALF_DTYPES]
    spellings += [f'"{s}"' for s, d in DTYPE_STRINGS.items() if d in ("float16", "bfloat16")]
    spellings += [f".{m}()" for m in HALF_CAST_METHODS]
    rule = type("R", (), {"requires_any": REDUCED_DTYPE_TOKENS, "and_requires_any": ()})
    for spelling in [*spellings, '"\\x31\\x36"']:
        assert may_fire(f"x = {spelling}\n", (rule,)), spelling
    assert not may_fire('x = "float"  # 16, half\n', (rule,))
    fp16 = type("R", (), {"requires_any": FP16_DTYPE_TOKENS, "and_requires_any": ()})
    for spelling in [q.rsplit(".", 1)[-1] for q, d in HALF_DTYPES.items() if d == "float16"]:
        assert may_fire(f"x = torch.{spelling}\n", (fp16,)), spelling
    for s, d in DTYPE_STRINGS.items():
        assert may_fire(f'x = "{s}"\n', (fp16,)) is (d == "float16"), s
    assert may_fire("model.half()\n", (fp16,)) and not may_fire("model.bfloat16()\n", (fp16,))


def test_optimizer_tokens_cover_the_packages_and_factories() -> None:
    from amplint.analysis.casts import _OPTIMIZER_FACTORY
    from amplint.analysis.torch_api import OPTIMIZER_PACKAGES, OPTIMIZER_TOKENS

    rule = type("R", (), {"requires_any": OPTIMIZER_TOKENS, "and_requires_any": ()})
    for package in OPTIMIZER_PACKAGES:
        assert may_fire(f"import {package}Adam\n", (rule,)), package
    factories = ["create_optimizer", "get_optim_and_scheduler", "_build_optimizers_and_schedulers", "configure_optimizers"]
    for name in factories:
        assert _OPTIMIZER_FACTORY.match(name) and may_fire(f"x = {name}(m)\n", (rule,)), name
    assert not may_fire("import optimum\nbest = optimal(x)\n", (rule,))


def test_amp501_number_token_matches_exactly_the_float_literals_beyond_fp16() -> None:
    """`number_of` reads float literals; the token passes exactly those it finds out of range."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    import libcst as cst

    from amplint.analysis.precision import number_of, overflows_fp16

    (number,) = [t for t in registry.BY_CODE["AMP501"].requires_any if type(t).__name__ == "_OverflowingFloat"]
    digits = st.text("0123456789", min_size=1, max_size=8)

    @st.composite
    def float_literals(draw) -> str:
        whole, frac = draw(digits), draw(st.one_of(st.just(""), digits))
        text = draw(st.sampled_from([f"{whole}.{frac}", f".{whole}", f"{whole}"]))
        if draw(st.booleans()) or "." not in text:
            text += draw(st.sampled_from(["e", "E"])) + draw(st.sampled_from(["", "+", "-"])) + draw(digits)
        if draw(st.booleans()) and len(whole) > 1:
            text = text.replace(whole, whole[0] + "_" + whole[1:], 1)
        return text

    @settings(max_examples=400, deadline=None)
    @given(float_literals())
    def check(literal: str) -> None:
        try:
            node = cst.parse_expression(literal)
        except cst.ParserSyntaxError:
            return
        assert number.search(f"x = -{literal.lower()}") == overflows_fp16(number_of(node)), literal

    check()


def test_code_text_without_strings_keeps_f_strings_which_hold_code() -> None:
    source = 'url = "see pull/12619#issue-3606633695."\nmsg = f"{x.masked_fill(m, -1e9)}"\ny = rb\'1e9\'\n'
    bare = code_text(source, strings=False)
    assert "3606633695" not in bare and "1e9'" not in bare
    assert 'f"{x.masked_fill(m, -1e9)}"' in bare
    rule = registry.BY_CODE["AMP501"]
    assert not may_fire('import torch\nx = torch.zeros(3).half()\nx.masked_fill(m, 0)\nu = "3606633695."\n', (rule,))
    assert may_fire("import torch\nx = torch.zeros(3).half()\nx.masked_fill(m, -3606633695.)\n", (rule,))
