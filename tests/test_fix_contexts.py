"""AMP401's safe fix holds in every context the rewritten code can run in.

A fix is safe only if the new code builds the same objects from the same arguments
wherever it runs: inside another autocast region, in whichever branch chose the import,
called from another module that imports the rewritten name, compared with `isinstance`
in another module, inside an f-string under any Python, next to IPython lines amplint
cannot rewrite.  Where that cannot be shown, the finding stays and the fix goes.
tests/runtime/ runs the shapes with torch; here: what the fixer offers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import fixes, notebooks
from amplint.engine import check_source

ROOT = Path(__file__).resolve().parent.parent


pytestmark = pytest.mark.usefixtures("a_project_of_its_own")  # tests/conftest.py


def fixed(source: str, path: str = "t.py", **kw) -> str:
    """The text after AMP401's fixes, safe and unsafe: what each writes is the question here
    (a GradScaler's fix and a module-level import's are unsafe, for reasons outside the file)."""
    outcome = fixes.fix_text(source, lambda text: check_source(text, path, select=["AMP401"], **kw), unsafe=True)
    return outcome.source


def offered(path: Path) -> list[tuple[int, bool]]:
    """(line, has a fix) per AMP401 finding of a file on disk, checked as pre-commit passes it."""
    return [(d.span.line, d.fix is not None) for d in check_source(path.read_text(), str(path), select=["AMP401"])]


# --- the device chosen when the module is imported -----------------------------------------------


@pytest.mark.parametrize("guard", ["if torch.cuda.is_available():", "if USE_CUDA:", "try:"])
def test_an_import_chosen_per_device_is_not_fixed(guard: str) -> None:
    """Either import binds `autocast`: a call means cuda's on one machine and cpu's on
    another; `autocast("cuda")` would disable autocast (and the scaler) on CPU."""
    other = "except ImportError:" if guard == "try:" else "else:"
    source = (
        f"import torch\nUSE_CUDA = True\n{guard}\n    from torch.cuda.amp import GradScaler, autocast\n"
        f"{other}\n    from torch.cpu.amp import GradScaler, autocast\n"
        "scaler = GradScaler()\nwith autocast():\n    pass\n"
    )
    assert fixed(source) == source


def test_the_same_device_imported_in_both_branches_is_still_fixed() -> None:
    source = (
        "import torch\nif FAST:\n    from torch.cuda.amp import autocast\nelse:\n    from torch.cuda.amp import autocast\n"
        "with autocast():\n    pass\n"
    )
    assert 'autocast("cuda", dtype=torch.float16, cache_enabled=True)' in fixed(source)


# --- names re-exported to other modules ---------------------------------------------------------


IMPORTERS = {
    "from-import": "from utils import GradScaler, autocast\nscaler = GradScaler(2.0**10)\nwith autocast(True, torch.bfloat16):\n    pass\n",
    "module-attribute": "import utils\nscaler = utils.GradScaler(2.0**10)\n",
    "star-import": "from utils import *\nwith autocast():\n    pass\n",
    "package-relative": None,  # pkg/__init__.py re-exports, train.py imports the package
    "package-star": None,  # pkg/__init__.py: `from .utils import *`, train.py imports the package
}


@pytest.mark.parametrize("how", sorted(IMPORTERS))
def test_a_name_another_module_imports_is_not_renamed(tmp_path: Path, how: str) -> None:
    """`train.py` calls `utils.GradScaler(2.0**10)` the legacy way: after a fix of
    utils.py alone it would build a scaler on device 1024.0."""
    if how in ("package-relative", "package-star"):
        pkg = tmp_path / "pkg"
        pkg.mkdir()
        target = pkg / "utils.py"
        (pkg / "__init__.py").write_text("from .utils import *\n" if how == "package-star" else "from .utils import GradScaler\n")
        (tmp_path / "train.py").write_text("from pkg import GradScaler\nscaler = GradScaler(2.0**10)\n")
    else:
        target = tmp_path / "utils.py"
        (tmp_path / "train.py").write_text("import torch\n" + IMPORTERS[how])
    target.write_text("import torch\nfrom torch.cpu.amp import GradScaler, autocast\n\nscaler = GradScaler()\n")
    found = offered(target)
    assert found and not any(has_fix for _, has_fix in found)


UNRESOLVED_IMPORTERS = {
    # Python finds `utils` only because the script edits sys.path: no resolver follows that
    "sys-path": 'import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))\n'
                "from utils import GradScaler\nscaler = GradScaler(2.0**10)\n",
    "sys-path-dotted": "import sys\nsys.path.append('..')\nimport lib.utils as u\nscaler = u.GradScaler(2.0**10)\n",
    "import-module": 'import importlib\nhelpers = importlib.import_module("utils")\nscaler = helpers.GradScaler(2.0**10)\n',
    "dunder-import": 'h = __import__("utils")\nscaler = getattr(h, "GradScaler")(2.0**10)\n',
    "file-loader": 'import importlib.util\nspec = importlib.util.spec_from_file_location("u", "../lib/utils.py")\n'
                   "u = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(u)\nscaler = u.GradScaler(2.0**10)\n",
}


@pytest.mark.parametrize("marker", [True, False], ids=["in-a-git-tree", "no-project-marker"])
@pytest.mark.parametrize("how", sorted(UNRESOLVED_IMPORTERS))
def test_an_importer_the_resolver_cannot_follow_still_pins_the_fix(tmp_path_factory, how: str, marker: bool) -> None:
    """`scripts/train.py` reaches `lib/utils.py` through sys.path or importlib: fixing
    utils.py alone would hand it `torch.amp.GradScaler`, device 1024.0.  With no project
    marker nothing says where the project ends, so the folders beside `lib/` are read."""
    root = tmp_path_factory.mktemp("unresolved")
    if marker:
        (root / ".git").mkdir()
    (root / "lib").mkdir()
    (root / "scripts").mkdir()
    target = root / "lib" / "utils.py"
    target.write_text("import torch\nfrom torch.cpu.amp import GradScaler\n")
    (root / "scripts" / "train.py").write_text(UNRESOLVED_IMPORTERS[how])
    assert offered(target) == [(2, False)]


NOTEBOOK_IMPORTERS = {
    "from-import": ("nb.ipynb", "from utils import GradScaler\ns = GradScaler(4.0)\n"),
    "module-attribute": ("nb.ipynb", "import utils\ns = utils.GradScaler(4.0)\n"),
    "star-import": ("nb.ipynb", "from utils import *\ns = GradScaler(4.0)\n"),
    "in-a-subfolder": ("notebooks/explore.ipynb", "import sys\nsys.path.insert(0, '..')\nfrom utils import GradScaler\n"),
    "through-a-star-re-export": ("nb.ipynb", "from amp_compat import GradScaler\ns = GradScaler(4.0)\n"),
}


@pytest.mark.parametrize("how", sorted(NOTEBOOK_IMPORTERS))
def test_a_notebook_that_imports_the_name_pins_the_fix(tmp_path_factory, how: str) -> None:
    """hostile3 c30: `nb.ipynb` does `from utils import GradScaler; GradScaler(4.0)`: renaming
    utils.py's import (the tree checked whole, or utils.py alone) built a scaler on device 4.0."""
    root = tmp_path_factory.mktemp("notebook")
    (root / ".git").mkdir()
    target = root / "utils.py"
    target.write_text("import torch\nfrom torch.cpu.amp import GradScaler\n\ndef make():\n    return GradScaler(init_scale=8.0)\n")
    (root / "amp_compat.py").write_text("from utils import *\n")
    rel, code = NOTEBOOK_IMPORTERS[how]
    (root / rel).parent.mkdir(exist_ok=True)
    (root / rel).write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                                  "source": code.splitlines(keepends=True)}],
                                        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert offered(target) == [(2, False), (5, False)]


