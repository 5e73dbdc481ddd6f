"""A fix never changes what code means, and what `--fix` and `--diff` promise holds (issue 17, items 2-4).

The fixtures under fixtures/AMP401 and fixtures/AMP101 hold the shapes; tests/test_fix_semantics.py
runs the safe fixes with torch.  Here: the issue's own examples, one by one, and the
properties that make the class of defect impossible (every advertised fix applies on its
own; a `--diff` is a patch that `git apply` takes).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import fixes
from amplint.engine import SourceError, check_source, parse
from amplint.registry import ALL_RULES
from amplint.testing import fixture_cases

ROOT = Path(__file__).resolve().parent.parent
EVERY_RULE = [r.code for r in ALL_RULES]


pytestmark = pytest.mark.usefixtures("a_project_of_its_own")  # tests/conftest.py


def fixes_of(source: str, code: str = "AMP401") -> list[tuple[int, str | None]]:
    """(line, fixed text of that line, or None when no fix) per finding."""
    out = []
    for d in check_source(source, "t.py", select=[code]):
        if d.fix is None:
            out.append((d.span.line, None))
            continue
        fixed, _ = fixes.apply_fixes(source, [d.fix])
        out.append((d.span.line, fixed.splitlines()[d.span.line - 1]))
    return out


# --- item 2: "safe" AMP401 fixes that changed behaviour --------------------------------------


def test_enabled_false_after_kwargs_is_kept() -> None:
    source = "import torch\nwith torch.cuda.amp.autocast(**kw, enabled=False, dtype=torch.bfloat16, cache_enabled=True):\n    pass\n"
    assert fixes_of(source) == [
        (2, 'with torch.autocast("cuda", **kw, enabled=False, dtype=torch.bfloat16, cache_enabled=True):')]


def test_kwargs_that_may_hold_cache_enabled_get_no_fix() -> None:
    """The legacy class passes cache_enabled=True; `torch.autocast` without it takes the
    enclosing region's.  Beside `**kw`, which may hold it, the fix cannot write it out."""
    source = "import torch\nwith torch.cuda.amp.autocast(**kw, enabled=False, dtype=torch.bfloat16):\n    pass\n"
    assert fixes_of(source) == [(2, None)]


def test_cache_enabled_after_kwargs_is_kept() -> None:
    source = "from torch.cuda.amp import autocast\nwith autocast(True, torch.float16, **kw, cache_enabled=False):\n    pass\n"
    assert fixes_of(source)[1] == (
        2, 'with autocast("cuda", enabled=True, dtype=torch.float16, **kw, cache_enabled=False):')


def test_kwargs_that_may_hold_the_dtype_get_no_fix() -> None:
    """The legacy class passes float16 itself; `torch.autocast` without a dtype takes the
    enclosing region's.  The fix must write the dtype out, and cannot beside `**kw`,
    which may hold one (a second `dtype=` would be a TypeError)."""
    source = "import torch\nwith torch.cuda.amp.autocast(**kw, enabled=False):\n    pass\n"
    assert fixes_of(source) == [(2, None)]


@pytest.mark.parametrize(
    ("call", "fixed"),
    [
        ("torch.cuda.amp.autocast()", 'torch.autocast("cuda", dtype=torch.float16, cache_enabled=True)'),
        ("torch.cpu.amp.autocast()", 'torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=True)'),
        ("torch.cuda.amp.autocast(enabled=flag)", 'torch.autocast("cuda", enabled=flag, dtype=torch.float16, cache_enabled=True)'),
        ("torch.cpu.amp.autocast(True, torch.float16)", 'torch.autocast("cpu", enabled=True, dtype=torch.float16, cache_enabled=True)'),
        ("torch.cuda.amp.autocast(dtype=torch.bfloat16)", 'torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=True)'),
    ],
)
def test_the_legacy_default_dtype_is_written_out(call: str, fixed: str) -> None:
    """Nested in `torch.autocast("cpu", dtype=torch.float16)`, `torch.cpu.amp.autocast()`
    runs bfloat16 and `torch.autocast("cpu")` float16 (and, nested in a region built with
    cache_enabled=False, caches no weight): the fix passes what the old class passed."""
    source = f"import torch\nwith torch.autocast('cpu', dtype=torch.float16):\n    with {call}:\n        pass\n"
    assert fixes_of(source) == [(3, f"    with {fixed}:")]


def test_a_module_that_binds_no_torch_gets_no_autocast_fix() -> None:
    """`dtype=torch.float16` needs a name for torch; amplint adds no import."""
    source = "from torch.cuda.amp import autocast\nwith autocast():\n    pass\n"
    assert fixes_of(source) == [(1, None), (2, None)]
    assert fixes_of("import torch as th\nwith th.cuda.amp.autocast():\n    pass\n") == [
        (2, 'with th.autocast("cuda", dtype=th.float16, cache_enabled=True):')]


def test_star_args_to_the_legacy_autocast_get_no_fix() -> None:
    """`*args` fills `enabled, dtype, cache_enabled` positionally: nothing knows which."""
    assert fixes_of("import torch\nctx = torch.cuda.amp.autocast(*args)\n") == [(2, None)]


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nclass S(torch.cuda.amp.GradScaler):\n    def __init__(self, scale):\n        super().__init__(scale)\n",
        "import torch\nScaler = torch.cuda.amp.GradScaler\ns = Scaler(4.0)\n",
        "import functools, torch\nmake = functools.partial(torch.cuda.amp.GradScaler, 2.0)\n",
        "import torch\ndef build(cls=torch.cuda.amp.GradScaler):\n    return cls(8.0)\n",
        "import torch\ndef is_scaler(s):\n    return isinstance(s, torch.cuda.amp.GradScaler)\n",
    ],
    ids=["subclass", "alias", "partial", "cls-default", "isinstance"],
)
def test_a_bare_class_reference_is_reported_without_a_fix(source: str) -> None:
    """`torch.amp.GradScaler(4.0)` is a scaler with `device=4.0`: no drop-in spelling exists."""
    found = check_source(source, "t.py", select=["AMP401"])
    assert found and all(d.fix is None for d in found)


def test_a_subclassed_imported_class_pins_its_import() -> None:
    source = "from torch.cuda.amp import GradScaler\nclass S(GradScaler):\n    pass\nscaler = GradScaler(64.0)\n"
    found = check_source(source, "t.py", select=["AMP401"])
    assert [d.span.line for d in found] == [1, 2, 4] and all(d.fix is None for d in found)


