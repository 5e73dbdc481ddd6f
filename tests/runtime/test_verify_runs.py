"""verify end to end: transparency, failures, step budget, ranks, clean removal of every patch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

PY = sys.executable
SCRIPTS = Path(__file__).resolve().parent / "scripts"

pytestmark = pytest.mark.runtime


def test_losses_bit_identical_with_and_without_verify(tmp_path, verify_run):
    plain, probed = tmp_path / "plain.txt", tmp_path / "probed.txt"
    subprocess.run([PY, str(SCRIPTS / "deterministic.py"), str(plain)], check=True)
    code, report = verify_run("--nan-guard", "--", PY, str(SCRIPTS / "deterministic.py"), str(probed))
    assert code == 0, report
    assert report["steps"] == 8 and report["ended"] == "completed"
    assert plain.read_text() == probed.read_text()
    assert len(plain.read_text().split()) == 8


def test_step_budget_stops_cleanly_and_dataloader_workers_do_not_report(tmp_path, verify_run):
    code, report = verify_run("--steps", "3", "--", PY, str(SCRIPTS / "many_steps.py"))
    assert code == 3 and report["status"] == "not-tested", report  # an fp32 loop: nothing of AMP ran
    assert report["steps"] == 3
    assert report["ended"] == "stopped after 3 steps"
    assert report["ranks"] == ["main"]  # the two DataLoader workers wrote nothing


@pytest.mark.parametrize(
    "how, exit_code, verify_exit, ended",
    [
        ("raise", 1, 1, "raised ValueError: boom"),
        ("exit", 3, 3, "sys.exit(3)"),
        ("os_exit", 4, 4, "os._exit(4)"),
        ("sigint", 130, 130, "interrupted (SIGINT)"),
        # exit 0 but not one optimizer step: nothing was verified, so verify does not pass it
        ("nostep", 0, 3, "completed; no optimizer step was taken"),
    ],
)
def test_failures_still_write_the_report(how, exit_code, verify_exit, ended, verify_run):
    code, report = verify_run("--", PY, str(SCRIPTS / "ends_badly.py"), how)
    assert report["exit_code"] == exit_code
    assert code == verify_exit == report["verify_exit"]
    assert report["ended"] == ended
    assert report["steps"] == (0 if how == "nostep" else 2)
    assert report["status"] == ("no-step" if how == "nostep" else "command-failed")


def test_sigint_death_survives_a_string_exec_at_exit(tmp_path, verify_run, monkeypatch):
    """A string exec during verify's exit work (a dataclass made by a probe's finish, as on a CUDA
    build of torch) clears CPython's unhandled-KeyboardInterrupt flag; the script must still die by
    SIGINT (130), as it does without verify."""
    (tmp_path / "exec_at_exit.py").write_text(
        "import dataclasses\n"
        "class _Handle:\n"
        "    def remove(self):\n"
        "        dataclasses.make_dataclass('MadeAtExit', ['a'])\n"
        "def install(sink):\n"
        "    return _Handle()\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("AMPLINT_EXTENSIONS", "exec_at_exit:install")
    code, report = verify_run("--", PY, str(SCRIPTS / "ends_badly.py"), "sigint")
    assert (code, report["exit_code"], report["ended"]) == (130, 130, "interrupted (SIGINT)")
    assert not report.get("errors"), report.get("errors")


def test_cpu_emulation_runs_a_cuda_script(verify_run):
    code, report = verify_run("--device", "cpu", "--", PY, str(SCRIPTS / "ends_badly.py"), "cuda")
    assert code == 0, report
    assert report["emulated"] is True and report["device"] == "cpu"
    assert report["steps"] == 2 and "CPU" in report["notes"][0]


def test_update_every_microbatch_is_confirmed_before_torch_raises(verify_run):
    """AMP107's real shape (accum > 1) crashes inside GradScaler.update: the finding is confirmed
    first, and verify passes on the script's own exit code."""
    code, report = verify_run("--", PY, str(SCRIPTS / "update_every_microbatch.py"))
    assert code == report["exit_code"] != 0
    assert "No inf checks were recorded" in report["ended"]
    (f,) = [f for f in report["findings"] if f["code"] == "AMP107"]
    assert f["status"] == "confirmed"
    assert f["evidence"]["updates"] > f["evidence"]["scaler_steps"]


