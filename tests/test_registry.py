"""The registry's invariants: unique codes and names, fixtures for every rule, docs that are
tests, and a static side that never imports torch."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import registry
from amplint.engine import check_source
from amplint.registry import ALL_RULES, BY_CODE

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CODES = sorted(r.code for r in ALL_RULES)
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)

# Rules whose docstring example cannot stand on its own, each with the reason.
# (Keep empty where possible: an example that does not fire is usually a stale doc.)
EXAMPLE_NOT_SELF_CONTAINED: dict[str, str] = {}


def test_codes_and_names_are_unique() -> None:
    codes = [r.code for r in ALL_RULES]
    names = [r.name for r in ALL_RULES]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert len({r.__name__ for r in ALL_RULES}) == len(ALL_RULES)


def test_lookup_tables_cover_every_rule() -> None:
    assert set(registry.BY_CODE) == set(CODES)
    assert {r.code for r in registry.expand("ALL")} == {r.code for r in ALL_RULES}
    for rule in ALL_RULES:
        assert registry.expand(rule.name) == [rule]
        assert registry.expand(rule.code.lower()) == [rule]
    with pytest.raises(registry.UnknownSelector):
        registry.expand("AMP6")  # no AMP6xx group


def _tier(code: str) -> str:
    from amplint.rule_catalog import CATALOG

    return next(e.tier for e in CATALOG if e.code == code)


@pytest.mark.parametrize("opt_in", [r.code for r in ALL_RULES if not r.default_enabled])
def test_a_selector_selects_every_rule_it_names_opt_in_ones_included(opt_in: str) -> None:
    """As in Ruff: ALL, a prefix, a code and a name each select every rule they name; an
    opt-in rule is only off by default.  A preview rule stays behind its own switch too:
    selected, it runs with preview and not without."""
    name = registry.BY_CODE[opt_in].name
    selectors = ["ALL", "AMP", opt_in[:4], opt_in[:5], opt_in, opt_in.lower(), name]
    preview = _tier(opt_in) == "preview"
    assert opt_in not in registry.resolve_codes()
    assert opt_in not in registry.resolve_codes(preview=True)
    for selector in selectors:
        assert opt_in in registry.expand_codes(selector), selector
        assert opt_in in registry.resolve_codes(select=[selector], preview=True), selector
        assert opt_in in registry.resolve_codes(extend_select=[selector], preview=True), selector
        assert (opt_in in registry.resolve_codes(select=[selector])) is not preview, selector
        assert opt_in not in registry.resolve_codes(select=[selector], ignore=[opt_in], preview=True), selector
    # a prefix names exactly the codes that start with it
    group = opt_in[:4]
    assert registry.expand_codes(group) == sorted(r.code for r in ALL_RULES if r.code.startswith(group))


def test_an_empty_selection_selects_nothing() -> None:
    """Ruff's reading of `select = []`: no rule (None, not given: the defaults)."""
    assert registry.resolve_codes(select=()) == ()
    assert registry.resolve_codes(select=(), extend_select=["AMP401"]) == ("AMP401",)
    assert registry.resolve_codes(select=None) == tuple(sorted(
        r.code for r in ALL_RULES if r.default_enabled and r.code not in registry.PREVIEW_CODES))


def test_a_preview_rule_runs_only_in_preview_however_it_is_selected() -> None:
    """As in Ruff: the preview tier stays behind its own switch; a selector cannot reach past it."""
    from amplint.rule_catalog import CATALOG

    preview = sorted(e.code for e in CATALOG if e.tier == "preview")
    assert preview, "no rule is in preview: pick another way to exercise the tier"
    code = preview[0]
    for selection in ({"select": [code]}, {"select": ["ALL"]}, {"extend_select": [code]}, {"select": [code[:4]]}, {}):
        assert code not in registry.resolve_codes(**selection), selection
        if selection:
            assert code in registry.resolve_codes(**selection, preview=True), selection
    assert code in registry.resolve_codes(preview=True) or not dict((e.code, e) for e in CATALOG)[code].default_enabled
    assert registry.named_preview_codes([code, "AMP1"]) == [code]


def test_every_tier_is_known() -> None:
    from amplint.rule_catalog import CATALOG

    assert {e.tier for e in CATALOG} <= {"stable", "preview"}


@pytest.mark.parametrize("code", CODES)
def test_every_rule_has_bad_and_good_fixtures(code: str) -> None:
    directory = FIXTURES / code
    names = [p.name for p in directory.glob("*.py") if not p.name.endswith(".fixed.py")]
    assert any(n.startswith("bad_") for n in names), f"{directory} has no bad_*.py fixture"
    assert any(n.startswith("good_") for n in names), f"{directory} has no good_*.py fixture"


