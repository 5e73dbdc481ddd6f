"""Notebooks are checked and fixed like modules, findings placed by cell (as Ruff does it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from amplint import notebooks
from amplint.config import Config
from amplint.engine import check_source
from amplint.runner import check_paths, discover

DEPRECATED = "with torch.cuda.amp.autocast(): pass"
# Clips before unscale_ (AMP101, a preview rule: the checks of the `train` notebook run in preview)
TRAIN_CELL = """\
for _ in range(2):
    with torch.cuda.amp.autocast():
        loss = model(torch.randn(2, 4)).sum()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
model?"""


def make_notebook(path: Path, cells: list, *, language: str = "python") -> Path:
    """A notebook as Jupyter writes it (nbformat's own writer: indent 1, sorted keys)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "k", "display_name": "K", "language": language}
    nb.metadata["language_info"] = {"name": language}
    for cell in cells:
        nb.cells.append(nbformat.v4.new_markdown_cell(cell[1:]) if cell.startswith("#md") else nbformat.v4.new_code_cell(cell))
    nb.cells[-1].outputs = [nbformat.v4.new_output("stream", text="kept\n")]
    nb.cells[-1].execution_count = 7
    nbformat.write(nb, path)
    return path


@pytest.fixture
def train(tmp_path: Path) -> Path:
    return make_notebook(tmp_path / "train.ipynb", [
        "#md # Training",
        "%matplotlib inline\n!pip install torch\nimport torch",
        "model = torch.nn.Linear(4, 4)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n" + DEPRECATED,
        "%%bash\necho torch.cuda.amp.GradScaler",
        TRAIN_CELL,
    ])


def amplint(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amplint", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_findings_name_their_cell_and_rows_count_within_it(train: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "train.ipynb", cwd=train.parent)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert "train.ipynb:cell 3:3:6: AMP401 [*] `torch.cuda.amp.autocast` is deprecated since PyTorch 2.4" in lines
    assert "train.ipynb:cell 5:2:10: AMP401 [*] `torch.cuda.amp.autocast` is deprecated since PyTorch 2.4" in lines
    assert any(line.startswith("train.ipynb:cell 5:5:5: AMP101") for line in lines)
    # the line under the finding is the cell's own line, not the notebook's JSON
    assert "     3 | with torch.cuda.amp.autocast(): pass" in lines
    # magics (`%matplotlib`, `!pip`, `model?`) and the %%bash cell are neither reported nor parse errors
    assert "cell 2" not in proc.stdout and "cell 4" not in proc.stdout and not proc.stderr


def test_json_sarif_and_github_carry_the_cell(train: Path) -> None:
    rows = json.loads(amplint("check", "--isolated", "--preview", "--output-format", "json", "train.ipynb", cwd=train.parent).stdout)
    assert [(r["cell"], r["code"], r["location"]["row"], r["noqa_row"]) for r in rows] == [
        (3, "AMP401", 3, 3), (5, "AMP401", 2, 2), (5, "AMP101", 5, 5)]
    sarif = json.loads(amplint("check", "--isolated", "--preview", "--output-format", "sarif", "train.ipynb", cwd=train.parent).stdout)
    result = sarif["runs"][0]["results"][0]
    assert result["properties"] == {"cell": 3} and result["locations"][0]["message"] == {"text": "cell 3"}
    github = amplint("check", "--isolated", "--preview", "--output-format", "github", "train.ipynb", cwd=train.parent).stdout
    assert "title=amplint (AMP401%2C cell 3),file=train.ipynb,line=3,col=6" in github
    assert "::cell 3:3:6: AMP401" in github


def test_fix_edits_only_the_cells_it_fixes_and_keeps_the_json_layout(train: Path) -> None:
    before = train.read_text()
    proc = amplint("check", "--isolated", "--preview", "--fix", "--unsafe-fixes", "train.ipynb", cwd=train.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Found 3 errors (3 fixed, 0 remaining)." in proc.stdout and "warning" not in proc.stderr
    after = train.read_text()
    nbformat.validate(nbformat.reads(after, as_version=4))
    old, new = json.loads(before), json.loads(after)
    assert new["metadata"] == old["metadata"] and new["nbformat_minor"] == old["nbformat_minor"]
    assert [c.get("id") for c in new["cells"]] == [c.get("id") for c in old["cells"]]
    assert new["cells"][4]["outputs"] == old["cells"][4]["outputs"] and new["cells"][4]["execution_count"] == 7
    assert "".join(new["cells"][2]["source"]).endswith('with torch.autocast("cuda", dtype=torch.float16, cache_enabled=True): pass')
    assert "    scaler.unscale_(optimizer)\n" in new["cells"][4]["source"]
    assert new["cells"][1]["source"] == old["cells"][1]["source"]  # the magics are back, untouched
    assert new["cells"][4]["source"][-1] == "model?"
    # nothing but the fixed source lines changed: the JSON diff is exactly those lines
    import difflib

    changed = [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:1] in "+-"]
    assert changed == [
        '-     "with torch.cuda.amp.autocast(): pass"',
        '+     "with torch.autocast(\\"cuda\\", dtype=torch.float16, cache_enabled=True): pass"',
        '-     "    with torch.cuda.amp.autocast():\\n",',
        '+     "    with torch.autocast(\\"cuda\\", dtype=torch.float16, cache_enabled=True):\\n",',
        '+     "    scaler.unscale_(optimizer)\\n",',
    ]


def test_diff_is_per_cell_and_changes_nothing(train: Path) -> None:
    before = train.read_bytes()
    proc = amplint("check", "--isolated", "--preview", "--diff", "train.ipynb", cwd=train.parent)
    assert proc.returncode == 1
    assert "--- a/train.ipynb:cell 3\n+++ b/train.ipynb:cell 3\n" in proc.stdout
    assert '+with torch.autocast("cuda", dtype=torch.float16, cache_enabled=True): pass' in proc.stdout
    assert train.read_bytes() == before


def test_noqa_inside_a_cell_and_add_noqa(train: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "--add-noqa", "train.ipynb", cwd=train.parent)
    assert proc.stdout.strip() == "Added 3 noqa directives.", proc.stderr
    cells = json.loads(train.read_text())["cells"]
    assert "".join(cells[2]["source"]).endswith("autocast(): pass  # noqa: AMP401")
    assert amplint("check", "--isolated", "--preview", "train.ipynb", cwd=train.parent).returncode == 0


def test_directory_walks_include_notebooks_and_honour_excludes(tmp_path: Path) -> None:
    make_notebook(tmp_path / "a.ipynb", ["import torch\n" + DEPRECATED])
    (tmp_path / "skip").mkdir()
    make_notebook(tmp_path / "skip" / "b.ipynb", ["import torch\n" + DEPRECATED])
    (tmp_path / "script.pyw").write_text("import torch\n" + DEPRECATED + "\n")
    config = Config(root=tmp_path, extend_exclude=("skip",), extend_include=("*.pyw",))
    files, _ = discover([tmp_path], config)
    assert sorted(p.name for p in files) == ["a.ipynb", "script.pyw"]
    result = check_paths([tmp_path], config)
    assert {(Path(d.path).name, d.cell) for d in result.diagnostics} == {("a.ipynb", 1), ("script.pyw", None)}


def test_magics_are_neutralised_but_strings_are_not(tmp_path: Path) -> None:
    code, magics = notebooks.neutralise('x = """\n%not a magic\n"""\n%time y = 1\nfiles = !ls\n', "M")
    assert magics == ("%time y = 1", "files = !ls")
    assert "%not a magic" in code and code.count("pass  # M magic") == 2
    assert notebooks.neutralise("%%writefile x.py\nimport torch\n", "M") == (None, ())
    assert notebooks.neutralise("%%time\nx = 1\n", "M")[0] == "pass  # M magic\nx = 1\n"


@pytest.mark.parametrize("escape", ["!pip install -q \\", "%pip install -q \\", "files = !ls \\"])
def test_an_ipython_line_continued_by_a_backslash_is_one_command(tmp_path: Path, escape: str) -> None:
    """Colab's `!pip install -q \\` + `    transformers accelerate`: IPython joins the lines, so the
    indented continuation is not Python's "unexpected indent" (hostile pass 11)."""
    source = f"{escape}\n    transformers \\\n  accelerate\nimport torch\n{DEPRECATED}"
    code, magics = notebooks.neutralise(source, "M")
    assert magics == (escape, "    transformers \\", "  accelerate")
    assert code.startswith("pass  # M magic\n" * 3)
    make_notebook(tmp_path / "colab.ipynb", [source])
    result = check_paths([tmp_path / "colab.ipynb"], Config(root=tmp_path))
    assert result.errors == [] and {d.code for d in result.diagnostics} == {"AMP401"}


def test_a_non_python_kernel_is_skipped_and_broken_json_is_an_error(tmp_path: Path) -> None:
    make_notebook(tmp_path / "r.ipynb", ["library(torch)\n" + DEPRECATED], language="R")
    (tmp_path / "bad.ipynb").write_text("{not json")
    result = check_paths([tmp_path], Config(root=tmp_path))
    assert result.diagnostics == []
    (err,) = result.errors
    assert err.path.endswith("bad.ipynb") and "not a notebook: invalid JSON" in err.error.reason


def test_a_syntax_error_names_its_cell(tmp_path: Path) -> None:
    make_notebook(tmp_path / "nb.ipynb", ["import torch", "x = (\n"])
    (err,) = check_paths([tmp_path / "nb.ipynb"], Config(root=tmp_path)).errors
    assert err.error.reason.startswith("cell 2: line ")


def test_a_fix_that_would_break_the_cells_is_not_written(train: Path) -> None:
    nb = notebooks.load(train.read_text(), str(train))
    with pytest.raises(notebooks.NotebookError, match="moved code across cells"):
        nb.with_module(nb.module.replace(f"# {nb.marker} 5\n", ""))


def test_stdin_notebook_with_fix_writes_the_notebook_to_stdout(train: Path) -> None:
    proc = amplint("check", "--isolated", "--preview", "--fix", "--stdin-filename", "train.ipynb", "-", cwd=train.parent,
                   stdin=train.read_text())
    nbformat.validate(nbformat.reads(proc.stdout, as_version=4))
    assert DEPRECATED not in proc.stdout and "cell 5:5:5: AMP101" in proc.stderr


def test_check_source_on_the_joined_module_is_what_the_cli_reports(train: Path) -> None:
    nb = notebooks.load(train.read_text(), "train.ipynb")
    found = notebooks.check(nb, lambda text: check_source(text, "train.ipynb", Config(preview=True)))
    assert [(d.cell, d.span.line, d.code) for d in found] == [(3, 3, "AMP401"), (5, 2, "AMP401"), (5, 5, "AMP101")]


@pytest.mark.parametrize("indent", [2, 4, None])
def test_other_json_layouts_are_kept_or_normalisation_is_said(tmp_path: Path, indent) -> None:
    path = make_notebook(tmp_path / "nb.ipynb", ["import torch\n" + DEPRECATED])
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data, indent=indent, ensure_ascii=False) + "\n")
    result = check_paths([path], Config(root=tmp_path), fix=True)
    (f,) = result.files
    assert f.written and f.warnings == []
    fixed = path.read_text()
    data["cells"][0]["source"][-1] = 'with torch.autocast("cuda", dtype=torch.float16, cache_enabled=True): pass'
    assert fixed == json.dumps(data, indent=indent, ensure_ascii=False) + "\n"
    # a layout json cannot reproduce (keys on one line, odd spacing) is normalised, and said so
    path.write_text(json.dumps(json.loads(fixed), indent=1).replace('"cells": [', '"cells":   [') .replace(
        'torch.autocast(\\"cuda\\", dtype=torch.float16, cache_enabled=True)', "torch.cuda.amp.autocast()"))
    (f,) = check_paths([path], Config(root=tmp_path), fix=True).files
    assert f.written and "normalised layout" in f.warnings[0]


