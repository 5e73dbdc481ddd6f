"""Generated docs are fresh, and the README's copy-paste snippets do what they say."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10, the declared minimum: the backport amplint itself depends on there
    import tomli as tomllib

import pytest

from amplint import docs
from amplint.config import from_table
from amplint.registry import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent
SARIF_SCHEMA = ROOT.parent / "shared" / "data" / "sarif-schema-2.1.0.json"
# AMP401 at 5:10 (safe fix) and AMP104 at 10:5: stable rules, what the README's snippets run by
# default (AMP101, clipping before unscale_, stood here until it moved to the preview tier)
TRAIN = """\
import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
for _ in range(2):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(torch.randn(2, 4)).sum()
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
"""
DEPRECATED = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"  # AMP401 at 3:10


def snippet(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- snippet: {re.escape(name)} -->\s*```[a-z]*\n(.*?)```", text, re.S)
    assert m, f"README.md has no `<!-- snippet: {name} -->` block"
    return m.group(1)


def _amplint_command(line: str) -> list[str]:
    """A README command line, with `amplint` run from this checkout's interpreter."""
    argv = shlex.split(line)
    assert argv[0] == "amplint"
    return [sys.executable, "-m", "amplint", *argv[1:]]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_old.py").write_text(DEPRECATED)
    return tmp_path


# --- generated files ---------------------------------------------------------------------


def test_rule_pages_and_readme_table_are_fresh() -> None:
    problems = docs.stale()
    assert not problems, "stale generated docs (run `python -m amplint.docs --write`):\n" + "\n".join(problems)


def test_every_code_has_a_page_and_a_row() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split(docs.START, 1)[1].split(docs.END, 1)[0]
    for rule in ALL_RULES:
        assert (ROOT / "rules" / f"{rule.code}.md").is_file()
        assert f"[{rule.code}](rules/{rule.code}.md) | `{rule.name}`" in table


def test_staleness_is_detected_and_write_repairs_it(tmp_path: Path) -> None:
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "rules", tmp_path / "rules")
    assert docs.stale(tmp_path) == []
    page = tmp_path / "rules" / "AMP101.md"
    page.write_text(page.read_text().replace("Flags", "Flagz", 1))
    (tmp_path / "rules" / "AMP999.md").write_text("# gone\n")
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("`clip-before-unscale`", "`clip-b4-unscale`"))
    assert sorted(docs.stale(tmp_path)) == [
        "README.md: out of date", "rules/AMP101.md: out of date", "rules/AMP999.md: no such rule any more",
    ]
    assert docs.main(["--check", "--root", str(tmp_path)]) == 1
    docs.write(tmp_path)
    assert docs.stale(tmp_path) == []
    assert (tmp_path / "README.md").read_text() == (ROOT / "README.md").read_text()


def test_check_command_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "amplint.docs", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# --- README snippets ---------------------------------------------------------------------


def _workflow_runs(name: str) -> list[str]:
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(snippet(name))
    (job,) = workflow["jobs"].values()
    return [s["run"] for s in job["steps"] if "run" in s and s["run"].startswith("amplint ")], job["steps"]


