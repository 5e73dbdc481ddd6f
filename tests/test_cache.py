"""The result cache (amplint/cache.py): same findings warm as cold, never stale, never fatal."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amplint.runner as runner
from amplint import cache as cache_mod
from amplint.cli import main
from amplint.config import Config
from amplint.runner import check_paths

ROOT = Path(__file__).resolve().parent.parent
LEGACY = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\nwith torch.cuda.amp.autocast():\n    pass\n"


def _tree(tmp_path: Path) -> Path:
    """A few fixtures (findings, fixes, clean files) plus a file that does not parse.

    AMP101 is a preview rule: the checks of this tree run in preview, so its fixtures report."""
    src = tmp_path / "src"
    src.mkdir()
    for code in ("AMP101", "AMP201"):
        for f in sorted((ROOT / "fixtures" / code).glob("*.py"))[:4]:
            if not f.name.endswith(".fixed.py"):
                shutil.copy(f, src / f"{code}_{f.name}")
    (src / "legacy.py").write_text(LEGACY)
    (src / "broken.py").write_text("import torch\nwith torch.autocast('cuda'):\n    loss.backward(\n")
    # Old mtimes: a file written just now is never trusted by stat alone (racy-write rule).
    old = os.stat(src).st_mtime_ns - 3600 * 10**9
    for f in src.iterdir():
        os.utime(f, ns=(old, old))
    return src


def _summary(result) -> list:
    return [(f.path, f.diagnostics, f.error and (f.error.line, f.error.reason)) for f in result.files]


def _forbid_analysis(monkeypatch) -> None:
    def boom(*a, **k):
        raise AssertionError("a cached file was analysed again")

    monkeypatch.setattr(runner, "check_source", boom)


def test_warm_run_is_identical_and_reads_nothing(tmp_path, monkeypatch) -> None:
    src, cdir = _tree(tmp_path), tmp_path / "cache"
    config = Config(root=tmp_path, preview=True)
    cold = check_paths([src], config, cache_dir=cdir)
    assert any(f.diagnostics for f in cold.files) and any(f.error for f in cold.files)
    assert any(d.fix for f in cold.files for d in f.diagnostics)
    assert _summary(cold) == _summary(check_paths([src], config))  # same as no cache at all
    _forbid_analysis(monkeypatch)

    def no_read(*a, **k):
        raise AssertionError("an unchanged file was read")

    monkeypatch.setattr(runner.sources, "read", no_read)
    real_read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: no_read() if self.parent == src else real_read_bytes(self))
    warm = check_paths([src], config, cache_dir=cdir)
    assert _summary(warm) == _summary(cold)


def test_cache_directory_layout(tmp_path) -> None:
    src, cdir = _tree(tmp_path), tmp_path / "cache"
    check_paths([src], Config(root=tmp_path, preview=True), cache_dir=cdir)
    assert (cdir / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (cdir / ".gitignore").read_text().splitlines()[-1] == "*"
    entries = [e for e in cdir.rglob("*.json") if e.parent.name != "sets"]  # sets: shared project listings
    assert len(entries) == len(list(src.iterdir()))
    assert not list(cdir.rglob("*.tmp"))  # atomic writes leave no temporary files


def test_touched_file_is_rehashed_not_reanalysed(tmp_path, monkeypatch) -> None:
    src, cdir = _tree(tmp_path), tmp_path / "cache"
    config = Config(root=tmp_path, preview=True)
    cold = check_paths([src], config, cache_dir=cdir)
    for f in src.iterdir():
        os.utime(f)  # same bytes, new mtime
    _forbid_analysis(monkeypatch)
    assert _summary(check_paths([src], config, cache_dir=cdir)) == _summary(cold)


def test_changed_file_is_rechecked(tmp_path) -> None:
    src, cdir = _tree(tmp_path), tmp_path / "cache"
    config = Config(root=tmp_path, preview=True)
    clean = src / "new.py"
    clean.write_text("import torch\n")
    assert not [f for f in check_paths([clean], config, cache_dir=cdir).files if f.diagnostics]
    clean.write_text(LEGACY)
    again = check_paths([clean], config, cache_dir=cdir)
    assert again.files[0].diagnostics == check_paths([clean], config).files[0].diagnostics != []


def test_same_size_change_within_racy_window_is_rechecked(tmp_path) -> None:
    f, cdir = tmp_path / "m.py", tmp_path / "cache"
    config = Config(root=tmp_path)
    f.write_text("import torch\nx = torch.cuda.amp.autocast\n")
    first = check_paths([f], config, cache_dir=cdir).files[0].diagnostics
    st = os.stat(f)
    f.write_text("import torch\nx = torch.cuda.xxx.autocast\n")  # same size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime: only the hash can tell
    assert first and check_paths([f], config, cache_dir=cdir).files[0].diagnostics == []


def test_changed_configuration_is_rechecked(tmp_path) -> None:
    src, cdir = _tree(tmp_path), tmp_path / "cache"
    only_101 = check_paths([src], Config(select=("AMP101",), root=tmp_path, preview=True), cache_dir=cdir)
    only_401 = check_paths([src], Config(select=("AMP401",), root=tmp_path, preview=True), cache_dir=cdir)
    codes = lambda r: {d.code for d in r.diagnostics}  # noqa: E731
    assert codes(only_101) == {"AMP101"} and codes(only_401) == {"AMP401"}
    assert _summary(only_401) == _summary(check_paths([src], Config(select=("AMP401",), root=tmp_path, preview=True)))


def test_other_amplint_version_does_not_share_entries(tmp_path) -> None:
    config = Config(root=tmp_path)
    a = cache_mod.ResultCache(tmp_path / "c", config, version="1.0")
    b = cache_mod.ResultCache(tmp_path / "c", config, version="1.1")
    assert a.dir != b.dir


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"[]", b'{"path": 3}', None])
def test_corrupt_entry_is_a_miss_not_an_error(tmp_path, garbage) -> None:
    src, cdir = _tree(tmp_path), tmp_path / "cache"
    config = Config(root=tmp_path, preview=True)
    cold = check_paths([src], config, cache_dir=cdir)
    for entry in cdir.rglob("*.json"):
        if garbage is None:  # well-formed JSON, malformed result
            data = json.loads(entry.read_text())
            data["diagnostics"] = [{"code": "AMP101"}]
            entry.write_text(json.dumps(data))
        else:
            entry.write_bytes(garbage)
    assert _summary(check_paths([src], config, cache_dir=cdir)) == _summary(cold)
    for entry in cdir.rglob("*.json"):  # and the entries (and the sets they name) were rewritten
        json.loads(entry.read_text())["files" if entry.parent.name == "sets" else "sha256"]


def test_fix_run_never_uses_a_stale_result(tmp_path) -> None:
    src, cdir = _tree(tmp_path), tmp_path / "cache"
    config = Config(root=tmp_path, preview=True)
    before = check_paths([src], config, cache_dir=cdir)
    fixable = [f for f in before.files if any(d.fix for d in f.diagnostics)]
    assert fixable
    fixed = check_paths([src], config, cache_dir=cdir, fix=True, unsafe=True)
    assert any(f.written for f in fixed.files)
    after = check_paths([src], config, cache_dir=cdir)
    assert _summary(after) == _summary(check_paths([src], config))
    assert _summary(after) != _summary(before)


def test_cli_flags(tmp_path, monkeypatch, capsys) -> None:
    src = _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--isolated", "--preview", "--no-cache", "--exit-zero", str(src)]) in (0, 2)
    assert not (tmp_path / ".amplint_cache").exists()
    first = capsys.readouterr()
    main(["check", "--isolated", "--preview", "--cache-dir", str(tmp_path / "elsewhere"), "--exit-zero", str(src)])
    second = capsys.readouterr()
    assert (tmp_path / "elsewhere" / "CACHEDIR.TAG").is_file() and not (tmp_path / ".amplint_cache").exists()
    main(["check", "--isolated", "--preview", "--exit-zero", str(src)])
    third = capsys.readouterr()
    assert (tmp_path / ".amplint_cache" / "CACHEDIR.TAG").is_file()
    main(["check", "--isolated", "--preview", "--exit-zero", str(src)])  # warm
    assert first == second == third == capsys.readouterr()


# --- results that depend on other modules of the project (issue 13) --------------------


def _project_copy(tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(ROOT / "fixtures" / "projects" / name, dest)
    (dest / "pyproject.toml").write_text("")  # a project root of its own
    old = os.stat(dest).st_mtime_ns - 3600 * 10**9
    for f in dest.iterdir():
        os.utime(f, ns=(old, old))
    return dest


# The projects below show AMP101/AMP106, preview rules: their checks run in preview.
def _codes_by_line(result) -> list:
    return sorted((Path(d.path).name, d.span.line, d.code) for d in result.diagnostics)


@pytest.mark.parametrize("one_file", [False, True], ids=["tree", "one-file"])
def test_editing_an_imported_module_recomputes_the_importer(tmp_path, monkeypatch, one_file) -> None:
    """train.py is unchanged, but utils.load_checkpoint starts restoring the scaler:
    the cached AMP106 of train.py's resume must not survive."""
    from amplint.project.index import reset_shared

    project, cdir = _project_copy(tmp_path, "checkpoint_helper"), tmp_path / "cache"
    config = Config(root=project, preview=True)
    target = [project / "train.py"] if one_file else [project]
    cold = check_paths(target, config, cache_dir=cdir)
    assert ("train.py", 27, "AMP106") in _codes_by_line(cold)
    utils = project / "utils.py"
    utils.write_text(utils.read_text().replace('    return state["epoch"]', '    scaler.load_state_dict(state["scaler"])\n    return state["epoch"]')
                     .replace("def load_checkpoint(path, model, optimizer):",
                              "def load_checkpoint(path, model, optimizer, scaler=None):"))
    reset_shared()  # a new process: nothing remembered in memory, only in the cache
    warm = check_paths(target, config, cache_dir=cdir)
    assert ("train.py", 27, "AMP106") not in _codes_by_line(warm)
    assert _codes_by_line(warm) == _codes_by_line(check_paths(target, config))