@pytest.mark.parametrize("clean", ["sys.exit(0)", "sys.exit(None)", "os._exit(0)"])
def test_children_that_exit_cleanly_are_no_failure(tmp_path, clean):
    """multiprocessing children end with `sys.exit(0)`: the run completed, and no child 'failed first'."""
    from amplint.runtime.launch import collect

    for rank, at in ((0, 10.0), (1, 11.0)):
        _evidence(tmp_path, 2000 + rank, rank, clean, at)
    outcome = collect(tmp_path, ["python", "train.py"], 0, None)
    assert outcome.ended == "completed", outcome.ended
    from amplint.runtime.launch import rank_ends

    procs = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("evidence-*.json"))]
    assert not any(e["first_failure"] for e in rank_ends(procs))


@pytest.mark.skipif(shutil.which("torchrun") is None and not hasattr(torch, "distributed"), reason="no torchrun")
def test_torchrun_two_ranks_are_merged(verify_run):
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "ddp_clip.py")]
    code, report = verify_run("--", *cmd)
    assert report["exit_code"] == 0, report
    assert sorted(report["ranks"]) == ["rank0", "rank1"]
    (f,) = [f for f in report["findings"] if f["code"] == "AMP101"]
    assert f["status"] == "confirmed"
    assert f["evidence"]["ranks"] == ["rank0", "rank1"]
    assert f["evidence"]["stage"] == "READY" and f["evidence"]["max_norm"] == 1.0
    assert code == 1


def _snapshot():
    import warnings

    import torch.nn.utils.clip_grad as cg
    from torch.optim import optimizer as optmod

    from amplint.runtime import torch_state

    S = torch_state.BaseGradScaler
    return {
        "scaler": {n: S.__dict__[n] for n in ("__init__", "scale", "unscale_", "step", "update")},
        "opt_init": torch.optim.Optimizer.__dict__["__init__"],
        "pre_hooks": len(optmod._global_optimizer_pre_hooks),
        "post_hooks": len(optmod._global_optimizer_post_hooks),
        "fwd_hooks": len(torch.nn.modules.module._global_forward_hooks),
        "clip": (torch.nn.utils.clip_grad_norm_, cg.clip_grad_norm_, torch.nn.utils.clip_grad_value_),
        "backward": (torch.Tensor.__dict__["backward"], torch.autograd.backward, torch.autograd.grad),
        "autocast": (torch.amp.autocast_mode.autocast.__dict__["__enter__"], torch.amp.autocast_mode.autocast.__dict__["__init__"]),
        "module": tuple(torch.nn.Module.__dict__[n] for n in ("half", "bfloat16", "to", "cuda")),
        "save": (torch.save, torch.set_default_dtype, warnings.showwarning),
        "cuda": (torch.cuda.synchronize, torch.cuda.set_device, torch.cuda.current_device, torch.cuda.is_available),
        "sys": (sys.excepthook, sys.exit, os._exit, threading.excepthook),
        "modes": torch._C._len_torch_function_stack(),
        "emulation": (torch.randn, torch.zeros, torch.Tensor.__dict__.get("to"), torch.Tensor.__dict__.get("cuda"), torch.Tensor.__dict__.get("new_zeros")),
    }