def _examples(rule) -> tuple[str, str]:
    doc = inspect.cleandoc(rule.__doc__ or "")
    example, found, rest = doc.partition("Use instead:")
    assert found, f"{rule.code}: docstring has no 'Use instead:' block"
    bad_blocks = _BLOCK.findall(example.split("## Example", 1)[1])
    good_blocks = _BLOCK.findall(rest)
    assert bad_blocks and good_blocks, f"{rule.code}: Example and Use instead need ```python blocks"
    return bad_blocks[-1], good_blocks[0]


def _with_import(code: str) -> str:
    # Examples elide `import torch` for brevity; names must resolve to torch to mean anything.
    return code if re.search(r"^import torch$", code, re.M) else "import torch\n" + code


@pytest.mark.parametrize("code", CODES)
def test_docstring_example_fires_and_use_instead_does_not(code: str) -> None:
    if code in EXAMPLE_NOT_SELF_CONTAINED:
        pytest.skip(EXAMPLE_NOT_SELF_CONTAINED[code])
    rule = BY_CODE[code]
    bad, good = _examples(rule)
    fired = [d.code for d in check_source(_with_import(bad), f"{code}_example.py", select=[code])]
    assert code in fired, f"{code}'s `## Example` does not fire:\n{bad}"
    silent = [d.code for d in check_source(_with_import(good), f"{code}_use_instead.py", select=[code])]
    assert code not in silent, f"{code}'s `Use instead:` block fires:\n{good}"


TORCH_FREE = r"""
import sys
from pathlib import Path

import amplint.cli
import amplint.flake8_plugin
from amplint.cli import main

root = Path(sys.argv[1])
rc = main(["check", "--isolated", "--preview", "--output-format", "sarif", "--exit-zero", str(root / "fixtures"),
           str(root / "examples")])
assert rc == 0, rc
main(["rules", "--format", "json"])
main(["explain", "AMP101"])
from amplint.rule_catalog import CATALOG
preview = {e.code for e in CATALOG if e.tier == "preview"}  # the plugin runs them only with preview = true
fixture = next(p for p in sorted((root / "fixtures").glob("AMP1*/bad_*.py"))
               if not p.name.endswith(".fixed.py") and p.parent.name not in preview)
lines = fixture.read_text().splitlines(keepends=True)
plugin = amplint.flake8_plugin.Flake8Plugin(None, lines, str(fixture))
assert list(plugin.run()), "the plugin found nothing on a bad fixture"
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print("TORCH-MODULES:", loaded, file=sys.stderr)
sys.exit(1 if loaded else 0)
"""


def test_check_never_imports_torch() -> None:
    """A fresh interpreter: import the CLI and the flake8 plugin, check every fixture, look."""
    proc = subprocess.run([sys.executable, "-c", TORCH_FREE, str(ROOT)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TORCH-MODULES: []" in proc.stderr


def test_the_catalog_describes_every_rule_as_its_class_does() -> None:
    """Selection and the cache key read rule_catalog.CATALOG; the classes must agree with it."""
    from amplint.rule_catalog import CATALOG

    assert [e.code for e in CATALOG] == [r.code for r in ALL_RULES]
    for entry, rule in zip(CATALOG, ALL_RULES):
        assert (entry.name, entry.default_enabled) == (rule.name, rule.default_enabled), entry
        assert rule.__module__ == f"amplint.rules.{entry.module}" and rule.__name__ == entry.class_name
        assert registry.expand_codes(entry.code) == [entry.code] and registry.rule(entry.code) is rule


def test_a_run_that_the_cache_answers_imports_no_rule_and_no_libcst(tmp_path) -> None:
    """A warm check of one file (pre-commit, an editor's save) is start-up and a cache look-up:
    importing libcst and the rules was half of its time."""
    (tmp_path / "train.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    probe = (
        "import sys\n"
        "from amplint.cli import main\n"
        "try:\n"
        "    main(['check', 'train.py', '--exit-zero', '-q', '-j', '1'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m == 'libcst' or m.startswith(('amplint.rules', 'amplint.engine'))))\n"
    )
    cold = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "'libcst'" in cold.stdout.splitlines()[-1], cold.stderr  # the first run analyses (in-process: -j 1)
    warm = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert warm.stdout.splitlines()[-1] == "[]", warm.stdout + warm.stderr


def test_every_stable_rule_is_held_to_a_precision_of_0_90_on_unseen_code() -> None:
    """The default tier is what users can trust: a rule whose measured precision on the test split
    (repositories that shaped no rule) is below 0.90 belongs in preview until it passes."""
    from amplint.rule_catalog import CATALOG
    from amplint.rule_figures import FIGURES

    below = []
    for e in CATALOG:
        tp, fp, _ = FIGURES.get(e.code, (0, 0, 0))
        if e.tier == "stable" and tp + fp and tp / (tp + fp) < 0.90:
            below.append(f"{e.code}: {tp} true, {fp} false")
    assert not below, f"stable rules below 0.90 precision: {below}"
