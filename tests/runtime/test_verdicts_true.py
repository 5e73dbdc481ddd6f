"""Every verdict is true: a line that did not run is NOT REACHED whatever its code, evidence does
not contradict itself and is shown whole, runtime findings say why, the "report the miss" hint is
given only for real misses of `check`, and `--steps` says how it counts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from amplint.runtime import cli  # noqa: E402
from amplint.runtime.correlate import NoqaLookup, RunFacts, correlate  # noqa: E402

from .conftest import PY, SCRIPTS  # noqa: E402

pytestmark = pytest.mark.runtime

NEEDS = {"AMP101": frozenset({"scaler"}), "AMP204": frozenset({"scaler", "autocast"}), "AMP401": frozenset()}


def diag(code, path, line):
    return SimpleNamespace(code=code, path=path, message=f"`torch.cuda.amp.GradScaler` {code}", span=SimpleNamespace(line=line, end_line=line))


def obs(code, file, line, **evidence):
    return {"code": code, "file": file, "line": line, "end_line": line, "stack": [], "count": 1, "evidence": evidence}


def amp_on(**kw) -> RunFacts:
    base = dict(scalers_built=1, scalers_enabled=1, autocast_entered=3, autocast_enabled=3, steps=4, reach_mode="lines", ended="completed")
    base.update(kw)
    return RunFacts(**base)


@pytest.mark.parametrize("code", ["AMP401", "AMP101", "AMP205"])
def test_a_line_that_did_not_run_is_not_reached_though_other_lines_of_its_file_ran(tmp_path, code):
    script = str(tmp_path / "train.py")
    reached = {(script, 1, 1), (script, 12, 12)}  # the imports and the loop ran; line 6 (a function never called) did not
    (f,), _ = correlate([diag(code, script, 6)], [], reached, NEEDS, amp_on())
    assert (f.status, f.reason) == ("not-reached", "not-run")


UNCALLED = """\
import torch
from torch.cuda.amp import autocast


