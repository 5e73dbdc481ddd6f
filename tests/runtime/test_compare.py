"""amplint compare: fp32 / bf16 run variants, loss capture, the divergence verdict, the PNG and the CLI."""

from __future__ import annotations

import json
import math
import sys

import pytest

torch = pytest.importorskip("torch")

from amplint.runtime import compare, fp32_mode  # noqa: E402
from amplint.runtime.loss_capture import LossCapture  # noqa: E402

from ._inprocess import SCRIPTS, run_script  # noqa: E402

STEPS = 30


# --- the verdict (pure) ------------------------------------------------------------------------
def test_identical_curves_do_not_diverge():
    v = compare.judge([1.0, 0.8, 0.6, 0.5], [1.0, 0.8, 0.6, 0.5], tolerance=0.1)
    assert not v["diverged"] and v["max_relative_deviation"] == 0.0 and v["identical"]


def test_persistent_gap_diverges_at_the_first_step_beyond_tolerance():
    ref = [1.0] * 10
    run = [1.0] * 4 + [1.4] * 6
    v = compare.judge(ref, run, tolerance=0.1, window=1)
    assert v["diverged"] and v["first_step_beyond_tolerance"] == 4
    assert v["max_relative_deviation"] == pytest.approx(0.4)
    # on 5-step means: 0.08 at step 4 (one step of the gap), 0.16 at step 5
    assert compare.judge(ref, run, tolerance=0.1, window=5)["first_step_beyond_tolerance"] == 5


def test_a_single_noisy_step_is_smoothed_but_not_with_window_1():
    ref = [1.0] * 10
    run = [1.0] * 5 + [1.3] + [1.0] * 4  # one step 30% off, e.g. the step after a GradScaler skip
    assert not compare.judge(ref, run, tolerance=0.1, window=5)["diverged"]
    assert compare.judge(ref, run, tolerance=0.1, window=1)["first_step_beyond_tolerance"] == 5


def test_nan_in_the_run_or_a_crash_diverges_nan_in_the_reference_is_not_judged():
    v = compare.judge([1.0, 0.9, 0.8], [1.0, math.nan, 0.8], tolerance=0.1)
    assert v["first_step_beyond_tolerance"] == 1 and "nan" in v["reason"]
    v = compare.judge([1.0, 0.9, 0.8], [1.0], tolerance=0.1)
    assert v["first_step_beyond_tolerance"] == 1 and "stopped after 1" in v["reason"]
    v = compare.judge([1.0, math.nan, 0.8], [1.0, 5.0, 0.8], tolerance=0.1, window=1)
    assert not v["diverged"] and math.isnan(v["relative_deviation"][1])


def test_losses_near_zero_are_measured_against_a_floor():
    # 1e-6 vs 2e-6 is 100% relative, but far below 1e-3 of the curve's scale
    v = compare.judge([1.0, 0.5, 1e-6], [1.0, 0.5, 2e-6], tolerance=0.1, window=1)
    assert not v["diverged"]


def test_align_by_updates_drops_the_points_a_skipped_step_did_not_advance():
    # iterations 0 and 1 skipped (calibration), 4 skipped later: losses after 0, 1, 2, 3 updates
    run = [9.0, 9.1, 9.2, 5.0, 4.0, 4.1, 3.0]
    assert compare.align_by_updates(run, [0, 1, 4]) == [9.0, 5.0, 4.0, 3.0]
    assert compare.align_by_updates(run, []) == run
    assert compare.skip_marks([0, 1, 4]) == [0, 0, 2]
    s = compare.skip_summary([0, 1, 4], len(run))
    assert (s["calibration_skips"], s["later_skips"], s["updates_lost"]) == (2, [4], 3)
    assert s["lag"] == "GradScaler skipped steps 0-1 while calibrating: 2 updates lost; skipped 1 later step(s) [4]"


def test_a_calibration_lag_on_a_fast_falling_loss_is_a_lag_not_a_divergence():
    ref = [100.0 * 0.7**k for k in range(20)]
    run = [ref[0]] * 6 + ref[:14]  # a correct run 6 updates behind: 6 skipped calibration steps
    skipped = list(range(6))
    assert compare.judge(ref, run, tolerance=0.1)["diverged"]  # unaligned: the old false alarm
    v = compare.judge(ref, run, tolerance=0.1, skipped=skipped)
    assert not v["diverged"] and v["max_relative_deviation"] == 0.0
    assert v["calibration_skips"] == 6 and "0-5 while calibrating: 6 updates lost" in v["lag"]


