"""The pre-commit hooks, run by the real pre-commit against this checkout.

pre-commit builds a virtualenv and pip-installs the hook repository (from PyPI: libcst),
which takes ~30-40 s once; the hook environment is shared by the tests in this module
(one PRE_COMMIT_HOME), so the runs themselves take a second or two each.

The hook repository is a snapshot of this working tree (what `pre-commit try-repo`
does too), so uncommitted changes to the hooks are what is tested.  The user's
`.pre-commit-config.yaml` is the README's snippet with the URL and rev pointed at it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BAD = (ROOT / "fixtures" / "AMP101" / "bad_clip_between_backward_and_step.py").read_text()
GOOD = (ROOT / "fixtures" / "AMP101" / "good_unscale_then_clip.py").read_text()
# A legacy autocast call: a safe AMP401 fix (a GradScaler's is unsafe, so amplint-fix leaves it).
DEPRECATED = """\
import torch

model = torch.nn.Linear(4, 4)
scaler = torch.amp.GradScaler("cuda")
with torch.cuda.amp.autocast():
    loss = model(torch.randn(2, 4)).sum()
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("git") is None, reason="pre-commit needs git"),
]


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=amplint-test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false",
         *args], cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout.strip()


def readme_snippet(name: str) -> str:
    """The fenced block that follows `<!-- snippet: NAME -->` in README.md."""
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- snippet: {re.escape(name)} -->\s*```[a-z]*\n(.*?)```", text, re.S)
    assert m, f"README.md has no `<!-- snippet: {name} -->` block"
    return m.group(1)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory) -> tuple[Path, str]:
    """A git repository holding this working tree's package and hook manifest, committed."""
    pytest.importorskip("pre_commit")
    repo = tmp_path_factory.mktemp("hook-repo")
    for name in ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        shutil.copy2(ROOT / name, repo / name)
    shutil.copytree(ROOT / "amplint", repo / "amplint", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "snapshot", cwd=repo)
    return repo, _git("rev-parse", "HEAD", cwd=repo)


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture
def project(tmp_path: Path, hook_repo) -> Path:
    repo, rev = hook_repo
    config = readme_snippet("pre-commit")
    config = re.sub(r"repo: \S+", f"repo: {repo}", config, count=1)
    assert re.search(r"(?m)^\s*rev: main$", config), "README's rev must name a ref that exists until a tag does"
    config = re.sub(r"(?m)^(\s*)rev: \S+", rf"\g<1>rev: {rev}", config, count=1)
    _git("init", "-q", cwd=tmp_path)
    (tmp_path / ".pre-commit-config.yaml").write_text(config)
    # BAD clips before unscale_ (AMP101), a preview rule: this project turns the preview tier on,
    # as a user does, so the hooks (plain `amplint check`) run it
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\npreview = true\n")
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "deprecated.py").write_text(DEPRECATED)
    _git("add", "-A", cwd=tmp_path)
    return tmp_path


def pre_commit(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PRE_COMMIT_COLOR": "never"}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )


def test_manifest_never_runs_verify() -> None:
    manifest = (ROOT / ".pre-commit-hooks.yaml").read_text()
    assert "verify" not in re.findall(r"entry: (.*)", manifest)[0] + re.findall(r"entry: (.*)", manifest)[1]
    assert set(re.findall(r"^- id: (\S+)", manifest, re.M)) == {"amplint", "amplint-fix"}


def test_bad_file_fails_with_the_finding(project: Path, pre_commit_home: Path) -> None:
    proc = pre_commit("run", "amplint", "--files", "bad.py", cwd=project, home=pre_commit_home)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = [i for i, text in enumerate(BAD.splitlines(), 1) if "# expect: AMP101" in text]
    assert f"bad.py:{line}:5: AMP101" in proc.stdout
    assert re.search(r"amplint\.+Failed", proc.stdout)


def test_good_file_passes(project: Path, pre_commit_home: Path) -> None:
    proc = pre_commit("run", "amplint", "--files", "good.py", cwd=project, home=pre_commit_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"amplint\.+Passed", proc.stdout)


def test_fix_hook_rewrites_an_amp401_file(project: Path, pre_commit_home: Path) -> None:
    proc = pre_commit("run", "amplint-fix", "--files", "deprecated.py", cwd=project, home=pre_commit_home)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "files were modified by this hook" in proc.stdout
    fixed = (project / "deprecated.py").read_text()
    assert "torch.cuda.amp" not in fixed
    assert 'torch.autocast("cuda", dtype=torch.float16, cache_enabled=True)' in fixed
    # once fixed, both hooks pass
    again = pre_commit("run", "--files", "deprecated.py", cwd=project, home=pre_commit_home)
    assert again.returncode == 0, again.stdout + again.stderr


def test_all_files_reports_only_the_bad_ones(project: Path, pre_commit_home: Path) -> None:
    proc = pre_commit("run", "amplint", "--all-files", cwd=project, home=pre_commit_home)
    assert proc.returncode == 1
    found = set(re.findall(r"^(\w+\.py):\d+:\d+: (AMP\d+)", proc.stdout, re.M))
    assert found == {("bad.py", "AMP101"), ("deprecated.py", "AMP401")}


MIXED = DEPRECATED + BAD.split("import torch\n", 1)[1]  # a fixable AMP401 and an unfixable AMP101


def test_both_hooks_print_each_finding_once(project: Path, pre_commit_home: Path) -> None:
    """The README configures both: amplint-fix fixes (and fails because it did), amplint reports the rest."""
    (project / "mixed.py").write_text(MIXED)
    _git("add", "mixed.py", cwd=project)
    proc = pre_commit("run", "--files", "mixed.py", cwd=project, home=pre_commit_home)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "files were modified by this hook" in proc.stdout
    assert proc.stdout.count(": AMP101 ") == 1, proc.stdout
    assert ": AMP401 " not in proc.stdout  # fixed by the first hook, so never reported by the second


def test_hooks_run_on_notebooks(project: Path, pre_commit_home: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import torch"), nbformat.v4.new_code_cell("scaler = torch.cuda.amp.GradScaler()")]
    nbformat.write(nb, project / "train.ipynb")
    _git("add", "train.ipynb", cwd=project)
    proc = pre_commit("run", "amplint", "--files", "train.ipynb", cwd=project, home=pre_commit_home)
    assert proc.returncode == 1 and "train.ipynb:cell 2:1:10: AMP401" in proc.stdout, proc.stdout + proc.stderr