def test_the_result_cache_keeps_cells(train: Path, tmp_path: Path) -> None:
    config = Config(root=tmp_path, preview=True)
    cold = check_paths([train], config, cache_dir=tmp_path / "cache")
    warm = check_paths([train], config, cache_dir=tmp_path / "cache")
    assert [(d.cell, d.span, d.code) for d in warm.diagnostics] == [(d.cell, d.span, d.code) for d in cold.diagnostics]
    assert {d.cell for d in warm.diagnostics} == {3, 5}


@pytest.fixture
def cross_cell(tmp_path: Path) -> Path:
    """A fix that changes several cells: the import in the first, the calls in the others."""
    return make_notebook(tmp_path / "nb.ipynb", [
        "import torch\nfrom torch.cuda.amp import GradScaler, autocast",
        "scaler = GradScaler()",
        "with autocast():\n    y = 1",
        "s2 = torch.cuda.amp.GradScaler()",
    ])


def test_the_fixable_count_is_what_fix_then_fixes(cross_cell: Path) -> None:
    # NB: every fix here is unsafe (a module-level import, GradScaler constructions): counted
    # and applied with --unsafe-fixes, as the summary says
    checked = amplint("check", "--isolated", "--no-cache", "nb.ipynb", cwd=cross_cell.parent)
    assert "Found 5 errors.\nNo fixes available (5 hidden fixes can be enabled with the `--unsafe-fixes` option)." in checked.stdout, checked.stdout
    checked = amplint("check", "--isolated", "--no-cache", "--unsafe-fixes", "nb.ipynb", cwd=cross_cell.parent)
    assert "Found 5 errors.\n[*] 5 fixable with the `--fix` option." in checked.stdout, checked.stdout
    assert checked.stdout.count(" [*] ") == 5
    fixed = amplint("check", "--isolated", "--no-cache", "--fix", "--unsafe-fixes", "nb.ipynb", cwd=cross_cell.parent)
    assert "Found 5 errors (5 fixed, 0 remaining)." in fixed.stdout, fixed.stdout + fixed.stderr