def test_a_notebook_that_names_the_module_but_not_the_name_leaves_the_fix(tmp_path) -> None:
    (tmp_path / ".git").mkdir(exist_ok=True)
    target = tmp_path / "utils.py"
    target.write_text("import torch\nfrom torch.cpu.amp import GradScaler\n\ndef make():\n    return GradScaler(init_scale=8.0)\n")
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                                                              "execution_count": None, "source": ["import utils\n", "s = utils.make()\n"]}],
                                                   "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert offered(target) == [(2, True), (5, True)]


@pytest.mark.parametrize("setting", ["torch.set_autocast_cache_enabled(False)",
                                     'with torch.autocast("cpu", cache_enabled=False):\n    model.forward()'])
def test_a_weight_cache_set_in_another_module_of_the_program_is_kept_by_the_fix(tmp_path: Path, setting: str) -> None:
    """`train.py` disables the cache (or enters a region without it) around model.py's
    legacy region: the legacy class turns the cache back on, and so does the fixed call."""
    target = tmp_path / "model.py"
    target.write_text("import torch\n\ndef forward():\n    with torch.cpu.amp.autocast():\n        pass\n")
    (tmp_path / "train.py").write_text(f"import torch\nimport model\n{setting}\n")
    assert offered(target) == [(4, True)]
    assert 'torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=True)' in fixed(target.read_text(), str(target))