def test_skips_that_are_not_calibration_still_diverge():
    ref = [1.0] * 12
    v = compare.judge(ref, [1.0] * 12, tolerance=0.1, skipped=list(range(12)))
    assert v["diverged"] and "skipped every step" in v["reason"]
    v = compare.judge(ref, [1.0] * 12, tolerance=0.1, skipped=[3, 5, 6, 8, 9, 10])
    assert v["diverged"] and "skipped 6 of 12 steps after calibrating" in v["reason"]


def test_the_allowed_deviation_follows_fp32s_own_noise():
    ref = [1.0] * 10
    run = [1.0] + [1.25] * 9
    noisy_fp32 = [1.0] + [1.2, 0.8] * 4 + [1.2]
    envelope = compare.noise_envelope(ref, noisy_fp32, window=1)
    assert envelope == sorted(envelope) and envelope[-1] == pytest.approx(0.2)
    assert compare.judge(ref, run, tolerance=0.1, window=1)["diverged"]
    v = compare.judge(ref, run, tolerance=0.1, window=1, noise=envelope)
    assert not v["diverged"] and v["allowed_deviation"][-1] == pytest.approx(compare.NOISE_FACTOR * 0.2)


def test_batch_noise_reads_the_step_to_step_noise_not_the_trend():
    assert compare.batch_noise([100.0 * 0.9**k for k in range(30)]) < 0.01  # smooth: no noise
    noisy = [1.0 + (0.2 if k % 2 else -0.2) for k in range(30)]
    assert compare.batch_noise(noisy) == pytest.approx(0.8 / 0.6745 / math.sqrt(6), rel=0.1)


# --- fp32 / bf16 variants, in-process ----------------------------------------------------------
def test_fp32_mode_disables_autocast_scaler_and_reduced_casts_then_restores_everything():
    handles = fp32_mode.install()
    try:
        lin = torch.nn.Linear(4, 4).half()
        assert lin.weight.dtype == torch.float32
        assert torch.nn.Linear(4, 4).to(torch.bfloat16).weight.dtype == torch.float32
        assert torch.nn.Linear(4, 4).to("cpu", dtype=torch.float16).weight.dtype == torch.float32
        x = torch.randn(3, 4)
        assert x.half().dtype == torch.float32 and x.to(torch.float16).dtype == torch.float32
        assert x.to(dtype=torch.bfloat16).dtype == torch.float32 and x.bfloat16().dtype == torch.float32
        y = x.half()
        y.add_(1.0)  # the unpatched call copies; so must this one
        assert not torch.equal(x, y)
        assert x.to(torch.float64).dtype == torch.float64  # other casts untouched
        with torch.autocast("cpu", dtype=torch.float16):
            assert lin(x).dtype == torch.float32
            assert not torch.is_autocast_enabled("cpu")
        scaler = torch.amp.GradScaler("cpu")
        assert not scaler.is_enabled()
    finally:
        handles.remove()
    assert torch.nn.Linear(4, 4).half().weight.dtype == torch.float16
    assert torch.randn(2).half().dtype == torch.float16
    assert torch.amp.GradScaler("cpu").is_enabled()
    with torch.autocast("cpu", dtype=torch.float16):
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.float16
    assert "half" not in torch.Tensor.__dict__ and "to" not in torch.Tensor.__dict__


def test_bf16_mode_turns_fp16_into_bf16_and_drops_the_scaler():
    handles = fp32_mode.install_bf16()
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.bfloat16
        assert torch.nn.Linear(4, 4).half().weight.dtype == torch.bfloat16
        assert torch.randn(2).half().dtype == torch.bfloat16
        assert not torch.amp.GradScaler("cpu").is_enabled()
    finally:
        handles.remove()


def test_loss_capture_records_the_unscaled_loss_once_per_iteration_and_the_skipped_steps():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    capture = LossCapture().install()
    expected = []
    try:
        for i in range(3):
            total = 0.0
            for _micro in range(2):  # gradient accumulation: the point is the sum of the micro-losses
                x = torch.randn(8, 4) * (1e30 if i == 1 else 1.0)  # iteration 1 overflows: skipped
                loss = model(x).pow(2).mean() / 2
                total += loss.item()
                scaler.scale(loss).backward()
            expected.append(total)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()  # no scaler: recorded at backward
        expected.append(loss.item())
        opt.step()
        # a backward with an explicit gradient is not a loss
        (model(torch.randn(8, 4)) * 2).backward(torch.ones(8, 1))
    finally:
        capture.remove()
    assert capture.series == pytest.approx(expected, rel=1e-6)
    assert expected[0] < 100 and math.isinf(expected[1])
    assert capture.skipped == [1]
    assert capture.complete == [True] * 4  # the trailing explicit-gradient backward added nothing