def test_a_fix_across_cells_names_the_cell_of_each_edit(cross_cell: Path, tmp_path: Path) -> None:
    def edits(*args: str) -> list:
        rows = json.loads(amplint("check", "--isolated", "--output-format", "json", *args, "nb.ipynb",
                                  cwd=cross_cell.parent).stdout)
        return [(r["cell"], [(e["cell"], e["location"]["row"], e["content"]) for e in r["fix"]["edits"]]) for r in rows]

    (first, *rest) = found = edits("--no-cache")
    assert first == (1, [
        (1, 2, "from torch.amp import GradScaler, autocast"), (2, 1, 'GradScaler("cuda")'), (3, 1, 'autocast("cuda", dtype=torch.float16, cache_enabled=True)'),
    ])
    assert found[-1] == (4, [(4, 1, 'torch.amp.GradScaler("cuda")')])
    cache = str(tmp_path / "cache")
    assert edits("--cache-dir", cache) == found
    assert edits("--cache-dir", cache) == found  # read back from the cache


def test_a_crlf_notebook_stays_crlf(tmp_path: Path) -> None:
    path = make_notebook(tmp_path / "nb.ipynb", ["import torch\n" + DEPRECATED])
    before = path.read_bytes().replace(b"\n", b"\r\n")
    path.write_bytes(before)
    (f,) = check_paths([path], Config(root=tmp_path), fix=True).files
    assert f.written and f.warnings == []
    after = path.read_bytes()
    assert after == before.replace(b"torch.cuda.amp.autocast()", b'torch.autocast(\\"cuda\\", dtype=torch.float16, cache_enabled=True)')


