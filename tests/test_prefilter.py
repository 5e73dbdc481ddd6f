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

from amplint import registry, unused_noqa
from amplint.config import Config
from amplint.engine import SourceError, check_source
from amplint.prefilter import Attr, Word, code_text, may_fire, prefilter_tokens, rules_that_may_fire
from amplint.project.index import for_path as project_for

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
        if d.code == unused_noqa.CODE:
            continue  # AMP001 reads comments, which the code text drops: the engine runs it after the rest, unfiltered
        rule = registry.BY_CODE[d.code]
        # The tokens may sit in the project files it imports (a clip inside a helper).
        if not rules_that_may_fire(source, (rule,), str(path), project=project_for(str(path))):
            problems.append(f"{path}:{d.span.line}: {d.code} fired but its pre-filter tokens are neither in the file nor in what it imports")
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
    from amplint.analysis.casts import OPTIMIZER_FACTORY, OPTIMIZER_TOKENS
    from amplint.analysis.torch_api import OPTIMIZER_PACKAGES

    rule = type("R", (), {"requires_any": OPTIMIZER_TOKENS, "and_requires_any": ()})
    for package in OPTIMIZER_PACKAGES:
        assert may_fire(f"import {package}Adam\n", (rule,)), package
    factories = ["create_optimizer", "get_optim_and_scheduler", "_build_optimizers_and_schedulers", "configure_optimizers"]
    for name in factories:
        assert OPTIMIZER_FACTORY.match(name) and may_fire(f"x = {name}(m)\n", (rule,)), name
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


def test_f_strings_keep_their_fields_only() -> None:
    """An f-string's text is a message like any string's; its fields are code."""
    bare = code_text('log(f"use torch.autocast, not {x.masked_fill(m, -1e9)!r:>{w}} {{1e9}}")\n', strings=False)
    assert "autocast" not in bare and "{{1e9}}" not in bare
    assert "{x.masked_fill(m, -1e9)!r:>{w}}" in bare
    # a field that holds a quote is kept whole with its text (keeping more only passes more)
    assert code_text("f\"autocast {d['k']}\"\n", strings=False) == "f\"autocast {d['k']}\"\n"
    # a 3.12 f-string nesting its own quote splits wrongly in this lexer: the file keeps
    # its strings rather than lose the code after the split
    nested = 'y = f"{d["k"]} {x.masked_fill(m, -1e9)}"\nz = "text"\n'
    assert code_text(nested, strings=False) == code_text(nested)
    assert "x.masked_fill(m, -1e9)" in code_text(nested, strings=False)


def test_code_words_and_attributes_are_not_read_in_strings() -> None:
    rule = registry.BY_CODE["AMP201"]
    message = 'loss.backward()\nwarn("wrap the forward in torch.autocast")\nwarn(f"{x} see torch.autocast")\n'
    assert not may_fire(message, (rule,))
    assert may_fire('loss.backward()\nwith torch.autocast("cuda"):\n    pass\n', (rule,))
    assert may_fire('loss.backward()\nctx = f"{torch.autocast}"\n', (rule,))  # a field is code
    step = registry.BY_CODE["AMP202"]
    assert not may_fire('with torch.autocast("cuda"):\n    print("call optimizer.step() after")\n', (step,))


def test_half_is_a_word_and_bfloat16_is_not_float16() -> None:
    amp301, amp501 = registry.BY_CODE["AMP301"], registry.BY_CODE["AMP501"]
    train = "opt = torch.optim.SGD(model.parameters())\n"
    assert not may_fire(f"def rotate_half(x):\n    half_dim = 2\n{train}", (amp301,))
    for spelling in ("model.half()", "x = torch.half", 'dtype = "half"', "from torch import half as h"):
        assert may_fire(f"{spelling}\n{train}", (amp301,)), spelling
    masked = "y = x.masked_fill(m, -1e9)\n"
    assert not may_fire(f"if x.dtype == torch.bfloat16:\n    pass\n{masked}", (amp501,))
    assert may_fire(f"if x.dtype == torch.float16:\n    pass\n{masked}", (amp501,))


