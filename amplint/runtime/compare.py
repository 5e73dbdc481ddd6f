"""`amplint compare`: the same training steps in fp32 and in mixed precision, loss curves side by side.

    amplint compare [--steps N] [--bf16] [--tolerance T] [--window W] [--plot FILE.png]
                    [--report FILE.json] [--device cpu] [--timeout S] [--no-noise-run] -- COMMAND...
    amplint compare [options] train.py [ARGS...]      # shorthand for `python train.py ARGS...`

"Measure, always": if the fp32 curve and the mixed-precision curve lie on top of each other, the
precision setup is fine; when they drift apart there is a problem that no single number shows
(updates lost in fp16 weights, gradients underflowing without a scaler, clipping scaled gradients).

How: the command runs N optimizer steps several ways under the verify launcher (`run_instrumented`,
so `--device cpu` emulation, torchrun and accelerate work the same): as a reference with autocast,
GradScaler and reduced-precision casts turned into fp32 from outside (`fp32_mode:install`), as
written, with `--bf16` in bf16 without a scaler (`fp32_mode:install_bf16`), and (unless
`--no-noise-run`) noise runs: the fp32 reference again with bf16-sized rounding noise on the
forward and the gradients (`perturb.py`), NOISE_DRAWS independent draws, skipping the updates the
compared run's GradScaler skipped (`loss_capture`'s replay; one noise run per skip pattern, so a
run without skips and the bf16 run share one).  They measure how much this training, under the
mixed run's own conditions, amplifies rounding.  Every run is seeded the same (`AMPLINT_SEED`) and
records its per-iteration loss (`loss_capture:install`, the unscaled loss at `scaler.scale()` or
`backward()`). No probe runs: a comparison wants plain runs.

Alignment: a step GradScaler skips applies no update, so a correct fp16 run whose scaler skips its
first steps while calibrating lags fp32 by those steps; on a fast-falling loss that lag alone used
to read as divergence. Each run is aligned by applied updates (`align_by_updates`: its loss after
j updates against fp32's after j) and the lag is reported on its own ("GradScaler skipped steps 0-9
while calibrating: 10 updates lost").  After alignment the run's update j saw a later batch than
fp32's update j; the noise run that replayed the same skips saw the same later batch, so that
difference is in the envelope, measured.

Divergence: after j updates, the relative deviation of the run from the reference, |run - fp32| /
max(|fp32|, 1e-3 * max|fp32|), computed on trailing means over `--window` updates (default 5, so
one noisy batch does not decide). The allowed deviation is the largest of `--tolerance` (default
0.1), NOISE_FACTOR (3) x the noise runs' largest deviation so far, over the first `--window`
updates NOISE_FACTOR x that by update `window` (the early floor), and, only where no noise run
replayed the skips (`--no-noise-run`, a failed noise run), NOISE_FACTOR x the mini-batch noise of a
trailing mean (`batch_noise`). `judge` says which term set it at every update (`allowed_from`).
The run diverges where it exceeds that, where its loss is NaN/Inf and the
reference's is not, where it stopped (crashed) before the reference, when GradScaler skipped every
step, or when it skipped at least 3 steps after calibrating and at least half of them.
Not compared: a run in which mixed precision never ran (no autocast region entered enabled, no
GradScaler enabled, no float16/bfloat16 parameter or activation: the script switched AMP off, no
CUDA found, `--amp` not given) is fp32 again; comparing it would pass vacuously, so it is reported
"not compared: mixed precision never ran" with what did run, and without `--bf16` no further run is
made after it.
Exit status: 0 all within tolerance, 1 a run diverged (or failed, a non-zero exit, where the
reference ran: FAILED in the summary), 3 not compared: mixed precision never ran in the run as
written (and nothing diverged), 2 usage error (including `--plot` without matplotlib or a
`--report`/`--plot` path that cannot be written, said before any run) or the fp32 reference itself
failed (exit non-zero: no other run is made), 124 `--timeout` expired, 128+N compare got signal N
(the run in progress is ended).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

EXIT_CLEAN, EXIT_DIVERGED, EXIT_ERROR, EXIT_NOT_COMPARED, EXIT_TIMEOUT = 0, 1, 2, 3, 124
NOISE_RUN = "fp32_nudged"  # the noise runs: fp32 again under rounding-sized noise (perturb.py)
# Independent noise draws per noise run.  One draw is one sample of how far fp32 strays: on a noisy
# training, draws with different noise seeds were 5x apart at the same update, so a correct run (itself
# one more draw) could land beyond 2x a low one.  The envelope is the largest of the draws.
NOISE_DRAWS = 2

DEFAULT_STEPS = 50
DEFAULT_TOLERANCE = 0.1
DEFAULT_WINDOW = 5
# A run may deviate from fp32 by this many times what fp32 deviates from itself under another seed.
NOISE_FACTOR = 3.0

# Plot colours: fixed, so tests can find each curve's pixels.
COLORS = {"fp32": "#1f77b4", "as_written": "#ff7f0e", "bf16": "#2ca02c"}
LABELS = {"fp32": "fp32 reference", "as_written": "as written (mixed precision)", "bf16": "bf16, no scaler"}

EXTENSIONS = {
    "fp32": "amplint.runtime.fp32_mode:install,amplint.runtime.loss_capture:install",
    "as_written": "amplint.runtime.loss_capture:install",
    "bf16": "amplint.runtime.fp32_mode:install_bf16,amplint.runtime.loss_capture:install",
    "fp32_nudged": "amplint.runtime.fp32_mode:install,amplint.runtime.perturb:install,amplint.runtime.loss_capture:install",
}


# --- the comparison itself (pure; tested directly) ---------------------------------------------
def _finite(v: float) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def relative_deviation(
    reference: Sequence[float], run: Sequence[float], *, window: int = DEFAULT_WINDOW
) -> tuple[list[float], list[float]]:
    """(smoothed, raw) relative deviation of `run` from `reference`, one value per reference step.

    inf: the run is non-finite (or missing: it stopped early) where the reference is finite.
    nan: the reference itself is non-finite there (no verdict possible).
    """
    finite_ref = [abs(v) for v in reference if _finite(v)]
    floor = max(1e-3 * max(finite_ref, default=0.0), 1e-30)

    def one(r: float, c: float | None) -> float:
        if not _finite(r):
            return math.nan
        if c is None or not _finite(c):
            return math.inf
        return abs(c - r) / max(abs(r), floor)

    raw = [one(r, run[k] if k < len(run) else None) for k, r in enumerate(reference)]
    smoothed = []
    w = max(1, int(window))
    for k in range(len(reference)):
        lo = max(0, k - w + 1)
        refs = reference[lo : k + 1]
        runs = [run[i] if i < len(run) else None for i in range(lo, k + 1)]
        if not all(_finite(r) for r in refs):
            smoothed.append(math.nan)
        elif not all(c is not None and _finite(c) for c in runs):
            smoothed.append(math.inf)
        else:
            smoothed.append(one(sum(refs) / len(refs), sum(runs) / len(runs)))  # type: ignore[arg-type]
    return smoothed, raw


def align_by_updates(run: Sequence[float], skipped: Sequence[int]) -> list[float]:
    """The run's loss after 0, 1, 2... applied updates (what fp32's point j is after j updates).

    A step GradScaler skipped applied no update, so the loss of the iteration after it was
    computed from the same weights: the skipped iterations are dropped and every later point
    moves back by one.  The first point (no update yet) is the run's first loss."""
    skip = set(skipped)
    aligned, applied = [], 0
    for k, value in enumerate(run):
        if k == 0 or (k - 1) not in skip:
            if k:
                applied += 1
            if applied == len(aligned):
                aligned.append(value)
    return aligned


