"""What CPython accepts is checked; what it refuses is one clear error (issue 17, items 5, 6 and 9).

`engine.parse` asks CPython first, then guards libcst's native parser (amplint.parse_limits).
Inputs that crash libcst run in a subprocess: without the guard they would take pytest
down with them (a segfault is not an exception).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from amplint import deep_codegen, engine, parse_limits
from amplint.engine import SourceError, check_source

ROOT = Path(__file__).resolve().parent.parent
AMP = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"  # AMP401 at line 2
FLAKE8 = Path(sys.executable).with_name("flake8")


def in_subprocess(code: str, source: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter, with `source` as the variable `src` (read from stdin)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", "import sys\nsrc = sys.stdin.read()\n" + code], input=source,
                          capture_output=True, text=True, env=env, timeout=timeout)


def findings(source: str, **kwargs) -> list[tuple[str, int]]:
    return [(d.code, d.span.line) for d in check_source(source, "x.py", crashes=[], **kwargs)]


def refusal(source: str, **kwargs) -> tuple[int, str]:
    with pytest.raises(SourceError) as info:
        check_source(source, "x.py", crashes=[], **kwargs)
    return info.value.line, info.value.reason


def and_chain(n: int) -> str:
    return "x = " + " and ".join(["a"] * n) + "\n"


# --- item 5: chains CPython keeps flat, libcst nests -------------------------------------------


def test_the_issues_seven_thousand_term_chain_is_analysed_whatever_the_callers_stack() -> None:
    """It crashed libcst on an 8 MiB stack; amplint parses deep input in a thread of its own,
    so even a caller on a 256 KiB thread (an editor's worker, musl's default) gets the findings."""
    proc = in_subprocess('''
import threading
from amplint.engine import check_source
box = []
threading.stack_size(256 * 1024)
t = threading.Thread(target=lambda: box.append([(d.code, d.span.line) for d in check_source(src, "x.py", crashes=[])]))
t.start(); t.join()
print(box)
''', AMP + and_chain(7000))
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # -11 was the segfault
    assert proc.stdout.strip() == "[[('AMP401', 2)]]"


def test_a_chain_too_long_for_the_analysis_is_refused_at_its_line() -> None:
    proc = in_subprocess('''
from amplint.engine import check_source, SourceError
try:
    check_source(src, "x.py", crashes=[])
except SourceError as exc:
    print(exc.line, exc.reason)
''', AMP + "y = 1\n" + and_chain(30_000))
    assert proc.returncode == 0, proc.stderr[-2000:]
    line, reason = proc.stdout.strip().split(" ", 1)
    assert line == "4"
    assert reason.startswith("not analysed: nested 30,002 levels deep as libcst, amplint's parser, builds it")
    assert "(Python accepts it)" in reason


@pytest.mark.parametrize("op", ["and", "or"])
def test_chains_within_the_limit_are_analysed(op: str) -> None:
    n = parse_limits.MAX_LIBCST_DEPTH - 10
    assert findings(AMP + "x = " + f" {op} ".join(["a"] * n) + "\n") == [("AMP401", 2)]


def test_nested_chains_add_up() -> None:
    """`f(a and ... and (b or ... or c))`: libcst nests both; each part alone would pass."""
    half = parse_limits.MAX_LIBCST_DEPTH // 2 + 100
    inner = "(" + " or ".join(["b"] * half) + ")"
    line, reason = refusal(AMP + "x = " + " and ".join(["a"] * half + [inner]) + "\n")
    assert line == 3 and "levels deep as libcst" in reason


# --- item 9: implicitly concatenated strings ---------------------------------------------------


def strings(n: int, *, one_per_line: bool) -> str:
    sep = "\n    " if one_per_line else " "
    return "x = (" + sep + sep.join(['"a"'] * n) + "\n)\n"


@pytest.mark.parametrize("one_per_line", [False, True], ids=["one-line", "one-per-line"])
def test_three_thousand_concatenated_strings_are_analysed(one_per_line: bool) -> None:
    assert findings(AMP + strings(parse_limits.MAX_CONCATENATED_STRINGS, one_per_line=one_per_line)) == [("AMP401", 2)]


@pytest.mark.parametrize("one_per_line", [False, True], ids=["one-line", "one-per-line"])
def test_more_strings_than_libcst_reads_are_refused_where_they_start_not_a_syntax_error(one_per_line: bool) -> None:
    """libcst called 3,001 strings a syntax error, at the line after them."""
    line, reason = refusal(AMP + "y = 1\n" + strings(3_500, one_per_line=one_per_line))
    assert line == (5 if one_per_line else 4)
    assert reason == ("not analysed: 3,500 implicitly concatenated strings in one expression; libcst, amplint's "
                      "parser, reads at most 3,000 (Python accepts it)")
    assert "SyntaxError" not in reason


def test_strings_with_non_ascii_text_are_counted_by_characters() -> None:
    """ast columns count UTF-8 bytes; the count must not cut the run short or run past it."""
    run = " ".join(['"é€"'] * 3_200)
    line, reason = refusal(AMP + f"x = ('ü', {run}, 'ü')\n")
    assert line == 3 and reason.startswith("not analysed: 3,200 implicitly concatenated strings")


# --- item 9: CPython decides, the same way whether or not the pre-filter skips the file ---------

CPYTHON_VERDICTS = {
    "pep695": "type Point = tuple[float, float]\n\ndef first[T](xs: list[T]) -> T:\n    return xs[0]\n",
    "backslash-line": "x = 1\n    \\\ny = 2\n",
    "return-outside": "return 1\n",  # compile() refuses it, the parser and symtable do not: neither does amplint
    "deep-plus": "y = " + "+".join(["a"] * 12_000) + "\n",
    "nested-parens": "y = " + "(" * 250 + "1" + ")" * 250 + "\n",
}


def _cpython_accepts(source: str) -> bool:
    import symtable

    try:
        symtable.symtable(source, "x.py", "exec")
    except (SyntaxError, RecursionError, MemoryError):
        return False
    return True


@pytest.mark.parametrize("name", sorted(CPYTHON_VERDICTS))
def test_cpython_decides_what_is_python_whatever_the_pre_filter_does(name: str) -> None:
    body = CPYTHON_VERDICTS[name]
    outcomes = []
    for text, prefilter in ((body, True), (body, False), (body + AMP, True), (body + AMP, False)):
        try:
            found = [d.code for d in check_source(text, "x.py", crashes=[], prefilter=prefilter)]
            outcomes.append(("checked", "AMP401" in found or text == body))
        except SourceError as exc:
            outcomes.append(("error", exc.line, exc.col0, exc.reason))
    assert len(set(outcomes)) == 1, outcomes  # the AMP words (and so the pre-filter) change nothing
    assert (outcomes[0][0] == "checked") == _cpython_accepts(body)


def test_cpythons_errors_for_deep_code_name_the_line() -> None:
    line, reason = refusal(AMP + "y = 1\n" * 5 + "y = " + "+".join(["a"] * 12_000) + "\n")
    assert line == 8
    assert reason == f"too deeply nested: Python {parse_limits.python_version()} cannot compile it either"


def test_a_line_after_a_multi_line_string_is_counted_right() -> None:
    """The old guard replaced each string by one character and lost the newlines inside them."""
    doc = '"""\n' + "text\n" * 20 + '"""\n'
    line, _ = refusal(AMP + doc + "y = " + "+".join(["a"] * 12_000) + "\n")
    assert line == 3 + 22


# --- nesting that CPython accepts and amplint does not -------------------------------------------


def test_nesting_past_amplints_limit_is_refused_at_the_deep_line(monkeypatch) -> None:
    """CPython 3.13 compiles ~10,000 levels, where libcst takes minutes; amplint stops at MAX_NESTING
    (made small here: on 3.11 CPython itself stops first)."""
    monkeypatch.setattr(parse_limits, "MAX_NESTING", 60)
    deep = "y = " + " + ".join(["value_with_a_long_name"] * 80) + "\n"  # a long logical line, measured
    line, reason = refusal(AMP + "z = 1\n" + deep)
    assert line == 4  # not 1: operators carry no position, their parent's is used
    assert reason.startswith("not analysed: nested more than 60 levels deep, amplint's limit")


def test_an_elif_ladder_is_measured_although_its_lines_are_short(monkeypatch) -> None:
    monkeypatch.setattr(parse_limits, "MAX_NESTING", 150)
    ladder = "if a:\n    pass\n" + "elif a:\n    pass\n" * 200
    line, reason = refusal(AMP + ladder)
    assert line > 3 and "nested more than 150 levels" in reason


def test_a_long_real_elif_ladder_is_analysed() -> None:
    ladder = "if a:\n    pass\n" + "elif a:\n    pass\n" * 2_500
    assert findings(AMP + ladder) == [("AMP401", 2)]


# --- Python 3.12's fixed C recursion limit -------------------------------------------------------


def test_an_eight_hundred_term_expression_is_analysed() -> None:
    """Python 3.12.0/3.12.1 refused it ('too deeply nested'): libcst's codegen recursed through C."""
    assert findings(AMP + "y = " + " + ".join(["value"] * 800) + "\n") == [("AMP401", 2)]