def test_editing_the_importer_recomputes_a_helpers_checkpoint_finding(tmp_path) -> None:
    """utils.py is unchanged, but train.py stops using a scaler: the cached AMP106 at the
    helper's own write (it depends on who calls the helper) must not survive."""
    from amplint.project.index import reset_shared

    project, cdir = _project_copy(tmp_path, "checkpoint_helper"), tmp_path / "cache"
    config = Config(root=project, preview=True)
    target = [project / "utils.py"]
    assert _codes_by_line(check_paths(target, config, cache_dir=cdir)) == [("utils.py", 6, "AMP106")]
    train = project / "train.py"
    train.write_text(train.read_text().replace("torch.amp.GradScaler(device)", "torch.amp.GradScaler(device, enabled=False)"))
    reset_shared()
    warm = check_paths(target, config, cache_dir=cdir)
    assert _codes_by_line(warm) == [] == _codes_by_line(check_paths(target, config))


def test_a_module_that_appears_recomputes_the_importer(tmp_path) -> None:
    """`from utils import clip_gradients` could not be resolved; then utils.py is created."""
    from amplint.project.index import reset_shared

    project, cdir = _project_copy(tmp_path, "clip_helper"), tmp_path / "cache"
    moved = project / "utils.py"
    text = moved.read_text()
    moved.unlink()
    config = Config(root=project, preview=True)
    assert _codes_by_line(check_paths([project / "train.py"], config, cache_dir=cdir)) == []
    moved.write_text(text)
    reset_shared()
    assert [c for _, _, c in _codes_by_line(check_paths([project / "train.py"], config, cache_dir=cdir))] == ["AMP101"]