def test_optimizer_token_wants_a_package_part_or_a_factory() -> None:
    from amplint.analysis.casts import OPTIMIZER_TOKENS

    rule = type("R", (), {"requires_any": OPTIMIZER_TOKENS, "and_requires_any": ()})
    assert not may_fire("self.optimizer.step()\noptimizer_cls = get_optimizer_cls_and_kwargs(args)\n", (rule,))
    for text in ("from torch import optim\n", "import torch.optim as o\n", "opt = build_optimizer(cfg)\n",
                 "from .optimization import Adafactor\n"):
        assert may_fire(text, (rule,)), text


def test_optimizer_token_is_not_read_in_a_message_but_counts_in_the_package(tmp_path: Path) -> None:
    from amplint.analysis.casts import OPTIMIZER_TOKENS

    rule = type("R", (), {"requires_any": OPTIMIZER_TOKENS, "and_requires_any": ()})
    assert not may_fire('logger.warning("LoRA weights are not applied due to optimization.")\n', (rule,))
    pkg = tmp_path / "optim"  # `from . import adam` inside a package named optim
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "user.py").write_text("from . import adam\n")
    assert may_fire("from . import adam\n", (rule,), str(pkg / "user.py"))


def test_use_is_a_call_or_a_name_not_a_definition() -> None:
    from amplint.prefilter import Use

    backward = Use("backward")
    for text in ("loss.backward()", "backward(loss)", "torch.autograd.backward([loss])", "from torch.autograd import backward"):
        assert backward.search(text), text
    for text in ("def backward(ctx, grad):", "    def   backward(ctx):", "class backward:", "def backward_hook(m):"):
        assert not backward.search(text), text
    # AMP303 judges training in the file: an autograd Function's `def backward` is none
    amp303 = registry.BY_CODE["AMP303"]
    function = "torch.set_default_dtype(torch.float16)\nclass F(torch.autograd.Function):\n    def backward(ctx, g):\n        return g\n"
    assert not may_fire(function, (amp303,))
    assert may_fire(function + "loss.backward()\n", (amp303,))


def test_near_finds_what_its_pattern_finds_around_the_literal() -> None:
    from amplint.prefilter import Near

    pattern = re.compile(r"([a-z_][\w.]*)\s*=\s*[\w.]*parameter\s*\(\s*\1\s*\.")
    near = Near("parameter", pattern)
    texts = [
        "self.enc.w = torch.nn.parameter(self.enc.w.half())",
        "x = 1\n    self.w = nn.parameter(\n        self.w.to(torch.float16))",
        "for p in model.parameters():\n    pass\nself.w = nn.parameter(self.w.half())",
        "self.w = nn.parameter(other.half())",
        "no literal at all",
    ]
    for text in texts:
        assert bool(near.search(text)) == bool(pattern.search(text)), text
    # what every match has around the literal, checked first, finds the same
    around = Near("parameter", pattern, after="(", before="=")
    for text in [*texts, "self.w = nn.parameter \v(self.w.half())", "self.w = nn.parameter\t\n(self.w.half())",
                 "w = [p for p in model.parameters()]\nself.w = nn.parameter(self.w.half())"]:
        assert bool(around.search(text)) == bool(pattern.search(text)), text
    # a `parameter` with no call after it, or no assignment before it on its line, is skipped
    assert not around._around("p = model.parameters", 0, 14, 9)
    assert not around._around("nn.parameter(self.w.x)", 0, 3, 9)
    assert around._around("w = nn.parameter (w.x)", 0, 7, 9)


def test_code_pattern_is_not_read_in_a_string() -> None:
    from amplint.prefilter import CodePattern, tokens_in

    token = CodePattern(re.compile(r"autocast\s*\("))
    message = 'raise ValueError(f"use `with torch.autocast(device_type={d!r})`")\n'
    code = "with torch.autocast(device_type='cuda'):\n    pass\n"
    assert tokens_in(message.lower(), frozenset({token}), lambda: code_text(message, strings=False).lower()) == frozenset()
    assert tokens_in(code, frozenset({token}), lambda: code_text(code, strings=False).lower()) == {token}
    assert tokens_in(message.lower(), frozenset({token})) == {token}  # without the code text: a necessary condition