def test_sarif_leaves_out_a_fix_it_cannot_place_in_its_cells(cross_cell: Path) -> None:
    sarif = json.loads(amplint("check", "--isolated", "--no-cache", "--output-format", "sarif", "nb.ipynb",
                               cwd=cross_cell.parent).stdout)
    results = sarif["runs"][0]["results"]
    assert [("fixes" in r, r["properties"]["cell"]) for r in results] == [
        (False, 1), (False, 1), (False, 2), (False, 3), (True, 4),
    ]


def _raw_notebook(**changes) -> dict:
    nb = {"cells": [{"cell_type": "code", "source": ["import torch\n", DEPRECATED + "\n"], "metadata": {},
                     "outputs": [], "execution_count": None}],
          "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    for where, value in changes.items():
        if where == "source":
            nb["cells"][0]["source"] = value
        elif where in ("worksheets", "worksheet_cells"):  # nbformat 3: no `cells`
            del nb["cells"]
            nb["nbformat"] = 3
            nb["worksheets"] = value if where == "worksheets" else [{"cells": value}]
        else:
            nb[where] = value
    return nb


CELL_ERROR = "cell 1: `source` is neither text nor a list of lines"
MALFORMED_NOTEBOOKS = {
    "a line of the source is a number": ({"source": ["import torch\n", 5]}, CELL_ERROR),
    "a line of the source is null": ({"source": [None]}, CELL_ERROR),
    "a line of the source is a list": ({"source": [["import torch\n"]]}, CELL_ERROR),
    "a line of the source is an object": ({"source": [{"text": "x"}]}, CELL_ERROR),
    "the source is a number": ({"source": 5}, CELL_ERROR),
    "the source is true": ({"source": True}, CELL_ERROR),
    "cells is an object": ({"cells": {"0": {}}}, "not a notebook: `cells` is not a list"),
    "worksheets is a number": ({"worksheets": 3}, "not a notebook: `worksheets` is not a list of worksheets"),
    "a worksheet is a string": ({"worksheets": ["ws"]}, "not a notebook: `worksheets` is not a list of worksheets"),
    "a worksheet's cells are a number": ({"worksheet_cells": 3}, "not a notebook: a worksheet's `cells` is not a list"),
    "nbformat is a word": ({"nbformat": "four"}, 'not a notebook: `nbformat` is "four", not a version number'),
    "nbformat is a list": ({"nbformat": [4]}, "not a notebook: `nbformat` is [4], not a version number"),
}


@pytest.mark.parametrize("changes,reason", MALFORMED_NOTEBOOKS.values(), ids=MALFORMED_NOTEBOOKS.keys())
def test_a_malformed_notebook_is_that_files_clear_error_not_an_internal_one(tmp_path: Path, changes, reason) -> None:
    (tmp_path / "nb.ipynb").write_text(json.dumps(_raw_notebook(**changes)))
    result = check_paths([tmp_path / "nb.ipynb"], Config(root=tmp_path))
    assert [c for f in result.files for c in f.crashes] == []
    (err,) = result.errors
    assert err.error.reason == reason


@pytest.mark.parametrize("metadata", [[], "python", {"language_info": "python"}, {"kernelspec": ["python"]},
                                      {"language_info": {"name": 3}}])
def test_metadata_of_another_shape_says_no_language_and_the_cells_are_checked(tmp_path: Path, metadata) -> None:
    (tmp_path / "nb.ipynb").write_text(json.dumps(_raw_notebook(metadata=metadata)))
    result = check_paths([tmp_path / "nb.ipynb"], Config(root=tmp_path))
    assert [c for f in result.files for c in f.crashes] == [] and result.errors == []
    assert [(d.code, d.cell) for d in result.diagnostics] == [("AMP401", 1)]


def test_the_cli_names_the_cell_whose_source_holds_a_number(tmp_path: Path) -> None:
    (tmp_path / "nb.ipynb").write_text(json.dumps(_raw_notebook(source=["import torch\n", 5])))
    proc = amplint("check", "--isolated", "nb.ipynb", cwd=tmp_path)
    assert proc.returncode == 2
    assert f"nb.ipynb:1:1: error: {CELL_ERROR}" in proc.stdout + proc.stderr
    assert "internal error" not in proc.stdout + proc.stderr and "All checks passed" not in proc.stdout


UNWRITABLE_NOTEBOOKS = {
    "invalid once written": {"cells": [{"cell_type": "code", "source": ["import torch\n", DEPRECATED + "\n"], "metadata": {},
                                        "outputs": [], "execution_count": None}],
                             "metadata": {"kernelspec": {"name": "python3", "language": "python"}},
                             "nbformat": 4, "nbformat_minor": 5},
    "nbformat 3": {"worksheets": [{"cells": [{"cell_type": "code", "language": "python", "metadata": {}, "outputs": [],
                                              "input": ["import torch\n", DEPRECATED + "\n"]}]}],
                   "metadata": {}, "nbformat": 3, "nbformat_minor": 0},
}


@pytest.mark.parametrize("raw", UNWRITABLE_NOTEBOOKS.values(), ids=UNWRITABLE_NOTEBOOKS.keys())
def test_a_notebook_fix_that_is_not_written_leaves_its_findings_reported(tmp_path: Path, raw) -> None:
    """`--fix` refused to write the notebook, then said "All checks passed!" and exited 0:
    the findings it did not fix are still there."""
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(raw))
    before = path.read_bytes()
    proc = amplint("check", "--isolated", "--no-cache", "--fix", "--select", "AMP401", str(path), cwd=tmp_path)
    assert path.read_bytes() == before
    assert "fix not written" in proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "All checks passed" not in proc.stdout and "AMP401" in proc.stdout


