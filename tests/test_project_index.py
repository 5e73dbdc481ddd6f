"""The project index's text readers: what they find without parsing, and what they skip.

These are the cheap questions asked of every module of a project (which files a module
imports, whether a module can enter autocast); the fixture projects under
fixtures/projects show what the rules make of the answers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from amplint.project.index import ProjectIndex
from amplint.project.text_imports import imported_files
from amplint.project.text_index import attributes_used


def _tree(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_names_imported_from_a_plain_module_are_not_looked_for_as_submodules(tmp_path) -> None:
    _tree(tmp_path, {"helpers.py": "def clip(): pass\n", "train.py": ""})
    missing: set = set()
    found = imported_files("from helpers import clip, save\n", tmp_path / "train.py", None, missing)
    assert found == [tmp_path / "helpers.py"]
    # helpers.py cannot have submodules, so helpers/clip.py is never probed
    assert not any("clip" in Path(p).name for p in missing)


def test_names_imported_from_a_package_may_be_its_submodules(tmp_path) -> None:
    _tree(tmp_path, {"pkg/__init__.py": "", "pkg/engine.py": "", "train.py": ""})
    missing: set = set()
    found = imported_files("from pkg import engine, missing_name\n", tmp_path / "train.py", None, missing)
    assert found == [tmp_path / "pkg" / "__init__.py", tmp_path / "pkg" / "engine.py"]
    # a later pkg/missing_name.py would change the answer: the cache must know it was looked for
    assert str(tmp_path / "pkg" / "missing_name.py") in missing


def test_a_file_that_imports_one_module_many_times_lists_it_once(tmp_path) -> None:
    _tree(tmp_path, {"helpers.py": "", "train.py": ""})
    code = "import helpers\nfrom helpers import a\nfrom helpers import (b,\n    c)\n"
    assert imported_files(code, tmp_path / "train.py", None) == [tmp_path / "helpers.py"]


def test_autocast_named_only_in_strings_and_comments_is_not_entered(tmp_path) -> None:
    _tree(tmp_path, {
        "model.py": (
            "import torch\n"
            "# run this under torch.autocast for speed\n"
            "def check(dtype):\n"
            "    raise ValueError(f'use `with torch.autocast(device_type=\"cuda\")` for {dtype}')\n"
        ),
        "engine.py": (
            "import torch\n"
            "def step(model, x):\n"
            "    with torch.autocast('cuda', dtype=torch.float16):\n"
            "        return model(x)\n"
        ),
    })
    index = ProjectIndex()
    assert not index.runs_autocast(str(tmp_path / "model.py"))
    assert not index._entries  # decided from the text: nothing parsed
    assert index.runs_autocast(str(tmp_path / "engine.py"))


def test_attributes_are_collected_only_for_the_names_asked_for() -> None:
    code = "utils.clip(m)\nx = utils . save\nself.utils.other()\nlayers.norm(x)\nutils.clip(n)\n"
    assert attributes_used(code, ["utils"]) == {"utils": {"clip"}}
    assert attributes_used(code, ["utils", "layers"]) == {"utils": {"clip"}, "layers": {"norm"}}
    assert attributes_used(code, []) == {}



_IMPORT_CORNERS = [
    "import a\nimport b.c as d, e\n",
    "from . import x\nfrom ..pkg.mod import (\n    a,\n    b as c,\n)\nfrom m import *\n",
    "from x import (a); import y\nimport_z = 1\nx.import_()\n",
    "from m import a, \\\n    b\nimport n, \\\n    o\n",
    "if t:\n    from m import a\n    import n\nelse:\n\timport o\n",
    "from x import (\n    import_utils,\n    imports,\n)\nimport p\n",
    "s = 'import q'\n# import r\nfromimport = 1\nfrom   mod   import   name\n",
    "from x \\\n  import y\nimport\n",
    "\r\nimport a\r\nfrom b import (c,\r\n d)\r\n",
]


def test_import_statements_are_those_the_plain_scan_finds() -> None:
    """Only lines with `import` are tried; the matches are the ones `finditer` makes."""
    from amplint.project.text_imports import _IMPORT, import_statements

    fixtures = sorted((Path(__file__).resolve().parent.parent / "fixtures").rglob("*.py"))
    texts = _IMPORT_CORNERS + [p.read_text(encoding="utf-8", errors="replace") for p in fixtures]
    for text in texts:
        plain = [(m.start(), m.end(), m.groups()) for m in _IMPORT.finditer(text)]
        assert [(m.start(), m.end(), m.groups()) for m in import_statements(text)] == plain, text[:200]
    assert sum(1 for t in _IMPORT_CORNERS for _ in import_statements(t)) == 17  # NB: what the corners hold


def _find_by_stat(root: str, dotted: str):
    """What `layout._find` answers, by a stat of each candidate (the oracle below)."""
    import os

    rel = os.path.join(*dotted.split("."))
    tried = []
    for candidate in (os.path.join(root, rel + ".py"), os.path.join(root, rel, "__init__.py")):
        tried.append(candidate)
        if os.path.isfile(candidate):
            return tuple(tried), candidate
    return tuple(tried), None


def test_module_lookup_by_folder_listing_answers_as_stat_does(tmp_path) -> None:
    import os

    from amplint.project import layout

    files = ["a.py", "pkg/__init__.py", "pkg/mod.py", "pkg/sub/__init__.py", "pkg/sub/deep.py",
             "ns/only.py", "both.py", "both/__init__.py", "dir.py/__init__.py", "noinit/x.py", "pkg/data.txt"]
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("x = 1\n")
    (tmp_path / "notdir").write_text("")  # a file where a folder is looked for
    (tmp_path / "linked").symlink_to(tmp_path / "pkg", target_is_directory=True)
    (tmp_path / "broken.py").symlink_to(tmp_path / "missing.py")
    names = ["a", "pkg", "pkg.mod", "pkg.sub", "pkg.sub.deep", "pkg.nothing", "ns", "ns.only", "both", "dir",
             "noinit", "noinit.x", "notdir", "notdir.x", "linked", "linked.mod", "linked.sub.deep", "broken",
             "missing", "pkg.data"]
    layout.clear_caches()
    for root in (str(tmp_path), str(tmp_path / "pkg"), str(tmp_path / "nowhere")):
        for name in names:
            assert layout._find(root, name) == _find_by_stat(root, name), (root, name)
    assert os.path.isdir(tmp_path / "linked")
    # As the interpreter's finder, in the exact case (a case-insensitive disk would stat `A`)
    assert layout._find(str(tmp_path), "A")[1] is None and layout._find(str(tmp_path), "Pkg.mod")[1] is None


def test_a_name_imported_and_never_used_is_not_read(tmp_path) -> None:
    """A re-export (`__init__.py` importing helpers it never calls) reads nothing: the
    analysis meets an imported definition only where the code names it."""
    from amplint.prefilter import code_text

    _tree(tmp_path, {
        "helpers.py": "import torch\n\ndef half_default():\n    torch.set_default_dtype(torch.float16)\n",
        "other.py": "def nothing():\n    return 1\n",
        "__init__.py": "",
    })
    index = ProjectIndex()
    wanted = frozenset({"set_default_dtype"})

    def tokens(code: str) -> frozenset:
        return index.imported_tokens(str(tmp_path / "train.py"), code, None, wanted,
                                     uses=lambda: code_text(code, strings=False).lower())

    imports = "from helpers import half_default\nfrom other import nothing\n"
    assert tokens(imports + "__all__ = ['half_default']\nx = 'half_default()'\n") == frozenset()
    assert tokens(imports + "if TYPE_CHECKING:\n    from helpers import half_default as h\n") == frozenset()
    assert tokens(imports + "half_default()\n") == wanted
    assert tokens(imports + "run(f'{half_default()}')\n") == wanted  # an f-string's field is code
    assert tokens(imports + "@half_default\ndef f(): pass\n") == wanted
    # without `uses`, every name imported is read (what a caller without the code gets)
    assert index.imported_tokens(str(tmp_path / "train.py"), imports, None, wanted) == wanted


def test_a_helper_parsed_whole_for_another_file_is_not_parsed_again_when_checked(tmp_path, monkeypatch) -> None:
    """trainer.py reads trainer_pt_utils.py whole; checking trainer_pt_utils.py then takes
    that tree (same text), and finds what a fresh parse finds.  Another text is parsed."""
    from amplint import engine
    from amplint.config import Config

    helper = (
        "import torch\n\n"
        "def clip(model):\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n\n"
        "def train(model, opt, scaler, loss):\n"
        "    scaler.scale(loss).backward()\n"
        "    clip(model)\n"
        "    scaler.step(opt)\n"
        "    scaler.update()\n"
    )
    _tree(tmp_path, {"helpers.py": helper})
    path = str(tmp_path / "helpers.py")
    config = Config(preview=True)  # AMP101 is a preview rule
    fresh = engine.check_source(helper, path, config, project=ProjectIndex())
    assert [d.code for d in fresh] == ["AMP101"]

    index = ProjectIndex()
    assert index.model_at(path) is not None  # read whole, as for another file's sake
    parses: list[str] = []
    real_parse = engine.parse
    monkeypatch.setattr(engine, "parse", lambda text, where, **k: parses.append(where) or real_parse(text, where, **k))
    assert engine.check_source(helper, path, config, project=index) == fresh
    assert parses == []
    edited = helper.replace("clip(model)\n", "clip(model)  # edited\n")
    assert [d.code for d in engine.check_source(edited, path, config, project=index)] == ["AMP101"]
    assert parses == [path]


@pytest.mark.parametrize("before", ["\x0c\n", "# page\x0cbreak\n", "S = 'a\u2028b'\n", "# a\x1cb\x85c\n"])
def test_a_partial_parse_keeps_a_kept_function_whole_after_a_character_splitlines_breaks_at(before: str) -> None:
    """The cut counted lines with str.splitlines: after a form feed every emptied range
    started a line early, and `b` lost its `return x` while still parsing."""
    from amplint.project.partial import partial_source

    text = f"def a():\n    return 1\n{before}def b():\n    x = 1\n    return x\ndef c():\n    return 3\n"
    cut = partial_source(text, {"b"})
    assert "def b():\n    x = 1\n    return x\n" in cut
    assert "return 1" not in cut and "return 3" not in cut
    assert len(cut.split("\n")) == len(text.split("\n"))


def test_a_namespace_package_is_imported_from_the_folder_above_it(tmp_path) -> None:
    """`src/train.py` writes `from src.helper import init_opt` with no `__init__.py` and
    no project marker: the only way that import works is a script run from above `src/`
    (`python main.py`), so the folder above is searched, and only for a name that starts
    with a folder the importing file is inside."""
    from amplint.project import layout

    for name in ("src/train.py", "src/helper.py", "src/utils/log.py", "main.py", "other/run.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    layout.clear_caches()
    assert layout.resolve_module("src.helper", tmp_path / "src" / "train.py").path == tmp_path / "src" / "helper.py"
    assert layout.resolve_module("src.helper", tmp_path / "src" / "utils" / "log.py").path == tmp_path / "src" / "helper.py"
    # Outside src/, nothing says where `src` would come from: not resolved by this rule.
    assert layout.resolve_module("src.helper", tmp_path / "other" / "run.py").path is None
    assert layout.resolve_module("src.missing", tmp_path / "src" / "train.py").path is None