def test_a_loss_of_several_elements_counts_as_its_sum():
    """`scaler.scale(per_head).backward(torch.ones(2))`: the objective of that backward."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    capture = LossCapture().install()
    expected = []
    try:
        for _ in range(2):
            per_head = model(torch.randn(8, 4)).pow(2).mean(0)
            expected.append(per_head.sum().item())
            scaler.scale(per_head).backward(torch.ones(2))
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    finally:
        capture.remove()
    assert capture.series == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    "script, first_range",
    [
        ("amp_clip_before_unscale", (1, 8)),  # grads clipped at 65536x their size: training stalls at once
        ("amp_no_scaler", (3, 20)),  # gradients underflow in fp16 without loss scaling
        ("amp_half_model", (5, 25)),  # fp16 weights swallow the small SGD updates of the output bias
    ],
)
def test_broken_amp_scripts_diverge_from_fp32(script, first_range):
    ref = run_script(script, mode="fp32", steps=STEPS).series
    run = run_script(script, steps=STEPS).series
    assert len(ref) == len(run) == STEPS
    v = compare.judge(ref, run, tolerance=compare.DEFAULT_TOLERANCE)
    assert v["diverged"], v["max_relative_deviation"]
    assert first_range[0] <= v["first_step_beyond_tolerance"] <= first_range[1]
    # the curves start together: same seed, same data; the precision setup is what separates them
    assert v["raw_relative_deviation"][0] < 1e-2


def test_correct_amp_script_stays_within_tolerance_of_fp32_and_of_bf16():
    ref = run_script("amp_correct", mode="fp32", steps=STEPS)
    amp = run_script("amp_correct", steps=STEPS)
    bf16 = run_script("amp_correct", mode="bf16", steps=STEPS)
    v = compare.judge(ref.series, amp.series, tolerance=compare.DEFAULT_TOLERANCE)
    assert not v["diverged"], v["reason"]
    assert not v["identical"]  # it really ran in fp16
    assert amp.skipped and not ref.skipped  # the fp16 run calibrated its scale; fp32 has no scaler
    assert not compare.judge(ref.series, bf16.series, tolerance=compare.DEFAULT_TOLERANCE)["diverged"]


def test_a_scaler_starting_at_2_to_the_24_is_a_calibration_lag_not_a_divergence():
    ref = run_script("amp_high_init_scale", mode="fp32", steps=STEPS)
    amp = run_script("amp_high_init_scale", steps=STEPS)
    assert compare.judge(ref.series, amp.series, tolerance=compare.DEFAULT_TOLERANCE)["diverged"]  # unaligned
    v = compare.judge(ref.series, amp.series, tolerance=compare.DEFAULT_TOLERANCE, skipped=amp.skipped)
    assert not v["diverged"], v["reason"]
    assert v["calibration_skips"] >= 8 and "while calibrating" in v["lag"]  # 2**24 -> 2**16 takes 8 halvings


def test_a_noisy_correct_scripts_bf16_run_is_judged_against_fp32s_own_noise():
    from amplint.runtime import perturb

    ref = run_script("amp_noisy_correct", mode="fp32", steps=40).series
    noise = run_script("amp_noisy_correct", mode="fp32", steps=40, extra=[perturb.install()]).series
    bf16 = run_script("amp_noisy_correct", mode="bf16", steps=40).series
    plain = compare.judge(ref, bf16, tolerance=compare.DEFAULT_TOLERANCE)
    assert plain["diverged"]  # the tolerance alone flags plain noise
    v = compare.judge(ref, bf16, tolerance=compare.DEFAULT_TOLERANCE, noise=compare.noise_envelope(ref, noise))
    assert not v["diverged"], v["reason"]


def test_the_noise_run_does_not_hide_a_broken_script():
    from amplint.runtime import perturb

    ref = run_script("amp_no_scaler", mode="fp32", steps=STEPS).series
    noise = run_script("amp_no_scaler", mode="fp32", steps=STEPS, extra=[perturb.install()]).series
    run = run_script("amp_no_scaler", steps=STEPS).series
    assert compare.judge(ref, run, tolerance=compare.DEFAULT_TOLERANCE, noise=compare.noise_envelope(ref, noise))["diverged"]


def test_the_early_floor_allows_over_the_first_window_what_fp32_noise_reached_by_then():
    ref = [1.0] * 20
    run = [1.0] + [1.3] * 19  # 0.3 off after one update; the mixed run rounds differently from its first forward
    noise = [0.0, 0.01, 0.02, 0.05, 0.08] + [0.12] * 15  # fp32's own noise is still ~0 over the first updates
    # with a window of 1 the floor covers update 0 only: 0.3 after one update is beyond 3 x 0.01
    assert compare.judge(ref, run, tolerance=0.1, window=1, noise=noise)["first_step_beyond_tolerance"] == 1
    v = compare.judge(ref, run, tolerance=0.1, window=5, noise=noise)
    assert not v["diverged"], v["reason"]
    assert v["allowed_from"][:5] == ["noise-early"] * 5 and v["allowed_from"][5:] == ["noise"] * 15
    # beyond the floor the envelope still decides: 0.3 persists, 3 x 0.12 = 0.36 allows it, 3 x 0.08 would not
    assert compare.judge(ref, run, tolerance=0.1, window=5, noise=[min(n, 0.08) for n in noise])["diverged"]


def test_the_noise_envelope_aligns_a_replaying_noise_run_by_its_own_updates():
    ref = [100.0 * 0.7**k for k in range(12)]
    nudged = [ref[0]] * 3 + ref[:9]  # skipped iterations 0-2, as the mixed run did: 3 updates behind
    assert compare.noise_envelope(ref, nudged, window=1, skipped=[0, 1, 2]) == [0.0] * 9
    assert compare.noise_envelope(ref, nudged, window=1)[-1] > 1  # unaligned it would read as a huge noise


def test_loss_capture_replays_a_skip_without_touching_the_optimizer_or_its_scheduler():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    scaler = torch.amp.GradScaler("cpu", enabled=False)  # the fp32 noise run's scaler
    wrapped = opt.__dict__.get("step")
    capture = LossCapture(replay_skips={1}).install()
    weights = []
    try:
        for _ in range(3):
            scaler.scale(model(torch.randn(8, 4)).pow(2).mean()).backward()
            scaler.step(opt)
            scaler.update()
            sched.step()
            opt.zero_grad()
            weights.append(model.weight.detach().clone())
    finally:
        capture.remove()
    assert capture.skipped == [1] and len(capture.series) == 3
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[1], weights[2])
    assert opt.__dict__.get("step") is wrapped  # the scheduler's wrapper is back, not deleted


def test_forward_noise_nudges_every_leaf_output_by_a_rounding_unit_and_leaves_the_rng_alone():
    from amplint.runtime import perturb

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(inplace=True), torch.nn.Linear(64, 64))
    x = torch.randn(256, 64)
    clean = model(x)
    state = torch.get_rng_state()
    noise = perturb.ForwardNoise()
    try:
        nudged = model(x)
    finally:
        noise.remove()
    assert torch.equal(torch.get_rng_state(), state)  # the script's data and dropout draws are untouched
    relative = ((nudged - clean) / clean.abs().clamp_min(1e-3)).abs().median().item()
    assert 2.0**-11 < relative < 2.0**-5
    assert torch.equal(model(x), clean)  # removed


def test_a_calibrating_scaler_is_judged_against_fp32_noise_that_skipped_the_same_steps():
    from amplint.runtime import perturb

    ref = run_script("amp_high_init_scale", mode="fp32", steps=STEPS).series
    amp = run_script("amp_high_init_scale", steps=STEPS)
    assert amp.skipped[:8] == list(range(8))  # calibrating
    draws = [run_script("amp_high_init_scale", mode="fp32", steps=STEPS, replay=amp.skipped,
                        extra=[_noise(perturb, seed)]) for seed in range(compare.NOISE_DRAWS)]
    assert all(d.skipped == amp.skipped for d in draws)  # the noise runs skipped exactly those steps
    envelope = [max(e) for e in zip(*(compare.noise_envelope(ref, d.series, skipped=d.skipped) for d in draws))]
    v = compare.judge(ref, amp.series, tolerance=compare.DEFAULT_TOLERANCE, skipped=amp.skipped,
                      noise=envelope, noise_replays_skips=True)
    assert not v["diverged"], v["reason"]
    assert v["noise_replays_skips"] and v["batch_shift_allowance"] == 0.0  # measured, no longer guessed


@pytest.mark.parametrize("script", ["amp_clip_before_unscale", "amp_scaler_per_epoch"])
def test_noise_that_replays_the_skipped_steps_does_not_hide_a_wrong_script(script):
    from amplint.runtime import perturb

    ref = run_script(script, mode="fp32", steps=STEPS).series
    amp = run_script(script, steps=STEPS)
    draws = [run_script(script, mode="fp32", steps=STEPS, replay=amp.skipped, extra=[_noise(perturb, seed)])
             for seed in range(compare.NOISE_DRAWS)]
    envelope = [max(e) for e in zip(*(compare.noise_envelope(ref, d.series, skipped=d.skipped) for d in draws))]
    v = compare.judge(ref, amp.series, tolerance=compare.DEFAULT_TOLERANCE, skipped=amp.skipped,
                      noise=envelope, noise_replays_skips=True)
    assert v["diverged"], v["reason"]


def _noise(perturb, draw: int):
    handles = perturb.Handles()
    handles.append(perturb.GradientNoise(seed=2 * draw))
    handles.append(perturb.ForwardNoise(seed=2 * draw + 1))
    return handles


# --- the CLI through the launcher, and the PNG ------------------------------------------------
def _columns_with(png, hex_color: str, top_fraction: float = 0.55, tol: float = 0.08) -> float:
    """Share of image columns in the top panel holding pixels of `hex_color`.

    A curve across the axes covers about 85% of the width; a legend swatch alone about 3%."""
    import matplotlib.image as mpimg
    import numpy as np

    img = mpimg.imread(str(png))[..., :3]
    top = img[: int(img.shape[0] * top_fraction)]
    rgb = np.array([int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    mask = (np.abs(top - rgb) < tol).all(axis=-1)
    return mask.any(axis=0).mean()


def test_cli_correct_script_passes_and_the_png_shows_both_curves(tmp_path):
    png, report = tmp_path / "curves.png", tmp_path / "report.json"
    code = compare.main(["compare", "--steps", "12", "--bf16", "--plot", str(png), "--report", str(report),
                         "--device", "cpu", "--", sys.executable, str(SCRIPTS / "amp_correct.py")])
    data = json.loads(report.read_text())
    assert code == 0, data["comparisons"]
    # each compared run is judged against two noise draws that skipped what it skipped: the bf16 run
    # (no scaler, no skips) against plain ones, the fp16 run against its own when its scaler skipped
    skipped = data["runs"]["as_written"]["skipped_steps"]
    own = "fp32_nudged@as_written" if skipped else "fp32_nudged"
    assert data["comparisons"]["as_written"]["noise_run"] == own
    assert data["comparisons"]["bf16"]["noise_run"] == "fp32_nudged"
    assert set(data["runs"]) == {"fp32", "as_written", "bf16", "fp32_nudged", "fp32_nudged#2", own, own + "#2"}
    assert data["noise"]["runs"][own]["draws"] == [own, own + "#2"]
    assert data["noise"]["runs"][own]["replayed_skips"] == skipped
    assert data["runs"][own]["skipped_steps"] == data["runs"][own + "#2"]["skipped_steps"] == skipped
    assert not data["not_compared"]  # the noise runs are fp32 by design, not "mixed precision never ran"
    assert all(len(r["losses"]) == 12 for r in data["runs"].values())  # 12 steps, 12 losses
    assert data["runs"]["fp32"]["losses"][0] == pytest.approx(data["runs"]["as_written"]["losses"][0], rel=1e-3)
    assert data["diverged"] is False and data["emulated"] is True
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the curves lie on top of each other and both are still visible across the plot
    for name in ("fp32", "as_written", "bf16"):
        assert _columns_with(png, compare.COLORS[name]) > 0.6, name


def test_cli_broken_script_exits_1_with_the_divergence_step(tmp_path):
    png, report = tmp_path / "curves.png", tmp_path / "report.json"
    code = compare.main(["--steps", "10", "--plot", str(png), "--report", str(report),
                         "--", sys.executable, str(SCRIPTS / "amp_clip_before_unscale.py")])
    data = json.loads(report.read_text())
    assert code == 1
    v = data["comparisons"]["as_written"]
    assert v["diverged"] and 1 <= v["first_step_beyond_tolerance"] <= 8
    assert v["max_relative_deviation"] > 0.5
    # one point per applied update: the steps GradScaler skipped are a lag, not compared points
    assert len(data["runs"]["fp32"]["losses"]) == 10  # 10 steps, 10 losses
    assert len(v["relative_deviation"]) == len(v["aligned_losses"]) == 10 - v["updates_lost"]
    assert _columns_with(png, compare.COLORS["fp32"]) > 0.6
    assert _columns_with(png, compare.COLORS["as_written"]) > 0.6
    assert _columns_with(png, compare.COLORS["bf16"]) == 0.0  # not asked for: not drawn


def test_cli_usage_errors_exit_2(tmp_path):
    assert compare.main(["--steps", "3"]) == 2
    assert compare.main(["--steps", "0", "--", sys.executable, "x.py"]) == 2
    assert compare.main(["--", sys.executable, str(tmp_path / "missing.py")]) == 2


def test_plot_without_matplotlib_fails_at_once_before_any_run(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    monkeypatch.setattr(compare, "run_variant", lambda *a, **k: pytest.fail("a run started"))
    assert compare.main(["--plot", "x.png", "--", sys.executable, str(SCRIPTS / "amp_correct.py")]) == 2
    assert "pip install 'amplint[plot]'" in capsys.readouterr().err


def test_cli_timeout_ends_the_comparison_with_124(tmp_path):
    report = tmp_path / "report.json"
    code = compare.main(["--timeout", "3", "--report", str(report), "--", sys.executable, str(SCRIPTS / "hangs.py"), str(tmp_path / "pids")])
    data = json.loads(report.read_text())
    assert (code, data["status"]) == (124, "timed-out")
    assert list(data["runs"]) == ["fp32"]  # nothing else was started


AMP_ONLY_FAILS = """\
import sys
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for step in range(3):
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(torch.ones(2, 4))
    scaler.scale(out.float().sum()).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    if out.dtype == torch.float16 and step == 1:
        raise RuntimeError("fp16 output seen")
