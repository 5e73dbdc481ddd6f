"""Fixture projects: a training step spread over modules, checked three ways.

Each folder under `fixtures/projects/` is a small project whose `# expect:` comments
say, file by file, exactly which findings amplint makes in preview (every default-on
rule and every preview rule); without preview the preview rules' findings are gone and
nothing else changes.  A user meets the same project

1. as a whole tree (`amplint check .` in CI),
2. one file at a time (pre-commit passes only the changed files; editors one buffer),
   where the imported modules are found on disk and read, and
3. through flake8,

and all three must agree: a finding whose evidence is in `utils.py` is found when
only `train.py` is checked.  The three ways run in preview, so that a preview rule
(AMP101, AMP106, AMP110...) is held to each project's expectations, silence included;
the whole tree is checked without preview as well.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.config import Config
from amplint.project import index as project_index
from amplint.rule_catalog import CATALOG
from amplint.runner import check_paths
from amplint.testing import expectations

PROJECTS_ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "projects"
PROJECTS = sorted(p for p in PROJECTS_ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
PREVIEW = frozenset(e.code for e in CATALOG if e.tier == "preview")


def _files(project: Path) -> list[Path]:
    return sorted(p for p in project.rglob("*.py") if "__pycache__" not in p.parts)


def _expected(project: Path) -> set[tuple[str, int, str]]:
    out = set()
    for f in _files(project):
        for line, code in expectations(f.read_text(encoding="utf-8")):
            out.add((f.relative_to(project).as_posix(), line, code))
    return out


def _found(project: Path, result) -> set[tuple[str, int, str]]:
    assert not result.errors, [str(f.error) for f in result.errors]
    assert not result.crashes, [c.trace for c in result.crashes]
    return {(Path(d.path).resolve().relative_to(project).as_posix(), d.span.line, d.code) for d in result.diagnostics}


@pytest.fixture(autouse=True)
def _fresh_index():
    """Each way of checking starts from an empty project index, as a new process would."""
    project_index.reset_shared()
    yield
    project_index.reset_shared()


def _config(project: Path, preview: bool = True) -> Config:
    return Config(root=project, preview=preview)


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_whole_tree(project: Path) -> None:
    result = check_paths([project], _config(project), jobs=1)
    assert _found(project, result) == _expected(project)


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_whole_tree_without_preview(project: Path) -> None:
    """The default selection: the same findings, less those of the preview tier."""
    result = check_paths([project], _config(project, preview=False), jobs=1)
    assert _found(project, result) == {e for e in _expected(project) if e[2] not in PREVIEW}


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_one_file_at_a_time(project: Path) -> None:
    """As pre-commit runs it: each file alone, its imports read from disk."""
    expected = _expected(project)
    for f in _files(project):
        project_index.reset_shared()
        rel = f.relative_to(project).as_posix()
        found = _found(project, check_paths([f], _config(project), jobs=1))
        assert found == {e for e in expected if e[0] == rel}, rel


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_flake8(project: Path, tmp_path: Path) -> None:
    """In preview, which flake8 takes only from `preview = true` in [tool.amplint] (`--isolated`
    would read none): a copy of the project gets one (test_flake8_parity does the same)."""
    copy = tmp_path / project.name
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = copy / "pyproject.toml"
    own = pyproject.read_text(encoding="utf-8") if pyproject.exists() else ""
    assert "[tool.amplint]" not in own, "the project's own [tool.amplint] would need preview = true"
    pyproject.write_text(own + "\n[tool.amplint]\npreview = true\n", encoding="utf-8")
    files = [str(f.relative_to(project)) for f in _files(project)]
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "AMP", "--format", "%(path)s:%(row)d:%(code)s", *files],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr
    found = set()
    for line in proc.stdout.splitlines():
        path, row, code = line.rsplit(":", 2)
        found.add((Path(path).as_posix().removeprefix("./"), int(row), code))
    assert found == _expected(project)


def test_every_project_has_a_story() -> None:
    """A project fixture is either bad (some finding expected) or says in its name why it is good."""
    assert PROJECTS, "no fixture projects found"
    for project in PROJECTS:
        docs = [f.read_text(encoding="utf-8").lstrip().startswith('"""') for f in _files(project)]
        assert all(docs), f"{project.name}: every module starts with a docstring saying what it shows"