def test_constructions_of_a_class_the_module_tests_against_stay() -> None:
    """After `s = torch.amp.GradScaler("cuda")`, `isinstance(s, torch.cuda.amp.GradScaler)` is False."""
    source = "import torch\ns = torch.cuda.amp.GradScaler()\nassert isinstance(s, torch.cuda.amp.GradScaler)\n"
    assert fixes_of(source) == [(2, None), (3, None)]
    # the other device's class is another class: its constructions are still fixed
    source += "c = torch.cpu.amp.GradScaler()\n"
    assert fixes_of(source)[-1] == (4, 'c = torch.amp.GradScaler("cpu")')


def test_a_module_that_sets_autocast_defaults_keeps_its_autocast() -> None:
    """`torch.autocast("cuda")` reads the global default dtype; the legacy class passes float16."""
    source = "import torch\ntorch.set_autocast_dtype('cuda', torch.bfloat16)\nctx = torch.cuda.amp.autocast()\n"
    assert fixes_of(source) == [(3, None)]


@pytest.mark.parametrize(
    "setting",
    [
        'getattr(torch, "set_autocast_cache_enabled")(False)',  # looked up by a string
        "torch.set_autocast_cache_enabled(False)",
        'with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):\n    pass',  # an enclosing region
        "ctx = torch.cuda.amp.autocast(cache_enabled=flag)",
    ],
)
def test_a_fix_beside_a_changed_weight_cache_passes_the_cache_the_legacy_class_passed(setting: str) -> None:
    """The legacy classes pass cache_enabled=True; `torch.autocast("cuda", dtype=...)`
    alone would take the cache from the state it is entered in (a setter, even one looked
    up by a string, or an enclosing region without the cache): the fix writes it out."""
    source = f"import torch\nflag = False\n{setting}\nctx2 = torch.cuda.amp.autocast()\n"
    line = source.count("\n")
    fixed = dict(fixes_of(source))[line]
    assert fixed is None or fixed.endswith('torch.autocast("cuda", dtype=torch.float16, cache_enabled=True)'), fixed


def test_a_decorator_is_rewritten_and_a_bare_function_reference_is_not() -> None:
    source = (
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    @torch.cuda.amp.custom_fwd\n"
        "    def forward(ctx, x):\n"
        "        return x\n"
        "wrap = torch.cuda.amp.custom_fwd\n"
    )
    assert fixes_of(source) == [(4, '    @torch.amp.custom_fwd(device_type="cuda")'), (7, None)]


# --- item 3: the unsafe AMP101 fix unscales the one optimizer the clip covers -----------------


def test_the_clip_fix_leaves_a_clip_covering_two_optimizers_alone() -> None:
    """Two optimizers may share a parameter: unscaling both before the first step divides
    that gradient twice for it. The finding stays; the fix takes one optimizer only."""
    source = (
        "import torch\n"
        "def step(scaler, loss, params, opt_a, opt_b):\n"
        "    scaler.scale(loss).backward()\n"
        "    torch.nn.utils.clip_grad_norm_(params, 1.0)\n"
        "    scaler.step(opt_a)\n"
        "    scaler.step(opt_b)\n"
        "    scaler.update()\n"
        "step(*batch)  # the script calls it, outside any handler: an error in it ends the run\n"
    )
    (d,) = check_source(source, "t.py", select=["AMP101"])
    assert d.fix is None


@pytest.mark.parametrize(
    "steps",
    [
        "    if flag:\n        scaler.step(opt_a)\n    scaler.step(opt_b)\n",  # one step is conditional
        "    for opt in (opt_a, opt_b):\n        scaler.step(opt)\n",  # the name exists only in the loop
        "    scaler.unscale_(opt_a)\n    scaler.step(opt_a)\n",  # a second unscale_ raises
    ],
    ids=["conditional-step", "loop-variable", "unscaled-later"],
)
def test_no_clip_fix_where_unscaling_first_is_not_what_the_steps_do(steps: str) -> None:
    source = (
        "import torch\n"
        "def step(scaler, loss, params, opt_a, opt_b, flag):\n"
        "    scaler.scale(loss).backward()\n"
        "    torch.nn.utils.clip_grad_norm_(params, 1.0)\n"
        f"{steps}"
        "    scaler.update()\n"
    )
    (d,) = check_source(source, "t.py", select=["AMP101"])
    assert d.fix is None


@pytest.mark.parametrize(
    ("clips", "fixed_lines"),
    [
        ("    if clip_value:\n        torch.nn.utils.clip_grad_value_(params, 0.5)\n"
         "    if clip_norm:\n        torch.nn.utils.clip_grad_norm_(params, 1.0)\n", []),
        ("    torch.nn.utils.clip_grad_value_(params, 0.5)\n"
         "    if clip_norm:\n        torch.nn.utils.clip_grad_norm_(params, 1.0)\n", [5]),
        ("    torch.nn.utils.clip_grad_value_(params, 0.5)\n"
         "    torch.nn.utils.clip_grad_norm_(params, 1.0)\n", [5]),
    ],
    ids=["each-under-its-option", "first-always-runs", "both-always-run"],
)
def test_two_clips_of_one_backward_get_one_unscale_or_none(clips: str, fixed_lines: list[int]) -> None:
    """A fix at each of two clips unscales twice when both run, and the second `unscale_`
    raises (hostile pass 15). One fix, at the clip every path to the other passes through."""
    source = (
        "import torch\n"
        "def step(scaler, loss, params, opt, clip_value, clip_norm):\n"
        "    opt.zero_grad()\n"
        "    scaler.scale(loss).backward()\n"
        f"{clips}"
        "    scaler.step(opt)\n"
        "    scaler.update()\n"
        "step(*batch)\n"
    )
    found = check_source(source, "t.py", select=["AMP101"])
    assert len(found) == 2
    assert [d.span.line for d in found if d.fix is not None] == fixed_lines


# --- item 4: what `--fix` advertises applies; `--diff` is a patch --------------------------------


def test_a_semicolon_one_liner_is_fixed_without_doubling_the_semicolon() -> None:
    source = "import torch\nfrom torch.cuda.amp import autocast; x = autocast()\n"
    (a, b) = check_source(source, "t.py", select=["AMP401"])
    assert a.fix == b.fix
    fixed, _ = fixes.apply_fixes(source, [a.fix])
    assert fixed == 'import torch\nfrom torch.amp import autocast; x = autocast("cuda", dtype=torch.float16, cache_enabled=True)\n'