@pytest.mark.parametrize("appears", ["src-folder", "project-marker"])
def test_a_new_import_root_recomputes_the_importer(tmp_path, appears) -> None:
    """Where Python looks for `from utils import ...` depends on folders and markers that
    may not exist yet: a `src/` folder under the project root (the src layout) and the
    project root itself (the nearest folder with pyproject.toml, setup.cfg, setup.py or
    .git).  Creating either changes what the import means, so each is a dependency of the
    cached result, absent or not."""
    from amplint.project.index import reset_shared

    project, cdir = _project_copy(tmp_path, "clip_helper"), tmp_path / "cache"
    utils_text = (project / "utils.py").read_text()
    (project / "utils.py").unlink()
    if appears == "src-folder":
        # train.py in a scripts folder; utils.py will appear in src/ under the root.
        scripts = project / "scripts"
        scripts.mkdir()
        (project / "train.py").rename(scripts / "train.py")
        train, created = scripts / "train.py", project / "src" / "utils.py"
    else:
        # No marker yet: the scripts folder alone is searched; utils.py waits at the top.
        (project / "pyproject.toml").unlink()
        scripts = project / "scripts"
        scripts.mkdir()
        (project / "train.py").rename(scripts / "train.py")
        (project / "utils.py").write_text(utils_text)
        train, created = scripts / "train.py", project / "pyproject.toml"
    config = Config(root=project, preview=True)
    assert _codes_by_line(check_paths([train], config, cache_dir=cdir)) == []
    created.parent.mkdir(exist_ok=True)
    created.write_text(utils_text if created.name == "utils.py" else "")
    reset_shared()
    warm = _codes_by_line(check_paths([train], config, cache_dir=cdir))
    reset_shared()
    cold = _codes_by_line(check_paths([train], config))
    assert [c for _, _, c in cold] == ["AMP101"]
    assert warm == cold