def test_an_unrelated_dotted_import_does_not_pin_the_fix(tmp_path: Path) -> None:
    """`from torch.utils.data import DataLoader` names a module `utils` too, but not this one."""
    target = tmp_path / "utils.py"
    target.write_text("import torch\nfrom torch.cpu.amp import GradScaler\n\nscaler = GradScaler()\n")
    (tmp_path / "train.py").write_text("import torch\nfrom torch.utils.data import DataLoader\nscaler = torch.amp.GradScaler('cpu')\n")
    assert offered(target) == [(2, True), (4, True)]


def test_a_module_nobody_imports_is_still_fixed(tmp_path: Path) -> None:
    target = tmp_path / "utils.py"
    target.write_text("import torch\nfrom torch.cpu.amp import GradScaler\n\nscaler = GradScaler()\n")
    (tmp_path / "other.py").write_text("import torch\nGradScaler = 1\n")  # names it, imports nothing
    assert offered(target) == [(2, True), (4, True)]


# --- isinstance in another module ----------------------------------------------------------------


@pytest.mark.parametrize(
    "test_line",
    [
        "isinstance(s, torch.cuda.amp.GradScaler)",
        "type(s) is torch.cuda.amp.GradScaler",
        "s.__class__ in (torch.cuda.amp.GradScaler,)",
    ],
)
@pytest.mark.parametrize("direction", ["builder-is-imported", "tester-is-imported", "both-imported-by-main"])
def test_a_class_tested_in_another_module_keeps_its_constructions(tmp_path: Path, test_line: str, direction: str) -> None:
    builder = tmp_path / "build.py"
    builder.write_text("import torch\n\ndef make():\n    return torch.cuda.amp.GradScaler(enabled=False)\n")
    tester_text = f"import torch\n\ndef check(s):\n    return {test_line}\n"
    if direction == "builder-is-imported":
        (tmp_path / "loop.py").write_text(tester_text + "from build import make\ncheck(make())\n")
    elif direction == "tester-is-imported":
        (tmp_path / "loop.py").write_text(tester_text)
        builder.write_text(builder.read_text() + "from loop import check\ncheck(make())\n")
    else:
        (tmp_path / "loop.py").write_text(tester_text)
        (tmp_path / "main.py").write_text("from build import make\nfrom loop import check\ncheck(make())\n")
    assert offered(builder) == [(4, False)]


def test_a_script_beside_it_that_shares_nothing_does_not_pin_the_fix(tmp_path: Path) -> None:
    """A folder of independent scripts: the scaler built in one never reaches the other."""
    builder = tmp_path / "build.py"
    builder.write_text("import torch\nscaler = torch.cuda.amp.GradScaler(enabled=False)\n")
    (tmp_path / "other.py").write_text("import torch\nprint(isinstance(1, torch.cuda.amp.GradScaler))\n")
    assert offered(builder) == [(2, True)]


# --- f-strings: the fixed text parses on every Python the original parses on ---------------------


def _pythons() -> list[str]:
    import glob
    import shutil

    found = {}
    for minor in ("3.10", "3.11", "3.12", "3.13"):
        for candidate in [shutil.which(f"python{minor}"), *sorted(glob.glob(str(Path.home() / f".pyenv/versions/{minor}.*/bin/python{minor}")))]:
            if candidate and minor not in found:
                found[minor] = candidate
    return sorted(found.values())


def _compiles(python: str, source: str) -> bool:
    return subprocess.run([python, "-c", "import sys; compile(sys.stdin.read(), 'x.py', 'exec')"],
                          input=source, text=True, capture_output=True).returncode == 0


F_STRINGS = [
    'print(f"{torch.cuda.amp.GradScaler()}")\n',
    "print(f'{torch.cuda.amp.GradScaler()}')\n",
    'print(f"""{torch.cuda.amp.GradScaler(init_scale=2.0)}""")\n',
    "print(f'{f\"{torch.cuda.amp.autocast()}\"}')\n",
    'name = f"{torch.cuda.amp.autocast(enabled=False)!r:>10}"\n',
    'from torch.cuda.amp import autocast\nprint(f"{autocast()}", f\'{autocast()}\')\n',
]