def test_the_codegen_shim_swaps_only_libcsts_own_method(monkeypatch) -> None:
    from libcst._nodes.base import CSTNode

    original = CSTNode.__dict__["_codegen"]
    with deep_codegen.codegen_without_c_recursion():
        assert CSTNode.__dict__["_codegen"] is deep_codegen._codegen_flat
    assert CSTNode.__dict__["_codegen"] is original

    def changed_upstream(self, state, **kwargs):
        state.before_codegen(self)
        self._codegen_impl(state, **kwargs)
        state.after_codegen(self)
        state.after_codegen(self)

    monkeypatch.setattr(CSTNode, "_codegen", changed_upstream)
    with deep_codegen.codegen_without_c_recursion():
        assert CSTNode.__dict__["_codegen"] is changed_upstream  # not the method it knows: left alone


def test_the_flat_codegen_writes_the_same_code() -> None:
    import libcst as cst

    source = (ROOT / "fixtures" / "AMP101" / "bad_clip_between_backward_and_step.py").read_text()
    module = cst.parse_module(source)
    with deep_codegen.codegen_without_c_recursion():
        assert module.code == source


# --- item 6: size ------------------------------------------------------------------------------


def test_the_size_limit_applies_whether_or_not_the_pre_filter_skips_the_file() -> None:
    from amplint.config import Config

    config = Config(max_file_tokens=1_000)
    body = "".join(f"v{i} = {i}\n" for i in range(400))  # ~1,200 tokens
    for text in (body, body + AMP):
        with pytest.raises(SourceError, match=r"not analysed: too large \(more than 1,000 tokens, the limit"):
            check_source(text, "x.py", config)
    assert check_source(body + AMP, "x.py", Config(max_file_tokens=0), crashes=[])  # 0: no limit