def test_a_noqa_line_is_never_rewritten_by_a_shared_fix() -> None:
    source = "from torch.cuda.amp import autocast\nwith autocast():  # noqa: AMP401\n    pass\nx = autocast()\n"
    found = check_source(source, "t.py", select=["AMP401"])
    assert [(d.span.line, d.fix) for d in found] == [(1, None), (4, None)]


@pytest.mark.parametrize("path", fixture_cases(ROOT / "fixtures"), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_advertised_fix_applies_on_its_own(path: Path) -> None:
    """A `[*]` that cannot apply (its text does not parse) is a broken promise, whatever the rule."""
    source = path.read_text(encoding="utf-8")
    for d in check_source(source, str(path), select=EVERY_RULE):
        if d.fix is not None:
            fixed, accepted = fixes.apply_fixes(source, [d.fix])
            assert accepted == [d.fix]
            try:
                parse(fixed, str(path))
            except SourceError as exc:  # pragma: no cover - the failure message
                pytest.fail(f"{d.code} at line {d.span.line} ({d.fix.title}) does not parse: {exc}")


def test_a_diff_marks_a_missing_final_newline() -> None:
    diff = fixes.unified_diff("x = 1\ny = 2", "x = 1\ny = 3", "a/t.py", "b/t.py")
    assert diff.endswith("-y = 2\n\\ No newline at end of file\n+y = 3\n\\ No newline at end of file\n")
    assert fixes.unified_diff("a\n", "a\n", "a/t.py", "b/t.py") == ""


def test_a_diff_keeps_carriage_returns_inside_lines() -> None:
    """git and patch split a diff at LF only: a CR-only file is one line to them."""
    diff = fixes.unified_diff("a = 1\rb = 2\r", "a = 1\rb = 3\r", "a/t.py", "b/t.py")
    assert diff == (
        "--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n"
        "-a = 1\rb = 2\r\n\\ No newline at end of file\n"
        "+a = 1\rb = 3\r\n\\ No newline at end of file\n"
    )


VARIANTS = {
    "no_final_newline.py": b"import torch\nscaler = torch.cuda.amp.GradScaler()",
    "crlf.py": b"import torch\r\nscaler = torch.cuda.amp.GradScaler()\r\n",
    "cr_only.py": b"import torch\rs = torch.cuda.amp.GradScaler()\rt = torch.cuda.amp.GradScaler(2.0)\r",
    "mixed.py": b"import torch\n# a\rs1 = torch.cuda.amp.GradScaler(1.0)\r\ns2 = torch.cuda.amp.GradScaler(2.0)\n",
    "bom.py": b"\xef\xbb\xbfimport torch\nscaler = torch.cuda.amp.GradScaler()\n",
    "latin1.py": b"# -*- coding: latin-1 -*-\n# caf\xe9\nimport torch\nscaler = torch.cuda.amp.GradScaler()\n",
}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_apply_takes_the_diff_and_gets_what_fix_writes(tmp_path: Path) -> None:
    """One `--diff` over files of every line ending, a BOM and a latin-1 file, one after
    another (a missing newline must not glue the next header on): `git apply` accepts it
    and leaves exactly what `--fix` writes."""
    repo, fixed = tmp_path / "repo", tmp_path / "fixed"
    for d in (repo, fixed):
        d.mkdir()
        for name, data in VARIANTS.items():
            (d / name).write_bytes(data)
    git = ["git", "-c", "core.autocrlf=false", "-c", "core.safecrlf=false"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    # NB: --unsafe-fixes: a GradScaler's AMP401 fix is unsafe (the class it builds is another)
    cli = [sys.executable, "-m", "amplint", "check", "--isolated", "--no-cache", "--jobs", "1", "--unsafe-fixes"]
    names = sorted(VARIANTS)
    diff = subprocess.run([*cli, "--diff", *names], cwd=repo, capture_output=True, timeout=300)
    assert diff.returncode == 1, diff.stderr
    patch = tmp_path / "fix.patch"
    patch.write_bytes(diff.stdout)
    check = subprocess.run([*git, "apply", "--check", "-v", str(patch)], cwd=repo, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    subprocess.run([*git, "apply", str(patch)], cwd=repo, check=True)
    subprocess.run([*cli, "--fix", *names], cwd=fixed, capture_output=True, timeout=300)
    for name in names:
        assert (repo / name).read_bytes() == (fixed / name).read_bytes(), name
        assert (repo / name).read_bytes() != VARIANTS[name], f"{name} was not fixed"


@pytest.mark.parametrize(
    "source",
    [
        "from torch.cuda.amp import autocast as autocast\n",
        "from torch.cuda.amp import autocast\n__all__ = ['autocast']\nwith autocast():\n    pass\n",
        "import torch\nfrom torch.cuda.amp import autocast\n__all__ = ['auto' + 'cast']\nwith autocast():\n    pass\n",
        "import torch\nfrom torch.cuda.amp import autocast\n__all__ = []\n__all__ += ['autocast']\nwith autocast():\n    pass\n",
        "import torch\nfrom torch.cuda.amp import autocast\n__all__ = []\n__all__.append('autocast')\nwith autocast():\n    pass\n",
        "import torch\nfrom torch.cuda.amp import autocast\n__all__ = ['f']\n__all__.extend(['autocast'])\nwith autocast():\n    pass\n",
    ],
    ids=["redundant-alias", "dunder-all", "dunder-all-computed", "dunder-all-augmented", "dunder-all-appended",
         "dunder-all-extended"],
)
def test_a_re_exported_import_is_not_renamed(source: str) -> None:
    """Importers of this module call `autocast(enabled)`: `torch.amp.autocast` takes the device first."""
    assert all(d.fix is None for d in check_source(source, "t.py", select=["AMP401"]))


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nfrom torch.cuda.amp import autocast\ndef f(torch):\n    with autocast():\n        pass\n",
        "import torch\nfrom torch.cuda.amp import autocast\ndef f():\n    torch = 1\n    with autocast():\n        pass\n",
        "import torch\nfrom torch.cuda.amp import autocast\nx = [autocast() for torch in range(2)]\n",
        "import torch\nfrom torch.cuda.amp import autocast\nclass C:\n    torch = 0\n    a = autocast()\n",
        "from torch.cuda.amp import autocast\ndef g():\n    import torch\ndef f():\n    with autocast():\n        pass\n",
        "from torch.cuda.amp import autocast\nwith autocast():\n    pass\nimport torch\n",
        "import torch as th\nfrom torch.cuda.amp import autocast\nf = lambda th: autocast()\n",
        "from typing import TYPE_CHECKING\nfrom torch.cuda.amp import autocast\nif TYPE_CHECKING:\n    import torch\n"
        "with autocast():\n    pass\n",
        "from torch.cuda.amp import autocast\nif WANT_TORCH:\n    import torch\nwith autocast():\n    pass\n",
        "from torch.cuda.amp import autocast\ntry:\n    pass\nexcept ImportError:\n    import torch\n"
        "with autocast():\n    pass\n",
    ],
    ids=["parameter", "local", "comprehension", "class-attribute", "import-in-another-function",
         "import-after-the-use", "lambda-parameter", "import-for-type-checkers-only", "import-in-a-branch",
         "import-in-an-except"],
)
def test_the_written_dtype_reads_torch_where_the_call_runs(source: str) -> None:
    """`dtype=torch.float16` is evaluated at the call: a name that is not torch there (a
    local, a class attribute, an import elsewhere or later, an import that may not run:
    `if TYPE_CHECKING:`, a branch, an `except`) made the fixed code raise."""
    assert all(d.fix is None for d in check_source(source, "t.py", select=["AMP401"]))


_USE = "import torch\nfrom torch.cpu.amp import autocast\n"
_RUN = "def run():\n    with autocast():\n        pass\n"


@pytest.mark.parametrize(
    "source",
    [
        _USE + _RUN + "del torch\nrun()\n",
        _USE + _RUN + "try:\n    import torchvision\nexcept ImportError as torch:\n    pass\nrun()\n",
        pytest.param(  # `except*` is Python 3.11 syntax: a file 3.10 cannot parse has no fix to judge
            _USE + _RUN + "try:\n    pass\nexcept* ImportError as torch:\n    pass\n",
            marks=pytest.mark.skipif(sys.version_info < (3, 11), reason="except* needs Python 3.11"),
        ),
        _USE + _RUN + "match 'x':\n    case torch:\n        pass\n",
        _USE + _RUN + "match 'x':\n    case str() as torch:\n        pass\n",
        _USE + _RUN + "match ['x']:\n    case [*torch]:\n        pass\n",
        _USE + _RUN + "match {}:\n    case {**torch}:\n        pass\n",
        _USE + _RUN + "match 1:\n    case int(real=torch):\n        pass\n",
        _USE + "def run():\n    import numpy as torch\n    with autocast():\n        pass\n",
        _USE + "def run():\n    with autocast():\n        pass\n    import torch\n",
        _USE + "from numpy import torch\n" + _RUN,
        _USE + _RUN + "class torch:\n    pass\n",
        _USE + _RUN + "def reset():\n    global torch\n    del torch\n",
        _USE + "def outer():\n    torch = None\n    def run():\n        nonlocal torch\n        with autocast():\n            pass\n",
        _USE + "def run():\n    if (torch := None) is None:\n        with autocast():\n            pass\n",
        _USE + _RUN + "with open(__file__) as torch:\n    pass\n",
        _USE + _RUN + "for torch in range(2):\n    pass\n",
        _USE + _RUN + "torch: object = None\n",
        _USE + _RUN + "torch += 0\n",
        _USE + "import torch.nn as torch\n" + _RUN,
    ],
    ids=["del", "except-as", "except-star-as", "match-capture", "match-as", "match-star", "match-mapping-rest",
         "match-class-keyword", "import-as-in-the-function", "import-after-the-use-in-the-function",
         "from-import", "class-definition", "global-del", "nonlocal", "walrus", "with-as", "for-target",
         "annotated-assignment", "augmented-assignment", "import-submodule-as"],
)
def test_the_written_dtype_needs_torch_bound_by_nothing_else(source: str) -> None:
    """Every Python binding form of `torch` (hostile3 c33-c36): where any statement binds the
    name to something else (or unbinds it), `dtype=torch.bfloat16` read numpy, an exception,
    None, or raised NameError where the original ran."""
    assert all(d.fix is None for d in check_source(source, "t.py", select=["AMP401"]))


def test_an_import_torch_of_a_submodule_leaves_the_dtype_fix() -> None:
    """`import torch.nn` binds `torch` to torch as well: no other object."""
    source = "import torch\nimport torch.nn\nfrom torch.cpu.amp import autocast\nwith autocast():\n    pass\n"
    assert fixes_of(source)[1] == (4, 'with autocast("cpu", dtype=torch.bfloat16, cache_enabled=True):')


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nclass Trainer:\n    from torch.cpu.amp import autocast\n    def run(self):\n"
        "        with self.autocast(dtype=torch.float16):\n            pass\n    ctx = autocast()\n",
        "import torch\nclass Trainer:\n    from torch.cuda.amp import GradScaler\nTrainer.GradScaler(4.0)\n"
        "s = Trainer.GradScaler(init_scale=2.0)\n",
        "import torch\ndef build():\n    class Trainer:\n        from torch.cuda.amp import GradScaler\n"
        "        s = GradScaler(2.0)\n    return Trainer().GradScaler(4.0)\n",
    ],
    ids=["used-through-self", "used-through-the-class", "class-in-a-function"],
)
def test_an_import_in_a_class_body_is_not_renamed(source: str) -> None:
    """An import in a class body binds a class attribute (hostile3 c28): `self.autocast(dtype=...)`
    called the renamed `torch.amp.autocast` without its device (TypeError), unseen by the fix."""
    assert all(d.fix is None for d in check_source(source, "t.py", select=["AMP401"]))