@pytest.mark.parametrize("one_file", [False, True], ids=["tree", "one-file"])
def test_editing_the_option_choices_in_the_bin_script_recomputes_the_backend(tmp_path, one_file) -> None:
    """backend.py reads `args.train_dtype`, declared with its choices in asr_train.py (an
    importer): drop float16 from the choices and the cached findings of backend.py go."""
    from amplint.project.index import reset_shared

    project, cdir = _project_copy(tmp_path, "train_dtype_option"), tmp_path / "cache"
    config = Config(root=project)
    target = [project / "backend.py"] if one_file else [project]
    cold = check_paths(target, config, cache_dir=cdir)
    assert [c for _, _, c in _codes_by_line(cold)] == ["AMP301", "AMP304", "AMP304"]
    script = project / "asr_train.py"
    script.write_text(script.read_text().replace('default="float16"', 'default="float32"')
                      .replace('choices=["float16", "float32",', 'choices=["float32",'))
    reset_shared()
    warm = check_paths(target, config, cache_dir=cdir)
    assert _codes_by_line(warm) == [] == _codes_by_line(check_paths(target, config))


@pytest.mark.parametrize("one_file", [False, True], ids=["tree", "one-file"])
def test_a_result_that_depends_on_the_whole_project_is_stored_once_and_never_stale(tmp_path, one_file) -> None:
    """ops.py's AMP205 holds because some module of the project runs autocast (nothing
    imports ops.py by name), so it depends on every file of the project: they are stored
    once, as a dependency set the entry names, not in the entry.  Drop the autocast from
    train.py and the cached finding goes; touch a file without changing it and it stays."""
    from amplint.project.index import reset_shared

    project, cdir = _project_copy(tmp_path, "function_loaded_by_name"), tmp_path / "cache"
    config = Config(root=project, preview=True)  # AMP205 is a preview rule
    target = [project / "ops.py"] if one_file else [project]
    assert [c for _, _, c in _codes_by_line(check_paths(target, config, cache_dir=cdir))] == ["AMP205"]
    sets = list(cdir.rglob("sets/*.json"))
    assert len(sets) == 1
    entries = [json.loads(p.read_text()) for p in cdir.rglob("*.json") if p.parent.name != "sets"]
    ops = next(e for e in entries if e["path"].endswith("ops.py"))
    assert ops["deps"]["sets"] == [sets[0].stem]
    assert not any(dep.endswith("train.py") for dep, *_ in ops["deps"]["files"])  # it is in the set
    train = project / "train.py"
    later = os.stat(train).st_mtime_ns + 10**9
    os.utime(train, ns=(later, later))  # touched, same bytes
    reset_shared()
    assert [c for _, _, c in _codes_by_line(check_paths(target, config, cache_dir=cdir))] == ["AMP205"]
    train.write_text(train.read_text().replace('with torch.autocast("cpu", dtype=torch.bfloat16):', "if True:"))
    reset_shared()
    warm = check_paths(target, config, cache_dir=cdir)
    assert _codes_by_line(warm) == [] == _codes_by_line(check_paths(target, config))