def never_called():
    scaler = torch.cuda.amp.GradScaler()
    return scaler


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for _ in range(2):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(torch.ones(2, 4)).float().sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
"""


def test_a_deprecated_call_in_a_function_never_called_is_not_reached(tmp_path, verify_run):
    script = tmp_path / "uncalled.py"
    script.write_text(UNCALLED)
    _code, report = verify_run("--", PY, str(script))
    verdicts = {f["line"]: (f["status"], f["reason"]) for f in report["findings"] if f["code"] == "AMP401"}
    assert verdicts[6] == ("not-reached", "not-run")
    assert verdicts[2][0] == "not-confirmed"  # the import itself ran


def test_overflow_and_underflow_are_measured_apart_and_add_up(verify_run):
    _code, report = verify_run("--", PY, str(SCRIPTS / "fp16_overflow_and_underflow.py"))
    (f,) = [f for f in report["findings"] if f["code"] == "AMP203"]
    ev = f["evidence"]
    assert f["status"] == "confirmed"
    # a float16 loss times 65536 is inf: that pass measured overflow, not underflow
    assert ev["overflow_share_at_scale"]["65536"] == 1.0
    assert ev["underflow_measured"] is True and ev["probe_scale"] < 65536
    assert ev["underflow_share"] > 0
    assert ev["underflow_share"] + ev["structural_zero_share"] == pytest.approx(ev["zero_share_as_is"], abs=2e-4)


def test_the_table_shows_every_figure_of_the_evidence():
    ev = {f"figure_{i}": 0.123456 * i for i in range(12)}
    finding = SimpleNamespace(code="AMP203", filename="train.py", line=3, status="confirmed", evidence=ev, why="")
    report = {"emulated": False, "device": "cpu", "steps": 2, "ended": "completed", "status": "findings",
              "reason": "1 confirmed", "verify_exit": 1, "exit_code": 0}
    text = cli.render_table(report, [finding], [])
    assert "..." not in text
    for key in ev:
        assert key in text


def test_runtime_findings_say_why_and_only_a_real_miss_asks_to_be_reported(tmp_path):
    literal = tmp_path / "literal.py"
    literal.write_text("import torch\nscaler = torch.amp.GradScaler('cpu')\nctx = torch.autocast('cpu', dtype=torch.bfloat16)\n")
    flagged = tmp_path / "flagged.py"
    flagged.write_text("import torch, sys\ndtype = torch.bfloat16 if sys.argv[1:] else torch.float16\n"
                       "scaler = torch.amp.GradScaler('cpu')\nctx = torch.autocast('cpu', dtype=dtype)\n")
    seen = [obs("AMP204", str(literal), 2, autocast_dtype="bfloat16")]
    facts = amp_on(scalers_enabled_at=[[str(literal), 2, 2]], autocast_enabled_at=[[str(literal), 3, 3]])
    _, (miss,) = correlate([], seen, set(), NEEDS, facts, NoqaLookup())
    assert miss.reason == "missed-by-check" and "report the miss" in miss.hint and miss.why
    seen = [obs("AMP204", str(flagged), 3, autocast_dtype="bfloat16")]
    facts = amp_on(scalers_enabled_at=[[str(flagged), 3, 3]], autocast_enabled_at=[[str(flagged), 4, 4]])
    _, (setting,) = correlate([], seen, set(), NEEDS, facts, NoqaLookup())
    assert setting.reason == "run-settings" and "report the miss" not in setting.hint
    assert "`dtype`" in setting.why and "flagged.py:4" in setting.why
    assert "# noqa: AMP204" in setting.hint
    _, (nine,) = correlate([], [obs("AMP902", str(literal), 2, summary="GradScaler skipped 5 of 8 steps", min_scale=0.5)],
                           set(), NEEDS, amp_on(), NoqaLookup())
    assert "skipped 5 of 8" in nine.why
    assert all(r.as_json()["why"] for r in (miss, setting, nine))


def test_the_runtime_finding_reasons_are_documented():
    import pathlib

    readme = (pathlib.Path(cli.__file__).parents[2] / "README.md").read_text()
    for reason in ("runtime-only", "missed-by-check", "run-settings", "noqa"):
        assert f"`{reason}`" in readme, reason


def test_steps_counts_per_optimizer_and_says_so(verify_run, capfd):
    help_text = cli.build_parser().format_help()
    assert "counted per optimizer" in " ".join(help_text.split())
    code, report = verify_run("--steps", "3", "--", PY, str(SCRIPTS / "two_optimizers.py"))
    out, _ = capfd.readouterr()
    assert report["steps"] == 3 and report["ended"] == "stopped after 3 steps"
    # the discriminator (2 steps per iteration) reached 3 first: iteration 1 ended at its 2nd step
    assert "iteration 1: discriminator step" in out and "iteration 1: generator step" not in out


def test_compare_says_what_was_allowed_at_each_step_and_what_set_it():
    from amplint.runtime import compare

    ref = [1.0 / (1 + 0.3 * k) for k in range(20)]
    run = [r * (1.15 if k > 3 else 1.0) for k, r in enumerate(ref)]
    v = compare.judge(ref, run, tolerance=0.1, noise=[0.0] * 5 + [0.08] * 15)
    allowed = compare.NOISE_FACTOR * 0.08
    assert not v["diverged"]  # 0.15 beyond the tolerance, inside NOISE_FACTOR x fp32's own noise
    assert v["allowed_at_max"] == pytest.approx(allowed)
    # the first 5 updates (the window) get the envelope at update 5: the early floor
    assert v["allowed_from"][:5] == ["noise-early"] * 5 and set(v["allowed_from"][5:]) == {"noise"}
    assert v["noise_deviation"] == [0.0] * 5 + [0.08] * 15
    assert compare.judge(ref, run, tolerance=0.1)["allowed_from"] == ["tolerance"] * 20
    assert f"<= {allowed:.3g} allowed after {v['max_at_step']} updates" in v["reason"]
    report = {"emulated": True, "device": "cpu", "tolerance": 0.1, "window": 5, "runs": {"fp32": {"losses": ref},
              "as_written": {"ended": "completed"}}, "comparisons": {"as_written": v},
              "noise": {"measured": True, "max": 0.08, "factor": compare.NOISE_FACTOR}}
    text = compare.render(report)
    assert f"{allowed:.3g} allowed there" in text and "within tolerance" not in text
    # every update's measured and allowed deviation is printed, with the term that set it
    assert "per update, measured/allowed" in text and f"{v['relative_deviation'][6]:.2g}/{allowed:.2g}n" in text