def test_an_import_in_a_method_body_is_still_renamed() -> None:
    source = ("import torch\nclass Trainer:\n    def run(self):\n        from torch.cuda.amp import GradScaler\n"
              "        return GradScaler(2.0)\n")
    assert (5, '        return GradScaler("cuda", 2.0)') in fixes_of(source)


def test_a_torch_import_in_the_branch_of_the_use_gives_the_dtype_fix() -> None:
    """A script's `if __name__ == "__main__":` imports torch and then runs: the import has run there."""
    source = ("from torch.cuda.amp import autocast\nif __name__ == '__main__':\n    import torch\n"
              "    with autocast():\n        pass\n")
    assert fixes_of(source)[1] == (4, '    with autocast("cuda", dtype=torch.float16, cache_enabled=True):')


def test_a_module_level_torch_import_still_gives_the_dtype_fix() -> None:
    source = "import torch as th\nfrom torch.cuda.amp import autocast\ndef f(x):\n    with autocast():\n        return x\n"
    assert fixes_of(source)[1] == (4, '    with autocast("cuda", dtype=th.float16, cache_enabled=True):')


@pytest.mark.parametrize(
    "lookup",
    ["exec('s = GradScaler(4.0)')", "s = eval('GradScaler(4.0)')", "s = globals()['GradScaler'](4.0)",
     "s = getattr(sys.modules[__name__], 'GradScaler')(4.0)", "s = vars()['GradScaler'](4.0)",
     "get_ipython().run_line_magic('time', 's = GradScaler(4.0)')",
     "get_ipython().run_cell_magic('timeit', '', 's = GradScaler(4.0)\\n')"],
)
def test_an_import_a_string_looks_up_is_not_renamed(lookup: str) -> None:
    """The string's use calls the name the legacy way: after the rename it built a scaler on device 4.0.
    A script nbconvert or jupytext exported writes `%time ...` as `get_ipython().run_line_magic(...)`."""
    source = f"import sys\nimport torch\nfrom torch.cuda.amp import GradScaler\n{lookup}\nx = GradScaler(2.0)\n"
    assert all(d.fix is None for d in check_source(source, "t.py", select=["AMP401"]))


