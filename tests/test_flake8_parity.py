"""The real flake8 executable and `amplint check` report the same `line:col code` on every fixture.

flake8 finds the plugin through the installed `flake8.extension` entry point, so the
package must be installed (`pip install -e .`, which CI does).  Both tools run with
`--isolated` so neither this repository's configuration nor the user's interferes.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.registry import ALL_RULES
from amplint.rule_catalog import CATALOG

ROOT = Path(__file__).resolve().parent.parent
DIRS = ["fixtures", "examples"]  # walked by each tool itself (every .py file, .fixed.py included)
FILES = sorted(str(p.relative_to(ROOT)) for d in DIRS for p in (ROOT / d).rglob("*.py"))
PREVIEW = sorted(e.code for e in CATALOG if e.tier == "preview")
# Opt-in rules of the stable tier (a preview one stays behind its own switch as well:
# test_preview_rules_agree_in_preview)
OPT_IN = sorted(r.code for r in ALL_RULES if not r.default_enabled and r.code not in PREVIEW)
FORMAT = "%(path)s:%(row)d:%(col)d: %(code)s"

pytestmark = pytest.mark.skipif(
    not any(e.name == "AMP" and e.value.startswith("amplint.") for e in importlib.metadata.entry_points(group="flake8.extension")),
    reason="amplint is not installed, so flake8 cannot find its entry point: run `pip install -e .`",
)


def flake8(*args: str, files=DIRS, cwd: Path = ROOT) -> set[tuple[str, int, int, str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", f"--format={FORMAT}", *args, *files],
        cwd=cwd, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr
    out = set()
    for line in proc.stdout.splitlines():
        path, row, col, code = line.rsplit(":", 3)
        if code.strip().startswith("AMP"):
            out.add((Path(path).as_posix(), int(row), int(col), code.strip()))
    return out


def amplint(*args: str, files=DIRS, cwd: Path = ROOT) -> set[tuple[str, int, int, str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "amplint", "check", "--isolated", "--output-format", "json", *args, *files],
        cwd=cwd, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return {
        (Path(d["filename"]).as_posix(), d["location"]["row"], d["location"]["column"], d["code"])
        for d in json.loads(proc.stdout)
    }


def _diff(a: set, b: set) -> str:
    return f"only flake8: {sorted(a - b)[:10]}\nonly amplint: {sorted(b - a)[:10]}"


def test_plugin_is_registered() -> None:
    proc = subprocess.run([sys.executable, "-m", "flake8", "--version"], capture_output=True, text=True, timeout=60)
    assert "amplint: " in proc.stdout


def test_same_findings_as_the_cli_on_every_fixture() -> None:
    assert FILES, "no fixtures found"
    from_flake8 = flake8("--select", "AMP")
    from_cli = amplint("--select", "AMP")
    assert from_flake8 == from_cli, _diff(from_flake8, from_cli)
    # the comparison is not vacuous: every rule with bad fixtures shows up
    # (preview rules run only in preview: test_preview_rules_agree_in_preview)
    expected = {p.split("/")[1] for p in FILES if "/bad_" in p and p.startswith("fixtures/AMP")} - set(OPT_IN) - set(PREVIEW)
    assert {c for *_, c in from_cli} >= expected


@pytest.mark.skipif(not PREVIEW, reason="no rule is in the preview tier")
def test_preview_rules_agree_in_preview(tmp_path: Path) -> None:
    """`preview = true` in [tool.amplint] turns the preview tier on for flake8 as `--preview` does
    for the CLI: the same findings on every preview rule's bad fixtures."""
    import shutil

    for code in PREVIEW:
        for bad in sorted((ROOT / "fixtures" / code).glob("bad_*.py")):
            if not bad.name.endswith(".fixed.py"):
                shutil.copy(bad, tmp_path / f"{code}_{bad.name}")
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\npreview = true\n")
    run = lambda *cmd: subprocess.run([sys.executable, "-m", *cmd], cwd=tmp_path, capture_output=True,  # noqa: E731
                                      text=True, timeout=600)
    f8 = run("flake8", f"--format={FORMAT}", "--select", ",".join(PREVIEW), ".")
    cli = run("amplint", "check", "--no-cache", "--output-format", "json", "--select", ",".join(PREVIEW), ".")
    from_flake8 = {(Path(line.rsplit(":", 3)[0]).name, int(line.rsplit(":", 3)[1]), line.rsplit(":", 3)[3].strip())
                   for line in f8.stdout.splitlines() if ": AMP" in line}
    from_cli = {(Path(d["filename"]).name, d["location"]["row"], d["code"]) for d in json.loads(cli.stdout)}
    assert from_flake8 == from_cli, _diff(from_flake8, from_cli)
    assert {c for *_, c in from_cli} == set(PREVIEW)