def test_no_patch_or_hook_remains(tmp_path, monkeypatch):
    from amplint.runtime import bootstrap

    before = _snapshot()
    monkeypatch.setenv("AMPLINT_OUT", str(tmp_path))
    monkeypatch.setenv("AMPLINT_DEVICE", "cpu")
    monkeypatch.setenv("AMPLINT_NAN_GUARD", "1")
    monkeypatch.delenv("AMPLINT_STEPS", raising=False)
    session = bootstrap.Session()
    session.start()
    try:
        during = _snapshot()
        changed = [k for k in before if before[k] != during[k]]
        assert set(changed) >= {"scaler", "opt_init", "pre_hooks", "clip", "backward", "autocast", "module", "save", "sys", "emulation", "fwd_hooks"}
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(3, 2)).sum().backward()
        opt.step()
    finally:
        session.finish()
    assert _snapshot() == before
    assert not session.sink.errors


@pytest.mark.parametrize(
    "how, source, says",
    [
        ("exit", "command", "(exit 3: the command's own exit status, passed through)"),
        ("nostep", "verify", "(exit 3: verify's verdict; the command itself exited 0)"),
        ("raise", "command", "(exit 1: the command's own exit status, passed through)"),
    ],
)
def test_a_scripts_own_exit_status_is_told_apart_from_verifys_verdict(how, source, says, verify_run, capsys):
    """sys.exit(3) in the script and "no optimizer step" both exit 3 (and a script's exit 1 looks
    like "findings"): the report's exit_source and the summary line say whose number it is."""
    code, report = verify_run("--", PY, str(SCRIPTS / "ends_badly.py"), how)
    assert report["exit_source"] == source
    assert capsys.readouterr().out.splitlines()[-1].endswith(says)


THREADED_LOOP = """\
import threading
import torch

def train():
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()

t = threading.Thread(target=train, name="trainer")
t.start()
t.join()
print("main thread went on")
"""


def test_the_step_budget_ends_a_training_thread_without_noise(tmp_path, verify_run, capfd):
    script = tmp_path / "threaded.py"
    script.write_text(THREADED_LOOP)
    code, report = verify_run("--steps", "2", "--", PY, str(script))
    out, err = capfd.readouterr()
    assert code == 3 and report["status"] == "not-tested", report  # an fp32 loop: nothing of AMP ran
    assert (report["steps"], report["ended"]) == (2, "stopped after 2 steps")
    assert "main thread went on" in out
    assert "Exception in thread" not in err and "_EnoughSteps" not in err, err


def _evidence(out: Path, pid: int, rank: int | None, ended: str | None, at: float | None, steps: int = 1) -> None:
    """An evidence file as a rank's bootstrap writes it (only the fields the merge reads)."""
    data = {"pid": pid, "rank": rank, "label": "main" if rank is None else f"rank{rank}", "steps": steps,
            "observations": [], "reached": [], "extra": {}, "errors": []}
    if ended is not None:
        data.update(ended=ended, ended_at=at, finished=(at or 0) + 0.5)
    (out / f"evidence-{pid}.json").write_text(json.dumps(data))


GLOO = "raised RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:4242"


@pytest.mark.parametrize(
    "ends, first, then",
    [
        # rank 1 raises; rank 0, waiting in an all-reduce, gets gloo's error after it
        ({0: (GLOO, 102.0), 1: ("raised RuntimeError: rank 1 dies", 100.0)}, "rank1 raised RuntimeError: rank 1 dies",
         ["rank0: " + GLOO]),
        # rank 2 exits; torchrun then ends the others; rank 3 was killed before it wrote its end
        ({0: ("terminated (SIGTERM)", 51.0), 1: ("completed", 49.0), 2: ("sys.exit(7)", 50.0), 3: (None, None)},
         "rank2 sys.exit(7)", ["rank0: terminated (SIGTERM)", "rank3: killed before it could write its evidence"]),
        # one rank failed alone: nothing follows it
        ({0: ("completed", 10.0), 1: ("raised ValueError: bad batch", 9.0)}, "rank1 raised ValueError: bad batch", []),
    ],
)
def test_the_rank_that_failed_first_is_named_with_its_error(tmp_path, ends, first, then):
    from amplint.runtime.cli import build_report, render_table
    from amplint.runtime.launch import collect

    for rank, (ended, at) in ends.items():
        _evidence(tmp_path, 1000 + rank, rank, ended, at)
    outcome = collect(tmp_path, ["torchrun", "train.py"], 1, None)
    expected = f"{first} (the first to fail" + (f"; then {'; '.join(then)})" if then else ")")
    assert outcome.ended == expected
    report = build_report(outcome, [], [])
    rows = {e["rank"]: e for e in report["rank_ends"]}
    assert set(rows) == {f"rank{r}" for r in ends}
    assert [r for r, e in rows.items() if e["first_failure"]] == [first.split()[0]]
    for rank, (ended, _at) in ends.items():
        assert rows[f"rank{rank}"]["ended"] == (ended or "killed before it could write its evidence")
    report.update(status="command-failed", reason="x", verify_exit=1, exit_source="command")
    table = render_table(report, [], [])
    assert f"  {first.split()[0]}: 1 step(s), {first.split(' ', 1)[1]}  <- failed first" in table