def test_a_string_naming_the_class_without_a_lookup_keeps_the_fix() -> None:
    source = "import torch\nfrom torch.cuda.amp import GradScaler\nprint('GradScaler on')\nx = GradScaler(2.0)\n"
    assert fixes_of(source)[1] == (4, 'x = GradScaler("cuda", 2.0)')


def test_a_dunder_all_that_names_other_things_keeps_the_fix() -> None:
    source = "import torch\nfrom torch.cuda.amp import GradScaler\n__all__ = ['make']\nx = GradScaler(2.0)\n"
    assert fixes_of(source)[1] == (4, 'x = GradScaler("cuda", 2.0)')


@pytest.mark.parametrize(
    "source",
    [
        "import functools\nimport torch\n@functools.singledispatch\ndef f(x):\n    return 0\n"
        "@f.register\ndef _(x: torch.cuda.amp.GradScaler):\n    return 1\ns = torch.cuda.amp.GradScaler(4.0)\n",
        "import functools\nimport torch\nfrom torch.cuda.amp import GradScaler\n@functools.singledispatch\ndef f(x):\n"
        "    return 0\n@f.register\ndef _(x: GradScaler):\n    return 1\ns = GradScaler(4.0)\n",
    ],
    ids=["full-path", "imported-name"],
)
def test_a_class_singledispatch_registers_keeps_its_constructions(source: str) -> None:
    """`@f.register` reads the annotation and dispatches with an isinstance test: a
    `torch.amp.GradScaler` is no `torch.cuda.amp.GradScaler`, so f() took the other branch."""
    assert all(d.fix is None for d in check_source(source, "t.py", select=["AMP401"]))


@pytest.mark.parametrize(
    "source",
    [
        "import pydantic\nimport torch\n@pydantic.validate_call(config=dict(arbitrary_types_allowed=True))\n"
        "def step(s: torch.cuda.amp.GradScaler):\n    return s\nstep(torch.cuda.amp.GradScaler(4.0))\n",
        "import torch\nfrom torch.cuda.amp import GradScaler\nfrom typeguard import typechecked\n@typechecked\n"
        "def step(s: GradScaler) -> None:\n    pass\nstep(GradScaler(4.0))\n",
        "import pydantic\nimport torch\nclass Cfg(pydantic.BaseModel):\n    scaler: torch.cuda.amp.GradScaler\n"
        "Cfg(scaler=torch.cuda.amp.GradScaler(4.0))\n",
        "import torch\nfrom torch.cuda.amp import GradScaler\n@pydantic.dataclasses.dataclass\nclass Cfg:\n"
        "    scaler: GradScaler\nCfg(scaler=GradScaler(4.0))\n",
    ],
    ids=["validate-call", "typechecked-imported-name", "model-field", "checked-dataclass-field"],
)
def test_a_class_an_annotation_checker_reads_keeps_its_constructions(source: str) -> None:
    """pydantic, typeguard, beartype read a decorated function's annotations (and a model's
    fields) and test the value with isinstance: a `torch.amp.GradScaler` is no
    `torch.cuda.amp.GradScaler`, so the call raised a validation error after the fix."""
    assert all(d.fix is None for d in check_source(source, "t.py", select=["AMP401"]))


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ndef step(s: torch.cuda.amp.GradScaler) -> None:\n    pass\nstep(torch.cuda.amp.GradScaler(4.0))\n",
        "import torch\nclass Trainer:\n    scaler: torch.cuda.amp.GradScaler\n    @staticmethod\n"
        "    def make(s: torch.cuda.amp.GradScaler = None):\n        return torch.cuda.amp.GradScaler(4.0)\n",
        "import dataclasses\nimport torch\n@dataclasses.dataclass\nclass Cfg:\n    scaler: torch.cuda.amp.GradScaler\n"
        "Cfg(scaler=torch.cuda.amp.GradScaler(4.0))\n",
    ],
    ids=["plain-function", "plain-class-and-staticmethod", "stdlib-dataclass"],
)
def test_an_annotation_nothing_checks_keeps_the_fix(source: str) -> None:
    assert any('GradScaler("cuda", 4.0)' in line for _, line in fixes_of(source) if line)


@pytest.mark.parametrize(
    "star",
    ["from torch.cuda.amp import *", "from helpers import *"],
    ids=["deprecated-module", "project-module"],
)
def test_a_star_import_after_the_import_pins_it(star: str) -> None:
    """A star import that runs after `from torch.cuda.amp import autocast` may bind the
    name again (to the legacy class, or whatever a module re-exports): the renamed call
    `autocast("cuda", ...)` then passed "cuda" as `enabled` (TypeError)."""
    source = f"import torch\nfrom torch.cuda.amp import autocast\n{star}\nwith autocast():\n    pass\n"
    assert all(d.fix is None for d in check_source(source, "t.py", select=["AMP401"]))


def test_a_star_import_anywhere_takes_the_fix_away() -> None:
    """`from helpers import *` after `import torch` may bind `torch` again: the rewrite's
    `dtype=torch.float16` would then read another object."""
    source = "import torch\nfrom helpers import *\nfrom torch.cuda.amp import autocast\nwith autocast():\n    pass\n"
    assert all(fix is None for _, fix in fixes_of(source))


# --- AMP501's unsafe fix reads torch where the fill runs -------------------------------------------

_FILL = "def attend(q, mask):\n    s = q.half() @ q.t().half()\n    return s.masked_fill(mask, -1e9).softmax(-1)\n"


