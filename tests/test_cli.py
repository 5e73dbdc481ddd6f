"""The `amplint` command as editors and scripts use it: stdin, rules, explain, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.docs import rule_page
from amplint.registry import ALL_RULES, BY_CODE

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "fixtures" / "AMP101" / "bad_clip_between_backward_and_step.py"  # AMP101 is a preview rule: --preview
DEPRECATED = "import torch\n\nwith torch.cuda.amp.autocast(): pass\n"


def _expected_line(path: Path) -> int:
    """The line of the fixture's `# expect: AMP101` comment (fixtures get edited; do not hard-code)."""
    (line,) = [i for i, text in enumerate(path.read_text().splitlines(), 1) if "# expect: AMP101" in text]
    return line


def amplint(*args: str, cwd: Path = ROOT, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "amplint", *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120
    )


def test_stdin_reports_under_the_stdin_filename() -> None:
    proc = amplint("check", "--isolated", "--preview", "--output-format", "json", "-", "--stdin-filename", "pkg/train.py",
                   stdin=BAD.read_text())
    assert proc.returncode == 1, proc.stderr
    (d,) = json.loads(proc.stdout)
    assert (d["filename"], d["code"], d["location"]["row"]) == ("pkg/train.py", "AMP101", _expected_line(BAD))


def test_stdin_text_shows_the_source_line() -> None:
    proc = amplint("check", "--isolated", "--preview", "-", stdin=BAD.read_text())
    assert proc.returncode == 1
    assert f"-:{_expected_line(BAD)}:5: AMP101" in proc.stdout
    assert "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)" in proc.stdout