@pytest.mark.skipif(shutil.which("torchrun") is None and not hasattr(torch, "distributed"), reason="no torchrun")
def test_torchrun_names_the_rank_that_died_not_the_rank_its_death_broke(verify_run):
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "rank_dies.py")]
    code, report = verify_run("--", *cmd)
    assert code == report["exit_code"] == 1 and report["exit_source"] == "command"
    assert report["ended"].startswith("rank1 raised RuntimeError: rank 1 dies (the first to fail"), report["ended"]
    rows = {e["rank"]: e for e in report["rank_ends"]}
    assert rows["rank1"]["first_failure"] and rows["rank1"]["ended"] == "raised RuntimeError: rank 1 dies"
    assert not rows["rank0"]["first_failure"] and rows["rank0"]["ended"] != "completed"


# --- AMP904: what advanced on a step GradScaler skipped ----------------------------------------


def test_a_scheduler_and_an_ema_that_advance_on_skipped_steps_are_reported(verify_run):
    code, report = verify_run("--steps", "12", "--", PY, str(SCRIPTS / "scheduler_steps_after_skip.py"))
    found = {(f["code"], f["evidence"]["advanced"]): f for f in report["runtime_findings"]}
    assert set(found) == {("AMP904", "lr_scheduler"), ("AMP904", "weight_average")}, report["runtime_findings"]
    lr = found[("AMP904", "lr_scheduler")]
    assert lr["evidence"]["advanced_on_skipped_steps"] == 2 and lr["evidence"]["class"] == "StepLR"
    lines = (SCRIPTS / "scheduler_steps_after_skip.py").read_text().splitlines()
    assert lines[lr["line"] - 1].strip() == "scheduler.step()"
    assert code == 1


@pytest.mark.parametrize("flag", ["--guarded", "--calibrating"])
def test_no_advance_on_a_skip_or_only_while_calibrating_is_no_finding(verify_run, flag):
    """Stepping the scheduler only when the scale did not drop is the fix; skips while the scale
    comes down from init_scale are expected."""
    code, report = verify_run("--steps", "12", "--", PY, str(SCRIPTS / "scheduler_steps_after_skip.py"), flag)
    assert report["runtime_findings"] == [] and not report.get("probe_errors"), report["runtime_findings"]
    assert code == 0


# --- AMP905: float16 headroom of the activations ---------------------------------------------


def test_activations_close_to_the_float16_limit_are_reported_with_the_module(verify_run):
    code, report = verify_run("--steps", "5", "--", PY, str(SCRIPTS / "large_activations.py"))
    found = [f for f in report["runtime_findings"] if f["code"] == "AMP905"]
    assert len(found) == 1, report["runtime_findings"]
    evidence = found[0]["evidence"]
    worst = evidence["modules"][0]
    assert worst["module"] == "Sequential.0" and worst["module_type"] == "Linear"
    assert 1 < worst["headroom"] < 10 and evidence["run_dtype"] == "float16" and evidence["steps_measured"] == 3
    assert worst["max_gradient"] is not None and worst["max_gradient"] > 0  # divided by the loss scale
    lines = (SCRIPTS / "large_activations.py").read_text().splitlines()
    assert lines[found[0]["line"] - 1].strip() == "out = model(x)"
    assert code == 1