@pytest.mark.parametrize(
    "source",
    [
        "from typing import TYPE_CHECKING\nfrom torch import nn\nif TYPE_CHECKING:\n    import torch\n" + _FILL,
        "from torch import nn\ndef main():\n    import torch\n    print(torch.__version__)\n" + _FILL,
        "import torch\ndef attend(q, mask, torch=None):\n    s = q.half() @ q.t().half()\n    return s.masked_fill(mask, -1e9).softmax(-1)\n",
    ],
    ids=["import-for-type-checkers-only", "import-in-another-function", "parameter-named-torch"],
)
def test_the_finfo_fix_needs_a_torch_name_where_the_fill_runs(source: str) -> None:
    """`torch.finfo(s.dtype).min` is evaluated at the fill: a `torch` that is not bound there
    (an import under TYPE_CHECKING or in another function) or is another object (a parameter)
    turned an overflow into a NameError or AttributeError."""
    assert fixes_of(source, "AMP501") == [(source.count("\n"), None)]


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ndef attend(q, mask):\n    import numpy as torch\n    s = q.half() @ q.t().half()\n"
        "    return s.masked_fill(mask, -1e9)\n",
        "import torch\n" + _FILL + "del torch\n",
        "import torch\n" + _FILL + "match 0:\n    case torch:\n        pass\n",
        "import torch\n" + _FILL + "try:\n    pass\nexcept ImportError as torch:\n    pass\n",
    ],
    ids=["import-as-in-the-function", "del", "match-capture", "except-as"],
)
def test_the_finfo_fix_needs_torch_bound_by_nothing_else(source: str) -> None:
    """hostile3 c37: `import numpy as torch` in the function made `torch.finfo(s.dtype).min` numpy's finfo."""
    assert fixes_of(source, "AMP501") == [(source.split("masked_fill")[0].count("\n") + 1, None)]


def test_the_finfo_fix_reads_a_module_level_torch_alias() -> None:
    source = "import torch as th\n" + _FILL
    assert fixes_of(source, "AMP501") == [(4, "    return s.masked_fill(mask, th.finfo(s.dtype).min).softmax(-1)")]


# --- AMP103's unsafe fix needs the scaler wherever the backward runs ----------------------------

_LOOP = ("import torch\nmodel = torch.nn.Linear(4, 4)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n{make}\n"
         "for x in data:\n    with torch.autocast('cuda', dtype=torch.float16, enabled=use_amp):\n"
         "        loss = model(x).sum()\n    loss.backward()\n{step}")


@pytest.mark.parametrize(
    ("make", "step"),
    [
        ("scaler = torch.amp.GradScaler('cuda') if use_amp else None",
         "    if scaler is not None:\n        scaler.step(opt)\n        scaler.update()\n    else:\n        opt.step()\n"),
        ("scaler = torch.amp.GradScaler('cuda') if use_amp else None",
         "    if use_amp:\n        scaler.step(opt)\n        scaler.update()\n    else:\n        opt.step()\n"),
        ("scaler = use_amp and torch.amp.GradScaler('cuda')",
         "    if scaler:\n        scaler.step(opt)\n        scaler.update()\n    else:\n        opt.step()\n"),
    ],
    ids=["is-not-none-guard", "flag-guard", "truthiness-guard"],
)
def test_no_scale_fix_where_the_scaler_may_be_none_at_the_backward(make: str, step: str) -> None:
    """`scaler = GradScaler() if use_amp else None` and a step only where it exists: the
    backward runs either way, and `scaler.scale(loss)` raised AttributeError without AMP."""
    source = _LOOP.format(make=make, step=step)
    assert [fix for _, fix in fixes_of(source, "AMP103")] == [None]


def test_the_scale_fix_stays_where_the_scaler_always_exists() -> None:
    source = _LOOP.format(make="scaler = torch.amp.GradScaler('cuda', enabled=use_amp)",
                          step="    scaler.step(opt)\n    scaler.update()\n")
    assert fixes_of(source, "AMP103") == [(8, "    scaler.scale(loss).backward()")]


# --- hostile pass 17: unsafe fixes that changed a program --------------------------------------

_ATTENTION = (
    "import torch\n"
    "class Attention(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.q = torch.nn.Linear(4, 4)\n"
    "    def forward(self, x, mask):\n"
    "        scores = self.q(x) @ x.transpose(-2, -1)\n"
    "        scores = scores.masked_fill(mask == 0, -1e9)\n"
    "        return torch.softmax(scores, dim=-1)\n"
    "model = Attention().half()\n"
)


@pytest.mark.parametrize("export", ["scripted = torch.jit.script(model)\n", "traced = torch.fx.symbolic_trace(model)\n", ""])
def test_no_finfo_fix_where_torchscript_or_fx_compiles_the_module(export: str) -> None:
    """TorchScript and torch.fx cannot compile `torch.finfo`: the fixed model failed to script."""
    (d,) = check_source(_ATTENTION + export, "t.py", select=["AMP501"])
    assert (d.fix is None) == bool(export)


def test_no_update_fix_where_the_module_steps_one_scaler_in_two_functions() -> None:
    """A GAN's d_step and g_step: an update in each doubled the scale's growth."""
    step = ("def {name}(loss, opt):\n"
            "    scaler.scale(loss).backward()\n"
            "    scaler.step(opt)\n"
            "    opt.zero_grad()\n")
    source = ("import torch\nscaler = torch.amp.GradScaler('cpu')\n" + step.format(name="d_step") + step.format(name="g_step")
              + "for batch in range(3):\n    d_step(lossd, opt_d)\n    g_step(lossg, opt_g)\n")
    found = check_source(source, "t.py", select=["AMP102"])
    assert found and all(d.fix is None for d in found)


def test_no_scale_fix_for_a_loss_object_with_its_own_backward_method() -> None:
    source = (
        "import torch\n"
        "class LossOutput:\n"
        "    def __init__(self, terms):\n"
        "        self.terms = terms\n"
        "    def backward(self, **kwargs):\n"
        "        sum(self.terms.values()).backward(**kwargs)\n"
        "scaler = torch.amp.GradScaler('cpu')\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x in data:\n"
        "    loss = LossOutput({'mse': model(x).pow(2).mean()})\n"
        "    loss.backward()\n"
        "    scaler.step(opt)\n"
        "    scaler.update()\n"
    )
    (d,) = check_source(source, "t.py", select=["AMP103"])
    assert d.fix is None