def test_defaults_agree_without_any_selection() -> None:
    """No --select at all: opt-in rules stay off in both (the plugin does not run them), and
    so do preview rules (AMP101 left the default selection for the preview tier, issue 27)."""
    # flake8 then runs its own pycodestyle/pyflakes checks too, so keep this to a few directories.
    dirs = sorted({str(Path(p).parent) for p in FILES
                   if any(p.startswith(f"fixtures/{c}/") for c in [*OPT_IN, "AMP101", "AMP102"])})
    from_flake8 = flake8(files=dirs)
    from_cli = amplint(files=dirs)
    assert "AMP102" in {c for *_, c in from_cli}, "a default rule's bad fixtures must be reported"
    assert from_flake8 == from_cli, _diff(from_flake8, from_cli)
    assert not {c for *_, c in from_flake8} & set(OPT_IN)
    assert not {c for *_, c in from_flake8} & set(PREVIEW)
    # AMP101 runs under preview (flake8's preview = true: test_preview_rules_agree_in_preview)
    assert "AMP101" in {c for *_, c in amplint("--preview", files=dirs)}


@pytest.mark.skipif(not OPT_IN, reason="the registry has no opt-in rule yet")
def test_a_selector_turns_on_the_opt_in_rules_it_names_in_both() -> None:
    """A prefix (`AMP`, `AMP5`) selects every rule it names, as the full code does (Ruff's rule)."""
    bad_opt_in = [p for p in FILES if any(p.startswith(f"fixtures/{c}/bad_") for c in OPT_IN)]
    assert bad_opt_in, "each opt-in rule needs bad fixtures"
    for selection in ["AMP", ",".join(sorted({c[:4] for c in OPT_IN})), ",".join(OPT_IN)]:
        from_flake8 = flake8("--select", selection, files=bad_opt_in)
        from_cli = amplint("--select", selection, files=bad_opt_in)
        assert from_flake8 == from_cli, _diff(from_flake8, from_cli)
        assert {c for *_, c in from_flake8} >= {p.split("/")[1] for p in bad_opt_in}, selection


def test_noqa_and_columns_after_tabs_and_unicode(tmp_path: Path) -> None:
    """Same suppression and the same columns where the line holds non-ASCII text before the span."""
    (tmp_path / "t.py").write_text(
        "import torch\n"
        "s = torch.cuda.amp.GradScaler()  # noqa: AMP401\n"
        "ß = 1; t = torch.cuda.amp.GradScaler()\n"
        "if True:\n"
        "\tu = torch.cuda.amp.GradScaler()\n",
        encoding="utf-8",
    )
    from_flake8 = flake8("--select", "AMP", files=["t.py"], cwd=tmp_path)
    from_cli = amplint("--select", "AMP", files=["t.py"], cwd=tmp_path)
    assert from_flake8 == from_cli == {("t.py", 3, 12, "AMP401"), ("t.py", 5, 6, "AMP401")}


def _project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(f"[tool.amplint]\n{table}\n")
    (tmp_path / "tests").mkdir()
    dep = "import torch\ns = torch.cuda.amp.GradScaler()\n"
    (tmp_path / "train.py").write_text(dep + "t = torch.amp.GradScaler('cuda')  # noqa: AMP401\n")
    (tmp_path / "tests" / "test_x.py").write_text(dep)
    return tmp_path


