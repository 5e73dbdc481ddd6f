"""`amplint compare`: the same training steps in fp32 and in mixed precision, loss curves side by side.

    amplint compare [--steps N] [--bf16] [--tolerance T] [--window W] [--plot FILE.png]
                    [--report FILE.json] [--device cpu] -- COMMAND...
    amplint compare [options] train.py [ARGS...]      # shorthand for `python train.py ARGS...`

"Measure, always": if the fp32 curve and the mixed-precision curve lie on top of each other, the
precision setup is fine; when they drift apart there is a problem that no single number shows
(updates lost in fp16 weights, gradients underflowing without a scaler, clipping scaled gradients).

How: the command runs N optimizer steps three ways under the verify launcher (`run_instrumented`,
so `--device cpu` emulation, torchrun and accelerate work the same): as a reference with autocast,
GradScaler and reduced-precision casts turned into fp32 from outside (`fp32_mode:install`), as
written, and with `--bf16` in bf16 without a scaler (`fp32_mode:install_bf16`). Every run is seeded
the same (`AMPLINT_SEED`) and records its per-iteration loss (`loss_capture:install`, the unscaled
loss at `scaler.scale()` or `backward()`). No probe runs: a comparison wants plain runs.

Divergence: per step, the relative deviation of the run from the reference, |run - fp32| /
max(|fp32|, 1e-3 * max|fp32|), computed on trailing means over `--window` steps (default 5). The
mean matters: a correct fp16 run skips a step or two while its loss scale calibrates, which shifts
its curve by one step; with mini-batch noise the per-step difference can then reach the per-step
change of the loss (5-7% on the bundled correct script), while a mean over a few steps shows what
persists. The run diverges at the first step whose deviation exceeds `--tolerance` (default 0.1), or
where its loss is NaN/Inf and the reference's is not, or where it stopped (crashed) before the
reference. Exit status: 0 all within tolerance, 1 a run diverged (or crashed where the reference ran),
2 usage error or the fp32 reference itself failed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

EXIT_CLEAN, EXIT_DIVERGED, EXIT_ERROR = 0, 1, 2

DEFAULT_STEPS = 50
DEFAULT_TOLERANCE = 0.1
DEFAULT_WINDOW = 5

# Plot colours: fixed, so tests can find each curve's pixels.
COLORS = {"fp32": "#1f77b4", "as_written": "#ff7f0e", "bf16": "#2ca02c"}
LABELS = {"fp32": "fp32 reference", "as_written": "as written (mixed precision)", "bf16": "bf16, no scaler"}

EXTENSIONS = {
    "fp32": "amplint.runtime.fp32_mode:install,amplint.runtime.loss_capture:install",
    "as_written": "amplint.runtime.loss_capture:install",
    "bf16": "amplint.runtime.fp32_mode:install_bf16,amplint.runtime.loss_capture:install",
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


def judge(
    reference: Sequence[float], run: Sequence[float], *, tolerance: float, window: int = DEFAULT_WINDOW
) -> dict[str, Any]:
    """The verdict on one run against the reference (JSON-ready apart from non-finite floats)."""
    smoothed, raw = relative_deviation(reference, run, window=window)
    judged = [(k, d) for k, d in enumerate(smoothed) if not math.isnan(d)]
    worst = max(judged, key=lambda kd: kd[1], default=(None, math.nan))
    first = next((k for k, d in judged if d > tolerance), None)
    if first is None:
        reason = "within tolerance"
    elif first >= len(run):
        reason = f"the run stopped after {len(run)} steps, the reference ran {len(reference)}"
    elif not _finite(run[first]):
        reason = f"loss is {run[first]} at step {first} while the fp32 loss is {reference[first]:.6g}"
    else:
        reason = f"relative deviation {smoothed[first]:.3g} > {tolerance:g} at step {first}"
    return {
        "relative_deviation": smoothed,
        "raw_relative_deviation": raw,
        "max_relative_deviation": worst[1],
        "max_at_step": worst[0],
        "first_step_beyond_tolerance": first,
        "diverged": first is not None,
        "reason": reason,
        "identical": list(reference) == list(run),
    }


# --- plotting ----------------------------------------------------------------------------------
def plot(path: Path, series: dict[str, list[float]], verdicts: dict[str, dict[str, Any]], *,
         tolerance: float, title: str, skipped: dict[str, list[int]] | None = None) -> None:
    """Loss curves overlaid (top) and their relative deviation from fp32 (bottom, log scale).

    Steps GradScaler skipped are marked with a small triangle on the run's curve: they explain
    a one-step lag of a correct fp16 run."""
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
            top.plot(steps, ys, color=COLORS[name], label=LABELS[name], solid_capstyle="butt", **style)
            marks = [k for k in (skipped or {}).get(name, []) if k < len(values) and _finite(values[k])]
            if marks:
                top.plot(marks, [values[k] for k in marks], "v", color=COLORS[name], mec="black", ms=9, zorder=4,
                         label=f"{name}: step skipped by GradScaler")
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
                bottom.annotate(f"diverges at step {first}", (first, tolerance), xytext=(4, 6),
                                textcoords="offset points", fontsize=8, color=COLORS[name])
        bottom.axhline(tolerance, color="#d62728", ls="--", lw=1.0, label=f"tolerance {tolerance:g}")
        bottom.set_yscale("log")
        bottom.set_ylabel("relative deviation")
        bottom.set_xlabel("optimizer step (iteration)")
        bottom.legend(loc="lower right", fontsize=8)
        bottom.grid(alpha=0.3)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)


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
                seed: int) -> dict[str, Any]:
    from amplint.runtime.launch import run_instrumented
    from amplint.runtime.loss_capture import LOSS_DIR_ENV, SEED_ENV

    out_dir, loss_dir = work / name / "evidence", work / name / "losses"
    env = {
        "AMPLINT_EXTENSIONS": EXTENSIONS[name],
        "AMPLINT_PROBES": "none",
        SEED_ENV: str(seed),
        LOSS_DIR_ENV: str(loss_dir),
    }
    outcome = run_instrumented(command, steps=steps, device=device, out_dir=out_dir, extra_env=env)
    losses, skipped = _series_of(outcome, loss_dir)
    # The step budget stops the run at the start of step N+1, after that iteration's backward:
    # N+1 losses (after 0..N updates). Keep the N+1 points when present, the same in every run.
    return {
        "exit_code": outcome.exit_code,
        "ended": outcome.ended,
        "steps": outcome.steps,
        "losses": losses[: steps + 1],
        "skipped_steps": [k for k in skipped if k <= steps],
        "errors": list(getattr(outcome, "errors", []))[:5],
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
    p.add_argument("command", nargs=argparse.REMAINDER, help="the training command")
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    if "--" in argv:
        i = argv.index("--")
        args = build_parser().parse_args(argv[:i])
        args.command = argv[i + 1 :]
    else:
        args = build_parser().parse_args(argv)
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


def main(argv: list[str]) -> int:
    argv = list(argv)
    if argv and argv[0] == "compare":
        argv = argv[1:]
    try:
        args = parse(argv)
    except SystemExit as exc:
        return EXIT_ERROR if exc.code not in (0, None) else EXIT_CLEAN
    if not args.command:
        print("amplint compare: error: no command (use `amplint compare -- python train.py`)", file=sys.stderr)
        return EXIT_ERROR
    if args.steps < 1 or args.tolerance <= 0 or args.window < 1:
        print("amplint compare: error: --steps and --window must be >= 1, --tolerance > 0", file=sys.stderr)
        return EXIT_ERROR
    try:
        import torch  # noqa: F401
    except ImportError:
        from amplint.runtime import TORCH_INSTALL_HINT

        print(f"amplint compare: error: {TORCH_INSTALL_HINT}", file=sys.stderr)
        return EXIT_ERROR

    names = ["fp32", "as_written"] + (["bf16"] if args.bf16 else [])
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="amplint-compare-") as tmp:
        for name in names:
            print(f"amplint compare: running {name} ({args.steps} steps)...", file=sys.stderr)
            runs[name] = run_variant(name, args.command, steps=args.steps, device=args.device,
                                     work=Path(tmp), seed=args.seed)

    ref = runs["fp32"]
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
    if not ref["losses"]:
        why = f"the fp32 reference run recorded no loss ({ref['ended']}, exit {ref['exit_code']})"
        report.update(diverged=None, error=why)
        _write_report(args.report, report)
        print(f"amplint compare: error: {why}", file=sys.stderr)
        return EXIT_ERROR

    verdicts = {n: judge(ref["losses"], runs[n]["losses"], tolerance=args.tolerance, window=args.window)
                for n in names[1:]}
    report["comparisons"] = verdicts
    report["diverged"] = any(v["diverged"] for v in verdicts.values())
    script = next((Path(a).name for a in args.command if a.endswith(".py")), " ".join(args.command)[:40])
    if args.plot is not None:
        worst = [f"{n}: diverges at step {v['first_step_beyond_tolerance']}"
                 for n, v in verdicts.items() if v["diverged"]]
        title = f"{script}: " + ("; ".join(worst) if worst else f"within tolerance {args.tolerance:g}")
        plot(args.plot, {n: runs[n]["losses"] for n in names}, verdicts, tolerance=args.tolerance, title=title,
             skipped={n: runs[n]["skipped_steps"] for n in names})
        report["plot"] = str(args.plot)
    _write_report(args.report, report)
    print(render(report))
    return EXIT_DIVERGED if report["diverged"] else EXIT_CLEAN


def _write_report(path: Path | None, report: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_clean(report), indent=2, allow_nan=False) + "\n", encoding="utf-8")


def render(report: dict[str, Any]) -> str:
    where = "CPU emulation" if report["emulated"] else report["device"]
    ref = report["runs"]["fp32"]["losses"]
    lines = [f"amplint compare: {len(ref)} losses per run, {where}, tolerance {report['tolerance']:g} "
             f"on {report['window']}-step means"]
    for name, v in report["comparisons"].items():
        run = report["runs"][name]
        worst = v["max_relative_deviation"]
        status = "DIVERGED" if v["diverged"] else "ok"
        lines.append(f"  {name:<10} {status:<8} max deviation {worst:.3g} (step {v['max_at_step']}); {v['reason']}"
                     f"; run {run['ended']}")
        if run["skipped_steps"]:
            lines.append(f"  {'':<10} GradScaler skipped step(s) {run['skipped_steps'][:10]}")
        if v["identical"]:
            lines.append(f"  {'':<10} note: identical to fp32, the command may not use mixed precision at all")
    if report.get("plot"):
        lines.append(f"  plot: {report['plot']}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