def test_a_notebook_nesting_its_json_too_deeply_is_a_clear_error(tmp_path: Path) -> None:
    """Arrays nested past the JSON reader's recursion limit raised RecursionError: an internal
    error that every report then showed as a clean run (hostile pass 11). The depth is far past
    the limit of every supported Python (3.13's C reader reads 2,000 levels; 3.11's does not)."""
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deep.ipynb").write_text(
        '{"cells": [], "metadata": {"x": ' + deep + '}, "nbformat": 4, "nbformat_minor": 5}')
    (err,) = check_paths([tmp_path / "deep.ipynb"], Config(root=tmp_path)).errors
    assert err.error.reason == "not a notebook: its JSON nests too deeply to read"


def test_no_unscale_inserted_in_a_clip_cell_that_does_not_step(tmp_path: Path) -> None:
    """The clip and the step in two cells: re-running the clip cell alone would call the
    inserted `unscale_` twice in one iteration and raise (hostile pass 24)."""
    nb = make_notebook(tmp_path / "t.ipynb", [
        "import torch\nmodel = torch.nn.Linear(4, 4)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "scaler = torch.amp.GradScaler('cuda')\n"
        "with torch.autocast('cuda', dtype=torch.float16):\n    loss = model(torch.randn(2, 4)).sum()\n"
        "scaler.scale(loss).backward()",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "scaler.step(optimizer)\nscaler.update()",
    ])
    proc = amplint("check", "--isolated", "--preview", "--show-fixes", "--unsafe-fixes", nb.name, cwd=tmp_path)
    assert "AMP101" in proc.stdout and "Insert" not in proc.stdout and "fixable" not in proc.stdout, proc.stdout