@pytest.mark.parametrize("source, passes", [
    # the rebind shape: the same name, cast, then unfrozen after it
    ("for p in m.parameters():\n    p = p.to(torch.float32)\n    p.requires_grad = True\n", True),
    ("for p in m.parameters():\n    p = p.data.float()\n    p.requires_grad_()\n", True),
    ("for p in m.parameters():\n    p = p.detach() \\\n        .float()\n    p.requires_grad_(True)\n", True),
    # what transformers' model files have: each half alone, or a rebinding that is no cast
    ("h = h.to(torch.float16)\nfor p in m.parameters():\n    p.requires_grad_(True)\n", False),
    ("h = h.transpose(1, 2)\nh.weight\nh.requires_grad = True\n", False),
    ("p.requires_grad = True\np = p.to(torch.float32)\nw = m.weight\n", False),
    ("for p in m.parameters():\n    p = p.float()\n    p.requires_grad = False\n", False),
    # handed to an optimizer instead
    ("p = m.weight\np = p.float()\nopt = torch.optim.SGD([p])\n", True),
    ("p = m.weight\np = p.transpose(0, 1)\nopt = torch.optim.SGD([p])\n", False),
    # the replace shape
    ("self.w = torch.nn.Parameter(self.w.half())\n", True),
])
def test_amp305_tokens_tie_the_cast_to_what_trains_it(source: str, passes: bool) -> None:
    rule = registry.BY_CODE["AMP305"]
    assert bool(may_fire(source, (rule,))) is passes


_CLIP = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"


@pytest.mark.parametrize("source, passes", [
    # a library's scaling backward on a receiver that names it (Event.scales_loss)
    ("self.accelerator.backward(loss)\n" + _CLIP, True),
    ("accelerator.backward(loss, **kwargs)\n" + _CLIP, True),
    ("self._fabric . backward(loss)\n" + _CLIP, True),
    ("(self.accelerator\n    .backward(loss))\n" + _CLIP, True),
    ("self.manual_backward(loss)\n" + _CLIP, True),
    # the library named elsewhere, a plain backward: no scale anywhere
    ("accelerator = Accelerator()\nloss.backward()\n" + _CLIP, False),
    ("print('accelerator.backward(loss)')\nloss.backward()\n" + _CLIP, False),
    ("def manual_backward(self, loss):\n    loss.backward()\n" + _CLIP, False),
])
def test_amp101_tokens_pass_a_library_backward_that_scales(source: str, passes: bool) -> None:
    assert bool(may_fire(source, (registry.BY_CODE["AMP101"],))) is passes


def test_apex_and_amp_as_words(tmp_path: Path) -> None:
    rule = registry.BY_CODE["AMP402"]
    assert not may_fire("if is_apex_available():\n    import torch.amp\n", (rule,))
    assert may_fire("from apex import amp\n", (rule,)) and may_fire("import apex.amp as a\n", (rule,))
    pkg = tmp_path / "apex"  # inside apex itself: the package comes from the path
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "user.py").write_text("from . import amp\n\namp.initialize(model, optimizer)\n")
    assert may_fire((pkg / "user.py").read_text(), (rule,), str(pkg / "user.py"))
    assert _compare(pkg / "user.py") == []


def test_amp205_scaler_handed_in_needs_no_gradscaler_spelled() -> None:
    """`enabled_scaler` finds a scaler by its use alone; the pre-filter once required the
    words `autocast` or `GradScaler` and skipped this file."""
    source = (
        "import torch\n\n\n"
        "class Square(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return torch.softmax(x, -1)\n\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad):\n"
        # a reduction autocast would run in float32 (an identity backward is one that
        # custom_bwd would not change: no finding, analysis/function_dtypes.py)
        "        return grad - grad.sum(-1, keepdim=True)\n\n\n"
        "def train_step(model, optimizer, scaler, x):\n"
        "    loss = Square.apply(model(x)).mean()\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
    )
    assert [d.code for d in check_source(source, "train.py", ALL, prefilter=False)] == ["AMP205"]
    assert [d.code for d in check_source(source, "train.py", ALL)] == ["AMP205"]


def test_amp303_half_tensor_type_passes() -> None:
    source = 'import torch\ntorch.set_default_tensor_type("torch.cuda.HalfTensor")\nloss.backward()\n'
    assert [d.code for d in check_source(source, "train.py", ALL, prefilter=False)] == ["AMP303"]
    assert [d.code for d in check_source(source, "train.py", ALL)] == ["AMP303"]


# --- AMP501: only a literal the rule can read makes a file pass -----------------------------