def test_a_cached_finding_keeps_where_its_noqa_goes(tmp_path, monkeypatch) -> None:
    """JSON's `noqa_row` comes with the result: a warm run tokenizes nothing to print it."""
    from amplint import suppression
    from amplint.output import format_json

    src, cdir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    (src / "multi.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler(\n    enabled=True,\n)\n")
    old = os.stat(src).st_mtime_ns - 3600 * 10**9
    os.utime(src / "multi.py", ns=(old, old))
    config = Config(root=tmp_path)
    cold = check_paths([src], config, cache_dir=cdir)
    warm = check_paths([src], config, cache_dir=cdir)
    # the statement starts on line 2 and ends on line 4, where a comment covers all of it
    assert [d.noqa_row for f in cold.files for d in f.diagnostics] == [4]
    assert [d.noqa_row for f in warm.files for d in f.diagnostics] == [4]

    def no_tokenizing(*a, **k):
        raise AssertionError("the output tokenized a file for a cached finding")

    monkeypatch.setattr(suppression, "logical_line_ends", no_tokenizing)
    (row,) = json.loads(format_json([d for f in warm.files for d in f.diagnostics]))
    assert (row["location"]["row"], row["noqa_row"]) == (2, 4)


# --- what an entry's result depends on: the interpreter ----------------------------------

PEP_695 = "type Alias = list[int]\n"


def _cache_under(monkeypatch, tmp_path: Path, python: str, libcst: str) -> cache_mod.ResultCache:
    monkeypatch.setattr(sys, "version", python)
    monkeypatch.setattr(cache_mod, "libcst_version", lambda: libcst)
    return cache_mod.ResultCache(tmp_path / "cache", Config(root=tmp_path))


def test_another_python_or_libcst_never_sees_an_entry(tmp_path, monkeypatch) -> None:
    """Whether a file compiles depends on the Python (a PEP 695 alias is valid on 3.12 and a
    syntax error on 3.11), and what libcst accepts on its release: what 3.12 stored is not
    the answer on 3.11, nor with another libcst."""
    alias = tmp_path / "alias.py"
    alias.write_text(PEP_695)
    old = os.stat(alias).st_mtime_ns - 3600 * 10**9
    os.utime(alias, ns=(old, old))
    on_312 = _cache_under(monkeypatch, tmp_path, "3.12.1 (main) [GCC 12.2.0]", "1.9.0")
    _, probe = on_312.lookup(alias)
    on_312.store(alias, probe, alias.read_bytes(), [])  # 3.12 compiles it: no error, no finding
    assert _cache_under(monkeypatch, tmp_path, "3.12.1 (main) [GCC 12.2.0]", "1.9.0").lookup(alias)[0] is not None
    for python, libcst in (("3.11.7 (main) [GCC 12.2.0]", "1.9.0"), ("3.12.2 (main) [GCC 12.2.0]", "1.9.0"),
                           ("3.12.1 (main) [GCC 12.2.0]", "1.8.6"), ("3.12.1 (main) [Clang 15.0.0]", "1.9.0")):
        assert _cache_under(monkeypatch, tmp_path, python, libcst).lookup(alias)[0] is None, (python, libcst)


