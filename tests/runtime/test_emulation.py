"""`--device cpu`: CUDA scripts written the usual ways train on the CPU and their findings confirm.

In-process tests install the emulation and call what a script would; end-to-end tests run the
bundled scripts (tests/runtime/scripts/) under `amplint verify --device cpu`.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from amplint.runtime import emulation  # noqa: E402

pytestmark = pytest.mark.runtime

PY = sys.executable
SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture
def emulated():
    handles = list(emulation.install())
    try:
        yield
    finally:
        while handles:
            handles.pop().remove()


def test_integer_and_cuda_devices_land_on_the_cpu(emulated):
    model = torch.nn.Linear(2, 2).to(0).cuda(1).to("cuda:1")
    assert model.weight.device.type == "cpu"
    for t in (torch.zeros(2, device=0), torch.randn(2).to(1), torch.ones(2).cuda(0, non_blocking=True),
              torch.empty(2, device=torch.device("cuda", 3)), torch.zeros(1).new_zeros(2, device="cuda")):
        assert t.device.type == "cpu"
    g = torch.Generator(device="cuda").manual_seed(0)
    assert isinstance(g, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
    assert torch.randn(2, generator=g).device.type == "cpu"


@pytest.mark.parametrize("location", ["cuda", "cuda:1", torch.device("cuda", 0), 0, {"cuda:1": "cuda:0"},
                                      lambda storage, loc: storage.cuda(0), None])
def test_checkpoints_load_onto_the_cpu_whatever_the_map_location(emulated, tmp_path, location):
    torch.save({"w": torch.ones(2)}, tmp_path / "c.pt")
    assert torch.load(tmp_path / "c.pt", map_location=location)["w"].device.type == "cpu"


def test_the_script_sees_a_cuda_machine_with_streams_events_and_memory(emulated, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert torch.cuda.is_available() and torch.cuda.device_count() == 2
    assert torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == "cuda"
    torch.cuda.set_device(1)
    assert torch.cuda.current_device() == 1 == torch.accelerator.current_device_index()
    props = torch.cuda.get_device_properties(0)
    assert (props.major, props.minor) == torch.cuda.get_device_capability() == (8, 0) and props.total_memory > 0
    free, total = torch.cuda.mem_get_info()
    assert 0 < free <= total and torch.cuda.max_memory_allocated() == 0 == torch.cuda.memory_allocated()
    assert torch.cuda.memory_stats()["allocated_bytes.all.peak"] == 0
    side, start, end = torch.cuda.Stream(), torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    with torch.cuda.stream(side):
        x = torch.ones(3).cuda(non_blocking=True)
    torch.cuda.current_stream().wait_stream(side)
    x.record_stream(torch.cuda.current_stream())
    end.record()
    torch.cuda.synchronize()
    assert start.elapsed_time(end) >= 0.0 and side.query()
    torch.cuda.nvtx.range_push("step")
    torch.cuda.nvtx.range_pop()
    torch.backends.cuda.matmul.allow_tf32 = True  # accepted; there is no TF32 here (LIMITS says so)


def test_a_pinned_dataloader_builds_without_a_warning(emulated, recwarn):
    data = torch.utils.data.TensorDataset(torch.randn(4, 2))
    batches = list(torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True))
    assert len(batches) == 2
    assert not [w for w in recwarn if "pin_memory" in str(w.message)]


def test_torch_itself_gets_the_real_answers(emulated):
    """Only the script is told "CUDA": torch's own checks (the optimizer's graph-capture health
    check, DataLoader's pinning, checkpoint's default device) must not take CUDA paths."""
    import torch.optim.optimizer as optim_mod

    assert optim_mod.torch.accelerator.current_accelerator is torch.accelerator.current_accelerator
    code = compile("torch.accelerator.current_accelerator(check_available=True)", optim_mod.__file__, "eval")
    assert eval(code, {"torch": torch}) is None  # asked from a file inside torch: the real answer
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 2)).sum().backward()
    opt.step()  # Adam's capture check asks torch.accelerator: it must not see an emulated stream


def test_autocast_questions_about_cuda_answer_for_the_emulated_region(emulated):
    with torch.autocast("cuda"):
        assert torch.is_autocast_enabled() and torch.is_autocast_enabled("cuda")
        assert torch.get_autocast_dtype("cuda") == torch.float16
        assert torch.nn.Linear(2, 2)(torch.randn(1, 2)).dtype == torch.float16
    assert not torch.is_autocast_enabled("cuda")


def test_torch_compile_runs_eagerly(emulated):
    model = torch.nn.Linear(2, 2)
    assert torch.compile(model) is model
    assert torch.compile(mode="max-autotune")(model) is model
    model.compile()


def test_everything_is_restored():
    before = (torch.cuda.is_available, torch.cuda.Stream, torch.load, torch.Generator, torch.compile,
              torch.accelerator.current_accelerator, torch.is_autocast_enabled, torch.nn.Module.__dict__["to"])
    handles = list(emulation.install())
    assert torch.cuda.is_available is not before[0]
    while handles:
        handles.pop().remove()
    after = (torch.cuda.is_available, torch.cuda.Stream, torch.load, torch.Generator, torch.compile,
             torch.accelerator.current_accelerator, torch.is_autocast_enabled, torch.nn.Module.__dict__["to"])
    assert after == before


# --- end to end --------------------------------------------------------------------------------
def test_a_cuda_trainer_using_the_cuda_api_trains_and_confirms(verify_run):
    code, report = verify_run("--device", "cpu", "--", PY, str(SCRIPTS / "cuda_features.py"))
    assert report["steps"] == 8 and report["exit_code"] == 0, report["ended"]
    (f,) = [f for f in report["findings"] if f["code"] == "AMP101"]
    assert (f["status"], f["reason"]) == ("confirmed", "observed")
    assert report["runtime_findings"] == [] and not report.get("probe_errors")
    assert any("torch.compile" in n and "eagerly" in n for n in report["notes"])
    assert code == 1


def test_torchrun_ddp_the_usual_way_trains_and_confirms_on_every_rank(verify_run, tmp_path, monkeypatch):
    """nccl, LOCAL_RANK as a device index, device_ids=[local_rank], a GPU-count check, and a
    resume with map_location="cuda:<rank>"."""
    monkeypatch.setenv("CKPT_DIR", str(tmp_path))
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "ddp_usual.py")]
    code, report = verify_run("--device", "cpu", "--", *cmd)
    assert report["exit_code"] == 0 and report["steps"] == 4, report["ended"]
    assert sorted(report["ranks"]) == ["rank0", "rank1"]
    (f,) = [f for f in report["findings"] if f["code"] == "AMP101"]
    assert f["status"] == "confirmed" and f["evidence"]["ranks"] == ["rank0", "rank1"]
    assert (tmp_path / "ckpt.pt").is_file()
    assert code == 1


def test_a_script_that_decides_amp_from_the_device_is_told_why(verify_run):
    code, report = verify_run("--device", "cpu", "--", PY, str(SCRIPTS / "amp_from_device.py"))
    (f,) = report["findings"]
    assert (f["status"], f["reason"]) == ("not-confirmed", "amp-switched-off")
    assert "device.type" in f["why"]
    assert any("device.type" in limit for limit in report["emulation_limits"])
    assert code == 3 and report["status"] == "not-tested"  # nothing of mixed precision ran: not a pass


def test_profile_under_emulation_records_cpu_only_with_clean_stderr_and_bounded_time(tmp_path):
    """--profile used to add the CUDA activity under --device cpu: ~15,000 "Failed to record CUDA
    event" stack traces and a 30x slower run.  Bound: 4x the same run without --profile (generous:
    most of either run is the interpreter and torch starting)."""
    def run(*extra):
        start = time.monotonic()
        proc = subprocess.run([PY, "-m", "amplint", "verify", "--no-progress", "--steps", "6", "--device", "cpu", *extra,
                               "--", PY, str(SCRIPTS / "amp_correct.py")], capture_output=True, text=True, timeout=300)
        return time.monotonic() - start, proc

    plain_s, plain = run()
    prof_s, prof = run("--profile", str(tmp_path / "prof"))
    assert plain.returncode == prof.returncode == 0, prof.stderr[-2000:]
    assert "CUDA" not in prof.stderr and "Traceback" not in prof.stderr, prof.stderr[-2000:]
    assert len(prof.stderr.splitlines()) < 10, prof.stderr[-2000:]  # Kineto's own start/stop lines only
    assert list((tmp_path / "prof").glob("*.pt.trace.json"))
    assert prof_s < 4 * plain_s, (prof_s, plain_s)
