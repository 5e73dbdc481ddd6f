"""verify and compare read their command line as written: where the command starts, which output
paths can be written (said before any run, exit 2), what the script's own arguments are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from amplint.runtime import cli, compare, launch  # noqa: E402

pytestmark = pytest.mark.runtime

PY = sys.executable
SCRIPTS = Path(__file__).resolve().parent / "scripts"

ARGV_SCRIPT = """\
import json, sys
import torch
json.dump(sys.argv[1:], open(sys.argv[1], "w"))
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


# --- arguments after the script ----------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, command",
    [
        (["train.py", "--", "--flag"], ["train.py", "--", "--flag"]),
        (["--steps", "2", "train.py", "--lr", "3", "--", "--flag"], ["train.py", "--lr", "3", "--", "--flag"]),
        (["--steps", "2", "--", "python", "train.py", "--", "--flag"], ["python", "train.py", "--", "--flag"]),
        (["--steps", "2", "--", "torchrun", "train.py"], ["torchrun", "train.py"]),
    ],
)
@pytest.mark.parametrize("tool", [cli, compare], ids=["verify", "compare"])
def test_a_double_dash_after_the_script_belongs_to_the_script(tool, argv, command):
    args = tool.parse(argv)
    expected = [PY, *command] if command[0].endswith(".py") else command
    assert args.command == expected
    assert args.steps == (2 if "--steps" in argv else args.steps)


def test_verify_shorthand_passes_a_double_dash_and_what_follows_to_the_script(tmp_path):
    script, seen = tmp_path / "argv.py", tmp_path / "argv.json"
    script.write_text(ARGV_SCRIPT)
    code = cli.verify(["--no-progress", "--steps", "2", str(script), str(seen), "--", "--flag"])
    assert code == 3  # it ran (an fp32 loop: nothing of mixed precision to verify)
    assert json.loads(seen.read_text()) == [str(seen), "--", "--flag"]


# --- output paths that cannot be written: exit 2 before the run ---------------------------------
def _unwritable_cases(tmp: Path) -> list[tuple[str, Path, str]]:
    """(option, path, what the message says): cases that fail for root too."""
    a_file = tmp / "file.txt"
    a_file.write_text("x")
    a_dir = tmp / "a_dir"
    a_dir.mkdir()
    return [
        ("--report", a_file / "report.json", "not a directory"),
        ("--report", a_file / "deeper" / "report.json", "not a directory"),
        ("--report", a_dir, "is a directory"),
        ("--evidence-dir", a_file, "not a directory"),
        ("--evidence-dir", a_file / "evidence", "not a directory"),
    ]


def test_verify_refuses_an_unwritable_report_or_evidence_dir_before_running(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launch, "run_instrumented", lambda *a, **k: pytest.fail("the run started"))
    for option, path, why in _unwritable_cases(tmp_path):
        code = cli.verify(["--no-progress", option, str(path), str(SCRIPTS / "amp_correct.py")])
        err = capsys.readouterr().err
        assert code == 2, (option, path)
        assert f"{option}: {path}" in err and why in err, err


def test_compare_refuses_an_unwritable_report_or_plot_before_running(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(compare, "run_variant", lambda *a, **k: pytest.fail("a run started"))
    cases = [(o, p, w) for o, p, w in _unwritable_cases(tmp_path) if o == "--report"]
    cases.append(("--plot", tmp_path / "a_dir", "is a directory"))
    for option, path, why in cases:
        code = compare.main([option, str(path), "--", PY, str(SCRIPTS / "amp_correct.py")])
        err = capsys.readouterr().err
        assert code == 2, (option, path)
        assert f"{option}: {path}" in err and why in err, err


def test_writable_output_paths_are_accepted_and_nothing_is_created(tmp_path):
    (tmp_path / "exists.json").write_text("{}")
    for path, folder in [(tmp_path / "new" / "deeper" / "r.json", False), (tmp_path / "exists.json", False),
                         (tmp_path / "evidence", True), (tmp_path, True)]:
        assert launch.unwritable(path, directory=folder) is None, path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists.json"]
    assert (tmp_path / "exists.json").read_text() == "{}"


# --- numbers that cannot mean anything -------------------------------------------------------------
@pytest.mark.parametrize("tolerance", ["nan", "inf", "0", "-0.1"])
def test_compare_refuses_a_tolerance_no_deviation_could_exceed_before_running(tolerance, monkeypatch, capsys):
    """A NaN tolerance compared false with every deviation, so a diverging run read as within
    tolerance (exit 0); inf would do the same.  Refused with exit 2 before any run."""
    monkeypatch.setattr(compare, "run_variant", lambda *a, **k: pytest.fail("a run started"))
    code = compare.main(["--tolerance", tolerance, "--", PY, str(SCRIPTS / "amp_correct.py")])
    assert code == 2
    assert "--tolerance" in capsys.readouterr().err