_FP16 = "import torch\nx = torch.zeros(4).half()\nm = x > 0\nw = torch.zeros(4)\n"
_READ = [
    "x = x.masked_fill(m, -1e9)", "x = x.masked_fill(m, value = -1e9)", "x.fill_(-1e9)", "x.add_( 1e5 )",
    "x = torch.where(m, x, -1e10)", "x = x.masked_fill(m,\n    -1e9,\n)", "x[m] = -1e9", "x[m] -= 1e5",
    "x[m] = (-1e9)", "x[m] = -(1e9)", "x[m] = - -1e9", "NEG = -1e9\nx = x.masked_fill(m, NEG)",
    "NEG: float = -1e9\nx = x.masked_fill(m, NEG)", "x[m] = \\\n    -1e9", "x[m] = -1e9; y = 0",
    "if (neg := -1e9):\n    x.masked_fill_(m, neg)",
]
_NOT_READ = [
    "x = x.masked_fill(m, -1e9 * w)", "x = x.masked_fill(m, w - 1e30)", "x[m] = int(1e9)",
    "x = x.masked_fill(m, torch.tensor(-1e9))", "x[m] = [-1e9]", "x = x.masked_fill(m, {'a': -1e9}['a'])",
    "x[m] = -1e9 if w.dtype == torch.float32 else -1e4", "ok = w == 1e9",
]


@pytest.mark.parametrize("statement", _READ)
def test_amp501_literal_the_rule_reads_passes(statement: str) -> None:
    source = f"{_FP16}{statement}\n"
    rule = registry.BY_CODE["AMP501"]
    assert [d.code for d in check_source(source, "m.py", ALL, select=["AMP501"], prefilter=False)] == ["AMP501"]
    assert may_fire(source, (rule,))


@pytest.mark.parametrize("statement", _NOT_READ)
def test_amp501_literal_the_rule_cannot_read_does_not_pass(statement: str) -> None:
    source = f"{_FP16}{statement}\n"
    assert check_source(source, "m.py", ALL, select=["AMP501"], prefilter=False) == []
    assert not may_fire(source, (registry.BY_CODE["AMP501"],))


def _read_literal_positions(module) -> list:
    """Float literals where AMP501 reads a value whole (under signs and parentheses): an
    argument (a first positional one only of `fill_`/`add_`/`sub_`/`mul_`: every other
    sink takes a tensor or a size first), or the value of an assignment, a named
    expression or an augmented assignment."""
    import libcst as cst

    from amplint.analysis.walk import walk
    from amplint.rules.amp501_fp16_overflow_constant import _FIRST_ARGUMENT_SINKS

    found = []

    class Visitor(cst.CSTVisitor):
        def _take(self, value) -> None:
            node = value
            while isinstance(node, cst.UnaryOperation):
                node = node.expression
            if isinstance(node, cst.Float):
                found.append(node)

        def visit_Call(self, node) -> None:
            for i, arg in enumerate(node.args):
                first = i == 0 and arg.keyword is None and not arg.star
                if first and not (isinstance(node.func, cst.Attribute) and node.func.attr.value in _FIRST_ARGUMENT_SINKS):
                    continue
                self._take(arg.value)

        def visit_Assign(self, node) -> None:
            self._take(node.value)

        def visit_AnnAssign(self, node) -> None:
            if node.value is not None:
                self._take(node.value)

        def visit_AugAssign(self, node) -> None:
            self._take(node.value)

        def visit_NamedExpr(self, node) -> None:
            self._take(node.value)

    walk(module, Visitor())
    return found