def test_a_check_on_another_python_analyses_the_file_again(tmp_path, monkeypatch) -> None:
    src, cdir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    (src / "alias.py").write_text(PEP_695)
    analysed = []
    real = runner.check_source
    monkeypatch.setattr(runner, "check_source", lambda *a, **k: analysed.append(1) or real(*a, **k))
    config = Config(root=tmp_path)
    for python in ("3.12.1 (main) [GCC 12.2.0]", "3.12.1 (main) [GCC 12.2.0]", "3.11.7 (main) [GCC 12.2.0]"):
        monkeypatch.setattr(sys, "version", python)
        result = check_paths([src], config, cache_dir=cdir)
    assert len(analysed) == 2  # the second run was answered by the cache, the third was not
    # The answer is the running interpreter's own (sys.version above is only the cache key):
    # 3.10 and 3.11 cannot compile the alias, 3.12 and later can.
    assert (result.files[0].error is not None) == (sys.version_info < (3, 12))


def test_libcst_version_is_read_without_importing_libcst() -> None:
    import subprocess

    code = "import sys, amplint.cache as c; v = c.libcst_version(); print(v, 'libcst' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    from libcst._version import __version__

    version, imported = proc.stdout.split()
    assert version.startswith(__version__ + "+") and imported == "False", proc.stderr


# --- malformed entries: every shape `store` does not write is a miss -----------------------

def _entries(cdir: Path) -> dict[Path, object]:
    return {p: json.loads(p.read_text()) for p in cdir.rglob("*.json")}


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """Entries of every kind `store` writes: findings with fixes and related locations,
    notes, a file that does not parse, dependencies on files, folders, missing modules and
    a dependency set."""
    from amplint.project.index import reset_shared

    tmp_path = tmp_path_factory.mktemp("stored")
    trees = [_tree(tmp_path)]
    for name in ("checkpoint_helper", "function_loaded_by_name", "clip_helper"):
        trees.append(_project_copy(tmp_path, name))
    cdir = tmp_path / "cache"
    files = []
    for tree in trees:
        config = Config(root=tree if tree.name != "src" else tmp_path, preview=True)  # AMP101, AMP106 are preview
        reset_shared()
        cold = check_paths([tree], config, cache_dir=cdir)
        files += [(Path(f.path), config) for f in cold.files]
    entries = _entries(cdir)
    kinds = json.dumps(list(entries.values()), separators=(",", ":"))
    for needed in ('"sets"', '"folders": [[', '"missing": ["', '"files": [[', '"related": [[', '"notes": ["',
                   '"edits": [[', '"error": [', '"applicability": "unsafe"'):
        assert needed.replace(" ", "") in kinds, needed
    return cdir, entries, files


def _json_paths(value, at=()):
    """Every place in a JSON document: each key of an object and each item of an array."""
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _json_paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _json_paths(v, (*at, i))