def test_token_estimate_is_not_an_underestimate() -> None:
    import io
    import tokenize

    source = (ROOT / "amplint" / "engine.py").read_text()
    # NB: an f-string is one token, as Python 3.11 reads it; 3.12 and later tokenize its
    # parts (FSTRING_START ... FSTRING_END), which would make this count depend on the version
    fstring_start = getattr(tokenize, "FSTRING_START", None)
    fstring_end = getattr(tokenize, "FSTRING_END", None)
    real = depth = 0
    for t in tokenize.generate_tokens(io.StringIO(source).readline):
        if t.type in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        if t.type == fstring_start:
            depth += 1
            real += depth == 1
        elif t.type == fstring_end:
            depth -= 1
        elif depth == 0:
            real += 1
    estimate = parse_limits.estimated_tokens(source)
    assert real <= estimate <= 1.5 * real


def test_counting_string_by_string_matches_stripping_them_all() -> None:
    """The token count looks for strings one at a time (no scan to the end of a 50 MB file)."""
    from amplint.sources import STRINGS_AND_COMMENTS

    for path in sorted((ROOT / "amplint").rglob("*.py")) + sorted((ROOT / "tests").glob("*.py")):
        source = path.read_text()
        # (a prefix counts apart from its string: `f"x"` is two)
        expected = len(parse_limits._TOKEN.findall(STRINGS_AND_COMMENTS.sub(" 0", source)))
        got = parse_limits.estimated_tokens(source)
        assert expected <= got <= expected + len(source) // parse_limits._SLICE + 1, path