def _without_isolated(*args: str, files, cwd: Path) -> set:
    """flake8's AMP findings with no selection of its own: what [tool.amplint] selects decides."""
    proc = subprocess.run([sys.executable, "-m", "flake8", f"--format={FORMAT}", *args, *files],
                          cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    return {tuple(line.rsplit(":", 3)[::3]) for line in proc.stdout.splitlines() if line.rsplit(":", 1)[-1].startswith(" AMP")}


@pytest.mark.parametrize("table, expected", [
    ('ignore = ["AMP401"]', set()),
    ('per-file-ignores = { "tests/*" = ["AMP4"] }', {("train.py", " AMP401")}),
    ('extend-select = ["AMP001"]', {("train.py", " AMP401"), ("train.py", " AMP001"), ("tests/test_x.py", " AMP401")}),
])
def test_flake8_honours_the_nearest_tool_amplint(tmp_path: Path, table: str, expected: set) -> None:
    """One configuration everywhere: what [tool.amplint] silences in the CLI, flake8 does not report."""
    project = _project(tmp_path, table)
    files = ["train.py", "tests/test_x.py"]
    found = {(Path(p).as_posix().removeprefix("./"), c) for p, c in _without_isolated(files=files, cwd=project)}
    assert found == expected
    cli = subprocess.run([sys.executable, "-m", "amplint", "check", "--output-format", "json", *files], cwd=project,
                         capture_output=True, text=True, timeout=120)
    assert {(d["filename"], " " + d["code"]) for d in json.loads(cli.stdout)} == expected


@pytest.mark.parametrize("table", ['select = "AMP4"', "select = [", "unknown-key = 1"])
def test_a_mistake_in_tool_amplint_is_one_finding_not_a_flake8_crash(tmp_path: Path, table: str) -> None:
    """`amplint check` exits 2 naming the mistake; flake8 must not die with a traceback and lose
    every other plugin's findings (pyflakes' F401 here): one AMP000 per file (hostile pass 11)."""
    project = _project(tmp_path, table)
    (project / "train.py").write_text("import os\n" + (project / "train.py").read_text())
    proc = subprocess.run([sys.executable, "-m", "flake8", "--select", "F,AMP", "train.py"], cwd=project,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(" F401 " in line for line in lines), lines
    (refusal,) = [line for line in lines if " AMP" in line]
    assert refusal.startswith("train.py:1:1: AMP000 amplint did not analyse this file: ") and "pyproject.toml" in refusal
    cli = subprocess.run([sys.executable, "-m", "amplint", "check", "train.py"], cwd=project, capture_output=True, text=True,
                         timeout=120)
    assert cli.returncode == 2


def test_flake8_isolated_reads_no_pyproject(tmp_path: Path) -> None:
    project = _project(tmp_path, 'ignore = ["AMP401"]')
    assert flake8("--select", "AMP4", files=["train.py"], cwd=project) == {("train.py", 2, 5, "AMP401")}


AMP401_LINE = b"import torch\nscaler = torch.cuda.amp.GradScaler()\n"
ENCODINGS = {  # name -> (bytes, whether amplint and Python can read it)
    "latin_1_without_a_cookie": (b"# caf\xe9\n" + AMP401_LINE, False),
    "latin_1_crlf_without_a_cookie": ((b"# caf\xe9\n" + AMP401_LINE).replace(b"\n", b"\r\n"), False),
    "an_unknown_cookie": (b"# coding: klingon\n" + AMP401_LINE, False),
    "a_bom_and_a_latin_1_cookie": (b"\xef\xbb\xbf# coding: latin-1\n" + AMP401_LINE, False),
    "a_utf_16_cookie": (b"# coding: utf-16\n" + AMP401_LINE, False),
    "an_ascii_cookie_over_utf_8": (b"# coding: ascii\n# caf\xc3\xa9\n" + AMP401_LINE, False),
    "latin_1_with_its_cookie": (b"# coding: latin-1\n# caf\xe9\n" + AMP401_LINE, True),
    "utf_8_with_a_bom": (b"\xef\xbb\xbf# caf\xc3\xa9\n" + AMP401_LINE, True),
}


def test_a_file_amplint_cannot_decode_gets_the_same_verdict_from_the_cli_flake8_and_the_server(tmp_path: Path) -> None:
    """flake8 reads what it cannot decode as Latin-1 and reported AMP401 where `amplint check`
    refuses the file: now AMP000 with the CLI's reason, and the language server says the same
    of the buffer an editor decoded from that file."""
    from amplint.config import Config
    from amplint.engine import SourceError
    from amplint.runner import check_paths
    from amplint.sources import decode

    for name, (raw, _) in ENCODINGS.items():
        (tmp_path / f"{name}.py").write_bytes(raw)
    cli = {Path(e.path).stem: e.error.reason for e in check_paths([tmp_path], Config(root=tmp_path)).errors}
    flake = flake8("--select", "AMP", files=["."], cwd=tmp_path)
    pytest.importorskip("pygls")
    from amplint.server.app import AmplintServer

    server = AmplintServer()
    for name, (raw, readable) in ENCODINGS.items():
        assert (name not in cli) == readable, (name, cli.get(name))
        codes = {code.split()[0] for path, *_, code in flake if Path(path).stem == name}
        assert codes == ({"AMP401"} if readable else {"AMP000"}), (name, codes)
        lint = server._linter((tmp_path / f"{name}.py").as_uri())
        if readable:
            assert [d.code for d in lint(decode(raw)[0])] == ["AMP401"]
            continue
        for text in {raw.decode("latin-1"), raw.decode("utf-8", "replace")}:  # as editors decode it
            with pytest.raises(SourceError) as info:
                lint(text)
            assert (info.value.line, info.value.reason) == (1, cli[name])
    edited = server._linter((tmp_path / "latin_1_without_a_cookie.py").as_uri())
    assert [d.code for d in edited("# coding: latin-1\n# café\n" + AMP401_LINE.decode())] == ["AMP401"]
    messages = subprocess.run([sys.executable, "-m", "flake8", "--isolated", "--select", "AMP", "."], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600).stdout
    assert f"AMP000 amplint did not analyse this file: {cli['an_unknown_cookie']}" in messages


def test_per_file_ignores_match_the_files_flake8_matches(tmp_path: Path) -> None:
    """Where flake8 and Ruff agree (a bare name anywhere, `./x.py` at the top, globs below a
    folder, classes), `[tool.amplint] per-file-ignores` ignores the same files as flake8's own."""
    dep = "import torch\ns = torch.cuda.amp.GradScaler()\n"
    for rel in ["bar.py", "c.py", "foo.py", "a/bar.py", "a/c.py", "a/foo.py", "a/b/d.py", "a/b/e.py", "x/g.py", "x/h.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(dep)
    patterns = ["./bar.py", "c.py", "a/b/*.py", "x/[g].py"]
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", f"--format={FORMAT}", "--select", "AMP4",
         "--per-file-ignores", " ".join(f"{p}:AMP401" for p in patterns), "."],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    from_flake8 = {Path(line.split(":")[0]).as_posix() for line in proc.stdout.splitlines()}
    table = ", ".join(f'"{p}" = ["AMP401"]' for p in patterns)
    (tmp_path / "pyproject.toml").write_text(f"[tool.amplint]\nper-file-ignores = {{ {table} }}\n")
    cli = subprocess.run([sys.executable, "-m", "amplint", "check", "--no-cache", "--output-format", "json", "."],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    from_cli = {d["filename"] for d in json.loads(cli.stdout)}
    assert from_cli == from_flake8 == {"foo.py", "a/bar.py", "a/foo.py", "x/h.py"}


def test_a_notebook_handed_to_flake8_is_not_analysed_and_says_so(tmp_path: Path) -> None:
    """flake8 hands plugins a notebook's JSON; a silent pass read as a clean notebook where
    `amplint check` finds AMP401 in a cell (hostile pass 19)."""
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "id": "a", "metadata": {}, "outputs": [],
                           "source": ["import torch\n", "with torch.cuda.amp.autocast():\n", "    pass\n"]}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "train.ipynb").write_text(json.dumps(notebook))
    assert {c for *_, c in amplint(files=["train.ipynb"], cwd=tmp_path)} == {"AMP401"}
    assert flake8("--select", "AMP", files=["train.ipynb"], cwd=tmp_path) == {("train.ipynb", 1, 1, "AMP000")}


def test_an_opt_in_rule_a_sub_project_enables_runs_from_any_working_directory(tmp_path: Path) -> None:
    """The plugin read the working directory's [tool.amplint] once per run: a monorepo's
    sub-project got AMP001 from its own folder only (hostile pass 19)."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "pyproject.toml").write_text('[tool.amplint]\nextend-select = ["AMP001"]\n')
    (sub / "m.py").write_text("import torch\nx = 1  # noqa: AMP401\n")
    expected = {("sub/m.py", 2, 8, "AMP001")}
    run = lambda cwd, path: {(Path(p).as_posix().removeprefix("./"), r, c, code)  # noqa: E731
                             for p, r, c, code in _flake8_with_config(path, cwd)}
    assert run(tmp_path, "sub/m.py") == expected
    assert {(f"sub/{p}", r, c, code) for p, r, c, code in run(sub, "m.py")} == expected


def _flake8_with_config(path: str, cwd: Path) -> set[tuple[str, int, int, str]]:
    """flake8 as a user runs it: reading the projects' configuration (not --isolated)."""
    proc = subprocess.run([sys.executable, "-m", "flake8", f"--format={FORMAT}", path],
                          cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    rows = (line.rsplit(":", 3) for line in proc.stdout.splitlines())
    return {(p, int(r), int(c), code.strip()) for p, r, c, code in rows if code.strip().startswith("AMP")}
