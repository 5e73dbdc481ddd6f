"""The CLI flags users know from Ruff: --quiet/--silent, --fix-only, --exit-non-zero-on-fix,
--add-noqa, `amplint version`, the fixed-and-remaining summary, and what --statistics refuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import __version__, output
from amplint.diagnostics import Diagnostic, Span

# AMP401 twice (the autocast's fix is safe; the GradScaler's unsafe: the class it builds is
# another) and AMP101 (unsafe fix): three findings, one fixable by --fix (AMP101 is in the
# preview tier: the checks of TRAIN run with --preview)
TRAIN = """\
import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
for _ in range(2):
    with torch.cuda.amp.autocast():
        loss = model(torch.randn(2, 4)).sum()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""


def amplint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amplint", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def test_summary_counts_fixed_and_remaining_as_ruff_does(project: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "--fix", "train.py", cwd=project)
    assert proc.returncode == 1
    assert "Found 3 errors (1 fixed, 2 remaining)." in proc.stdout.splitlines()
    assert output.summary(0, 4, 0, 0) == "Found 4 errors (4 fixed, 0 remaining)."
    assert output.summary(1, 0, 0, 0) == "Found 1 error."
    assert output.summary(0, 0, 0, 0) == "All checks passed!"


def test_exit_non_zero_on_fix(project: Path) -> None:
    (project / "dep.py").write_text("import torch\nwith torch.cuda.amp.autocast(): pass\n")
    assert amplint("check", "--isolated", "--fix", "dep.py", cwd=project).returncode == 0
    (project / "dep.py").write_text("import torch\nwith torch.cuda.amp.autocast(): pass\n")
    assert amplint("check", "--isolated", "--fix", "--exit-non-zero-on-fix", "dep.py", cwd=project).returncode == 1
    # nothing left to fix: 0 again
    assert amplint("check", "--isolated", "--fix", "--exit-non-zero-on-fix", "dep.py", cwd=project).returncode == 0


def test_fix_only_fixes_and_neither_reports_nor_fails_on_the_rest(project: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "--fix-only", "train.py", cwd=project)
    assert (proc.returncode, proc.stdout) == (0, "Fixed 1 error.\n")
    assert "torch.cuda.amp.autocast" not in (project / "train.py").read_text()
    again = amplint("check", "--isolated", "--preview", "--fix-only", "--exit-non-zero-on-fix", "train.py", cwd=project)
    assert (again.returncode, again.stdout) == (0, "")  # AMP101 is left, but that is the reporting hook's job


def test_quiet_prints_findings_without_summary_and_silent_prints_nothing(project: Path) -> None:
    quiet = amplint("check", "--isolated", "--preview", "--quiet", "train.py", cwd=project)
    assert quiet.returncode == 1 and "train.py:5:10: AMP401" in quiet.stdout and "Found" not in quiet.stdout
    silent = amplint("check", "--isolated", "--preview", "-s", "train.py", cwd=project)
    assert (silent.returncode, silent.stdout) == (1, "")
    assert amplint("check", "--isolated", "--preview", "-q", "-s", "train.py", cwd=project).returncode == 2  # one or the other


def test_add_noqa_silences_every_current_finding_once(project: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "--add-noqa", "train.py", cwd=project)
    assert (proc.returncode, proc.stdout) == (0, "Added 3 noqa directives.\n")
    text = (project / "train.py").read_text()
    assert "scaler = torch.cuda.amp.GradScaler()  # noqa: AMP401\n" in text
    assert "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # noqa: AMP101\n" in text
    assert amplint("check", "--isolated", "--preview", "train.py", cwd=project).returncode == 0
    assert amplint("check", "--isolated", "--preview", "--add-noqa", "train.py", cwd=project).stdout == "Added 0 noqa directives.\n"
    # and AMP001 agrees that every one of them is in use
    assert amplint("check", "--isolated", "--preview", "--extend-select", "AMP001", "train.py", cwd=project).returncode == 0


def test_add_noqa_refuses_what_it_cannot_mean(project: Path) -> None:
    assert amplint("check", "--add-noqa", "--fix", "train.py", cwd=project).returncode == 2
    assert amplint("check", "--add-noqa", "-", cwd=project).returncode == 2