def test_a_helper_parameter_handed_the_scaler_is_that_scaler_whatever_its_name() -> None:
    """`finish(s, o)` updates the scaler between the two unscales: no AMP108 (and no fix that
    would delete the second, needed unscale_)."""
    source = (
        "import torch\n"
        "scaler = torch.amp.GradScaler('cpu')\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "def finish(s, o):\n"
        "    s.step(o)\n"
        "    s.update()\n"
        "for x in data:\n"
        "    scaler.scale(model(x).sum()).backward()\n"
        "    scaler.unscale_(opt)\n"
        "    finish(scaler, opt)\n"
        "    scaler.scale(model(x).sum()).backward()\n"
        "    scaler.unscale_(opt)\n"
        "    finish(scaler, opt)\n"
    )
    assert check_source(source, "t.py", select=["AMP108"]) == []


# --- hostile pass 18: fixes that changed a program or its line numbers -------------------------

_TWO_UNSCALES = (
    "import torch\n"
    "scaler = torch.amp.GradScaler('cpu')\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for x in data:\n"
    "    scaler.scale(model(x).sum()).backward()\n"
    "    scaler.unscale_(opt)\n"
    "{second}"
    "    scaler.step(opt)\n"
    "    scaler.update()\n"
    "print('done')\n"
)


def test_a_second_unscale_sharing_its_line_gets_no_fix() -> None:
    """Deleting the line deleted the clip beside it (`scaler.unscale_(opt); clip(...)`)."""
    source = _TWO_UNSCALES.format(second="    scaler.unscale_(opt); torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n")
    (d,) = check_source(source, "t.py", select=["AMP108"])
    assert d.fix is None


@pytest.mark.parametrize("second", [
    "    scaler.unscale_(opt)\n",
    "    scaler.unscale_(\n        opt,\n    )\n",
])
def test_a_deleted_unscale_leaves_its_lines_empty(second: str) -> None:
    """Every later line keeps its number (`%(lineno)d` in logs, tracebacks)."""
    source = _TWO_UNSCALES.format(second=second)
    (d,) = check_source(source, "t.py", select=["AMP108"])
    after, _ = fixes.apply_fixes(source, [d.fix])
    assert after.count("\n") == source.count("\n")
    assert after.splitlines().index("print('done')") == source.splitlines().index("print('done')")


def test_a_quoted_annotation_naming_the_import_keeps_the_legacy_import() -> None:
    """`typing.get_type_hints` evaluates `"GradScaler"` in the module: it would name the new class."""
    source = ("from torch.cuda.amp import GradScaler\n"
              "def step(s: \"GradScaler\") -> None:\n    pass\n")
    import_fixes = [d for d in check_source(source, "t.py", select=["AMP401"]) if d.span.line == 1]
    assert import_fixes and all(d.fix is None for d in import_fixes)


# --- hostile pass 20 -----------------------------------------------------------------------------


@pytest.mark.parametrize("patch", [
    "import torch.cpu.amp as cpu_amp\ncpu_amp.autocast = Shim\n",
    "import torch as th\nth.cpu.amp.autocast = Shim\n",
    "def install(torch_mod):\n    torch_mod.cpu.amp.autocast = Shim\n",
    'import importlib\nimportlib.import_module("torch.cpu.amp").autocast = Shim\n',
    'import torch.cpu.amp as amp_mod\nsetattr(amp_mod, "autocast", Shim)\n',
], ids=["module-alias", "torch-alias", "torch-parameter", "import-module", "setattr-alias"])
def test_a_legacy_name_patched_through_another_spelling_gets_no_fix(patch: str) -> None:
    """The fixed call skipped the project's run-time replacement of the legacy class."""
    source = "import torch\nclass Shim: ...\n" + patch + "with torch.cpu.amp.autocast():\n    pass\n"
    found = check_source(source, "t.py", select=["AMP401"])
    assert found and all(d.fix is None for d in found)


def test_a_setting_named_autocast_keeps_the_fix() -> None:
    source = "import torch\ncfg.autocast = True\nwith torch.cpu.amp.autocast():\n    pass\n"
    assert any(d.fix is not None for d in check_source(source, "t.py", select=["AMP401"]))


def test_no_finfo_fix_where_script_is_imported_from_torch_jit() -> None:
    (d,) = check_source(_ATTENTION + "from torch.jit import script\nscripted = script(model)\n", "t.py", select=["AMP501"])
    assert d.fix is None


# --- hostile pass 22: reads that run at another time, rebinding on one path only --------------


def _attention(body: str, tail: str = "") -> str:
    return ("import torch\nimport torch.nn.functional as F\n"
            "class Attention(torch.nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.q = torch.nn.Linear(4, 4)\n"
            "    def forward(self, x, mask, normalize=True):\n"
            "        scores = self.q(x) @ x.transpose(-2, -1)\n"
            + body + "model = Attention().half()\n" + tail)


def test_the_finfo_fix_stays_where_every_later_read_is_a_softmax() -> None:
    (d,) = check_source(_attention("        scores = scores.masked_fill(mask == 0, -1e9)\n"
                                   "        return torch.softmax(scores, dim=-1)\n"), "t.py", select=["AMP501"])
    assert d.fix is not None


@pytest.mark.parametrize("body", [
    # a debug closure reads the filled scores when it is called
    "        scores = scores.masked_fill(mask == 0, -1e9)\n"
    "        def stats():\n            return scores.min()\n"
    "        print(stats())\n"
    "        return torch.softmax(scores, dim=-1)\n",
    # a lambda built before the fill and called after it
    "        log = lambda: print(scores.mean())\n"
    "        scores = scores.masked_fill(mask == 0, -1e9)\n"
    "        log()\n"
    "        return torch.softmax(scores, dim=-1)\n",
    # the same with the in-place fill
    "        scores.masked_fill_(mask == 0, -1e9)\n"
    "        peek = lambda: scores.min()\n"
    "        print(peek())\n"
    "        return torch.softmax(scores, dim=-1)\n",
    # the softmax rebinding runs on one path only: the other returns the masked logits
    "        scores = scores.masked_fill(mask == 0, -1e9)\n"
    "        if normalize:\n            scores = F.softmax(scores, dim=-1)\n"
    "        return scores\n",
])
def test_no_finfo_fix_where_the_fill_is_read_at_another_time_or_on_another_path(body: str) -> None:
    (d,) = check_source(_attention(body), "t.py", select=["AMP501"])
    assert d.fix is None