def _literal_context_misses(path: Path) -> list[str]:
    """Each readable out-of-range literal of the file must be accepted where it stands by
    AMP501's literal token, on the text the pre-filter gives it (code, strings emptied)."""
    import libcst as cst

    from amplint.analysis.precision import number_of, overflows_fp16
    from amplint.rules.amp501_fp16_overflow_constant import _may_be_read_whole

    try:
        module = cst.parse_module(path.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - unreadable or unparsable: nothing to check
        return []
    marker = "9.75e77"
    misses = []
    for node in _read_literal_positions(module):
        if not overflows_fp16(number_of(node)):
            continue
        text = code_text(module.deep_replace(node, node.with_changes(value=marker)).code, strings=False).lower()
        at = text.find(marker)
        literal = node.value.lower()
        text = text[:at] + literal + text[at + len(marker):]
        if at < 0 or not _may_be_read_whole(text, at, at + len(literal)):
            line = text.count("\n", 0, max(at, 0)) + 1
            misses.append(f"{path}:{line}: `{node.value}` is read by AMP501 but its token does not accept it there")
    return misses


@pytest.mark.parametrize("path", _fixture_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_amp501_literal_token_accepts_every_readable_literal_of_the_fixtures(path: Path) -> None:
    assert _literal_context_misses(path) == []


def test_amp501_readable_literals_are_found() -> None:
    """The check above has something to check: the statements AMP501 reports hold them."""
    import libcst as cst

    for statement in _READ:
        assert _read_literal_positions(cst.parse_module(f"{_FP16}{statement}\n")), statement


@pytest.mark.skipif(not CORPUS.is_dir(), reason="set AMPLINT_CORPUS to a real-code corpus (benchmarks/fetch_corpus.sh) to run this")
def test_amp501_literal_token_accepts_every_readable_literal_of_real_code() -> None:
    misses: list[str] = []
    with concurrent.futures.ProcessPoolExecutor() as pool:
        for found in pool.map(_literal_context_misses, sorted(CORPUS.rglob("*.py")), chunksize=16):
            misses.extend(found)
    assert misses == []


def test_amp301_passes_a_trainer_or_an_optimizer_lookup_without_an_optimizer_named() -> None:
    """analysis/trainers.py and callees.classes_held train a model with no optimizer package
    or factory spelled in the module (trl's Trainer subclasses, espnet's lm.py)."""
    rule = registry.BY_CODE["AMP301"]
    cast = "h = h.to(torch.bfloat16)\n"
    assert not may_fire(cast + "print(h)\n", (rule,))
    assert not may_fire(cast + 'log("the trainer saves it")\n', (rule,))
    for training in ("class QLoRATrainer(BaseTrainer):\n    pass\n", "t = Trainer(model=model)\n",
                     "opt_class = dynamic_import_optimizer(args.opt)\n"):
        assert may_fire(cast + training, (rule,)), training


@pytest.mark.parametrize(
    ("cast", "passes"),
    [
        ("    net.half()\n", True),
        ("    model = model.to(torch.bfloat16)\n", True),
        ("    text_encoder.to(device, dtype=weight_dtype)\n", True),
        ("    model.to(device, dtype=model_dtype)\n", True),  # no reduced dtype spelled: handed in
        ("    hidden_states = hidden_states.to(torch.float16)\n", False),
        ("    latent_model_input = latent_model_input.to(dtype)\n", False),
        ("    self.vae.to(dtype=torch.float16)\n", False),
        ("    x = x.to(model_dtype)\n", False),
    ],
)
def test_amp301_reads_a_model_helper_that_casts_a_module_like_name_without_training(cast: str, passes: bool) -> None:
    """A helper that casts the network it returns or is handed is judged where its callers,
    in other modules, train it: its own module spells no optimizer."""
    rule = registry.BY_CODE["AMP301"]
    assert may_fire("import torch\n\ndef build(device, model_dtype):\n" + cast + "    return 1\n", (rule,)) is passes


_DROPOUT_FUNCTION = (
    "import torch\n"
    "{imports}\n\n"
    "class Dropout(torch.autograd.Function):\n"
    "    @staticmethod\n"
    "    def forward(ctx, x, mask):\n"
    "        ctx.save_for_backward(mask)\n"
    "        return x.masked_fill(mask,\n"
    "0.0){op}\n\n"  # a continuation line at column 0, inside brackets: still the body
    "    @staticmethod\n"
    "    def backward(ctx, grad):\n"
    '        """Gradients where the mask kept them.\n'
    'Not a body line: a string.\n'
    '        """\n'
    "        (mask,) = ctx.saved_tensors\n"
    "        return grad.masked_fill(mask, 0.0), None\n\n\n"
    "def attention(q, k, mask):\n"
    "    with torch.autocast('cuda', dtype=torch.float16):\n"
    "        return Dropout.apply(torch.softmax(q @ k.transpose(-1, -2), -1), mask)\n"
)


@pytest.mark.parametrize("imports, op, fires", [
    ("", "", False),  # the matmul and softmax are the module's, not the Function's
    ("", " @ x", True),
    ("from torch import bmm as batched", "", True),  # an op renamed: the body may call it by its new name
], ids=["ops-outside-the-function", "matmul-in-the-body", "op-imported-under-another-name"])
def test_amp205_needs_a_sensitive_op_in_a_function_body(imports: str, op: str, fires: bool) -> None:
    source = _DROPOUT_FUNCTION.format(imports=imports, op=op)
    rule = next(r for r in ALL.rules() if r.code == "AMP205")
    assert bool(rules_that_may_fire(source, (rule,), None)) is fires
    full = _findings(source, "layers.py", prefilter=False)
    assert _findings(source, "layers.py", prefilter=True) == full
    assert [d.code for d in full] == (["AMP205"] if op else [])


# --- AMP501's finfo token: one scan per question, the same answers -------------------------
def _finfo_may_be_full_by_plain_regexes(arg: str | None, text: str) -> bool:
    """The finfo argument reading written as one regex per question over the whole text
    (how the token read until each question became one scan): the oracle below."""
    from amplint.rules.amp501_fp16_overflow_constant import _DOTTED_NAME, _FULL_DTYPE_NAMES

    if arg is None:
        return True
    arg = arg.strip()
    if arg.startswith("type") and "=" in arg:
        arg = arg.split("=", 1)[1].strip()
    if not _DOTTED_NAME.fullmatch(arg):
        return True
    parts = [p.strip() for p in arg.split(".")]
    last = re.escape(parts[-1])
    if parts[-1] in _FULL_DTYPE_NAMES:
        return True
    if re.search(rf"(?:float32|float64|float|double)\s+as\s+{re.escape(parts[0])}(?![a-z0-9_])", text):
        return True
    if len(parts) > 1:
        head = re.escape(parts[0])
        dotted_text = r"\s*\.\s*".join(map(re.escape, parts))
        assigned = rf"(?<![a-z0-9_.]){dotted_text}\s*(?::[^=\n]*)?=(?!=)"
        if re.search(rf"def\s+[a-z0-9_]+\s*\(\s*{head}(?![a-z0-9_])", text):
            assigned += rf"|\.\s*{last}\s*(?::[^=\n]*)?=(?!=)"
    else:
        assigned = rf"(?:^|[=;])[ \t]*{last}\s*(?::[^=\n]*)?=(?!=)|(?<![a-z0-9_]){last}\s*:="
    return re.search(assigned, text, re.MULTILINE) is not None


def _finfo_disagreements(text: str) -> list[str]:
    from amplint.rules.amp501_fp16_overflow_constant import _NameFacts, _call_argument

    facts, out = _NameFacts(text), []
    at = text.find("finfo")
    while at != -1:
        arg = _call_argument(text, at + len("finfo"))
        if facts.may_be_full(arg) != _finfo_may_be_full_by_plain_regexes(arg, text):
            out.append(f"finfo({arg})")
        at = text.find("finfo", at + 1)
    return out


_FINFO_CASES = [
    # (text, argument): each branch of the reading, and the neighbours each check must turn down
    ("x = torch.finfo(torch.float32).min", "torch.float32"),
    ("from torch import float32 as f32\ny = finfo(f32)", "f32"),
    ("from torch import float32 as f32x\ny = finfo(f32)", "f32"),
    ("from torch import float as f, double as d\ny = finfo(d)", "d"),
    ("def f(self, x):\n    self.dtype = torch.float32\n    return finfo(self.dtype)", "self.dtype"),
    ("def f(self, x):\n    self . dtype : torch.dtype = x\n    return finfo(self.dtype)", "self.dtype"),
    ("def f(cfg):\n    other.dtype = x\nfinfo(cfg.dtype)", "cfg.dtype"),
    ("def f(x):\n    other.mydtype = x\nfinfo(cfg.dtype)", "cfg.dtype"),
    ("finfo(hidden_states.dtype)\nhidden_states.dtype == x", "hidden_states.dtype"),
    ("finfo(h.dtype)\nh.dtype = x", "h.dtype"),
    ("finfo(h.dtype)\nxh.dtype = x", "h.dtype"),
    ("finfo(h.dtype)\na.h.dtype = x", "h.dtype"),
    ("finfo(h . dtype)\nh.\n dtype = x", "h . dtype"),
    ("finfo(dtype)\ndtype = torch.float32", "dtype"),
    ("finfo(dtype)\n    dtype: torch.dtype = torch.float32", "dtype"),
    ("finfo(dtype)\nx = dtype = y", "dtype"),
    ("finfo(dtype)\nx = 1; dtype = y", "dtype"),
    ("finfo(dtype)\nx.dtype = y", "dtype"),
    ("finfo(dtype)\nif (dtype := y):", "dtype"),
    ("finfo(dtype)\nif (mydtype := y):", "dtype"),
    ("finfo(dtype)\nf(dtype=y)", "dtype"),
    ("finfo(dtype)\ndtype == y", "dtype"),
    ("finfo(type=dtype)\ndtype = y", "type=dtype"),
    ("finfo(x[0])", "x[0]"),
    ("finfo", None),
]


@pytest.mark.parametrize("text,arg", _FINFO_CASES)
def test_amp501_finfo_reading_answers_as_the_plain_regexes(text: str, arg: str | None) -> None:
    from amplint.rules.amp501_fp16_overflow_constant import _NameFacts

    assert _NameFacts(text).may_be_full(arg) == _finfo_may_be_full_by_plain_regexes(arg, text)


def test_amp501_finfo_reading_answers_as_the_plain_regexes_on_the_fixtures() -> None:
    texts = [p.read_text(encoding="utf-8", errors="replace").lower() for p in _fixture_files()]
    assert any("finfo" in t for t in texts)  # NB: the comparison has something to compare
    assert [(i, d) for i, t in enumerate(texts) for d in _finfo_disagreements(t)] == []


@pytest.mark.skipif(not CORPUS.is_dir(), reason="set AMPLINT_CORPUS to a real-code corpus (benchmarks/fetch_corpus.sh) to run this")
def test_amp501_finfo_reading_answers_as_the_plain_regexes_on_real_code() -> None:
    out = []
    for path in sorted(CORPUS.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace").lower()
        out.extend(f"{path}: {d}" for d in _finfo_disagreements(text))
    assert out == []


# --- the scan of strings and comments: the regex's own matches, found faster --------------------
_LEXER_CORNERS = [
    "x = 'a' # c\ny = \"b\\\"c\" + '''d\n'e'\n''' + \"\"\"f\"\"\"\n",
    "s = 'unterminated\nt = \"also\r\nu = '''never closed\n# trailing\n",
    "a = '#not a comment' # but this is 'quoted'\n",
    "b = r'\\' + \"\\\\\" + '\\\\'\nc = f\"{x['k']}\" + b'\\x00'\n",
    'd = """one "" two "\\"" three"""\ne = \'\'\'a \'\' b\'\'\'\n',
    "e = '\\\r\n continued'\nf = \"x\\\n y\"\n",
    "",
    "#",
    "'",
    '"""',
]


def test_the_scan_finds_what_finditer_finds() -> None:
    from amplint.sources import STRINGS_AND_COMMENTS, replace_strings_and_comments, strings_and_comments

    texts = _LEXER_CORNERS + [p.read_text(encoding="utf-8", errors="replace") for p in _fixture_files()]
    for text in texts:
        spans = [(m.start(), m.end(), m.lastgroup) for m in STRINGS_AND_COMMENTS.finditer(text)]
        assert [(m.start(), m.end(), m.lastgroup) for m in strings_and_comments(text)] == spans, text[:200]
        assert replace_strings_and_comments(text, lambda m: "<>") == STRINGS_AND_COMMENTS.sub("<>", text)
        for pos, endpos in ((3, len(text) - 2), (len(text) // 2, len(text)), (1, 1)):
            window = [(m.start(), m.end(), m.lastgroup) for m in STRINGS_AND_COMMENTS.finditer(text, pos, endpos)]
            assert [(m.start(), m.end(), m.lastgroup) for m in strings_and_comments(text, pos, endpos)] == window
    assert sum(1 for t in _LEXER_CORNERS for _ in strings_and_comments(t)) >= 20  # NB: the corners hold literals


@pytest.mark.skipif(not CORPUS.is_dir(), reason="set AMPLINT_CORPUS to a real-code corpus (benchmarks/fetch_corpus.sh) to run this")
def test_the_scan_finds_what_finditer_finds_on_real_code() -> None:
    from amplint.sources import STRINGS_AND_COMMENTS, strings_and_comments

    differ = []
    for path in sorted(CORPUS.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        spans = [(m.start(), m.end(), m.lastgroup) for m in STRINGS_AND_COMMENTS.finditer(text)]
        if [(m.start(), m.end(), m.lastgroup) for m in strings_and_comments(text)] != spans:
            differ.append(str(path))
    assert differ == []
