"""Bad input gets a clear answer, never a traceback (issue 8, item 1).

Each case runs the real CLI (`python -m amplint check` in a subprocess) unless it needs
to stage a race or a permission the test user cannot have; those drive the runner.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amplint import runner, sources
from amplint.config import Config
from amplint.engine import SourceError, check_source

ROOT = Path(__file__).resolve().parent.parent
# AMP101 is in the preview tier: a run that must report it passes --preview
BAD_AMP101 = (ROOT / "fixtures" / "AMP101" / "bad_clip_between_backward_and_step.py").read_text(encoding="utf-8")
AMP101_LINE = next(i for i, line in enumerate(BAD_AMP101.splitlines(), 1) if "expect: AMP101" in line)
DEPRECATED = "import torch\n\nwith torch.cuda.amp.autocast(): pass\n"


def amplint(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "amplint", "check", "--isolated", "--no-cache", "--jobs", "1", *args],
        capture_output=True, text=True, cwd=cwd or ROOT, env=env, timeout=timeout,
    )


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if ": error: " in line]


# --- syntax errors -------------------------------------------------------------------------


def test_syntax_error_is_a_finding_like_line_and_other_files_are_still_checked(tmp_path: Path) -> None:
    (tmp_path / "a_broken.py").write_text("import torch\n\ndef f(:\n    pass\n")
    (tmp_path / "b_good.py").write_text(BAD_AMP101)
    proc = amplint("--preview", str(tmp_path))
    no_traceback(proc)
    assert proc.returncode == 2
    assert error_lines(proc) == [f"{tmp_path / 'a_broken.py'}:3:7: error: SyntaxError: invalid syntax"]
    assert f"{tmp_path / 'b_good.py'}:{AMP101_LINE}:" in proc.stdout  # the other file still reported


def test_syntax_error_in_a_file_with_amp_code_reports_libcst_position(tmp_path: Path) -> None:
    broken = BAD_AMP101 + "\nif True\n    pass\n"
    (tmp_path / "x.py").write_text(broken)
    proc = amplint(str(tmp_path / "x.py"))
    no_traceback(proc)
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert line == f"{tmp_path / 'x.py'}:{len(BAD_AMP101.splitlines()) + 2}:8: error: SyntaxError: expected ':'"


# --- encodings -----------------------------------------------------------------------------


def test_coding_cookie_and_bom_are_decoded(tmp_path: Path) -> None:
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + DEPRECATED.encode())
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + DEPRECATED.replace("\n", "\r\n").encode())
    proc = amplint(str(tmp_path), "--output-format", "json")
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    import json

    found = sorted((Path(d["filename"]).name, d["location"]["row"], d["code"]) for d in json.loads(proc.stdout))
    assert found == [("bom.py", 3, "AMP401"), ("latin.py", 5, "AMP401")]


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"# coding: utf-8\nx = '\xff\xfe'\n", "cannot decode as utf-8"),
        (b"x = '\xe9'\n", "cannot decode as utf-8"),  # no cookie: UTF-8 by default
        (b"# coding: ascii\nx = '\xc3\xa9'\n", "cannot decode as ascii"),
        (b"# coding: no-such-codec\nx = 1\n", "unknown encoding: no-such-codec"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
    ],
    ids=["bad-utf8-cookie", "bad-utf8-default", "bad-ascii", "unknown-codec", "binary"],
)
def test_undecodable_files_are_reported_and_the_rest_checked(tmp_path: Path, raw: bytes, reason: str) -> None:
    (tmp_path / "a.py").write_bytes(raw)
    (tmp_path / "b.py").write_text(DEPRECATED)
    proc = amplint(str(tmp_path))
    no_traceback(proc)
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert line.startswith(f"{tmp_path / 'a.py'}:1:1: error: ") and reason in line, line
    assert "AMP401" in proc.stdout


def test_empty_file_is_clean(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_bytes(b"")
    (tmp_path / "bom_only.py").write_bytes(b"\xef\xbb\xbf")
    proc = amplint(str(tmp_path))
    no_traceback(proc)
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


def test_fifty_thousand_lines(tmp_path: Path) -> None:
    filler = "".join(f"value_{i} = {i} * 2  # padding\n" for i in range(50_000 - len(BAD_AMP101.splitlines())))
    (tmp_path / "big.py").write_text(filler + BAD_AMP101)
    assert len((tmp_path / "big.py").read_text().splitlines()) == 50_000
    start = time.perf_counter()
    proc = amplint("--preview", str(tmp_path / "big.py"), "--output-format", "json", timeout=900)
    elapsed = time.perf_counter() - start
    no_traceback(proc)
    assert proc.returncode == 1
    import json

    rows = [(d["code"], d["location"]["row"]) for d in json.loads(proc.stdout)]
    assert ("AMP101", 50_000 - len(BAD_AMP101.splitlines()) + AMP101_LINE) in rows
    # NB: about 15 s on an idle 2-core machine (libcst's PositionProvider dominates); the
    # bound only catches a quadratic blow-up, which would take hours.
    assert elapsed < 600, f"50,000 lines took {elapsed:.1f}s"


# --- deep nesting ----------------------------------------------------------------------------
# libcst parses natively: 5,000 nested parentheses overflow its C stack (a segfault, not an
# exception), and its time grows with the square of the depth.  CPython refuses both too.


@pytest.mark.parametrize(
    "tail, reason",
    [
        # CPython refuses each of these: its words (issue 17 item 9: one clear error, CPython's)
        ("y = " + "(" * 5000 + "1" + ")" * 5000 + "\n", "SyntaxError: too many nested parentheses"),
        ("y = " + "f(" * 3000 + "1" + ")" * 3000 + "\n", "SyntaxError: too many nested parentheses"),
        # (deeper than any CPython from 3.10 to 3.13 compiles: 3.13 takes ~10,000 `+`, ~6,000 `not`)
        ("y = " + "+".join(["a"] * 12000) + "\n", "too deeply nested: Python"),
        ("y = " + "not " * 8000 + "x\n", "too deeply nested: Python"),
        ("y = a" + ".b" * 12000 + "\n", "too deeply nested: Python"),
        ("".join("    " * i + f"if c{i}:\n" for i in range(120)) + "    " * 120 + "pass\n", "too many levels of indentation"),
    ],
    ids=["parens-5000", "calls-3000", "chain-12000", "not-8000", "attribute-12000", "ifs-120"],
)
def test_nesting_beyond_what_python_accepts_is_an_error_not_a_crash(tmp_path: Path, tail: str, reason: str) -> None:
    (tmp_path / "deep.py").write_text(BAD_AMP101 + tail)
    (tmp_path / "other.py").write_text(DEPRECATED)
    proc = amplint(str(tmp_path), timeout=120)
    no_traceback(proc)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)  # a segfault would be -11
    (line,) = error_lines(proc)
    assert line.startswith(f"{tmp_path / 'deep.py'}:") and reason in line, line
    assert "AMP401" in proc.stdout


@pytest.mark.parametrize(
    "tail",
    [
        "y = " + "+".join(["a"] * 800) + "\n",
        "y = a" + ".b" * 800 + "\n",
        "y = " + "(" * 150 + "1" + ")" * 150 + "\n",
        "".join("    " * i + f"if c{i}:\n" for i in range(90)) + "    " * 90 + "pass\n",
    ],
    ids=["chain-800", "attribute-800", "parens-150", "ifs-90"],
)
def test_deep_but_legal_code_is_analysed(tail: str) -> None:
    """Deeper than Python's default recursion limit allows the visitors: retried with room."""
    crashes: list = []
    found = check_source(BAD_AMP101 + tail, "deep.py", select=["AMP101"], crashes=crashes)
    assert crashes == []
    assert [(d.code, d.span.line) for d in found] == [("AMP101", AMP101_LINE)]