def test_version_command(project: Path) -> None:
    assert amplint("version", cwd=project).stdout == f"amplint {__version__}\n"
    assert json.loads(amplint("version", "--output-format", "json", cwd=project).stdout)["version"] == __version__
    assert amplint("--version", cwd=project).stdout == f"amplint {__version__}\n"


@pytest.mark.parametrize("fmt", ["sarif", "github"])
def test_statistics_refuses_formats_made_for_findings(project: Path, fmt: str) -> None:
    proc = amplint("check", "--isolated", "--statistics", "--output-format", fmt, "train.py", cwd=project)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--statistics" in proc.stderr and fmt in proc.stderr


def test_statistics_json_lines_is_one_row_per_line(project: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "--statistics", "--output-format", "json-lines", "train.py", cwd=project)
    assert [json.loads(line)["code"] for line in proc.stdout.splitlines()] == ["AMP401", "AMP101"]


def test_json_keys_are_ruffs(project: Path) -> None:
    (project / "multi.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler(\n    enabled=True,\n)\n")
    (row,) = json.loads(amplint("check", "--isolated", "--output-format", "json", "multi.py", cwd=project).stdout)
    assert list(row) == [
        "cell", "code", "end_location", "filename", "fix", "location", "message", "noqa_row", "notes", "related", "url"
    ]
    assert list(row["fix"]) == ["applicability", "edits", "message"]
    assert list(row["fix"]["edits"][0]) == ["content", "end_location", "location"]
    # noqa_row: the statement's last line, where a comment covers all of it
    assert (row["cell"], row["location"]["row"], row["noqa_row"]) == (None, 2, 4)
    assert row["url"] is None  # no public home yet: no dead link (`amplint explain AMP401` is the page)


def test_sarif_uris_are_relative_to_the_repository_root_and_results_have_fingerprints(project: Path) -> None:
    (project / ".git").mkdir()  # a work tree's root
    sub = project / "src" / "pkg"
    sub.mkdir(parents=True)
    (sub / "train.py").write_text(TRAIN)
    (sub / "moved.py").write_text(TRAIN.replace("import torch\n", "import torch\n\n\n"))  # same code, lines moved
    proc = amplint("check", "--isolated", "--preview", "--output-format", "sarif", ".", cwd=sub)
    assert proc.returncode == 1, proc.stderr
    log = json.loads(proc.stdout)
    run = log["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == project.resolve().as_uri() + "/"
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert uris == {"src/pkg/train.py", "src/pkg/moved.py"}
    prints = {}
    for r in run["results"]:
        uri = r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        prints.setdefault(uri, []).append(r["partialFingerprints"]["amplint/v1"])
    assert all(len(set(v)) == len(v) for v in prints.values())  # two AMP401s on different lines differ
    # moving a finding's line does not change its fingerprint; another file does
    moved = json.loads(amplint("check", "--isolated", "--preview", "--output-format", "sarif", "moved.py", cwd=sub).stdout)
    assert [r["partialFingerprints"]["amplint/v1"] for r in moved["runs"][0]["results"]] == prints["src/pkg/moved.py"]
    assert set(prints["src/pkg/moved.py"]).isdisjoint(prints["src/pkg/train.py"])


def test_fingerprint_ignores_whitespace_and_counts_repeats() -> None:
    d = Diagnostic("AMP401", "m", "a.py", Span(3, 0, 3, 1))
    assert output.fingerprint(d, "a.py", "x = 1", 0) == output.fingerprint(d, "a.py", "   x  =  1", 0)
    assert output.fingerprint(d, "a.py", "x = 1", 0) != output.fingerprint(d, "a.py", "x = 1", 1)


def test_explain_amp000_says_what_the_code_means(capsys) -> None:
    """AMP000 appears in JSON, SARIF and flake8 output; `explain` answered "unknown rule"
    (hostile pass 19)."""
    from amplint.cli import main

    assert main(["explain", "AMP000"]) == 0
    assert "not analysed" in capsys.readouterr().out