def test_stdin_filename_picks_the_config_and_per_file_ignores(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nper-file-ignores = { "legacy/*" = ["AMP401"] }\n')
    (tmp_path / "legacy").mkdir()
    ignored = amplint("check", "-", "--stdin-filename", str(tmp_path / "legacy" / "old.py"), stdin=DEPRECATED)
    assert ignored.returncode == 0, ignored.stdout
    reported = amplint("check", "-", "--stdin-filename", str(tmp_path / "new.py"), stdin=DEPRECATED)
    assert reported.returncode == 1 and "AMP401" in reported.stdout


def test_stdin_fix_writes_the_fixed_source_to_stdout() -> None:
    proc = amplint("check", "--isolated", "--fix", "-", stdin=DEPRECATED)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == 'import torch\n\nwith torch.autocast("cuda", dtype=torch.float16, cache_enabled=True): pass\n'
    assert "Found 1 error (1 fixed, 0 remaining)." in proc.stderr  # Ruff counts the fixed ones too


def test_stdin_syntax_error_is_exit_2_and_fix_gives_the_text_back() -> None:
    proc = amplint("check", "--isolated", "--fix", "-", stdin="def broken(:\n")
    assert proc.returncode == 2
    assert proc.stdout == "def broken(:\n"
    assert "SyntaxError" in proc.stderr


BOM = b"\xef\xbb\xbf"
FIXABLE = b"import torch\r\nwith torch.cuda.amp.autocast(): pass\r\n"
FIXED = b'import torch\r\nwith torch.autocast("cuda", dtype=torch.float16, cache_enabled=True): pass\r\n'


def _fix_stdin(data: bytes, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amplint", "check", "--isolated", "--fix", *args, "-"], cwd=ROOT,
                          input=data, capture_output=True, timeout=120)


@pytest.mark.parametrize(
    "given, expected",
    [
        (BOM + FIXABLE, BOM + FIXED),  # the BOM and the CRLF endings stay
        (b"# -*- coding: latin-1 -*-\nname = '\xe9'\n" + FIXABLE, b"# -*- coding: latin-1 -*-\nname = '\xe9'\n" + FIXED),
        (BOM + b"import torch\r\nx = 1\r\n", BOM + b"import torch\r\nx = 1\r\n"),  # nothing to fix
        (BOM + b"def broken(:\r\n", BOM + b"def broken(:\r\n"),  # cannot be parsed: given back
    ],
    ids=["bom-and-crlf", "latin-1-cookie", "nothing-to-fix", "syntax-error"],
)
def test_stdin_fix_writes_the_bytes_of_the_source_as_it_came(given: bytes, expected: bytes) -> None:
    """An editor replaces its buffer with what `--fix -` prints: a dropped BOM or a re-encoded
    file (UTF-8 under a latin-1 cookie) would be written back into it."""
    assert _fix_stdin(given).stdout == expected


def test_stdin_notebook_fix_keeps_its_bom(tmp_path: Path) -> None:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": ["import torch\n", "with torch.cuda.amp.autocast(): pass\n"]}
    nb = {"cells": [cell], "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    proc = _fix_stdin(BOM + json.dumps(nb, indent=1).encode() + b"\n", "--stdin-filename", "nb.ipynb")
    assert proc.stdout.startswith(BOM + b"{") and b'torch.autocast(\\"cuda\\"' in proc.stdout, proc.stderr


def test_rules_lists_every_code_with_default_and_fix() -> None:
    proc = amplint("rules", "--format", "json")
    assert proc.returncode == 0
    rows = json.loads(proc.stdout)
    assert [r["code"] for r in rows] == sorted(r.code for r in ALL_RULES)
    for row in rows:
        rule = BY_CODE[row["code"]]
        assert row["name"] == rule.name
        assert row["default"] is rule.default_enabled
        assert row["fix"] == rule.fix_availability.value
        assert row["tier"] in ("stable", "preview")
        assert set(row) >= {"precision", "recall", "measured"}  # None where not scored
        assert row["summary"]
    text = amplint("rules").stdout.splitlines()
    rule_lines = [line for line in text if line[:3] == "AMP"]
    assert len(rule_lines) == len(ALL_RULES)
    assert text[0].split()[:4] == ["code", "name", "default", "tier"] and "--preview" in text[-1]


def test_explain_prints_the_rule_page() -> None:
    by_code = amplint("explain", "AMP101")
    by_name = amplint("explain", "clip-before-unscale")
    assert by_code.returncode == by_name.returncode == 0
    assert by_code.stdout == by_name.stdout == rule_page(BY_CODE["AMP101"]) + "\n"
    assert by_code.stdout == (ROOT / "rules" / "AMP101.md").read_text() + "\n"
    unknown = amplint("explain", "AMP999")
    assert unknown.returncode == 2 and "AMP999" in unknown.stderr


def test_exit_codes() -> None:
    assert amplint("check", "--isolated", "--preview", str(BAD)).returncode == 1
    good = ROOT / "fixtures" / "AMP101" / "good_unscale_then_clip.py"
    assert amplint("check", "--isolated", "--preview", str(good)).returncode == 0
    assert amplint("check", "--isolated", "--preview", "--exit-zero", str(BAD)).returncode == 0
    missing = amplint("check", "--isolated", "no/such/file.py")
    assert missing.returncode == 2 and "no/such/file.py" in missing.stderr
    unknown = amplint("check", "--isolated", "--select", "AMP999", str(BAD))
    assert unknown.returncode == 2 and "'AMP999'" in unknown.stderr
    assert amplint("check", "--output-format", "yaml", str(BAD)).returncode == 2


def test_stdin_cannot_mix_with_paths() -> None:
    proc = amplint("check", "-", str(BAD), stdin="")
    assert proc.returncode == 2 and "stdin" in proc.stderr


def test_broken_pipe_is_quiet() -> None:
    """`amplint rules | head -1` must not print a traceback."""
    proc = subprocess.run(f"{sys.executable} -m amplint rules | head -1", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("code ")  # the header line of the table
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [["rules"], ["rules", "--format", "json"], ["explain", "AMP101"], ["version"]])
def test_every_command_says_when_its_output_cannot_be_written(command: list[str]) -> None:
    """`> /dev/full`: `check` said so with exit 2; the other commands printed a traceback and
    exited 1 (hostile pass 11)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "amplint", *command], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot write the output" in proc.stderr