def test_a_softmax_rebinding_after_the_branch_still_ends_the_reads() -> None:
    body = ("        if normalize:\n            scores = scores.masked_fill(mask == 0, -1e9)\n"
            "        scores = F.softmax(scores, dim=-1)\n"
            "        return scores\n")
    (d,) = check_source(_attention(body), "t.py", select=["AMP501"])
    assert d.fix is not None


def test_no_finfo_fix_for_a_module_level_fill_a_function_reads() -> None:
    source = ("import torch\n"
              "scores = (torch.randn(2, 3, 3) @ torch.randn(2, 3, 3)).half()\n"
              "mask = torch.ones(2, 3, 3)\n"
              "scores = scores.masked_fill(mask == 0, -1e9)\n"
              "def report():\n    return scores.min()\n"
              "probs = torch.softmax(scores, dim=-1)\n")
    (d,) = check_source(source, "t.py", select=["AMP501"])
    assert d.fix is None


_HOOKED = (
    "import torch\n"
    "model = torch.nn.Linear(4, 1)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "scaler = torch.amp.GradScaler('cuda')\n"
    "{hook}"
    "for x in loader:\n"
    "    with torch.autocast('cuda', dtype=torch.float16):\n"
    "        loss = model(x).pow(2).mean()\n"
    "    scaler.scale(loss).backward()\n"
    "    scaler.unscale_(opt)\n"
    "    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n"
    "    scaler.step(opt)\n"
    "    with torch.autocast('cuda', dtype=torch.float16):\n"
    "        loss2 = model(x).abs().mean()\n"
    "    scaler.scale(loss2).backward()\n"
    "    scaler.unscale_(opt)\n"
    "    scaler.step(opt)\n"
)


@pytest.mark.parametrize("hook", [
    "opt.register_step_post_hook(lambda o, a, k: scaler.update())\n",
    "def train():\n    def on_step(o, a, k):\n        scaler.update()\n    opt.register_step_post_hook(on_step)\ntrain()\n",
])
def test_a_scaler_updated_by_a_step_hook_is_updated_out_of_sight(hook: str) -> None:
    """Hostile pass 22: the second unscale_ was legal (the hook updated the scaler after the first
    step), and AMP108's fix deleted it; AMP102's 'no update' was as wrong."""
    found = check_source(_HOOKED.format(hook=hook), "t.py", select=["AMP102", "AMP108"])
    assert found == []


def test_without_the_hook_the_second_unscale_is_reported() -> None:
    found = check_source(_HOOKED.format(hook=""), "t.py", select=["AMP108"])
    assert [d.code for d in found] == ["AMP108"]


# --- hostile pass 24: globals, importers, an in-place fill inside the softmax, `out=` ----------


@pytest.mark.parametrize("body", [
    # the in-place fill written as the softmax's input, the filled tensor returned as well
    "        probs = torch.softmax(scores.masked_fill_(mask == 0, -1e9), dim=-1)\n"
    "        return probs, scores\n",
    "        probs = scores.masked_fill_(mask == 0, -1e9).softmax(-1)\n"
    "        return probs, scores\n",
    # the result of a matmul into a buffer others hold
    "        scores = torch.matmul(x, x.transpose(-2, -1), out=self.buf)\n"
    "        scores.masked_fill_(mask == 0, -1e9)\n"
    "        return torch.softmax(scores, dim=-1)\n",
])
def test_no_finfo_fix_where_an_in_place_fill_writes_a_tensor_read_elsewhere(body: str) -> None:
    (d,) = check_source(_attention(body), "t.py", select=["AMP501"])
    assert d.fix is None


def test_no_finfo_fix_for_a_global_declared_in_the_function() -> None:
    source = ("import torch\n"
              "scores = None\n"
              "def build(q, mask):\n"
              "    global scores\n"
              "    scores = (q @ q.transpose(-2, -1)).half()\n"
              "    scores = scores.masked_fill(mask == 0, -1e9)\n"
              "    return torch.softmax(scores, dim=-1)\n")
    (d,) = check_source(source, "t.py", select=["AMP501"])
    assert d.fix is None


def test_no_finfo_fix_for_a_module_level_fill_another_module_imports(a_project_of_its_own) -> None:
    source = ("import torch\n"
              "scores = (torch.randn(2, 3, 3) @ torch.randn(2, 3, 3)).half()\n"
              "mask = torch.ones(2, 3, 3)\n"
              "scores = scores.masked_fill(mask == 0, -1e9)\n"
              "probs = torch.softmax(scores, dim=-1)\n")
    (a_project_of_its_own / "masks.py").write_text(source)
    path = str(a_project_of_its_own / "masks.py")
    (d,) = check_source(source, path, select=["AMP501"])
    assert d.fix is not None  # a script nothing imports: read in order
    (a_project_of_its_own / "train.py").write_text("import masks\nprint(masks.scores * 2)\n")
    from amplint.project.index import reset_shared

    reset_shared()
    (d,) = check_source(source, path, select=["AMP501"])
    assert d.fix is None


# --- hostile pass 26: reads by name, by string, by frame ---------------------------------------


@pytest.mark.parametrize("reader", [
    "import runpy\nns = runpy.run_path('masks.py')\nprint(ns['scores'] * 2)\n",
    "import importlib\nprint(importlib.import_module('masks').scores * 2)\n",
    "ns = {}\nexec(open('masks.py').read(), ns)\nprint(ns['scores'] * 2)\n",
])
def test_no_finfo_fix_for_a_module_level_fill_another_file_runs_by_name(a_project_of_its_own, reader: str) -> None:
    source = ("import torch\n"
              "scores = (torch.randn(2, 3, 3) @ torch.randn(2, 3, 3)).half()\n"
              "scores = scores.masked_fill(torch.ones(2, 3, 3) == 0, -1e9)\n"
              "probs = torch.softmax(scores, dim=-1)\n")
    (a_project_of_its_own / "masks.py").write_text(source)
    (a_project_of_its_own / "report.py").write_text(reader)
    (d,) = check_source(source, str(a_project_of_its_own / "masks.py"), select=["AMP501"])
    assert d.fix is None


@pytest.mark.parametrize("read", ["        print(eval('scores.mean()'))\n", "        log(locals())\n"])
def test_no_finfo_fix_where_code_reads_names_it_does_not_spell(read: str) -> None:
    body = "        scores = scores.masked_fill(mask == 0, -1e9)\n" + read + "        return torch.softmax(scores, dim=-1)\n"
    (d,) = check_source(_attention(body), "t.py", select=["AMP501"])
    assert d.fix is None
