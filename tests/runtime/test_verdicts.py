"""Verdicts and their reasons, read as a specification (no training run: correlate is pure).

Every status carries a machine-readable `reason`; NOT REACHED (the line never ran) is told from NO
PROBE (it ran, the rule has none) and from NOT CONFIRMED, whose reason says whether the line behaved
or could not have shown the problem (AMP switched off, the call raised).
"""

from __future__ import annotations

import io
import signal
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from amplint.runtime.cli import EXIT_NO_STEP, EXIT_TIMEOUT, Progress, run_verdict  # noqa: E402
from amplint.runtime.correlate import REASONS, NoqaLookup, RunFacts, correlate  # noqa: E402

pytestmark = pytest.mark.runtime

NEEDS = {"AMP101": frozenset({"scaler"}), "AMP201": frozenset({"autocast"}), "AMP301": frozenset()}


def diag(code: str, path: str, line: int, end: int | None = None, message: str = "m"):
    return SimpleNamespace(code=code, path=path, message=message, span=SimpleNamespace(line=line, end_line=end or line))


def obs(code: str, file: str, line: int, **evidence):
    return {"code": code, "file": file, "line": line, "end_line": line, "stack": [], "count": 1, "evidence": evidence}


def amp_on(**kw) -> RunFacts:
    base = dict(scalers_built=1, scalers_enabled=1, autocast_entered=3, autocast_enabled=3, steps=4, reach_mode="lines", ended="completed")
    base.update(kw)
    return RunFacts(**base)


def one(d, facts: RunFacts, reached=(), observations=()):
    (f,), runtime = correlate([d], list(observations), set(reached), NEEDS, facts)
    assert runtime == []
    assert f.reason in REASONS and f.why
    return f


def test_confirmed_at_the_line_and_in_a_call_made_from_it(tmp_path):
    script = str(tmp_path / "train.py")
    f = one(diag("AMP101", script, 10), amp_on(), observations=[obs("AMP101", script, 10, stage="READY")])
    assert (f.status, f.reason) == ("confirmed", "observed")
    inner = dict(obs("AMP101", str(tmp_path / "helpers.py"), 3), stack=[[script, 10, 10]])
    f = one(diag("AMP101", script, 10), amp_on(), observations=[inner])
    assert (f.status, f.reason) == ("confirmed", "observed-in-call")
    assert "helpers.py:3" in f.why


def test_a_line_that_never_ran_is_not_reached_whatever_the_probe(tmp_path):
    script = str(tmp_path / "train.py")
    for code in ("AMP101", "AMP205"):  # with a probe, and without one
        f = one(diag(code, script, 10), amp_on())
        assert (f.status, f.reason) == ("not-reached", "not-run")
        assert "in the 4 step(s) taken" in f.why


def test_a_line_that_ran_under_a_rule_without_probe_is_no_probe(tmp_path):
    script = str(tmp_path / "train.py")
    f = one(diag("AMP205", script, 10), amp_on(), reached=[(script, 10, 10)])
    assert (f.status, f.reason) == ("no-probe", "no-probe")
    assert "AMP205 has no runtime probe" in f.why


def test_a_line_that_ran_and_behaved(tmp_path):
    script = str(tmp_path / "train.py")
    f = one(diag("AMP101", script, 10), amp_on(), reached=[(script, 10, 10)])
    assert (f.status, f.reason) == ("not-confirmed", "behaved")


@pytest.mark.parametrize(
    "code, facts, reason",
    [
        ("AMP101", dict(scalers_built=0, scalers_enabled=0), "no-scaler"),
        ("AMP101", dict(scalers_enabled=0, scalers_disabled_by_script=1), "scaler-disabled"),
        ("AMP201", dict(autocast_entered=0, autocast_enabled=0), "autocast-not-entered"),
        ("AMP201", dict(autocast_enabled=0, autocast_disabled_at=[["/x/train.py", 7, 7]]), "autocast-disabled"),
        # the script switched both off (amp = device.type != "cpu"): say so, whichever the probe needs
        ("AMP101", dict(scalers_enabled=0, scalers_disabled_by_script=1, autocast_enabled=0), "amp-switched-off"),
        ("AMP201", dict(scalers_enabled=0, scalers_disabled_by_script=1, autocast_enabled=0), "amp-switched-off"),
        ("AMP101", dict(scalers_built=0, scalers_enabled=0, autocast_entered=0, autocast_enabled=0), "no-amp"),
    ],
)
def test_not_confirmed_says_why_amp_could_not_show_it(tmp_path, code, facts, reason):
    script = str(tmp_path / "train.py")
    f = one(diag(code, script, 10), amp_on(**facts), reached=[(script, 10, 10)])
    assert (f.status, f.reason) == ("not-confirmed", reason)


