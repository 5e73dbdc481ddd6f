"""The package is ready to publish: metadata a registry shows, and an sdist its own tests pass from."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What the test suite reads besides the package: each must be in the sdist.
NEEDED_TREES = ("tests", "fixtures", "examples", "rules")
NEEDED_FILES = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "CONTRIBUTING.md", ".pre-commit-hooks.yaml")


def _setuptools_major() -> int:
    import importlib.metadata

    try:
        return int(importlib.metadata.version("setuptools").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 0


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> tarfile.TarFile:
    if _setuptools_major() < 77:  # pyproject's [build-system] asks for it (PEP 639 license fields)
        pytest.skip("the sdist is built without isolation here and needs setuptools>=77 installed")
    out = tmp_path_factory.mktemp("sdist")
    # setuptools' own PEP 517 hook, as `python -m build --sdist` calls it (no network, no isolation)
    proc = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    name = proc.stdout.strip().splitlines()[-1]
    return tarfile.open(out / name)


def _tree(top: str) -> set[str]:
    return {
        p.relative_to(ROOT).as_posix() for p in (ROOT / top).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_sdist_holds_what_its_tests_need(sdist: tarfile.TarFile) -> None:
    names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    missing = sorted({*NEEDED_FILES} - names)
    for top in NEEDED_TREES:
        missing += sorted(_tree(top) - names)
    assert not missing, f"not in the sdist (MANIFEST.in): {missing[:20]}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_metadata_has_an_spdx_license_classifiers_and_urls(sdist: tarfile.TarFile) -> None:
    (pkg_info,) = [m for m in sdist.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")]
    meta = Parser().parsestr(sdist.extractfile(pkg_info).read().decode())
    assert meta["License-Expression"] == "MIT"
    assert "LICENSE" in meta.get_all("License-File")
    classifiers = meta.get_all("Classifier")
    assert "Programming Language :: Python :: 3.10" in classifiers and "Framework :: Flake8" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # PEP 639: the expression says it
    assert not meta.get_all("Project-URL")  # no public home yet: no address that does not exist
    assert meta["Requires-Python"] == ">=3.10"
    assert "server" in meta.get_all("Provides-Extra")


def test_license_file_is_the_mit_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text


def test_no_file_cites_the_address_of_a_repository_that_does_not_exist() -> None:
    """README, pyproject, the changelog and what findings print named a GitHub repository that is
    not there: a user following them met a 404."""
    cited = [p.relative_to(ROOT).as_posix() for p in (ROOT / "README.md", ROOT / "pyproject.toml",
                                                      ROOT / "CHANGELOG.md", ROOT / "CONTRIBUTING.md",
                                                      *sorted((ROOT / "amplint").rglob("*.py")))
             if "github.com/amplint" in p.read_text(encoding="utf-8")]
    assert cited == []


# Every address the project's own text cites, by host (and, on GitHub, by repository): each is a
# well-known third-party page.  A new one is added here on purpose, after checking it exists;
# the project itself has no public home yet, so none of its own may appear.
KNOWN_ADDRESSES = (
    "download.pytorch.org/whl/cpu",
    "github.com/openlawlibrary/pygls",
    "marketplace.visualstudio.com/items",
    "ui.perfetto.dev",
    "keepachangelog.com/",
    "semver.org/",
    "json.schemastore.org/sarif-2.1.0.json",
    "bford.info/cachedir/",  # the CACHEDIR.TAG standard's own text
    "pre-commit.com",
)
URL = re.compile(r"https?://([^\s)\"'>`\\]+)")


def _cited_texts() -> list[Path]:
    tops = [ROOT / n for n in ("README.md", "pyproject.toml", "CHANGELOG.md", "CONTRIBUTING.md",
                               "BENCHMARKS.md", "MANIFEST.in", ".pre-commit-hooks.yaml")]
    for folder, pattern in (("docs", "*.md"), ("rules", "*.md"), ("amplint", "*.py"), ("examples", "*.py")):
        tops += sorted((ROOT / folder).rglob(pattern))
    return tops


def test_every_cited_address_is_a_known_third_party_page() -> None:
    unknown = [
        f"{p.relative_to(ROOT).as_posix()}: {m.group(0)}"
        for p in _cited_texts()
        for m in URL.finditer(p.read_text(encoding="utf-8"))
        if not m.group(1).startswith(KNOWN_ADDRESSES)
    ]
    assert unknown == []


def test_manifest_grafts_every_folder_the_tests_and_readme_read() -> None:
    """Offline and without setuptools>=77 (the sdist build above skips without it)."""
    grafted = {line.split()[1].rstrip("/") for line in (ROOT / "MANIFEST.in").read_text().splitlines()
               if line.startswith("graft ")}
    assert {*NEEDED_TREES, "docs", "benchmarks"} <= grafted


def test_pyproject_and_the_package_give_one_version() -> None:
    """`amplint --version` reads amplint/version.py; the wheel's metadata reads pyproject.toml."""
    from amplint.version import __version__

    declared = re.search(r'(?m)^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text())
    assert declared and declared.group(1) == __version__
