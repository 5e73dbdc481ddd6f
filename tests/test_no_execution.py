"""`amplint check` executes nothing it checks (issue 8, item 4).

The checked files would, if imported or run, write a marker file and exit with a
distinctive code; after checking them (with and without --fix, with a pyproject.toml,
a conftest.py and a setup.py alongside) no marker exists and the exit code is amplint's.
Configuration is read with tomllib only.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SIDE_EFFECTS = '''\
import os, sys
open(os.path.join({marker_dir!r}, "{name}.ran"), "w").write("executed")
import torch
scaler = torch.cuda.amp.GradScaler()
if __name__ == "__main__":
    open(os.path.join({marker_dir!r}, "{name}.main"), "w").write("executed")
sys.exit(42)
'''


def _tree(tmp_path: Path) -> Path:
    src = tmp_path / "project"
    (src / "pkg").mkdir(parents=True)
    markers = str(tmp_path / "markers")
    os.mkdir(markers)
    for rel in ("train.py", "pkg/__init__.py", "pkg/model.py", "conftest.py", "setup.py", "__main__.py"):
        name = rel.replace("/", "_")
        (src / rel).write_text(SIDE_EFFECTS.format(marker_dir=markers, name=name))
    # A pyproject whose values look like code: read as data, never run.
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\n'
        "[tool.amplint]\n"
        "extend-exclude = [\"__import__('os').system('touch pwned')\"]\n"
    )
    return src


def test_checking_files_with_import_side_effects_runs_none_of_them(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # --fix last: it changes the files; --unsafe-fixes: a GradScaler's AMP401 fix is unsafe
    for extra in ([], ["--jobs", "2"], ["--diff", "--unsafe-fixes"], ["--fix", "--unsafe-fixes"]):
        proc = subprocess.run(
            [sys.executable, "-m", "amplint", "check", "--no-cache", *extra, str(src)],
            capture_output=True, text=True, cwd=src, env=env, timeout=300,
        )
        assert proc.returncode in (0, 1), (extra, proc.returncode, proc.stderr)  # never the files' 42
        expected = {"--diff": "+scaler = torch.amp.GradScaler", "--fix": "fixed, 0 remaining)"}.get(extra[0] if extra else "", "AMP401")
        assert expected in proc.stdout, (extra, proc.stdout)  # the files were read and analysed
        assert list((tmp_path / "markers").iterdir()) == [], f"checked code ran ({extra})"
        assert not (src / "pwned").exists()


def test_in_process_check_imports_neither_the_checked_modules_nor_torch(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import amplint\n"
        f"result = amplint.check_paths([Path({str(src)!r})])\n"
        "assert result.diagnostics, 'expected AMP401 findings'\n"
        "bad = [m for m in ('train', 'pkg', 'pkg.model', 'conftest', 'setup', 'torch') if m in sys.modules]\n"
        "print(bad)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    assert list((tmp_path / "markers").iterdir()) == []


STATIC_SIDE = [p for p in (ROOT / "amplint").rglob("*.py") if "runtime" not in p.relative_to(ROOT / "amplint").parts]


def test_static_side_has_no_way_to_run_code() -> None:
    """No eval/exec/import-by-name/runpy/subprocess in what `check` loads; config via tomllib."""
    forbidden_calls = {"eval", "exec", "__import__", "execfile"}
    forbidden_modules = {"runpy", "importlib", "pickle", "marshal", "yaml", "configparser"}
    # subprocess only to ask `git check-ignore` (respect-gitignore), in config.py
    spawners = {p.name for p in STATIC_SIDE if "import subprocess" in p.read_text(encoding="utf-8")}
    assert spawners <= {"config.py"}, spawners
    problems = []
    for path in STATIC_SIDE:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in forbidden_calls:
                problems.append(f"{path.name}:{node.lineno} calls {node.func.id}")
            if isinstance(node, ast.Import):
                problems += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names
                             if a.name.split(".")[0] in forbidden_modules]
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in forbidden_modules:
                problems.append(f"{path.name}:{node.lineno} imports from {node.module}")
    # NB: the one place code is compiled is engine.syntax_check: compile() to bytecode, never run.
    assert problems == []
    config_src = (ROOT / "amplint" / "config.py").read_text(encoding="utf-8")
    assert "import tomllib" in config_src
    assert "tomllib.load" in config_src


def test_syntax_check_compiles_but_never_runs(tmp_path: Path) -> None:
    from amplint.engine import check_source

    marker = tmp_path / "ran"
    check_source(f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(3)\n", str(tmp_path / "m.py"))
    assert not marker.exists()


HOOK = '#!/bin/sh\necho "{name}" >> "{marker}"\nexit 1\n'


def _repo_with_hostile_git_config(tmp_path: Path, fsmonitor: str) -> tuple[Path, Path]:
    """A tree unpacked with its `.git`, whose config names programs for git to run.

    `fsmonitor` is how core.fsmonitor names its program: by absolute path or relative
    to the work tree.  Hooks (post-index-change, via .git/hooks and core.hooksPath)
    and pagers name the same kind of script.
    """
    repo, marker = tmp_path / "repo", tmp_path / "marker"
    (repo / "pkg").mkdir(parents=True)
    (repo / "build").mkdir()
    (repo / "pkg" / "train.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    (repo / "build" / "generated.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    (repo / ".gitignore").write_text("build/\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=repo, check=True)
    scripts = {}
    for name in ("fsmonitor", "post-index-change", "hooks-path", "pager"):
        script = repo / ".git" / ("hooks" if name == "post-index-change" else "") / name
        script.parent.mkdir(exist_ok=True)
        script.write_text(HOOK.format(name=name, marker=marker))
        script.chmod(0o755)
        scripts[name] = script
    (repo / ".git" / "evil-hooks").mkdir()
    os.link(scripts["hooks-path"], repo / ".git" / "evil-hooks" / "post-index-change")
    config = {
        "core.fsmonitor": str(scripts["fsmonitor"]) if fsmonitor == "absolute" else ".git/fsmonitor",
        "core.hooksPath": str(repo / ".git" / "evil-hooks"),
        "core.pager": str(scripts["pager"]),
        "pager.check-ignore": str(scripts["pager"]),
    }
    for key, value in config.items():
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    # The trap is live: plain git runs the repository's fsmonitor program.
    subprocess.run(["git", "status", "--short"], cwd=repo, capture_output=True)
    assert "fsmonitor" in marker.read_text()
    marker.unlink()
    return repo, marker


@pytest.mark.parametrize("fsmonitor", ["absolute", "relative"])
def test_checking_a_repository_runs_no_program_its_git_config_names(tmp_path: Path, fsmonitor: str) -> None:
    repo, marker = _repo_with_hostile_git_config(tmp_path, fsmonitor)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # A walk asks git about every path; a named file or folder is checked whatever git says.
    for args, walks_build in (([str(repo)], True), (["--jobs", "2", "."], True), ([str(repo / "pkg" / "train.py")], False)):
        proc = subprocess.run([sys.executable, "-m", "amplint", "check", "--no-cache", *args],
                              capture_output=True, text=True, cwd=repo, env=env, timeout=300)
        assert proc.returncode == 1, (args, proc.stderr)
        assert "AMP401" in proc.stdout
        if walks_build:  # .gitignore is still honoured: git was asked, and answered.
            assert "train.py" in proc.stdout and "generated.py" not in proc.stdout
        assert not marker.exists(), f"amplint check {args} ran {marker.read_text()!r}"


def test_the_language_server_runs_no_program_the_git_config_names(tmp_path: Path) -> None:
    pytest.importorskip("pygls")
    from amplint.server.app import AmplintServer

    repo, marker = _repo_with_hostile_git_config(tmp_path, "absolute")
    server = AmplintServer()
    assert server._linter((repo / "pkg" / "train.py").as_uri()) is not None
    assert server._linter((repo / "build" / "generated.py").as_uri()) is None  # git ignores it
    assert not marker.exists(), f"the server ran {marker.read_text()!r}"