def _replaced(doc, at, new, delete=False):
    if not at:
        return new
    doc = json.loads(json.dumps(doc))
    parent = doc
    for step in at[:-1]:
        parent = parent[step]
    if delete:
        del parent[at[-1]]
    else:
        parent[at[-1]] = new
    return doc


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def _assert_well_typed(hit: cache_mod.Hit) -> None:
    for d in hit.diagnostics:
        assert all(type(v) is str for v in (d.code, d.message, d.path, *d.notes))
        spans = [d.span, *(r.span for r in d.related)]
        assert all(type(v) is int for s in spans for v in (s.line, s.col0, s.end_line, s.end_col0))
        assert all(type(r.path) is str and type(r.message) is str for r in d.related)
        assert d.cell is None or type(d.cell) is int
        if d.fix is not None:
            assert type(d.fix.title) is str
            assert all(len(e.start) == len(e.end) == 2 for e in d.fix.edits)
            assert all(type(v) is int for e in d.fix.edits for v in (*e.start, *e.end))
            assert all(type(e.content) is str for e in d.fix.edits)
    if hit.error is not None:
        assert [type(v) for v in hit.error] == [int, int, str]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_json_in_any_field_of_an_entry_or_a_set_is_a_miss_or_a_well_formed_hit(stored, data) -> None:
    """An entry or a dependency set with any JSON value at any place (or a key missing):
    the lookup of every file never raises, and what it returns has the types `store` wrote."""
    cdir, entries, files = stored
    target = data.draw(st.sampled_from(sorted(entries)), label="file")
    doc = entries[target]
    at = data.draw(st.sampled_from(list(_json_paths(doc))), label="where")
    delete = bool(at) and isinstance(at[-1], str) and data.draw(st.booleans(), label="delete")
    new = None if delete else data.draw(JSON, label="value")
    try:
        target.write_text(json.dumps(_replaced(doc, at, new, delete)))
        for path, config in files:
            hit, _ = cache_mod.ResultCache(cdir, config).lookup(path)
            if hit is not None:
                _assert_well_typed(hit)
    finally:
        target.write_text(json.dumps(doc))


MALFORMED = {
    "deps is a number": (("deps",), 1),
    "deps is a list": (("deps",), []),
    "files is a number": (("deps", "files"), 1),
    "a dependency is a number": (("deps", "files"), [1]),
    "a dependency's path is a number": (("deps", "files"), [[1, 2, 3, "0" * 64]]),
    "a dependency's path holds a NUL": (("deps", "files"), [["a\0b", 2, 3, "0" * 64]]),
    "a dependency's size is true": (("deps", "files"), [["a.py", True, 3, "0" * 64]]),
    "missing is a number": (("deps", "missing"), 5),
    "missing holds a list": (("deps", "missing"), [["x"]]),
    "a folder has no time": (("deps", "folders"), [["x"]]),
    "a set is named by a number": (("deps", "sets"), [7]),
    "a set is named by a path": (("deps", "sets"), ["../../etc/passwd"]),
    "error is a string of three digits": (("error",), "123"),
    "size is true": (("size",), True),
    "written_ns is a float": (("written_ns",), 1.5),
    "diagnostics is an object": (("diagnostics",), {}),
    "a diagnostic is a list": (("diagnostics",), [[1, 2]]),
    "a span is short": (("diagnostics",), [{"code": "AMP101", "message": "m", "path": "p", "span": [1, 2, 3],
                                             "notes": [], "fix": None}]),
    "a code is a number": (("diagnostics",), [{"code": 101, "message": "m", "path": "p", "span": [1, 0, 1, 1],
                                               "notes": [], "fix": None}]),
    "a fix's edits are a number": (("diagnostics",), [{"code": "AMP101", "message": "m", "path": "p",
                                                       "span": [1, 0, 1, 1], "notes": [],
                                                       "fix": {"title": "t", "applicability": "safe", "edits": 1}}]),
    "related is a string": (("diagnostics",), [{"code": "AMP101", "message": "m", "path": "p", "span": [1, 0, 1, 1],
                                                 "notes": [], "fix": None, "related": "abc"}]),
}


