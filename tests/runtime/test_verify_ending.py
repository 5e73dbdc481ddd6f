"""How a verify run ends: a missing script, no optimizer step, calls that raise, a timeout, a
signal to verify itself.  Each ends with a report and an exit code that says so, and leaves no
process and no temporary directory behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.runtime

PY = sys.executable
SCRIPTS = Path(__file__).resolve().parent / "scripts"
ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead: it only waits for its parent to read its status
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@pytest.fixture(scope="module")
def hang_timeout() -> int:
    """A --timeout that a hanging script outlives only after its first step: 4 s, or four
    times what starting Python with torch takes now (on a loaded 2-core machine that alone
    took over 4 s, and the script was stopped before it trained)."""
    started = time.monotonic()
    subprocess.run([PY, "-c", "import torch; torch.nn.Linear(4, 1)(torch.randn(2, 4)).sum().backward()"], check=True)
    return max(4, int(4 * (time.monotonic() - started)) + 1)


def _wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


@pytest.mark.parametrize("form", ["shorthand", "command"])
def test_a_missing_script_is_a_usage_error_before_anything_runs(tmp_path, capsys, form):
    from amplint.runtime.cli import verify

    missing = str(tmp_path / "nope.py")
    args = [missing] if form == "shorthand" else ["--", PY, missing]
    assert verify(["--no-progress", *args]) == 2
    assert f"no such script: {missing}" in capsys.readouterr().err


def test_a_step_that_raises_is_not_step_without_update(verify_run):
    """An out-of-memory error inside scaler.step (no update follows) used to be reported as
    AMP102 "step without update" on every rank."""
    code, report = verify_run("--", PY, str(SCRIPTS / "raises_in_amp_calls.py"), "oom-in-step")
    assert "OutOfMemoryError" in report["ended"]
    assert report["runtime_findings"] == []
    assert (code, report["status"]) == (1, "command-failed")


def test_a_finding_whose_call_raised_is_not_confirmed_by_it(verify_run):
    code, report = verify_run("--", PY, str(SCRIPTS / "raises_in_amp_calls.py"), "clip-raises")
    (f,) = report["findings"]
    assert (f["code"], f["status"], f["reason"]) == ("AMP101", "not-confirmed", "call-raised")
    assert "non-finite" in f["evidence"]["raised"]


def test_amp203_measures_underflow_apart_from_structural_zeros(verify_run):
    code, report = verify_run("--", PY, str(SCRIPTS / "fp16_underflow.py"))
    (f,) = report["findings"]
    ev = f["evidence"]
    assert f["status"] == "confirmed" and ev["underflow_measured"] is True
    # the zero-initialised BatchNorm kills the branch Linear's gradients in fp32 too: 4160 of 5896
    assert ev["structural_zero_share"] == pytest.approx(4160 / 5896, abs=1e-3)
    assert ev["underflow_share"] == pytest.approx(1 - 4160 / 5896, abs=1e-3)  # the rest: flushed by fp16
    assert ev["zero_grad_share"] == 1.0  # what the old evidence showed: every gradient zero, causes mixed


def test_timeout_ends_a_hung_script_and_its_workers_with_a_report(tmp_path, verify_run, monkeypatch, hang_timeout):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where verify makes its amplint-verify-*
    pids = tmp_path / "pids"
    code, report = verify_run("--timeout", str(hang_timeout), "--", PY, str(SCRIPTS / "hangs.py"), str(pids))
    assert (code, report["status"]) == (124, "timed-out")
    assert report["ended"].startswith(f"timed out after {hang_timeout} s") and report["steps"] == 1
    assert _wait_gone([int(p) for p in pids.read_text().split()]) == []
    assert not list(tmp_path.glob("amplint-verify-*"))


def test_a_script_ignoring_sigint_is_escalated_on_timeout(tmp_path, verify_run, monkeypatch, hang_timeout):
    from amplint.runtime import supervise

    monkeypatch.setattr(supervise, "GRACE_S", 1.0)
    pids = tmp_path / "pids"
    code, report = verify_run("--timeout", str(hang_timeout), "--", PY, str(SCRIPTS / "hangs.py"), str(pids), "ignore-sigint")
    assert code == 124
    assert "terminated (SIGTERM)" in report["ended"]  # SIGINT ignored; SIGTERM wrote the evidence
    assert _wait_gone([int(p) for p in pids.read_text().split()]) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_verify_ends_the_command_and_still_writes_the_report(tmp_path, sig):
    pids, report = tmp_path / "pids", tmp_path / "report.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([PY, "-m", "amplint", "verify", "--no-progress", "--report", str(report), "--",
                             PY, str(SCRIPTS / "hangs.py"), str(pids)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text().endswith("\n")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(sig)  # to verify only, as `kill` or a CI runner does
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err[-2000:]
    data = json.loads(report.read_text())
    assert data["status"] == "interrupted" and data["verify_exit"] == 128 + sig
    assert f"{signal.Signals(sig).name} sent to verify" in data["ended"]
    assert _wait_gone([int(p) for p in pids.read_text().split()]) == []
    assert not list(tmp_path.glob("amplint-verify-*"))


def test_progress_lines_are_never_glued_to_the_scripts_output_on_a_terminal(tmp_path):
    """On a terminal the bar used to be redrawn in place with no newline, so the script's next
    line was glued to it (`...1/8 stepsiter 1: loss`)."""
    import pty

    script = tmp_path / "chatty.py"
    script.write_text(
        "import time, torch\n"
        "model = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(8):\n"
        "    loss = model(torch.randn(4, 2)).pow(2).mean()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
        "    print(f'iter {i}: loss {loss.item():.4f}')\n"
        "    time.sleep(0.3)\n"
    )
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([PY, "-m", "amplint", "verify", "--steps", "8", "--", PY, str(script)],
                            stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary, cwd=ROOT)
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 4096)
        except OSError:  # EIO: every writer has closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(primary)
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    bars = [line for line in text.split("\n") if "amplint verify [" in line]
    assert bars, text
    for line in bars:
        assert line.rstrip().endswith("steps"), repr(line)  # nothing after the bar on its line
    assert sum(line.startswith("iter ") for line in text.split("\n")) == 8, text


def test_an_error_re_raised_from_a_dataloader_worker_ends_on_one_line_naming_its_root():
    """torch re-raises a worker's error with the worker's whole traceback in the message: the
    summary keeps the first line and the error itself (hostile pass 21)."""
    from amplint.runtime.bootstrap import _one_line

    message = ("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
               '  File "torch/utils/data/_utils/worker.py", line 349, in _worker_loop\n'
               "    data = fetcher.fetch(index)  # type: ignore[possibly-undefined]\n"
               "ValueError: bad sample 20\n")
    assert _one_line(message) == "Caught ValueError in DataLoader worker process 0. ... ValueError: bad sample 20"
    assert _one_line("plain") == "plain" and _one_line("") == ""