def test_amp_switched_off_under_emulation_names_what_emulation_cannot_fake(tmp_path):
    script = str(tmp_path / "train.py")
    f = one(diag("AMP101", script, 10), amp_on(scalers_enabled=0, scalers_disabled_by_script=1, autocast_enabled=0, emulated=True),
            reached=[(script, 10, 10)])
    assert f.reason == "amp-switched-off"
    assert "device.type" in f.why and "emulation cannot fake" in f.why


def test_a_probe_never_concludes_from_a_call_that_raised(tmp_path):
    script = str(tmp_path / "train.py")
    raised = {"api": "torch.nn.utils.clip_grad_norm_", "error": "RuntimeError: out of memory", "file": script, "line": 10, "end_line": 10, "stack": []}
    f = one(diag("AMP101", script, 10), amp_on(raised=[raised]), reached=[(script, 10, 10)])
    assert (f.status, f.reason) == ("not-confirmed", "call-raised")
    assert "out of memory" in f.why and f.evidence["raised"] == "RuntimeError: out of memory"


def test_a_runtime_only_finding_of_another_code_is_plain_words_with_what_to_do(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("a = 1\nb = 2\n")
    _, (r,) = correlate([], [obs("AMP102", str(script), 2, scaler_steps=3, updates=0)], set(), NEEDS, amp_on(), NoqaLookup())
    assert r.status == "found" and r.reason == "missed-by-check"
    assert "found at run time; `check` did not report it" in r.message
    assert "false negative" not in r.message + r.hint
    assert "report the miss" in r.hint and "# noqa: AMP102" in r.hint


def test_noqa_on_the_line_suppresses_a_runtime_finding(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("a = 1\nscaler = make()  # noqa: AMP902\n")
    observed = [obs("AMP902", str(script), 2, summary="GradScaler skipped 5 of 8 steps", min_scale=0.5)]
    _, (r,) = correlate([], observed, set(), NEEDS, amp_on(), NoqaLookup())
    assert (r.status, r.reason) == ("suppressed", "noqa")


def _outcome(**kw):
    base = dict(timed_out=False, interrupted_by=None, ended="completed")
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize(
    "outcome, report, status, code",
    [
        (_outcome(timed_out=True, ended="timed out after 5 s"), dict(exit_code=130, steps=1), "timed-out", EXIT_TIMEOUT),
        (_outcome(interrupted_by="SIGTERM"), dict(exit_code=143, steps=1), "interrupted", 128 + signal.SIGTERM),
        (_outcome(), dict(exit_code=2, steps=0), "command-failed", 2),
        (_outcome(), dict(exit_code=0, steps=0), "no-step", EXIT_NO_STEP),
        (_outcome(), dict(exit_code=0, steps=3, findings=[{"status": "confirmed"}], runtime_findings=[]), "findings", 1),
        (_outcome(), dict(exit_code=0, steps=3, findings=[], runtime_findings=[{"status": "suppressed"}]), "clean", 0),
    ],
)
def test_the_run_verdict_and_exit_code(outcome, report, status, code):
    report = {"findings": [], "runtime_findings": [], **report}
    got_status, reason, got_code = run_verdict(outcome, report)
    assert (got_status, got_code) == (status, code)
    assert reason


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream", [io.StringIO(), _Tty()], ids=["log", "terminal"])
def test_progress_is_always_a_whole_line_of_its_own(stream):
    bar = Progress(8, stream, every=0.0)
    for step in (0, 1, 1, 2, 5, 8):
        bar.update(step)
    bar.close()
    text = stream.getvalue()
    assert text.endswith("\n")
    lines = text.split("\n")[:-1]
    assert len(lines) == 5  # a repeated count draws nothing
    prefix = "\r\033[K" if isinstance(stream, _Tty) else ""
    assert all(line.startswith(prefix + "amplint verify [") for line in lines)
    assert lines[-1].endswith("8/8 steps")


def test_progress_is_throttled_but_its_last_count_is_always_drawn():
    stream = io.StringIO()
    bar = Progress(None, stream, every=3600.0)
    for step in range(10):
        bar.update(step)
    bar.close()
    assert stream.getvalue() == "amplint verify: 0 steps\namplint verify: 9 steps\n"


def test_probed_codes_are_the_probe_modules_codes_without_importing_them():
    from amplint.runtime import probes

    assert probes.probed_codes() == {cls.code for cls in probes.probe_classes(nan_guard=True)}
    assert set(probes.NEEDS) <= probes.probed_codes()


def test_verify_itself_never_imports_torch(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "nostep.py"
    script.write_text("print('no torch here')\n")
    code = ("import sys\nfrom amplint.runtime.cli import verify\n"
            f"rc = verify(['--no-progress', {str(script)!r}])\n"
            "print('torch' in sys.modules, rc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.strip().splitlines()[-1] == "False 3"  # ran, took no step (exit 3), torch never imported