@pytest.mark.parametrize("where,value", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_entry_is_a_miss_and_the_check_gives_the_cold_result(tmp_path, where, value) -> None:
    from amplint.project.index import reset_shared

    src, cdir = _tree(tmp_path), tmp_path / "cache"
    project = _project_copy(tmp_path, "function_loaded_by_name")
    runs = [([src], Config(root=tmp_path, preview=True)), ([project], Config(root=project))]
    cold = []
    for paths, config in runs:
        reset_shared()
        cold.append(_summary(check_paths(paths, config, cache_dir=cdir)))
    for entry, doc in _entries(cdir).items():
        if entry.parent.name != "sets":
            entry.write_text(json.dumps(_replaced(doc, where, value)))
    for (paths, config), expected in zip(runs, cold):
        reset_shared()
        assert _summary(check_paths(paths, config, cache_dir=cdir)) == expected


def _other_pythons() -> list[str]:
    """Interpreters of other versions amplint supports (3.10 on), installed by pyenv or on PATH."""
    import glob
    import re
    import shutil

    found = {shutil.which(f"python3.{minor}") for minor in range(10, 15)}
    found |= set(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*")))
    here = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return sorted(p for p in found if p and "shims" not in p and re.search(r"python3\.1\d$", p) and not p.endswith(here))


@pytest.mark.skipif(not _other_pythons(), reason="no other Python installed")
def test_a_real_other_python_keeps_its_entries_apart(tmp_path) -> None:
    """The same cache directory and configuration, another installed interpreter: another
    run directory (amplint.cache needs neither libcst nor torch to say which)."""
    import subprocess

    code = ("import sys; from pathlib import Path; from amplint.cache import ResultCache; "
            "from amplint.config import Config; "
            "print(ResultCache(Path(sys.argv[1]), Config(root=Path(sys.argv[2]))).dir)")
    here = cache_mod.ResultCache(tmp_path / "c", Config(root=tmp_path)).dir
    asked = 0
    for python in _other_pythons():
        proc = subprocess.run([python, "-c", code, str(tmp_path / "c"), str(tmp_path)], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if "ModuleNotFoundError" in proc.stderr:
            continue  # amplint's dependencies are not installed there (3.10 needs tomli)
        assert proc.returncode == 0, (python, proc.stderr[-500:])
        there = Path(proc.stdout.strip())
        assert there.parent == here.parent and there != here, python
        asked += 1
    if not asked:
        pytest.skip("no other Python here can import amplint.cache")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
@pytest.mark.parametrize("odd", ["fifo", "fifo-package-init", "link-to-dev-zero"])
def test_a_fifo_or_device_beside_the_checked_file_is_no_dependency_to_read(tmp_path, odd) -> None:
    """The cache hashes the files a result depends on (the project's listing included): a FIFO
    there would block the read forever, /dev/zero would never end.  Only regular files are read,
    as a walk promises; a check with the cache on ends, twice, as one without it does."""
    import subprocess

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).half()\n"
                                       "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n")
    if odd == "fifo":
        os.mkfifo(tmp_path / "other.py")
    elif odd == "fifo-package-init":
        (tmp_path / "sub").mkdir()
        os.mkfifo(tmp_path / "sub" / "__init__.py")
    else:
        (tmp_path / "z.py").symlink_to("/dev/zero")
    command = [sys.executable, "-m", "amplint", "check", "--cache-dir", str(tmp_path / ".cache"), "train.py"]
    for _ in range(2):  # cold, then answered from the cache
        proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)  # NB: a hang guard
        assert proc.returncode == 1 and "AMP301" in proc.stdout, proc.stdout + proc.stderr


def test_same_spelling_in_two_folders_is_two_files(tmp_path, monkeypatch, capsys) -> None:
    """`amplint check t.py` run in `proj/sub` then in `proj`: the same spelling, the same bytes,
    two files. A per-file ignore covers only `sub/`, so the second run must not reuse the first's
    clean result (hostile pass 11)."""
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "pyproject.toml").write_text('[tool.amplint]\nper-file-ignores = { "sub/*" = ["AMP401"] }\n')
    for where in (proj / "sub", proj):
        (where / "t.py").write_text(LEGACY)
    cache = str(tmp_path / "cache")
    exits = {}
    for where in (proj / "sub", proj):
        monkeypatch.chdir(where)
        exits[where.name] = main(["check", "--cache-dir", cache, "t.py"])
        capsys.readouterr()
    assert exits == {"sub": 0, "proj": 1}