def skip_summary(skipped: Sequence[int], points: int) -> dict[str, Any]:
    """Calibration skips (leading: the scale coming down from init_scale) and the others."""
    skipped = sorted(k for k in skipped if k < points)
    lead = 0
    while lead < len(skipped) and skipped[lead] == lead:
        lead += 1
    later = skipped[lead:]
    text = ""
    if lead:
        text = (f"GradScaler skipped step {0} while calibrating: 1 update lost" if lead == 1 else
                f"GradScaler skipped steps 0-{lead - 1} while calibrating: {lead} updates lost")
    if later:
        text += ("; " if text else "") + f"skipped {len(later)} later step(s) {later[:10]}"
    return {"calibration_skips": lead, "later_skips": later, "updates_lost": len(skipped), "lag": text}


def noise_envelope(reference: Sequence[float], nudged: Sequence[float], *, window: int = DEFAULT_WINDOW,
                   skipped: Sequence[int] = ()) -> list[float]:
    """fp32's own deviation under rounding-sized noise, as a non-decreasing envelope over updates.

    `nudged` is the fp32 run again with rounding-sized noise on its forward and its gradients
    (perturb.py) and, where the mixed run's GradScaler skipped steps, those steps skipped too
    (`skipped`, loss_capture's replay): aligned by applied updates like the mixed run, it saw the
    same batch after j updates, so its deviation is what a correct run may show under the same
    conditions.  Non-decreasing, because two runs drift apart as they go; 0 where unknown."""
    aligned = align_by_updates(nudged, skipped)
    smoothed, _ = relative_deviation(reference[: len(aligned)], aligned, window=window)
    out, top = [], 0.0
    for d in smoothed:
        if _finite(d):
            top = max(top, d)
        out.append(top)
    return out


