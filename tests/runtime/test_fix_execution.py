"""Every fix amplint offers runs as the code it replaced (issue 26, "Severity 1").

Each case is fixed as users fix it (`amplint check --fix`, and `--unsafe-fixes`), over the tree
checked whole and over each file checked alone as pre-commit passes it; the original and every
distinct fixed tree run on the CPU under a recorder of what AMP builds
(`amplint/runtime/fix_execution.py`): autocast regions and their effective dtype, GradScalers and
their arguments, custom_fwd/custom_bwd calls, module forwards, what the script prints and leaves
in its globals, its exit and exception.  A fix must change none of it (deprecation warnings aside).

Cases: every fixture (and fixture project) that gets a fix, and the generated variants (the
deprecated spellings in nested regions, branches, re-exports, notebooks, f-strings, one-line
statements).  Compile parity on other Pythons is tests/test_fix_parse_parity.py (torch-free).
One child imports torch and forks per run: the whole file takes about a minute of CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from amplint.runtime import fix_execution as fx  # noqa: E402

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = [c for c in fx.fixture_cases(ROOT / "fixtures") if fx.offers_fixes(c)]
VARIANTS = fx.variants()
CASES = FIXTURES + VARIANTS

_outcomes: dict[str, fx.Outcome] = {}


@pytest.fixture(scope="module")
def outcomes(request) -> dict[str, fx.Outcome]:
    """The outcome of every case this session selected, run in one batch (one torch import)."""
    wanted = [item.callspec.params["case"] for item in request.session.items
              if item.originalname == "test_a_fix_runs_as_the_code_did" and hasattr(item, "callspec")]
    missing = [c for c in wanted if c.id not in _outcomes]
    for outcome in fx.execute(missing):
        _outcomes[outcome.case.id] = outcome
    return _outcomes


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_fix_runs_as_the_code_did(case: fx.Case, outcomes) -> None:
    outcome = outcomes[case.id]
    if not outcome.trees:
        # A fixture is here because a fix is offered: that fix must change the tree.
        assert case not in FIXTURES, f"{case.id}: its fixes changed nothing"
        pytest.skip("amplint offers no fix here: nothing to compare")
    if outcome.differences:
        pytest.fail(outcome.report(), pytrace=False)


def test_every_kind_of_fixture_fix_is_exercised() -> None:
    """The fixtures bring safe and unsafe fixes of several rules, and a fixture project."""
    ids = {c.id for c in FIXTURES}
    assert {"AMP401/bad_imported_names", "AMP401/bad_custom_fwd_bwd", "AMP101/bad_clip_between_backward_and_step",
            "AMP201/bad_scaled_backward_in_autocast", "AMP102/bad_no_update_anywhere"} <= ids, sorted(ids)
    assert any(i.startswith("projects/") for i in ids)


def test_the_variants_cover_the_contexts_a_fix_can_break() -> None:
    contexts = {c.id.split("-")[1] for c in VARIANTS}
    assert {"nested_bf16", "nested_fp16", "forward_in_bf16_region", "branch_import", "reexport",
            "isinstance_across_modules", "fstring", "notebook_magic", "one_line", "custom_function",
            "nested_no_cache", "checked_annotation", "star_import_after", "finfo_name",
            "optional_scaler", "torch_rebound", "class_body_import", "notebook_importer",
            "scaler_escapes", "clip_shares_line", "optimizer_rebound", "unscale_in_try",
            "scaled_elsewhere", "input_dtype_unknown", "rebound_by_call", "error_caught_elsewhere",
            "inherited_method", "not_a_tensor", "hidden_alias", "flag_guarded", "exception_edge",
            "stand_in_scaler", "explicit_dtype", "arithmetic"} <= contexts
    assert any(len(c.files) > 1 for c in VARIANTS) and any(c.entries[0].endswith(".ipynb") for c in VARIANTS)


# --- the recorder sees what a wrong fix changes ------------------------------------------------


def _diff(before: str, after: str, files: dict[str, str] | None = None) -> str | None:
    base = dict(files or {})
    entries = ("train.py",)
    a, b = fx.run_traces([({**base, "train.py": before}, entries), ({**base, "train.py": after}, entries)])
    return fx.compare(a, b)


def test_the_recorder_sees_the_dtype_a_nested_region_gives() -> None:
    """Issue 26 item 1's shape, by hand: the legacy CPU autocast's own bf16 vs the enclosing fp16."""
    head = "import torch\nm = torch.nn.Linear(2, 2)\nwith torch.autocast('cpu', dtype=torch.float16):\n"
    diff = _diff(head + "    with torch.cpu.amp.autocast():\n        y = m(torch.ones(1, 2))\n",
                 head + "    with torch.autocast('cpu'):\n        y = m(torch.ones(1, 2))\n")
    assert diff is not None and "torch.bfloat16" in diff and "torch.float16" in diff, diff


def test_the_recorder_sees_a_scaler_argument_taken_for_the_device() -> None:
    diff = _diff("import torch\ns = torch.cuda.amp.GradScaler(2.0**10)\n", "import torch\ns = torch.amp.GradScaler(2.0**10)\n")
    assert diff is not None and '"device": 1024.0' in diff, diff


def test_the_recorder_sees_a_forward_leave_autocast() -> None:
    head = "import torch\nm = torch.nn.Linear(2, 2)\nx = torch.ones(1, 2)\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n    loss = m(x).sum()\n"
    diff = _diff(head + "    aux = m(x).sum()\n", head + "aux = m(x).sum()\n")
    assert diff is not None and '"cpu": null' in diff, diff


def test_deprecation_and_cuda_warnings_and_moved_lines_are_not_differences() -> None:
    before = "import torch\ns = torch.cuda.amp.GradScaler()\nwith torch.cuda.amp.autocast():\n    pass\nprint(s.is_enabled())\n"
    after = "import torch\n\ns = torch.amp.GradScaler('cuda')\nwith torch.autocast('cuda'):\n    pass\nprint(s.is_enabled())\n"
    assert _diff(before, after) is None


def test_a_subprocess_of_the_script_is_recorded_too() -> None:
    child = "import torch\ns = torch.amp.GradScaler('cpu', init_scale={scale})\n"
    script = "import subprocess, sys\nsubprocess.run([sys.executable, 'child.py'], check=True)\n"
    a, b = fx.run_traces([({"train.py": script, "child.py": child.format(scale=8.0)}, ("train.py",)),
                          ({"train.py": script, "child.py": child.format(scale=16.0)}, ("train.py",))])
    assert a["runs"]["train.py"]["subprocesses"], a
    assert "16.0" in (fx.compare(a, b) or "")


def test_a_notebook_runs_its_code_cells_with_time_magics_as_statements() -> None:
    nb = fx.notebook("import torch\n", "%time s = torch.amp.GradScaler('cpu', init_scale=4.0)\n", "%%time\nprint(s.get_scale())\n")
    (trace,) = fx.run_traces([({"nb.ipynb": nb}, ("nb.ipynb",))])
    run = trace["runs"]["nb.ipynb"]
    assert run["exit"] == 0 and run["stdout"] == "4.0\n", run