def test_no_finfo_fix_where_a_magic_line_reads_the_filled_tensor(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "t.ipynb", [
        "import torch\nscaler = torch.amp.GradScaler('cuda')\n"
        "def attend(q, mask):\n    logits = (q @ q.transpose(-2, -1)).half()\n"
        "    logits = logits.masked_fill(mask == 0, -1e9)\n    return torch.softmax(logits, -1)",
        "scores = (torch.randn(2, 3, 3) @ torch.randn(2, 3, 3)).half()\n%time print(scores.min())\n"
        "scores = scores.masked_fill(torch.ones(2, 3, 3) == 0, -1e9)\nprint(torch.softmax(scores, -1))",
    ])
    before = nb.read_text()
    amplint("check", "--isolated", "--preview", "--fix", "--unsafe-fixes", nb.name, cwd=tmp_path)
    after = json.loads(nb.read_text())
    assert "finfo" in "".join(after["cells"][0]["source"])  # inside the function: fixed
    assert "finfo" not in "".join(after["cells"][1]["source"]), before


def test_a_comment_naming_the_step_is_no_step_in_the_clip_cell(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "t.ipynb", [
        "import torch\nmodel = torch.nn.Linear(4, 4)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "scaler = torch.amp.GradScaler('cuda')\n"
        "with torch.autocast('cuda', dtype=torch.float16):\n    loss = model(torch.randn(2, 4)).sum()\n"
        "scaler.scale(loss).backward()",
        "# then scaler.step(optimizer) in the next cell\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "scaler.step(optimizer)\nscaler.update()",
    ])
    proc = amplint("check", "--isolated", "--preview", "--show-fixes", "--unsafe-fixes", nb.name, cwd=tmp_path)
    assert "AMP101" in proc.stdout and "fixable" not in proc.stdout, proc.stdout