@pytest.mark.parametrize("body", F_STRINGS)
def test_a_fix_inside_an_f_string_parses_wherever_the_original_does(body: str) -> None:
    source = "import torch\n" + body
    new = fixed(source)
    assert "cuda.amp" not in new or "f'{f\"" in body  # fixed, unless both quotes are taken
    for python in _pythons() or [sys.executable]:
        if _compiles(python, source):
            assert _compiles(python, new), (python, new)


def test_every_quote_taken_by_enclosing_f_strings_means_no_fix() -> None:
    source = "import torch\nprint(f'{f\"{torch.cuda.amp.GradScaler()}\"}')\n"
    assert fixed(source) == source


def test_a_fix_that_would_need_python_3_12_is_refused_whatever_python_runs_it() -> None:
    """The check reads the tree, not the running interpreter: a replacement field that
    holds its own quote is refused on 3.11 (it does not parse) and on 3.12 alike."""
    from amplint.python_versions import needs_python_312
    from amplint.engine import parse

    assert needs_python_312(parse_any('x = f"{g("cuda")}"\n'))
    assert needs_python_312(parse_any('x = f"{"\\\\n"}"\n'))
    assert not needs_python_312(parse("x = f\"{g('cuda')}\" + f'''{'a'}'''\n", "t.py"))


def parse_any(source: str):
    import libcst as cst

    return cst.parse_module(source)


# --- notebooks: IPython lines amplint cannot rewrite ---------------------------------------------


def _notebook(*cells: str) -> str:
    return json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": "python"}},
        "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": c} for c in cells],
    }, indent=1) + "\n"


@pytest.mark.parametrize(
    "magic",
    ["%time s = GradScaler(2.0**10)\n", "%timeit with autocast(): pass\n", "%%time\nx = 1\n%time y = autocast\n",
     "s = 1  # fine\n%prun -s cumtime GradScaler()\n"],
)
def test_no_fix_while_a_magic_line_uses_the_name(magic: str) -> None:
    nb = notebooks.Notebook.parse(_notebook(
        "import torch\nfrom torch.cuda.amp import autocast, GradScaler\n", magic, "with autocast():\n    pass\n"))
    lint = lambda text: check_source(text, "n.ipynb", select=["AMP401"])  # noqa: E731
    outcome, new_text, _ = notebooks.fix(nb, lint)
    assert new_text is None and not outcome.applied
    assert all(d.fix is None for d in notebooks.check(nb, lint))


def test_a_magic_line_that_names_something_else_leaves_the_fix() -> None:
    nb = notebooks.Notebook.parse(_notebook(
        "import torch\nfrom torch.cuda.amp import autocast\n", "%timeit x = torch.ones(3)\n", "with autocast():\n    pass\n"))
    lint = lambda text: check_source(text, "n.ipynb", select=["AMP401"])  # noqa: E731
    _, new_text, _ = notebooks.fix(nb, lint, unsafe=True)  # a module-level import: an unsafe fix
    assert new_text is not None and 'autocast(\\"cuda\\", dtype=torch.float16, cache_enabled=True)' in new_text


# --- names that shadow the import are not the import ---------------------------------------------


@pytest.mark.parametrize(
    "shadow",
    [
        "def f(autocast):\n    return autocast\n",
        "def f():\n    autocast = 3\n    return autocast\n",
        "def f():\n    for autocast in range(3):\n        print(autocast)\n",
        "f = lambda autocast: autocast\n",
        "k = [autocast for autocast in range(3)]\n",
        "k = {autocast: 1 for autocast in range(3)}\n",
        "def f(*, autocast=None):\n    def g():\n        return autocast\n    return g\n",
        "def f():\n    with open('x') as autocast:\n        return autocast\n",
    ],
)
def test_a_local_of_the_same_name_is_not_reported_and_does_not_pin_the_fix(shadow: str) -> None:
    source = "import torch\nfrom torch.cuda.amp import autocast\n" + shadow + "with autocast():\n    pass\n"
    found = check_source(source, "t.py", select=["AMP401"])
    last = source.count("\n") - 1
    assert [d.span.line for d in found] == [2, last]
    assert all(d.fix is not None for d in found)


def test_a_global_declaration_reads_the_import() -> None:
    source = "from torch.cuda.amp import autocast\ndef f():\n    global autocast\n    return autocast()\n"
    assert [d.span.line for d in check_source(source, "t.py", select=["AMP401"])] == [1, 4]
