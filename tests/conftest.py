from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def a_project_of_its_own(tmp_path, monkeypatch):
    """The working directory is a fresh project (a `.git` marks its root), so a source checked
    as `t.py` has only the files a test puts beside it: this repository's own tests import
    modules by strings and name the legacy AMP classes, which would pin a fix that renames them."""
    from amplint.project.index import reset_shared

    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    reset_shared()
    yield tmp_path
    reset_shared()