"""


def test_a_script_failing_in_every_run_is_a_failed_reference_not_within_tolerance(tmp_path, capsys):
    report = tmp_path / "report.json"
    code = compare.main(["--steps", "2", "--report", str(report), "--",
                         sys.executable, str(SCRIPTS / "ends_badly.py"), "raise"])
    data = json.loads(report.read_text())
    err = capsys.readouterr().err
    assert code == 2
    assert data["status"] == "reference-failed" and data["diverged"] is None
    assert data["runs"]["fp32"]["exit_code"] == 1
    assert list(data["runs"]) == ["fp32"]  # no reference: the other runs are not made
    assert "fp32 reference run failed (exit 1: raised ValueError: boom)" in err


NAN_EVERYWHERE = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(torch.ones(2, 4)).float().pow(2).mean() * float("nan")
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def test_a_reference_whose_every_loss_is_nan_is_a_failed_reference_not_within_tolerance(tmp_path, capsys):
    """NaN in every run, fp32 included: a NaN deviation exceeds no tolerance, so without this
    the comparison read "within tolerance", exit 0, having compared nothing."""
    script, report = tmp_path / "nan_everywhere.py", tmp_path / "report.json"
    script.write_text(NAN_EVERYWHERE)
    code = compare.main(["--steps", "3", "--report", str(report), "--", sys.executable, str(script)])
    data = json.loads(report.read_text())
    assert code == 2
    assert data["status"] == "reference-failed" and data["diverged"] is None
    assert "recorded no finite loss" in capsys.readouterr().err


def test_a_mixed_precision_run_failing_where_fp32_completes_is_reported_failed(tmp_path, capsys):
    script, report = tmp_path / "amp_only_fails.py", tmp_path / "report.json"
    script.write_text(AMP_ONLY_FAILS)
    code = compare.main(["--steps", "3", "--no-noise-run", "--report", str(report), "--", sys.executable, str(script)])
    data = json.loads(report.read_text())
    out = capsys.readouterr().out
    assert code == 1
    assert data["runs"]["fp32"]["exit_code"] == 0
    assert data["runs"]["as_written"]["exit_code"] == 1
    v = data["comparisons"]["as_written"]
    assert v["diverged"] is True and v["failed"] is True
    assert v["reason"].startswith("the run failed (exit 1: raised RuntimeError: fp16 output seen)")
    assert "as_written FAILED" in out
