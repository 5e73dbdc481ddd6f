"""`[tool.amplint]`: found from the checked files upward, overridden by flags, validated loudly."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amplint.cli import main
from amplint.config import Config, ConfigError, from_table, load

ROOT = Path(__file__).resolve().parent.parent
CLIP = (ROOT / "fixtures" / "AMP101" / "bad_clip_between_backward_and_step.py").read_text()  # AMP101 at 15:5
DEPRECATED = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"  # AMP401 at 3:10


def amplint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real CLI entry point, in-process (a subprocess per call would cost ~1 s each)."""
    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(args))
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(list(args), rc, out.getvalue(), err.getvalue())


def test_cli_in_a_subprocess_agrees(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nselect = ["AMP401"]\n')
    (tmp_path / "a.py").write_text(CLIP + "\n" + DEPRECATED)
    proc = subprocess.run([sys.executable, "-m", "amplint", "check", "--output-format", "json", "."], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stdout == amplint("check", "--output-format", "json", ".", cwd=tmp_path).stdout


def findings(*args: str, cwd: Path) -> set[tuple[str, str]]:
    proc = amplint("check", "--output-format", "json", *args, cwd=cwd)
    assert proc.returncode in (0, 1), proc.stderr
    return {(Path(d["filename"]).as_posix(), d["code"]) for d in json.loads(proc.stdout)}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project: src/ with two findings, legacy/ with a deprecated import, build/ generated."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(CLIP)
    (tmp_path / "src" / "old.py").write_text(DEPRECATED)
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "amp.py").write_text(DEPRECATED)
    return tmp_path


def test_defaults_without_config(project: Path) -> None:
    assert findings(".", cwd=project) == {
        ("src/train.py", "AMP101"), ("src/old.py", "AMP401"), ("legacy/amp.py", "AMP401"),
    }


def test_select_ignore_per_file_ignores_exclude(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.amplint]\nselect = ["AMP4"]\nper-file-ignores = { "legacy/*" = ["AMP401"] }\n'
    )
    assert findings(".", cwd=project) == {("src/old.py", "AMP401")}
    (project / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP401"]\n')
    assert findings(".", cwd=project) == {("src/train.py", "AMP101")}
    (project / "pyproject.toml").write_text('[tool.amplint]\nextend-exclude = ["legacy/"]\n')
    assert findings(".", cwd=project) == {("src/train.py", "AMP101"), ("src/old.py", "AMP401")}
    (project / "pyproject.toml").write_text('[tool.amplint]\nexclude = ["src"]\n')
    assert findings(".", cwd=project) == {("legacy/amp.py", "AMP401")}
    (project / "pyproject.toml").write_text('[tool.amplint]\nselect = ["AMP101"]\nextend-select = ["deprecated-cuda-amp"]\n')
    assert findings("src", cwd=project) == {("src/train.py", "AMP101"), ("src/old.py", "AMP401")}


def test_cli_flags_override_the_file(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.amplint]\nselect = ["AMP4"]\n')
    assert findings("--select", "AMP101", ".", cwd=project) == {("src/train.py", "AMP101")}
    assert findings("--ignore", "AMP401", ".", cwd=project) == set()
    assert findings("--extend-select", "AMP1", "src", cwd=project) == {("src/train.py", "AMP101"), ("src/old.py", "AMP401")}
    assert findings("--extend-exclude", "legacy", ".", cwd=project) == {("src/old.py", "AMP401")}


def test_config_is_found_from_the_checked_files_upward(project: Path, tmp_path_factory) -> None:
    (project / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP401"]\n')
    (project / "legacy" / "pyproject.toml").write_text('[tool.amplint]\nselect = ["AMP401"]\n')
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    # Run from an unrelated directory: what counts is where the files are, not the cwd.
    got = findings(str(project / "src"), str(project / "legacy" / "amp.py"), cwd=elsewhere)
    assert {(Path(f).name, c) for f, c in got} == {("train.py", "AMP101"), ("amp.py", "AMP401")}
    # A pyproject.toml without [tool.amplint] is skipped on the way up.
    (project / "src" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert {c for _, c in findings(str(project / "src"), cwd=elsewhere)} == {"AMP101"}


def test_a_sub_project_inside_a_walked_directory_uses_its_own_config(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP401"]\n')
    (project / "legacy" / "pyproject.toml").write_text('[tool.amplint]\nselect = ["AMP401"]\n')
    assert findings(".", cwd=project) == {("src/train.py", "AMP101"), ("legacy/amp.py", "AMP401")}
    (project / "legacy" / "pyproject.toml").write_text('[tool.amplint]\nextend-exclude = ["amp.py"]\n')
    assert findings(".", cwd=project) == {("src/train.py", "AMP101")}


def test_config_path_and_isolated(project: Path, tmp_path_factory) -> None:
    (project / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP401"]\n')
    other = tmp_path_factory.mktemp("cfg") / "amplint.toml"
    other.write_text('select = ["AMP401"]\n')  # a bare table, like ruff.toml
    assert {c for _, c in findings("--config", str(other), ".", cwd=project)} == {"AMP401"}
    assert {c for _, c in findings("--isolated", ".", cwd=project)} == {"AMP101", "AMP401"}


@pytest.mark.parametrize(
    "table, named",
    [
        ('selct = ["AMP101"]', "selct"),
        ('select = ["AMP999"]', "AMP999"),
        ('ignore = ["clip-before-unscal"]', "clip-before-unscal"),
        ('per-file-ignores = { "x/*" = ["AMP9"] }', "AMP9"),
        ('select = "AMP101"', "select"),
        ("respect-gitignore = 1", "respect-gitignore"),
    ],
)
def test_unknown_keys_and_codes_are_clear_errors(project: Path, table: str, named: str) -> None:
    (project / "pyproject.toml").write_text(f"[tool.amplint]\n{table}\n")
    proc = amplint("check", ".", cwd=project)
    assert proc.returncode == 2
    assert named in proc.stderr and "pyproject.toml" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_invalid_toml_and_unknown_flag_codes(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.amplint\n")
    proc = amplint("check", "--config", str(project / "pyproject.toml"), ".", cwd=project)
    assert proc.returncode == 2 and "invalid TOML" in proc.stderr
    proc = amplint("check", "--isolated", "--ignore", "AMP1,AMP77", ".", cwd=project)
    assert proc.returncode == 2 and "'AMP77'" in proc.stderr


def test_from_table_unit() -> None:
    config = from_table({"select": ["AMP1"], "per-file-ignores": {"tests/*": ["AMP101"]}}, Path("/p/pyproject.toml"))
    assert config.root == Path("/p")
    assert [r.code for r in config.rules_for("/p/tests/test_x.py")] == [
        r.code for r in config.rules() if r.code != "AMP101"
    ]
    with pytest.raises(ConfigError, match="unknown .* key.*: bogus"):
        from_table({"bogus": 1})


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_directory_walks_honour_gitignore(project: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    (project / ".gitignore").write_text("legacy/\n*_old.py\n!keep_old.py\n")
    (project / "src" / "gen_old.py").write_text(DEPRECATED)
    (project / "src" / "keep_old.py").write_text(DEPRECATED)
    (project / "src" / "nested").mkdir()
    (project / "src" / "nested" / ".gitignore").write_text("secret.py\n")
    (project / "src" / "nested" / "secret.py").write_text(DEPRECATED)
    assert findings(".", cwd=project) == {
        ("src/train.py", "AMP101"), ("src/old.py", "AMP401"), ("src/keep_old.py", "AMP401"),
    }
    # opting out walks everything again
    assert ("legacy/amp.py", "AMP401") in findings("--no-respect-gitignore", ".", cwd=project)
    # a file named explicitly is checked anyway (as ruff does), unless --force-exclude
    assert findings("legacy/amp.py", cwd=project) == {("legacy/amp.py", "AMP401")}
    assert findings("--force-exclude", "legacy/amp.py", "src/nested/secret.py", cwd=project) == set()


def test_gitignore_outside_a_work_tree_is_not_consulted(project: Path) -> None:
    (project / ".gitignore").write_text("legacy/\n")
    if any((p / ".git").exists() for p in (project, *project.parents)):
        pytest.skip("the temporary directory is inside a git work tree")
    assert ("legacy/amp.py", "AMP401") in findings(".", cwd=project)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_gitignore_cost_is_one_git_call_per_directory(tmp_path: Path) -> None:
    """200 directories: the walk stays well under a second or two of git time."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    for i in range(200):
        d = tmp_path / f"d{i}"
        d.mkdir()
        (d / "m.py").write_text("x = 1\n")
    config = Config(root=tmp_path)
    start = time.perf_counter()
    from amplint.runner import discover

    files, _ = discover([tmp_path], config)
    elapsed = time.perf_counter() - start
    assert len(files) == 200
    assert elapsed < 10, f"gitignore lookups took {elapsed:.1f}s"


def test_load_reads_pyproject_table_or_bare_file(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nselect = ["AMP101"]\n')
    assert load(tmp_path / "pyproject.toml").select == ("AMP101",)


# --- target-torch (issue 14): validated, inferred from the project's torch floor ----------------


@pytest.mark.parametrize("value", ["banana", "2", "v2.4", "2.4.x", ""])
def test_target_torch_must_be_a_version(value: str) -> None:
    with pytest.raises(ConfigError, match=r'target-torch must be a torch version like "2.4", got'):
        from_table({"target-torch": value})


def test_target_torch_as_a_toml_number_is_refused() -> None:
    """`target-torch = 2.10` would be the float 2.1: a string is required."""
    with pytest.raises(ConfigError, match="target-torch"):
        from_table({"target-torch": 2.4})


def test_target_torch_is_read_and_parsed() -> None:
    assert from_table({"target-torch": "2.1"}).torch_version == (2, 1)
    assert from_table({"target-torch": "2.10.1"}).torch_version == (2, 10)
    assert Config().torch_version is None


@pytest.mark.parametrize(
    "dependencies, floor",
    [
        (["torch>=2.1"], "2.1"),
        (["numpy", "torch >=2.2.0, <3"], "2.2"),
        (["torch~=2.3.1"], "2.3"),
        (["torch==2.0.*"], "2.0"),
        (["torch>1.13"], "1.13"),
        (["Torch[cuda] (>=2.1)"], "2.1"),
        (["torch>=2.2; sys_platform == 'linux'", "torch>=2.0; sys_platform == 'darwin'"], "2.0"),
        (["torch"], None),
        (["torch<3"], None),
        (["torch>=2.2", "torch"], None),  # some environment takes any torch
        (["torchvision>=0.16"], None),
        ([], None),
    ],
)
def test_the_torch_floor_of_the_dependencies(dependencies: list[str], floor: str | None) -> None:
    from amplint.config import torch_floor

    assert torch_floor({"project": {"dependencies": dependencies}}) == floor


def test_optional_dependencies_count_only_without_a_torch_dependency() -> None:
    from amplint.config import torch_floor

    extras = {"optional-dependencies": {"torch": ["torch>=1.13"], "dev": ["pytest"]}}
    assert torch_floor({"project": extras}) == "1.13"
    assert torch_floor({"project": {"dependencies": ["torch>=2.2"], **extras}}) == "2.2"


def test_target_torch_is_inferred_and_decides_the_fix(tmp_path: Path) -> None:
    """The project says `torch>=2.1`: `torch.amp.GradScaler("cuda")` (torch 2.3) is no fix for it."""
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n')
    proc = amplint("check", "--no-cache", "--show-fixes", "a.py", cwd=tmp_path)  # no [tool.amplint] at all
    assert '`torch.amp.GradScaler("cuda")` needs torch 2.3, target-torch is 2.1' in proc.stdout
    assert "fixable" not in proc.stdout
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n[tool.amplint]\ntarget-torch = "2.4"\n'
    )
    proc = amplint("check", "--no-cache", "a.py", cwd=tmp_path)
    assert "needs torch" not in proc.stdout and "1 fixable" in proc.stdout
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n[tool.amplint]\n')
    proc = amplint("check", "--no-cache", "a.py", cwd=tmp_path)
    assert "target-torch is 2.1" in proc.stdout


def test_a_bad_target_torch_in_pyproject_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\ntarget-torch = "banana"\n')
    proc = amplint("check", "--no-cache", "a.py", cwd=tmp_path)
    assert proc.returncode == 2 and "target-torch" in proc.stderr and "banana" in proc.stderr


def test_a_walk_judges_a_link_by_where_it_leads(tmp_path: Path) -> None:
    """A walk works out each folder's real path once (amplint.config.WalkFilter); a link,
    folder or file, is still judged by its target: `src/linked -> ../vendor` and
    `src/alias.py -> ../vendor/v.py` lie in the excluded `vendor`, `src/own.py` does not."""
    from amplint.runner import discover

    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "v.py").write_text("x = 1\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "own.py").write_text("x = 1\n")
    (tmp_path / "src" / "linked").symlink_to(tmp_path / "vendor", target_is_directory=True)
    (tmp_path / "src" / "alias.py").symlink_to(tmp_path / "vendor" / "v.py")
    config = Config(root=tmp_path, extend_exclude=("vendor",), respect_gitignore=False)
    found, _ = discover([tmp_path / "src"], config)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["src/own.py"]
    assert config.is_excluded(tmp_path / "src" / "linked", below=tmp_path / "src")
    assert not config.is_excluded(tmp_path / "src" / "own.py", below=tmp_path / "src")