# --- files that are not there, or not readable -----------------------------------------------


def test_missing_path_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text(DEPRECATED)
    proc = amplint(str(tmp_path / "nope.py"), str(tmp_path / "ok.py"))
    no_traceback(proc)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"amplint: error: {tmp_path / 'nope.py'}: no such file or directory"]
    assert "AMP401" in proc.stdout


def test_symlink_loops(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text(DEPRECATED)
    os.symlink("loop_b.py", tmp_path / "loop_a.py")
    os.symlink("loop_a.py", tmp_path / "loop_b.py")
    os.symlink(".", tmp_path / "again")  # a directory loop: walked once
    os.symlink(str(tmp_path), tmp_path / "sub_up")
    for args in ([str(tmp_path)], [str(tmp_path / "loop_a.py"), str(tmp_path / "ok.py")]):
        proc = amplint(*args)
        no_traceback(proc)
        assert proc.returncode == 2
        errors = error_lines(proc)
        assert errors and all("Too many levels of symbolic links" in e for e in errors), proc.stderr
        assert proc.stdout.count("AMP401") == 1, proc.stdout  # ok.py once, not once per loop


def test_unreadable_file_is_reported(tmp_path: Path, monkeypatch) -> None:
    """Tests run as root, where chmod 000 does not stop a read: the read itself is made to fail."""
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "b.py").write_text(DEPRECATED)
    real = sources.read_bytes

    def read_bytes(path: Path) -> bytes:
        if path.name == "a.py":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(sources, "read_bytes", read_bytes)
    result = runner.check_paths([tmp_path], Config(root=tmp_path), jobs=1)
    by_name = {Path(f.path).name: f for f in result.files}
    assert by_name["a.py"].error is not None and by_name["a.py"].error.reason == "cannot read: Permission denied"
    assert [d.code for d in by_name["b.py"].diagnostics] == ["AMP401"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads chmod-000 files anyway")
def test_chmod_000_file_through_the_cli(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "a.py").chmod(0)
    proc = amplint(str(tmp_path))
    no_traceback(proc)
    assert proc.returncode == 2 and "Permission denied" in proc.stderr


def test_file_deleted_while_the_run_is_going_on(tmp_path: Path, monkeypatch) -> None:
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text(DEPRECATED)
    discover = runner.discover

    def discover_then_delete(*args, **kwargs):
        found = discover(*args, **kwargs)
        (tmp_path / "b.py").unlink()  # gone between discovery and reading
        return found

    monkeypatch.setattr(runner, "discover", discover_then_delete)
    result = runner.check_paths([tmp_path], Config(root=tmp_path), jobs=1)
    by_name = {Path(f.path).name: f for f in result.files}
    assert "no longer exists" in by_name["b.py"].error.reason
    assert [d.code for d in by_name["a.py"].diagnostics] == ["AMP401"]
    assert [d.code for d in by_name["c.py"].diagnostics] == ["AMP401"]


def test_file_deleted_before_its_fix_is_written(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "a.py"
    target.write_text(DEPRECATED)
    real_fix_text = runner.fix_text

    def fix_then_delete(*args, **kwargs):
        outcome = real_fix_text(*args, **kwargs)
        target.unlink(missing_ok=True)
        return outcome

    monkeypatch.setattr(runner, "fix_text", fix_then_delete)
    result = runner.check_paths([target], Config(root=tmp_path), fix=True, jobs=1)
    (f,) = result.files
    assert not f.written and not target.exists()
    assert any("no longer exists" in w for w in f.warnings), f.warnings


# --- an internal error in one rule -------------------------------------------------------------

CRASHING_RULE_DRIVER = '''
import sys
from amplint import cli, registry
from amplint.config import Config
from amplint.rules._base import Rule


class ExplodesOnPurpose(Rule):
    """
    ## What it does
    Nothing: it raises, so the test can see how an internal error is reported.

    ## Why is this bad?
    It is a test double.

    ## Example
    ```python
    x = 1
    ```
    """

    code = "AMP999"
    name = "explodes-on-purpose"
    message = "never reported"
    requires_any = ("torch",)

    def check(self):
        if self.model.path.endswith("a.py"):
            raise ZeroDivisionError("deliberate failure in a test rule")


original = Config.rules_for
Config.rules_for = lambda self, path: (ExplodesOnPurpose, *original(self, path))
sys.exit(cli.main(sys.argv[1:]))
'''


def test_internal_error_in_one_rule_is_reported_and_the_rest_still_runs(tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(CRASHING_RULE_DRIVER)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(DEPRECATED)
    (src / "b.py").write_text(DEPRECATED)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(driver), "check", "--isolated", "--no-cache", "--output-format", "json", str(src)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )
    no_traceback(proc)
    assert proc.returncode == 2
    assert f"internal error in AMP999 on {src / 'a.py'}: ZeroDivisionError: deliberate failure" in proc.stderr
    assert "please report" in proc.stderr
    assert proc.stderr.count("internal error") == 1  # b.py is fine; a.py reported once
    import json

    found = sorted((Path(d["filename"]).name, d["code"]) for d in json.loads(proc.stdout))
    assert found == [("a.py", "AMP401"), ("b.py", "AMP401")]  # AMP401 still ran on a.py


def test_internal_error_outside_the_rules_is_reported_per_file(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "b.py").write_text(DEPRECATED)
    import amplint.analysis.model as model

    build = model.ModuleModel.build

    def broken_build(module, path, package, **kwargs):
        if path.endswith("a.py"):
            raise KeyError("model bug")
        return build(module, path, package, **kwargs)

    monkeypatch.setattr(model.ModuleModel, "build", staticmethod(broken_build))
    result = runner.check_paths([tmp_path], Config(root=tmp_path), jobs=1)
    by_name = {Path(f.path).name: f for f in result.files}
    assert [(c.code, c.error) for c in by_name["a.py"].crashes] == [("model", "KeyError: 'model bug'")]
    assert [d.code for d in by_name["b.py"].diagnostics] == ["AMP401"]


def test_syntax_check_of_prefiltered_files_executes_nothing(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as info:
        check_source("import os\nos.system('touch x')\nreturn 1 +\n", str(tmp_path / "m.py"))
    assert info.value.line == 3
    assert not (ROOT / "x").exists() and not (tmp_path / "x").exists()


def test_decode_reports_why() -> None:
    with pytest.raises(sources.UnreadableSource, match="binary file"):
        sources.decode(b"a\x00b", "x.py")


def test_a_file_amplint_crashed_on_is_reported_as_not_analysed_not_clean(tmp_path: Path, monkeypatch) -> None:
    """A bug of ours on one file: the run goes on, and every report says the file was not
    analysed (an AMP000 row, SARIF's executionSuccessful false), never that it is clean."""
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "b.py").write_text(DEPRECATED)
    real = runner._check_file

    def crash_on_a(path, *args, **kwargs):
        if Path(path).name == "a.py":
            raise RecursionError("a bug of ours")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(runner, "_check_file", crash_on_a)
    result = runner.check_paths([tmp_path / "a.py", tmp_path / "b.py"], Config(root=tmp_path), jobs=1)
    by_name = {Path(f.path).name: f for f in result.files}
    assert by_name["a.py"].error is not None and "internal error (RecursionError)" in by_name["a.py"].error.reason
    assert [c.code for c in by_name["a.py"].crashes] == ["amplint"]
    assert [d.code for d in by_name["b.py"].diagnostics] == ["AMP401"]
