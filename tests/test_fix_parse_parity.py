"""A fix leaves text that compiles on every Python the original compiles on (issue 26, item 5).

The fixer runs here, in whatever Python runs the tests (CI's static runs use 3.10 and 3.13, where
libcst reads f-strings differently), over the fixtures that get a fix and the generated variants
(amplint/runtime/fix_execution.py: f-strings in both quotes and nested, notebooks, re-exports,
...), whole and file by file; every fixed file is then compiled by each Python 3.10-3.13 found on
this machine.  A fix may not turn text that one of them compiles into text it does not (an
f-string's inner quotes are the usual way).  No torch here: nothing runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from amplint.runtime import fix_execution as fx

ROOT = Path(__file__).resolve().parent.parent
CASES = [c for c in fx.fixture_cases(ROOT / "fixtures") if fx.offers_fixes(c)] + fx.variants()

_problems: dict[str, list[str]] = {}
_fixed: dict[str, list[fx.Tree]] = {}


@pytest.fixture(scope="module")
def problems(request) -> dict[str, list[str]]:
    """Compile parity of every selected case, in one batch (one process per Python)."""
    wanted = [item.callspec.params["case"] for item in request.session.items
              if item.originalname == "test_fixed_text_compiles_wherever_the_original_does" and hasattr(item, "callspec")]
    pairs, owners = [], []
    for case in wanted:
        if case.id in _problems:
            continue
        _problems[case.id] = []
        _fixed[case.id] = fx.fixed_trees(case)
        original = case.file_map
        for tree in _fixed[case.id]:
            for rel in tree.changed:
                pairs.append((f"{case.id}: {rel} after {tree.label}", original[rel], tree.files[rel]))
                owners.append(case.id)
    for problem in fx.compile_parity(pairs):
        owner = next(o for o, (name, _, _) in zip(owners, pairs) if problem.startswith(name))
        _problems[owner].append(problem)
    return _problems


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fixed_text_compiles_wherever_the_original_does(case: fx.Case, problems) -> None:
    if not _fixed[case.id]:
        pytest.skip("amplint offers no fix here: nothing to compile")
    if problems[case.id]:
        pytest.fail("\n".join(problems[case.id]), pytrace=False)


def test_other_pythons_are_found() -> None:
    """Parity means little with one interpreter: this machine's pyenv versions are all used."""
    versions = dict(fx.interpreters())
    assert "%d.%d" % sys.version_info[:2] in versions
    for minor in (10, 11, 12, 13):
        if list(Path.home().glob(f".pyenv/versions/3.{minor}.*/bin/python3.{minor}")):
            assert f"3.{minor}" in versions


def test_a_quote_that_only_3_12_reads_is_a_parity_problem() -> None:
    """The check itself: the 3.12 form of issue 26 item 5's fixed f-string."""
    before = 'import torch\nprint(f"{torch.cuda.amp.GradScaler()}")\n'
    after = 'import torch\nprint(f"{torch.amp.GradScaler("cuda")}")\n'
    versions = dict(fx.interpreters())
    problems = fx.compile_parity([("t.py", before, after)])
    older = [v for v in versions if v in ("3.10", "3.11")]
    assert [p.split("Python ")[1].split(" ")[0] for p in problems] == older


def test_notebook_cells_are_compiled_as_a_kernel_runs_them() -> None:
    nb = fx.notebook("import torch\n", "%time s = torch.cuda.amp.GradScaler()\n")
    fixed = fx.notebook("import torch\n", '%time s = torch.amp.GradScaler("cuda" if True else "x"\n')
    assert fx.compile_parity([("nb.ipynb", nb, nb)]) == []
    assert len(fx.compile_parity([("nb.ipynb", nb, fixed)])) == len(fx.interpreters())


def test_the_generated_variants_are_valid_python_here() -> None:
    """Each generated file compiles on this Python (bar the 3.12-only f-string shape)."""
    for case in fx.variants():
        for rel, text in case.files:
            if "same_quote_312" in case.id and sys.version_info < (3, 12):
                continue
            for name, code in fx.python_sources(rel, text):
                compile(code, f"{case.id}/{name}", "exec")