@pytest.mark.parametrize("flag", ["--small", "--bf16"])
def test_headroom_or_a_bfloat16_run_is_no_finding(verify_run, flag):
    """A model with activations far below 65,504, or a bfloat16 run (float32's range)."""
    code, report = verify_run("--steps", "5", "--", PY, str(SCRIPTS / "large_activations.py"), flag)
    assert [f for f in report["runtime_findings"] if f["code"] == "AMP905"] == [], report["runtime_findings"]
    assert not report.get("probe_errors")


# --- AMP901: where the first NaN/Inf of a step comes from, forward or backward, and why ----------


@pytest.mark.parametrize(
    "mode, where, module, dtype, node, cause",
    [
        ("forward-overflow", "forward", "Net.head", "float16", None, "overflow: a value beyond float16's 65,504"),
        ("forward-nan", "forward", "Net", "float32", None, "a NaN from finite inputs"),
        # the sqrt sits in Net's own forward between its two children: Net, not the head it feeds
        ("backward-pole", "backward", "Net", "float32", "SqrtBackward0", "its derivative has a pole"),
    ],
)
def test_nan_guard_names_the_origin_and_its_cause(verify_run, mode, where, module, dtype, node, cause):
    code, report = verify_run("--nan-guard", "--", PY, str(SCRIPTS / "nonfinite_origins.py"), mode)
    found = [f for f in report["runtime_findings"] if f["code"] == "AMP901"]
    assert len(found) == 1, report["runtime_findings"]
    evidence = found[0]["evidence"]
    assert (evidence["pass"], evidence["module"], evidence["dtype"], evidence.get("node")) == (where, module, dtype, node)
    assert evidence["cause"].startswith(cause) or cause in evidence["cause"], evidence["cause"]
    assert not report.get("probe_errors")
    assert code == 1


def test_nan_guard_is_silent_on_a_finite_run(verify_run):
    _code, report = verify_run("--nan-guard", "--", PY, str(SCRIPTS / "nonfinite_origins.py"), "clean")
    assert [f for f in report["runtime_findings"] if f["code"] == "AMP901"] == []
    assert not report.get("probe_errors")


TWO_SCALERS = str(SCRIPTS / "two_scalers.py")


def test_a_scaler_per_model_is_judged_by_the_gradients_it_scaled(verify_run):
    """Each clip sees the gradients its own scaler unscaled: the other scaler's READY stage for
    an optimizer it never touched is no clip before unscale_ (hostile pass 23)."""
    code, report = verify_run("--steps", "4", "--", PY, TWO_SCALERS)
    assert [f for f in report["runtime_findings"] if f["code"] == "AMP101"] == []
    assert (code, report["status"]) == (0, "clean"), report["reason"]


def test_with_two_scalers_the_clip_before_its_own_unscale_is_still_found(verify_run):
    code, report = verify_run("--steps", "4", "--", PY, TWO_SCALERS, "--forget-first-unscale")
    lines = [f["line"] for f in report["findings"] + report["runtime_findings"] if f["code"] == "AMP101"]
    assert lines == [21], lines  # m1's clip; m2's was unscaled first
    assert code == 1


