"""Both runtime commands say whether mixed precision ran at all, and neither passes a run in which
it never did: a script that switches AMP off (`--amp` not given, no CUDA found, `enabled=False`)
trains in fp32, so nothing about mixed precision was tested (exit 3, as for a run without a step).
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from amplint.runtime import compare  # noqa: E402
from amplint.runtime.cli import EXIT_NOT_TESTED, run_verdict  # noqa: E402
from amplint.runtime.correlate import RunFacts  # noqa: E402

from .conftest import PY, SCRIPTS  # noqa: E402

pytestmark = pytest.mark.runtime

SWITCHED_OFF = str(SCRIPTS / "amp_switched_off.py")


def test_verify_says_mixed_precision_never_ran_and_exits_3(verify_run):
    code, report = verify_run("--", PY, SWITCHED_OFF)
    mp = report["mixed_precision"]
    assert mp["ran"] is False
    assert mp["autocast"]["entered"] == 6 and mp["autocast"]["enabled"] == 0 and mp["autocast"]["regions"] == {}
    assert mp["grad_scaler"]["built"] == 1 and mp["grad_scaler"]["enabled"] == 0
    assert mp["reduced_precision"] == {"parameters": {}, "casts": {}, "activations": {}}
    assert (code, report["status"], report["verify_exit"]) == (EXIT_NOT_TESTED, "not-tested", 3)
    assert report["reason"].startswith("mixed precision never ran")
    assert "none of the 1 static finding(s) could be tested" in report["reason"]
    (f,) = report["findings"]
    assert (f["code"], f["status"], f["reason"]) == ("AMP101", "not-confirmed", "amp-switched-off")


def test_verify_records_autocast_scaler_and_skips_when_mixed_precision_ran(verify_run):
    code, report = verify_run("--steps", "4", "--", PY, SWITCHED_OFF, "--amp")
    mp = report["mixed_precision"]
    assert mp["ran"] is True
    assert mp["autocast"]["regions"] == {"cpu float16": mp["autocast"]["enabled"]} and mp["autocast"]["enabled"] >= 4
    assert mp["grad_scaler"]["enabled"] == 1 and mp["grad_scaler"]["steps"] == 4
    assert 0 <= mp["grad_scaler"]["skipped"] <= 4
    assert f"{mp['grad_scaler']['skipped']} of 4 step(s) skipped" in mp["summary"]
    assert mp["reduced_precision"]["activations"] == {"float16": "Linear"}  # autocast's outputs
    assert code == 1 and report["status"] == "findings"  # and then the clip before unscale_ is confirmed


def test_a_half_model_without_autocast_or_scaler_is_mixed_precision(verify_run):
    _code, report = verify_run("--steps", "2", "--", PY, str(SCRIPTS / "amp_half_model.py"))
    mp = report["mixed_precision"]
    assert mp["ran"] is True and report["status"] != "not-tested"
    assert mp["autocast"]["entered"] == 0 and mp["grad_scaler"]["built"] == 0
    assert mp["reduced_precision"]["parameters"] == {"float16": 4} and mp["reduced_precision"]["casts"]["float16"] >= 1


@pytest.mark.parametrize(
    "facts, ran",
    [
        (RunFacts(), False),
        (RunFacts(autocast_entered=3), False),
        (RunFacts(scalers_built=1, scalers_disabled_by_torch=1), False),
        (RunFacts(autocast_entered=3, autocast_enabled=1, autocast_regions={"cuda bfloat16": 1}), True),
        (RunFacts(scalers_built=1, scalers_enabled=1), True),
        (RunFacts(reduced_parameters={"bfloat16": 2}), True),
        (RunFacts(reduced_activations={"float16": "Embedding"}), True),
    ],
)
def test_what_counts_as_mixed_precision_having_run(facts, ran):
    assert facts.mixed_precision_ran is ran
    assert facts.precision_json()["ran"] is ran
    assert facts.precision_summary().startswith("mixed precision never ran") is (not ran)


def test_a_confirmed_finding_still_counts_when_mixed_precision_never_ran():
    """A deprecated API torch warned about is real whether AMP was on or not."""
    off = {"ran": False, "summary": "mixed precision never ran: ..."}
    outcome = SimpleNamespace(timed_out=False, interrupted_by=None, ended="completed")
    base = dict(exit_code=0, steps=3, runtime_findings=[], mixed_precision=off)
    assert run_verdict(outcome, dict(base, findings=[{"status": "confirmed"}]))[0] == "findings"
    status, reason, code = run_verdict(outcome, dict(base, findings=[]))
    assert (status, code) == ("not-tested", 3) and reason.startswith("mixed precision never ran")


def test_compare_says_not_compared_and_exits_3_without_further_runs(tmp_path, capsys):
    report = tmp_path / "report.json"
    code = compare.main(["--steps", "3", "--report", str(report), "--", sys.executable, SWITCHED_OFF])
    data = json.loads(report.read_text())
    out = capsys.readouterr().out
    assert code == compare.EXIT_NOT_COMPARED == 3
    assert data["status"] == "not-compared" and data["diverged"] is False
    assert data["comparisons"] == {}
    assert data["not_compared"]["as_written"]["reason"] == "not compared: mixed precision never ran"
    assert list(data["runs"]) == ["fp32", "as_written"]  # the noise run would only cost time
    assert data["runs"]["as_written"]["mixed_precision"]["ran"] is False
    assert "as_written not compared: mixed precision never ran" in out
    assert "ok" not in out.split() and "max deviation" not in out


HOGWILD = str(SCRIPTS / "hogwild_fork.py")


@pytest.mark.skipif(sys.platform != "linux", reason="the fork start method")
def test_training_in_forked_trainers_is_mixed_precision_with_their_own_evidence(verify_run):
    """A forked child starts with empty evidence but writes its own: Hogwild trainers forked by
    torch.multiprocessing ran autocast and a GradScaler, so the run was tested and is clean."""
    code, report = verify_run("--steps", "3", "--", PY, HOGWILD)
    forked = [r for r in report["ranks"] if r != "main"]
    assert len(forked) == 2, report["ranks"]
    mp = report["mixed_precision"]
    assert mp["ran"] is True, mp["summary"]
    assert mp["grad_scaler"]["enabled"] == 2 and mp["grad_scaler"]["steps"] == 6
    assert mp["autocast"]["regions"] == {"cpu float16": mp["autocast"]["enabled"]} and mp["autocast"]["enabled"] >= 6
    assert mp["reduced_precision"]["activations"] == {"float16": "Linear"}  # the children's own
    assert (code, report["status"]) == (0, "clean"), report["reason"]


@pytest.mark.skipif(sys.platform != "linux", reason="the fork start method")
def test_a_clip_before_unscale_in_forked_trainers_is_confirmed_in_a_tested_run(verify_run):
    code, report = verify_run("--steps", "3", "--", PY, HOGWILD, "--clip-first")
    (f,) = [f for f in report["findings"] if f["code"] == "AMP101"]
    assert f["status"] == "confirmed" and len(f["evidence"]["ranks"]) == 2
    assert report["mixed_precision"]["ran"] is True
    assert code == 1


@pytest.mark.skipif(sys.platform != "linux", reason="the fork start method")
def test_compare_reads_the_losses_of_forked_trainers(tmp_path):
    report = tmp_path / "report.json"
    code = compare.main(["--steps", "4", "--no-noise-run", "--report", str(report), "--", PY, HOGWILD])
    data = json.loads(report.read_text())
    assert len(data["runs"]["fp32"]["losses"]) == 4 and len(data["runs"]["as_written"]["losses"]) == 4
    # compared (two trainers racing on one model need not agree with fp32; that is not the point)
    assert "diverged" in data["comparisons"]["as_written"]
    assert code in (0, 1)