def test_ci_snippet_annotates_findings(project: Path) -> None:
    (command,), _ = _workflow_runs("ci")
    proc = subprocess.run(_amplint_command(command), cwd=project, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, "the CI job must fail on findings"
    assert sorted(re.findall(r"^::error title=amplint \((AMP\d+)\),file=([^,]+),line=(\d+)", proc.stdout, re.M)) == [
        ("AMP104", "src/train.py", "10"), ("AMP401", "src/train.py", "5"), ("AMP401", "tests/test_old.py", "3"),
    ]


def test_code_scanning_snippet_writes_a_valid_sarif_file(project: Path) -> None:
    (command,), steps = _workflow_runs("code-scanning")
    proc = subprocess.run(_amplint_command(command), cwd=project, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, "the upload step must run even when there are findings"
    (upload,) = [s for s in steps if str(s.get("uses", "")).startswith("github/codeql-action/upload-sarif")]
    log = json.loads((project / upload["with"]["sarif_file"]).read_text())
    assert len(log["runs"][0]["results"]) == 3
    if SARIF_SCHEMA.is_file():
        jsonschema = pytest.importorskip("jsonschema")
        jsonschema.validate(log, json.loads(SARIF_SCHEMA.read_text()))


def test_flake8_snippet(project: Path) -> None:
    (project / ".flake8").write_text(snippet("flake8"))
    proc = subprocess.run([sys.executable, "-m", "flake8", "--format=%(path)s:%(row)d:%(col)d: %(code)s", "."],
                          cwd=project, capture_output=True, text=True, timeout=300)
    found = {line for line in proc.stdout.splitlines() if ": AMP" in line}
    assert found == {"./src/train.py:10:5: AMP104", "./src/train.py:5:10: AMP401"}, proc.stdout + proc.stderr


def test_stdin_snippet(project: Path) -> None:
    line = snippet("stdin").strip()
    command, redirect = line.split(" < ")
    with open(project / redirect.strip(), "rb") as stdin:
        proc = subprocess.run(_amplint_command(command), cwd=project, stdin=stdin, capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode == 1
    rows = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [(r["filename"], r["code"], r["location"]["row"]) for r in rows] == [
        ("src/train.py", "AMP401", 5), ("src/train.py", "AMP104", 10),
    ]


def test_config_snippet(project: Path) -> None:
    table = tomllib.loads(snippet("config"))["tool"]["amplint"]
    config = from_table(table, project / "pyproject.toml")  # raises on an unknown key or code
    codes = {r.code for r in config.rules()}
    assert "AMP501" in codes and "AMP106" not in codes
    assert "AMP401" not in {r.code for r in config.rules_for(project / "tests" / "test_old.py")}
    (project / "pyproject.toml").write_text(snippet("config"))
    proc = subprocess.run([sys.executable, "-m", "amplint", "check", "--output-format", "json", "."], cwd=project,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == 1, proc.stderr
    assert {(d["filename"], d["code"]) for d in json.loads(proc.stdout)} == {
        ("src/train.py", "AMP104"), ("src/train.py", "AMP401"),
    }


def test_set_up_runs_the_main_job_on_every_bundled_example() -> None:
    """The README's first set-up command reports each example's bug, the preview rule's too
    (train_clip_before_unscale.py shows AMP101, which runs only in preview)."""
    block = re.search(r"## Set up\n.*?```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    (line,) = [x for x in block.splitlines() if x.startswith("pip install . && ")]
    command = line.removeprefix("pip install . && ")
    assert "--preview" in shlex.split(command)
    proc = subprocess.run([*_amplint_command(command), "--isolated", "--no-cache", "--output-format", "json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    found = {(Path(d["filename"]).name, d["code"]) for d in json.loads(proc.stdout)}
    assert ("train_clip_before_unscale.py", "AMP101") in found
    assert {name for name, _ in found} == {p.name for p in (ROOT / "examples").glob("*.py")}


# --- editor set-up snippets: each starts `amplint server` (tests/test_server.py drives it) --


def test_vscode_snippet_starts_the_server() -> None:
    settings = json.loads(snippet("lsp-vscode"))
    assert [settings["glspc.server.command"], *settings["glspc.server.commandArguments"]] == ["amplint", "server"]
    assert settings["glspc.server.languageId"] == ["python"]


def test_helix_snippet_starts_the_server() -> None:
    table = tomllib.loads(snippet("lsp-helix"))
    server = table["language-server"]["amplint"]
    assert [server["command"], *server["args"]] == ["amplint", "server"]
    (python,) = table["language"]
    assert python["name"] == "python" and "amplint" in python["language-servers"]


def test_neovim_snippet_starts_the_server() -> None:
    lua = snippet("lsp-neovim")
    assert 'cmd = { "amplint", "server" }' in lua and "vim.lsp.start(" in lua and 'pattern = "python"' in lua
    assert lua.count("(") == lua.count(")") and lua.count("{") == lua.count("}")


def test_server_subcommand_is_what_the_snippets_run() -> None:
    proc = subprocess.run([sys.executable, "-m", "amplint", "--help"], capture_output=True, text=True, timeout=60)
    assert "server" in proc.stdout and "version" in proc.stdout


def test_readme_points_to_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in re.findall(r"\]\(([A-Z]+\.md)\)", readme):
        assert (ROOT / name).is_file(), f"README links {name}, which is not in the repository"
    assert "STYLE.md" not in readme
    assert "once released" in readme