def batch_noise(reference: Sequence[float]) -> float:
    """The reference's own step-to-step (mini-batch) noise, relative to the loss: a robust estimate.

    From second differences, which a smooth trend barely moves: for white noise of standard
    deviation sigma, y[j-1] - 2 y[j] + y[j+1] has standard deviation sqrt(6) sigma; the median of
    its size over the loss, / 0.6745 (normal MAD), / sqrt(6), is sigma relative to the loss."""
    ys = [v for v in reference if _finite(v)]
    ratios = [abs(ys[j - 1] - 2 * ys[j] + ys[j + 1]) / abs(ys[j]) for j in range(1, len(ys) - 1) if ys[j]]
    if len(ratios) < 3:
        return 0.0
    ratios.sort()
    median = ratios[len(ratios) // 2] if len(ratios) % 2 else (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
    return median / 0.6745 / math.sqrt(6)


def judge(
    reference: Sequence[float], run: Sequence[float], *, tolerance: float, window: int = DEFAULT_WINDOW,
    skipped: Sequence[int] = (), noise: Sequence[float] | None = None, noise_replays_skips: bool = False,
) -> dict[str, Any]:
    """The verdict on one run against the reference (JSON-ready apart from non-finite floats).

    The run is first aligned by applied updates (`align_by_updates`), so steps GradScaler skipped
    while calibrating are a lag, reported on its own, not a deviation.  A step diverges where the
    trailing-mean deviation exceeds the allowed deviation, the largest of (`allowed_terms`):
    `tolerance`; NOISE_FACTOR x the noise envelope (`noise_envelope`) so far; over the first
    `window` updates, NOISE_FACTOR x the envelope at update `window` (an early floor: a running
    maximum over fewer than `window` noise points is not yet an estimate, while the mixed run's
    rounding differs from its first forward on); and, where the run skipped steps and the noise
    run did not replay them (`noise_replays_skips` False: `--no-noise-run`, or the noise run
    failed), NOISE_FACTOR x the mini-batch noise of a trailing mean (`batch_noise`).
    Also diverged: every step skipped, or at least 3 skipped after calibrating and at least half of
    those steps (the same rule as AMP902), or a run that stopped before the reference did."""
    aligned = align_by_updates(run, skipped)
    skips = skip_summary(skipped, len(run))
    stopped = len(run) < len(reference)
    compared = list(reference[: len(aligned)])
    smoothed, raw = relative_deviation(compared, aligned, window=window)
    replayed = bool(noise) and noise_replays_skips
    terms = allowed_terms(len(compared), tolerance=tolerance, window=window, noise=noise, skipped=skipped,
                          batch=batch_noise(reference) if skips["updates_lost"] and not replayed else 0.0)
    allowed = [max(t.values()) for t in terms]
    allowed_from = [max(t, key=t.get) for t in terms]  # NB: dicts keep order: a tie names the first term
    judged = [(k, d) for k, d in enumerate(smoothed) if not math.isnan(d)]
    worst = max(judged, key=lambda kd: kd[1], default=(None, math.nan))
    first = next((k for k, d in judged if d > allowed[k]), None)
    after = len(run) - skips["calibration_skips"]
    later = len(skips["later_skips"])
    if first is not None:
        if not _finite(aligned[first]):
            reason = f"loss is {aligned[first]} after {first} updates while the fp32 loss is {compared[first]:.6g}"
        else:
            reason = (f"relative deviation {smoothed[first]:.3g} > {allowed[first]:.3g} allowed "
                      f"({ALLOWED_FROM[allowed_from[first]]}) after {first} updates")
    elif stopped:
        first = len(aligned)
        reason = f"the run stopped after {len(run)} steps, the reference ran {len(reference)}"
    elif run and skips["calibration_skips"] >= len(run):
        first = 0
        reason = "GradScaler skipped every step: no update was applied"
    elif later >= 3 and later * 2 >= after:
        first = skips["later_skips"][0]
        reason = f"GradScaler skipped {later} of {after} steps after calibrating"
    else:
        at = worst[0]
        reason = ("within the allowed deviation" if at is None else
                  f"within the allowed deviation: {worst[1]:.3g} <= {allowed[at]:.3g} allowed after {at} updates")
    return {
        "relative_deviation": smoothed,
        "raw_relative_deviation": raw,
        "allowed_deviation": allowed,
        # what the noise run measured, per update: its own deviation from fp32 (running maximum)
        "noise_deviation": [t["noise"] / NOISE_FACTOR for t in terms] if noise else None,
        "max_relative_deviation": worst[1],
        "max_at_step": worst[0],
        # what was allowed where the deviation was largest, and what set it at each step
        "allowed_at_max": None if worst[0] is None else allowed[worst[0]],
        "allowed_from": allowed_from,
        "first_step_beyond_tolerance": first,
        "diverged": first is not None,
        "reason": reason,
        "identical": list(reference) == list(run),
        "aligned_losses": aligned,
        "batch_shift_allowance": max((t.get("batch-shift", 0.0) for t in terms), default=0.0),
        "noise_replays_skips": replayed,
        **skips,
    }


# What set the allowed deviation at a step (the report's `allowed_from`), in words.
ALLOWED_FROM = {
    "tolerance": "the tolerance",
    "noise": "fp32's own noise so far",
    "noise-early": "the early floor: fp32's own noise by update `window`",
    "batch-shift": "mini-batch noise after skipped steps",
}


def allowed_terms(points: int, *, tolerance: float, window: int, noise: Sequence[float] | None,
                  skipped: Sequence[int] = (), batch: float = 0.0) -> list[dict[str, float]]:
    """Per aligned update, each term of the allowed deviation by name (see `judge`)."""
    noise = list(noise or [])

    def env(j: int) -> float:
        return noise[j] if j < len(noise) else (noise[-1] if noise else 0.0)

    w = max(1, int(window))
    early = NOISE_FACTOR * env(min(w, max(points - 1, 0))) if noise else 0.0
    # Skipped steps shift the run's batches against fp32's: after alignment, point j of the run saw
    # a later batch than fp32's point j, so mini-batch noise no longer cancels.  A difference of two
    # independent `window`-step means has sqrt(2 / window) of its noise.
    shifted = NOISE_FACTOR * batch * math.sqrt(2 / w) if skipped else 0.0
    since = skip_marks(skipped)[0] + 1 if skipped else points  # points up to the first skip saw fp32's batches
    terms = []
    for j in range(points):
        t = {"tolerance": tolerance}
        if noise:
            t["noise"] = NOISE_FACTOR * env(j)
            if j < w:
                t["noise-early"] = early
        if shifted and j >= since:
            t["batch-shift"] = shifted
        terms.append(t)
    return terms


# --- plotting ----------------------------------------------------------------------------------
def plot(path: Path, series: dict[str, list[float]], verdicts: dict[str, dict[str, Any]], *,
         tolerance: float, title: str, marks: dict[str, list[int]] | None = None,
         labels: dict[str, str] | None = None) -> None:
    """Loss curves overlaid against applied updates (top) and their deviation from fp32 (bottom, log).

    `series` are the aligned curves (`align_by_updates`); `marks` are the update counts at which
    GradScaler skipped a step, drawn as triangles: they explain a correct fp16 run's lag."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 2]}, dpi=100
    )
    try:
        finite = [v for s in series.values() for v in s if _finite(v)]
        if finite and min(finite) > 0 and max(finite) / min(finite) > 30:
            top.set_yscale("log")
        for name, values in series.items():
            steps = list(range(len(values)))
            ys = [v if _finite(v) else math.nan for v in values]
            # NB: drawn as nested stripes (fp32 widest at the bottom, bf16 narrower above it, the
            # run as written thinnest on top), so curves lying exactly on each other stay visible.
            style = {"fp32": dict(lw=5.5, zorder=1), "bf16": dict(lw=3.0, zorder=2)}.get(name, dict(lw=1.4, zorder=3))
            label = (labels or {}).get(name) or LABELS.get(name, name)
            top.plot(steps, ys, color=COLORS.get(name, "#7f7f7f"), label=label, solid_capstyle="butt", **style)
            at = sorted({k for k in (marks or {}).get(name, []) if k < len(values) and _finite(values[k])})
            if at:
                top.plot(at, [values[k] for k in at], "v", color=COLORS[name], mec="black", ms=9, zorder=4,
                         label=f"{name}: GradScaler skipped a step here")
            bad = [k for k, v in enumerate(values) if not _finite(v)]
            if bad and finite:
                top.plot(bad, [max(finite)] * len(bad), "x", color=COLORS[name], ms=7, zorder=4)
        top.set_ylabel("loss")
        top.legend(loc="best", fontsize=8)
        top.grid(alpha=0.3)
        top.set_title(title, fontsize=10)

        values = [d for v in verdicts.values() for d in v["relative_deviation"] if _finite(d) and d > 0]
        cap = max(values + [tolerance * 10])
        for name, verdict in verdicts.items():
            devs = verdict["relative_deviation"]
            ys = [max(d, 1e-7) if _finite(d) else (cap if d == math.inf else math.nan) for d in devs]
            bottom.plot(range(len(ys)), ys, color=COLORS[name], lw=1.6, label=f"{name} vs fp32")
            first = verdict["first_step_beyond_tolerance"]
            if first is not None:
                bottom.axvline(first, color=COLORS[name], ls=":", lw=1.2)
                at = verdict["allowed_deviation"][first] if first < len(verdict.get("allowed_deviation") or []) else tolerance
                bottom.annotate(f"diverges after {first} updates", (first, at), xytext=(4, 6),
                                textcoords="offset points", fontsize=8, color=COLORS[name])
        # NB: the deviation that was applied, drawn where it lies, one dashed line per run in the run's
        # colour (each run has its own noise run when their skipped steps differ): the tolerance
        # alone was drawn while a wider envelope decided, and the envelope's line could fall off the axes.
        allowed_all: list[float] = []
        for name, verdict in verdicts.items():
            allowed = verdict.get("allowed_deviation") or [tolerance] * len(verdict["relative_deviation"])
            allowed_all += allowed
            widened = sorted({TERM_NAMES[f] for f in verdict.get("allowed_from") or [] if f != "tolerance"})
            bottom.plot(range(len(allowed)), allowed, color=COLORS[name], ls="--", lw=1.2,
                        label=f"allowed for {name}" + (f" (tolerance {tolerance:g}, {', '.join(widened)})" if widened
                                                       else f" (tolerance {tolerance:g})"))
        allowed = [a for a in allowed_all if _finite(a)] or [tolerance]
        bottom.set_yscale("log")
        plotted = [max(d, 1e-7) for v in verdicts.values() for d in v["relative_deviation"] if _finite(d)]
        shown = plotted + [a for a in allowed if _finite(a) and a > 0]
        if shown:
            bottom.set_ylim(min(shown) / 2, max(max(shown), cap) * 2)
        bottom.set_ylabel("relative deviation")
        bottom.set_xlabel("updates applied (GradScaler's skipped steps do not count)")
        bottom.legend(loc="lower right", fontsize=8)
        bottom.grid(alpha=0.3)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)


def skip_marks(skipped: Sequence[int]) -> list[int]:
    """Where each skipped iteration sits on the aligned curve: the updates applied before it."""
    skip = sorted(skipped)
    return [k - i for i, k in enumerate(skip)]


# --- running -----------------------------------------------------------------------------------
def _series_of(outcome: Any, loss_dir: Path) -> tuple[list[float], list[int]]:
    """(losses, skipped steps) of the script's (or lowest rank's) process that recorded losses."""
    per_label = (getattr(outcome, "extras", None) or {}).get("losses") or {}
    ranked = sorted(per_label.items(), key=lambda kv: (kv[0] != "main", kv[0]))
    for _label, data in ranked:
        if data and data.get("losses"):
            return [float(v) for v in data["losses"]], list(data.get("skipped", []))
    # the evidence file was not written (killed): the streamed JSONL still has the points
    from amplint.runtime.loss_capture import read_series

    data = read_series(loss_dir)
    return data["losses"], data["skipped"]


def run_variant(name: str, command: list[str], *, steps: int, device: str | None, work: Path,
                seed: int, timeout: float | None = None, extensions: str | None = None,
                replay: Sequence[int] = (), noise_seed: int = 0) -> dict[str, Any]:
    from amplint.runtime.launch import run_instrumented
    from amplint.runtime.loss_capture import LOSS_DIR_ENV, REPLAY_ENV, SEED_ENV

    out_dir, loss_dir = work / name / "evidence", work / name / "losses"
    env = {
        "AMPLINT_EXTENSIONS": extensions or EXTENSIONS[name],
        "AMPLINT_PROBES": "none",
        SEED_ENV: str(seed),
        LOSS_DIR_ENV: str(loss_dir),
    }
    if replay:
        env[REPLAY_ENV] = ",".join(str(k) for k in replay)
    if noise_seed:
        from amplint.runtime.perturb import NOISE_SEED_ENV

        env[NOISE_SEED_ENV] = str(noise_seed)
    outcome = run_instrumented(command, steps=steps, device=device, out_dir=out_dir, extra_env=env, timeout=timeout)
    losses, skipped = _series_of(outcome, loss_dir)
    from amplint.runtime.correlate import RunFacts

    facts = RunFacts.from_processes(outcome.processes, emulated=bool(getattr(outcome, "emulated", False)), steps=outcome.steps)
    # The step budget stops the run at the start of step N+1, after that iteration's backward, so
    # N+1 losses were seen; the last belongs to an iteration that took no step: N steps, N losses
    # (the loss of iteration k is the one its step k applied, after k updates).
    return {
        "exit_code": outcome.exit_code,
        "ended": outcome.ended,
        "steps": outcome.steps,
        "losses": losses[:steps],
        "skipped_steps": [k for k in skipped if k < steps],
        "mixed_precision": facts.precision_json(),
        "errors": list(getattr(outcome, "errors", []))[:5],
        "seed": seed,
        "timed_out": outcome.timed_out,
        "interrupted_by": outcome.interrupted_by,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="amplint compare",
        description="Run a training command in fp32 and in mixed precision; compare the loss curves.",
        usage="amplint compare [options] -- COMMAND...  |  amplint compare [options] train.py [ARGS...]",
    )
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"optimizer steps per run (default {DEFAULT_STEPS})")
    p.add_argument("--bf16", action="store_true", help="also run with bf16 autocast and no GradScaler")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   help=f"largest allowed relative deviation from fp32 (default {DEFAULT_TOLERANCE})")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                   help=f"steps in the trailing mean the deviation is measured on (default {DEFAULT_WINDOW})")
    p.add_argument("--plot", type=Path, help="write the curves to this PNG")
    p.add_argument("--report", type=Path, help="write the series and the verdict to this JSON file")
    p.add_argument("--device", choices=("cpu",), default=None, help="emulate a CUDA script on the CPU")
    p.add_argument("--seed", type=int, default=0, help="seed set in every run before the script starts (default 0)")
    p.add_argument("--no-noise-run", dest="noise_run", action="store_false",
                   help="skip the noise runs (fp32 under bf16-sized rounding noise, replaying the skipped steps) "
                        "that measure fp32's own variability")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="end the whole comparison after SECONDS (exit 124)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the training command")
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    from amplint.runtime.launch import parse_with_command

    args = parse_with_command(build_parser(), argv)
    if args.command and args.command[0].endswith(".py"):
        args.command = [sys.executable, *args.command]
    return args


def _json_clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _error(message: str) -> int:
    print(f"amplint compare: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: list[str]) -> int:
    argv = list(argv)
    if argv and argv[0] == "compare":
        argv = argv[1:]
    try:
        args = parse(argv)
    except SystemExit as exc:
        return EXIT_ERROR if exc.code not in (0, None) else EXIT_CLEAN
    if not args.command:
        return _error("no command (use `amplint compare -- python train.py`)")
    # `not tolerance > 0` also refuses NaN (every comparison with NaN is false: a NaN
    # tolerance would pass any deviation) and inf (no deviation could ever fail).
    if args.steps < 1 or not 0 < args.tolerance < float("inf") or args.window < 1:
        return _error("--steps and --window must be >= 1, --tolerance a finite number > 0")
    if args.timeout is not None and not args.timeout > 0:
        return _error("--timeout must be a positive number of seconds")
    if args.plot is not None:
        # NB: before any run: finding out after minutes of training that the plot cannot be drawn
        # wastes them all.
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return _error("--plot needs matplotlib: pip install 'amplint[plot]' (or pip install matplotlib)")
    from amplint.runtime.launch import script_of, unwritable

    script_path = script_of(args.command)
    if script_path is not None and not Path(script_path).is_file():
        return _error(f"no such script: {script_path}")
    for option, path in (("--report", args.report), ("--plot", args.plot)):
        why = None if path is None else unwritable(path)
        if why:  # NB: before any run, like --plot without matplotlib
            return _error(f"{option}: {why}")
    try:
        import torch  # noqa: F401
    except ImportError:
        from amplint.runtime import TORCH_INSTALL_HINT

        return _error(TORCH_INSTALL_HINT)

    plan = ["fp32", "as_written"] + (["bf16"] if args.bf16 else [])
    runs: dict[str, dict[str, Any]] = {}
    noise_of: dict[str, str] = {}  # compared run -> the noise run that replays its skipped steps
    stopped: dict[str, Any] | None = None
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    with tempfile.TemporaryDirectory(prefix="amplint-compare-") as tmp:
        def run(name: str, variant: str, replay: Sequence[int] = (), noise_seed: int = 0) -> bool:
            """Run one variant; False when the comparison must stop (timed out, signalled)."""
            left = None if deadline is None else max(0.1, deadline - time.monotonic())
            print(f"amplint compare: running {name} ({args.steps} steps)...", file=sys.stderr)
            runs[name] = run_variant(name, args.command, steps=args.steps, device=args.device, work=Path(tmp),
                                     seed=args.seed, timeout=left, extensions=EXTENSIONS[variant], replay=replay,
                                     noise_seed=noise_seed)
            return not (runs[name]["timed_out"] or runs[name]["interrupted_by"])

        for name in plan:
            if not run(name, name):
                stopped = runs[name]
                break
            if name == "fp32" and runs[name]["exit_code"] != 0:
                break  # no reference to compare with: the other runs would only cost time
            if name == "as_written" and not args.bf16 and _never_mixed(runs[name]):
                break  # nothing to compare: the noise run would only cost time
        if stopped is None and args.noise_run and runs["fp32"]["exit_code"] == 0:
            # One noise run per skip pattern: each compared run is judged against fp32 noise that
            # skipped the same updates, so it saw the same batches (a run without skips and the bf16
            # run, which has no scaler, share the plain one).
            for name in plan[1:]:
                if name not in runs or _never_mixed(runs[name]):
                    continue
                replay = runs[name]["skipped_steps"]
                noise_name = NOISE_RUN if not replay else f"{NOISE_RUN}@{name}"
                twin = next((n for n, o in noise_of.items() if runs[n]["skipped_steps"] == replay), None)
                if twin is not None:
                    noise_of[name] = noise_of[twin]
                    continue
                noise_of[name] = noise_name
                for draw in range(NOISE_DRAWS):
                    draw_name = noise_name if draw == 0 else f"{noise_name}#{draw + 1}"
                    if not run(draw_name, NOISE_RUN, replay, noise_seed=draw):
                        stopped = runs[draw_name]
                        break
                    runs[draw_name]["replayed_skips"] = list(replay)
                if stopped is not None:
                    break

    report: dict[str, Any] = {
        "command": args.command,
        "device": args.device or "native",
        "emulated": args.device == "cpu",
        "steps": args.steps,
        "tolerance": args.tolerance,
        "window": args.window,
        "seed": args.seed,
        "runs": runs,
        "comparisons": {},
    }
    if stopped is not None:
        return _stopped(args, report, stopped)
    ref = runs["fp32"]
    if ref["exit_code"] != 0 or not any(_finite(v) for v in ref["losses"]):
        # NB: a failed reference is no reference, even with losses recorded before it failed: a
        # script that raises in every run must not read as "within tolerance"; nor may one whose
        # every fp32 loss is NaN (a NaN deviation exceeds no tolerance).
        why = (f"the fp32 reference run failed (exit {ref['exit_code']}: {ref['ended']}); nothing was compared"
               if ref["exit_code"] != 0 else
               f"the fp32 reference run recorded no loss ({ref['ended']}, exit {ref['exit_code']})" if not ref["losses"] else
               f"the fp32 reference run recorded no finite loss (all {len(ref['losses'])} NaN or Inf); nothing was compared")
        report.update(diverged=None, error=why, status="reference-failed")
        _write_report(args.report, report)
        return _error(why)

    compared = [n for n in plan[1:] if n in runs and not _never_mixed(runs[n])]
    report["noise"] = _noise_report(args, runs, compared, noise_of)
    verdicts = {}
    for n in compared:
        measured = report["noise"]["runs"].get(noise_of.get(n, ""), {})
        envelope = measured.get("envelope") if measured.get("measured") else None
        verdicts[n] = failed_run(judge(ref["losses"], runs[n]["losses"], tolerance=args.tolerance, window=args.window,
                                       skipped=runs[n]["skipped_steps"], noise=envelope,
                                       noise_replays_skips=envelope is not None), runs[n])
        verdicts[n]["noise_run"] = noise_of.get(n) if envelope is not None else None
    report["comparisons"] = verdicts
    report["not_compared"] = {n: not_compared(runs[n]) for n in plan[1:] if n in runs and _never_mixed(runs[n])}
    report["diverged"] = any(v["diverged"] for v in verdicts.values())
    if report["diverged"]:
        report["status"] = "diverged"
    elif "as_written" in report["not_compared"]:
        report["status"] = "not-compared"  # the script's own setup was not tested, whatever else was
    else:
        report["status"] = "within-tolerance"
    if args.plot is not None:
        _plot(args, report, verdicts)
    written = _write_report(args.report, report)
    print(render(report))
    if not written:
        return EXIT_ERROR
    if report["diverged"]:
        return EXIT_DIVERGED
    return EXIT_NOT_COMPARED if report["status"] == "not-compared" else EXIT_CLEAN


def _never_mixed(run: dict[str, Any]) -> bool:
    """The run completed and nothing of mixed precision ran in it (see RunFacts.mixed_precision_ran)."""
    return run["exit_code"] == 0 and not (run.get("mixed_precision") or {"ran": True})["ran"]


def not_compared(run: dict[str, Any]) -> dict[str, Any]:
    """What compare says of a run in which mixed precision never ran: its curve is fp32's."""
    return {"compared": False, "reason": "not compared: mixed precision never ran",
            "why": run["mixed_precision"]["summary"]}