def test_a_rule_the_configuration_turns_off_is_suppressed_not_a_miss_of_check(tmp_path):
    """`per-file-ignores` (or `ignore`) silences AMP101 where `check` runs: what the probe sees
    there is the user's choice, as a `# noqa` is, not a miss to report (hostile pass 23)."""
    from .conftest import run_verify

    script = tmp_path / "train.py"
    script.write_text((SCRIPTS / "two_scalers.py").read_text())
    for table in ('[tool.amplint]\nper-file-ignores = { "train.py" = ["AMP101"] }\n',
                  '[tool.amplint]\nignore = ["AMP1"]\n'):
        (tmp_path / "pyproject.toml").write_text(table)
        code, report = run_verify(["--steps", "3", "--", PY, str(script), "--forget-first-unscale"], tmp_path)
        (f,) = [f for f in report["runtime_findings"] if f["code"] == "AMP101"]
        assert (f["status"], f["reason"]) == ("suppressed", "config"), f
        assert code == 0
    # A preview rule that was not turned off stays a finding without --preview.
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n")
    code, report = run_verify(["--steps", "3", "--", PY, str(script), "--forget-first-unscale"], tmp_path)
    assert code == 1


def test_each_file_is_judged_by_its_own_configuration_as_check_does(tmp_path):
    """The root ignores AMP101, the package's own [tool.amplint] does not: `check` reports the
    clip in the package, so verify confirms it there (hostile pass 25: it read the script's
    configuration for every file, SUPPRESSED and exit 0)."""
    from .conftest import run_verify

    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP101"]\n')
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text("[tool.amplint]\npreview = true\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text(
        "import torch\n\n\n"
        "def train_step(model, opt, scaler, x):\n"
        "    with torch.autocast(x.device.type, dtype=torch.float16):\n"
        "        loss = model(x).float().pow(2).mean()\n"
        "    scaler.scale(loss).backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "    scaler.step(opt)\n"
        "    scaler.update()\n"
        "    opt.zero_grad()\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nfrom pkg.engine import train_step\n"
        "torch.manual_seed(0)\nm = torch.nn.Linear(8, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.01)\n"
        "scaler = torch.amp.GradScaler('cpu')\nfor _ in range(4):\n    train_step(m, opt, scaler, torch.randn(4, 8) * 100)\n")
    code, report = run_verify(["--steps", "3", "--", PY, str(script)], tmp_path)
    (f,) = [f for f in report["findings"] if f["code"] == "AMP101"]
    assert f["status"] == "confirmed" and f["line"] == 8
    assert code == 1


@pytest.mark.parametrize("reentrant", ["1", "0"])
def test_with_two_scalers_a_clip_before_unscale_behind_a_checkpoint_is_confirmed(verify_run, reentrant):
    """A reentrant checkpoint hides which parameters a scaled loss reached: unknown is no
    reason to look away (hostile pass 25: NOT CONFIRMED, clean, exit 0)."""
    code, report = verify_run("--steps", "4", "--", PY, str(SCRIPTS / "two_scalers_reentrant_checkpoint.py"), reentrant)
    (f,) = [f for f in report["findings"] if f["code"] == "AMP101"]
    assert f["status"] == "confirmed" and f["line"] == 18
    assert code == 1


def test_a_gan_with_a_scaler_per_network_that_unscales_before_each_clip_is_clean(verify_run):
    code, report = verify_run("--steps", "4", "--", PY, str(SCRIPTS / "gan_two_scalers.py"))
    assert [f for f in report["runtime_findings"] if f["code"] == "AMP101"] == []
    assert (code, report["status"]) == (0, "clean"), report["reason"]


@pytest.mark.parametrize("script", ["two_scalers_one_clip_for_both.py", "two_scalers_detached_stage.py"])
def test_with_two_scalers_scaled_gradients_reached_another_way_are_still_a_clip_before_unscale(verify_run, script):
    """Hostile pass 26: one clip over both models after only one unscale_, and a scaled gradient
    handed on by `feat.backward(feat_d.grad)`, were judged clean."""
    code, report = verify_run("--steps", "4", "--", PY, str(SCRIPTS / script))
    found = [f for f in report["findings"] + report["runtime_findings"]
             if f["code"] == "AMP101" and f["status"] in ("confirmed", "found")]
    assert found, report["findings"] + report["runtime_findings"]
    assert code == 1