def test_a_huge_file_is_refused_after_reading_its_start(monkeypatch) -> None:
    text = AMP + "x = 1\n" * 5_000_000  # 30 MB
    furthest = []
    code_tokens = parse_limits._code_tokens

    def counting(text, start, end, *args):
        furthest.append(start)
        return code_tokens(text, start, end, *args)

    monkeypatch.setattr(parse_limits, "_code_tokens", counting)
    assert parse_limits.too_many_tokens(text, 1_000)
    assert max(furthest) < len(text) // 100


def test_out_of_memory_in_the_analysis_is_the_files_error(monkeypatch) -> None:
    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(engine, "analyse", no_memory)
    line, reason = refusal(AMP)
    assert (line, reason.split(" (")[0]) == (1, "not analysed: out of memory")


# --- flake8: the same guard, and a word for what it refuses ----------------------------------------


@pytest.mark.skipif(not FLAKE8.exists(), reason="flake8 not installed next to this interpreter")
def test_flake8_with_the_plugin_survives_the_chains_serial_and_parallel(tmp_path: Path) -> None:
    (tmp_path / "seven.py").write_text(AMP + and_chain(7_000))
    (tmp_path / "thirty.py").write_text(AMP + and_chain(30_000))
    (tmp_path / "ok.py").write_text(AMP)
    e501 = subprocess.run([str(FLAKE8), "--select", "E501", "seven.py", "thirty.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert e501.returncode == 1, e501.stderr  # long lines found; no crash (was -11)
    parallel = subprocess.run([str(FLAKE8), "-j", "2", "--select", "AMP", "."], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)  # a dead worker hung flake8's pool
    assert parallel.returncode == 1, parallel.stderr
    assert sorted(line.split(" ", 2)[:2] for line in parallel.stdout.splitlines()) == [
        ["./ok.py:2:10:", "AMP401"], ["./seven.py:2:10:", "AMP401"], ["./thirty.py:3:1:", "AMP000"]]
    assert "AMP000 amplint did not analyse this file: nested 30,002 levels deep" in parallel.stdout


def test_threads_see_the_same_limits_as_the_main_thread() -> None:
    """The guard's answer does not depend on the thread (only its stack would)."""
    text = AMP + "x = (" + " ".join(['"a"'] * 3_100) + ")\n"
    box: list = []
    t = threading.Thread(target=lambda: box.append(parse_limits.plan_parse(text)))
    t.start()
    t.join()
    assert box == [parse_limits.plan_parse(text)] and box[0].problem[0] == 3


# --- nesting whose parse costs libcst the square of its depth -------------------------------------

QUADRATIC = {  # shape -> a statement nesting it `n` levels deep without brackets
    "conditional expressions": lambda n: "x = " + "a if b else " * n + "c\n",
    "lambdas": lambda n: "x = " + "lambda: " * n + "0\n",
    "lambdas and conditionals": lambda n: "x = " + "lambda: a if b else " * (n // 2) + "c\n",
    "unary minus": lambda n: "x = " + "-" * n + "a\n",
    "not": lambda n: "x = " + "not " * n + "a\n",
    "power": lambda n: "x = " + " ** ".join(["a"] * n) + "\n",
    "invert and minus in a function": lambda n: "def f():\n    x = " + "~-" * (n // 2) + "a\n",
    "binary operators": lambda n: "x = " + " + ".join(["a"] * n) + "\n",
    "subscripts": lambda n: "x = a" + "[0]" * n + "\n",
    "calls": lambda n: "x = f" + "()" * n + "\n",
    "attributes": lambda n: "x = a" + ".b" * n + "\n",
    "method calls": lambda n: "x = a" + ".b()" * (n // 2) + "\n",
    "comprehensions in conditionals": lambda n: "x = " + "[a for a in b if c] if d else " * n + "e\n",
    "inside an f-string": lambda n: "x = f'{" + "a if b else " * n + "c}'\n",
    "many statements, each deep": lambda n: ("x = " + "a if b else " * (n // 9) + "c\n") * 50,
}


def test_expressions_nested_as_libcst_parses_in_squared_time_or_memory_are_refused_quickly_and_cheaply() -> None:
    """2,000 nested conditional expressions (24 KB) took libcst 740 MB, 2,000 chained
    subscripts 11 s, 50 statements 225 deep (134 KB) 6 s and 530 MB: each shape is refused
    before libcst sees it, in one process that never grows past a few hundred MB."""
    proc = in_subprocess('''
import json, resource
from amplint.engine import check_source, SourceError
shapes = json.loads(src)
out = {}
for name, text in shapes.items():
    compile(text, "x.py", "exec")  # Python accepts every one of them
    try:
        check_source(text, "x.py", crashes=[])
        out[name] = None
    except SourceError as exc:
        out[name] = [exc.line, exc.reason]
# NB: VmHWM, this process's own peak: ru_maxrss also holds the peak of the process that forked
# it (Linux keeps it across execve), the whole pytest run when the suite runs together
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps([out, hwm]))
''', json.dumps({name: AMP + shape(2_000) for name, shape in QUADRATIC.items()}))
    assert proc.returncode == 0, proc.stderr[-2000:]
    refused, max_rss_kib = json.loads(proc.stdout)
    for name, found in refused.items():
        assert found is not None, f"{name}: handed to libcst"
        line, reason = found
        assert line >= 3 and reason.startswith("not analysed: expressions nested too deeply for libcst"), (name, reason)
        assert reason.endswith("(Python accepts it)")
    assert max_rss_kib < 300 * 1024, max_rss_kib


@pytest.mark.parametrize("name", ["conditional expressions", "binary operators", "subscripts", "lambdas"])
def test_expressions_a_few_hundred_levels_deep_are_analysed(name: str) -> None:
    assert findings(AMP + QUADRATIC[name](400)) == [("AMP401", 2)]


def test_the_cli_its_workers_and_the_language_server_refuse_the_deep_expression_alike(tmp_path: Path) -> None:
    deep = AMP + QUADRATIC["conditional expressions"](2_000)
    (tmp_path / "deep.py").write_text(deep)
    (tmp_path / "other.py").write_text(AMP)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in (["deep.py"], ["--jobs", "2", "."]):
        proc = subprocess.run([sys.executable, "-m", "amplint", "check", "--no-cache", *args], cwd=tmp_path,
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "deep.py:3:1: error: not analysed: expressions nested too deeply for libcst" in proc.stdout + proc.stderr
    pytest.importorskip("pygls")
    from amplint.server.app import AmplintServer

    lint = AmplintServer()._linter((tmp_path / "deep.py").as_uri())
    with pytest.raises(SourceError, match="not analysed: expressions nested too deeply for libcst"):
        lint(deep)


# --- what amplint says of Python matches what Python does ------------------------------------------

COMPILE_EDGE = ["binary operators", "attributes", "unary minus", "method calls", "calls", "subscripts", "not",
                "conditional expressions", "lambdas", "power"]


@pytest.mark.parametrize("name", COMPILE_EDGE)
def test_a_file_is_called_one_python_cannot_compile_only_when_python_cannot(tmp_path: Path, name: str) -> None:
    """2,990 levels: near CPython's own limit, which some of these shapes pass and others not
    (amplint once said "Python cannot compile it either" of files `python file.py` runs)."""
    n = 2_990 if name != "method calls" else 2 * 2_990
    text = "raise SystemExit(0)\n" + AMP + QUADRATIC[name](n)
    (tmp_path / "f.py").write_text(text)
    runs = subprocess.run([sys.executable, str(tmp_path / "f.py")], capture_output=True, text=True, timeout=120)
    python_compiles = runs.returncode == 0
    assert python_compiles or "Error" in runs.stderr
    line, reason = refusal(text)
    cannot = f"Python {parse_limits.python_version()} cannot compile it either"
    assert (cannot in reason) == (not python_compiles), (python_compiles, reason)
    if python_compiles:
        assert reason.startswith("not analysed: ") and reason.endswith(("(Python accepts it)", "compiles it")), reason