def failed_run(verdict: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """A run that failed (non-zero exit) where the fp32 reference completed has diverged, whatever
    its losses: it crashed where fp32 ran (exit 1), and the verdict says so first."""
    verdict["failed"] = run["exit_code"] != 0
    if verdict["failed"]:
        crash = f"the run failed (exit {run['exit_code']}: {run['ended']}) where the fp32 reference completed"
        verdict["reason"] = crash if not verdict["diverged"] else f"{crash}; {verdict['reason']}"
        if verdict["first_step_beyond_tolerance"] is None:
            verdict["first_step_beyond_tolerance"] = len(verdict["aligned_losses"])
        verdict["diverged"] = True
    return verdict


PERTURBATION = (f"{NOISE_DRAWS} draws of the fp32 run again, each with every leaf module's output multiplied by 1 + 2**-8 * N(0, 1) and "
                "g + 2**-8 * rms(g) * N(0, 1) added to every gradient g before each optimizer step "
                "(bfloat16's rounding unit; perturb.py), skipping the updates the compared run's GradScaler skipped")


def _noise_report(args, runs: dict[str, dict[str, Any]], compared: list[str], noise_of: dict[str, str]) -> dict[str, Any]:
    """What the noise runs measured (fp32's own deviation under rounding-sized noise), per noise run."""
    if not args.noise_run:
        return {"measured": False, "why": "--no-noise-run", "runs": {}}
    if not compared:
        return {"measured": False, "why": "not run: mixed precision never ran in the run as written", "runs": {}}
    ref = runs["fp32"]["losses"]
    measured: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(noise_of[n] for n in compared if n in noise_of):
        draws = [d for d in [name] + [f"{name}#{k + 1}" for k in range(1, NOISE_DRAWS)]]
        entry: dict[str, Any] = {"measured": False, "draws": draws,
                                 "replayed_skips": (runs.get(name) or {}).get("replayed_skips", []),
                                 "for": [n for n in compared if noise_of.get(n) == name]}
        envelopes, why = [], []
        for draw in draws:
            other = runs.get(draw)
            if other is None:
                why.append(f"{draw} not run (the comparison was stopped)")
            elif other["exit_code"] != 0:
                why.append(f"{draw} failed (exit {other['exit_code']}: {other['ended']})")
            elif not other["losses"]:
                why.append(f"{draw} recorded no loss ({other['ended']})")
            elif other["losses"] == ref:
                why.append(f"{draw} was identical to fp32 (no forward or optimizer step ran?)")
            else:
                envelopes.append(noise_envelope(ref, other["losses"], window=args.window, skipped=other["skipped_steps"]))
        if envelopes:
            # the largest draw at each update (each envelope is non-decreasing, so is their maximum)
            envelope = [max(e[j] if j < len(e) else e[-1] for e in envelopes) for j in range(max(map(len, envelopes)))]
            entry.update(measured=True, envelope=envelope, max=max(envelope, default=0.0),
                         max_per_draw=[max(e, default=0.0) for e in envelopes])
        if why:
            entry["why"] = "; ".join(why)
        measured[name] = entry
    good = [e for e in measured.values() if e["measured"]]
    report: dict[str, Any] = {"measured": bool(good), "nudge": PERTURBATION, "factor": NOISE_FACTOR, "runs": measured}
    if good:
        report["max"] = max(e["max"] for e in good)
    else:
        report["why"] = "; ".join(e["why"] for e in measured.values()) or "no noise run"
    return report


def _stopped(args, report: dict[str, Any], run: dict[str, Any]) -> int:
    """A run timed out or verify's process got a signal: report what exists and stop."""
    if run["timed_out"]:
        report.update(status="timed-out", diverged=None, error=f"timed out after {args.timeout:g} s ({run['ended']})")
        code = EXIT_TIMEOUT
    else:
        signame = run["interrupted_by"]
        report.update(status="interrupted", diverged=None, error=f"{signame} sent to compare: the run was ended")
        code = 128 + int(signal.Signals[signame])
    _write_report(args.report, report)
    print(f"amplint compare: {report['error']}", file=sys.stderr)
    return code


def _plot(args, report: dict[str, Any], verdicts: dict[str, dict[str, Any]]) -> None:
    runs = report["runs"]
    script = next((Path(a).name for a in args.command if a.endswith(".py")), " ".join(args.command)[:40])
    worst = [f"{n}: diverges after {v['first_step_beyond_tolerance']} updates" for n, v in verdicts.items() if v["diverged"]]
    if worst:
        title = f"{script}: " + "; ".join(worst)
    elif report.get("status") == "not-compared":
        title = f"{script}: not compared: mixed precision never ran"
    else:
        title = f"{script}: within the allowed deviation (tolerance {args.tolerance:g} or fp32's own noise)"
    series = {"fp32": runs["fp32"]["losses"], **{n: v["aligned_losses"] for n, v in verdicts.items()}}
    labels = {n: f"{LABELS[n]}; {v['updates_lost']} update(s) lost to skips" for n, v in verdicts.items() if v["updates_lost"]}
    plot(args.plot, series, verdicts, tolerance=args.tolerance, title=title, labels=labels,
         marks={n: skip_marks(runs[n]["skipped_steps"]) for n in verdicts})
    report["plot"] = str(args.plot)


def _write_report(path: Path | None, report: dict[str, Any]) -> bool:
    """Write the report; False (said on stderr) if it could not be written after all."""
    if path is None:
        return True
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_json_clean(report), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    except OSError as exc:  # writable before the runs; something changed since
        _error(f"--report: cannot write {path}: {exc.strerror or exc}")
        return False
    return True


def render(report: dict[str, Any]) -> str:
    where = "CPU emulation" if report["emulated"] else report["device"]
    ref = report["runs"]["fp32"]["losses"]
    lines = [f"amplint compare: {len(ref)} losses per run, {where}, tolerance {report['tolerance']:g} "
             f"on {report['window']}-step means, runs aligned by applied updates"]
    noise = report.get("noise") or {} if report["comparisons"] else {}
    if noise.get("measured"):
        lines.append(f"  fp32 noise: fp32 with bf16-sized rounding noise on the forward and the gradients "
                     f"(and the compared run's skipped steps) deviates up to {noise['max']:.3g}; a run may deviate "
                     f"max(tolerance, {noise['factor']:g} x that so far, over the first {report['window']} updates "
                     f"{noise['factor']:g} x that by update {report['window']})")
    elif noise:
        lines.append(f"  fp32 noise: not measured ({noise['why']}); the tolerance alone applies"
                     + (", widened by mini-batch noise after skipped steps"
                        if any(v.get("batch_shift_allowance") for v in report["comparisons"].values()) else ""))
    for name, v in report["comparisons"].items():
        run = report["runs"][name]
        worst = v["max_relative_deviation"]
        status = "FAILED" if v.get("failed") else "DIVERGED" if v["diverged"] else "ok"
        at = "" if v["max_at_step"] is None else f" (after {v['max_at_step']} updates, {v['allowed_at_max']:.3g} allowed there)"
        lines.append(f"  {name:<10} {status:<8} max deviation {worst:.3g}{at}; {v['reason']}; run {run['ended']}")
        if v.get("lag"):
            lines.append(f"  {'':<10} {v['lag']}")
        if v["identical"]:
            lines.append(f"  {'':<10} note: identical to fp32, the command may not use mixed precision at all")
        lines.extend(per_step_lines(v))
    for name, nc in (report.get("not_compared") or {}).items():
        lines.append(f"  {name:<10} {nc['reason']} ({nc['why'].removeprefix('mixed precision never ran: ')})")
    if report.get("plot"):
        lines.append(f"  plot: {report['plot']}")
    return "\n".join(lines)


TERM_NAMES = {"tolerance": "tolerance", "noise": "fp32 noise", "noise-early": "early floor", "batch-shift": "batch shift"}
# One letter per term of the allowed deviation, for the per-step lines.
TERM_LETTERS = {"tolerance": "t", "noise": "n", "noise-early": "e", "batch-shift": "b"}


def per_step_lines(v: dict[str, Any], per_line: int = 8) -> list[str]:
    """Measured / allowed deviation at every update, with the letter of the term that set it."""
    devs, allowed, source = v["relative_deviation"], v.get("allowed_deviation") or [], v.get("allowed_from") or []
    if not devs or len(allowed) != len(devs):
        return []
    noise_run = v.get("noise_run")
    replayed = "" if not noise_run or not v.get("updates_lost") else ", replaying its skipped steps"
    head = (f"  {'':<10} per update, measured/allowed (t tolerance, n fp32 noise from {noise_run}{replayed}, "
            f"e early floor, b batch shift; ! beyond):" if noise_run else
            f"  {'':<10} per update, measured/allowed (t tolerance, b batch shift; ! beyond):")
    cells = []
    for j, (d, a, f) in enumerate(zip(devs, allowed, source)):
        mark = "!" if isinstance(d, (int, float)) and d > a else ""
        cells.append(f"{d:.2g}/{a:.2g}{TERM_LETTERS.get(f, '?')}{mark}")
    out = [head]
    for lo in range(0, len(cells), per_line):
        hi = min(lo + per_line, len(cells)) - 1
        out.append(f"  {'':<10}   {lo:>3}-{hi:<3} " + " ".join(cells[lo : hi + 1]))
    return out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
