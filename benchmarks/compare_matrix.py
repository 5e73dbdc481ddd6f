"""False-alarm and detection rates of `amplint compare` on a matrix of correct and wrong scripts.

    python benchmarks/compare_matrix.py [--steps 30] [--jobs 2] [--devices native,cpu] [--only NAME,...]
                                        [--json OUT.json] [--keep DIR]

Every script in benchmarks/compare_matrix/ is a complete CPU training script written in mixed
precision the way a user writes it (`device = "cuda" if torch.cuda.is_available() else "cpu"`, so
`--device cpu` emulation takes its CUDA path).  compare's contract needs no option in the script:
the fp32 reference, the bf16 variant and the noise runs are made from outside (fp32_mode, perturb).
Each script runs under `amplint compare --bf16`, natively and with `--device cpu`, and each
compared run gets a cell:

- correct_*.py: the run as written (fp16, or bf16 for correct_bf16) and the bf16 run must be ok;
- wrong_*.py: the run as written must be DIVERGED (or FAILED); the bf16 run drops the GradScaler,
  so a scaler bug does not exist there and that cell must be ok, except for the `.half()` model
  (bf16 weights without fp32 master weights are as wrong as fp16 ones): EXPECT_BF16 says which.

False-alarm rate: DIVERGED/FAILED cells among those that must be ok.  Detection rate:
DIVERGED/FAILED cells among those that must diverge.  Runs are independent processes; --jobs runs
that many comparisons side by side (each is a few seconds of CPU per run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
MATRIX = HERE / "compare_matrix"
ROOT = HERE.parent

# The bf16 run (--bf16) of a wrong script: True where the defect survives in bf16.
EXPECT_BF16 = {"wrong_half_model": True}


def expected(script: str, run: str) -> str:
    if script.startswith("correct_"):
        return "ok"
    if run == "as_written":
        return "DIVERGED"
    return "DIVERGED" if EXPECT_BF16.get(script) else "ok"


def compare_one(script: Path, device: str, steps: int, keep: Path | None) -> dict:
    out = (keep or Path(tempfile.mkdtemp(prefix="amplint-matrix-"))) / f"{script.stem}-{device}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "amplint", "compare", "--steps", str(steps), "--bf16", "--report", str(out),
           *(["--device", "cpu"] if device == "cpu" else []), "--", sys.executable, str(script)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.monotonic() - start
    try:
        report = json.loads(out.read_text())
    except (OSError, ValueError):
        report = {}
    cells = []
    for run in ("as_written", "bf16"):
        v = (report.get("comparisons") or {}).get(run)
        if v is None:
            nc = (report.get("not_compared") or {}).get(run)
            verdict = "not compared" if nc else f"no verdict (exit {proc.returncode})"
            cells.append({"run": run, "verdict": verdict, "detail": (nc or {}).get("why", proc.stderr[-300:])})
            continue
        verdict = "FAILED" if v.get("failed") else "DIVERGED" if v["diverged"] else "ok"
        cells.append({"run": run, "verdict": verdict, "max": v["max_relative_deviation"],
                      "allowed_at_max": v.get("allowed_at_max"), "first": v["first_step_beyond_tolerance"],
                      "reason": v["reason"], "lag": v.get("lag", "")})
    return {"script": script.stem, "device": device, "exit": proc.returncode, "seconds": round(seconds, 1),
            "cells": cells, "command": " ".join(["amplint", *cmd[3:-2], "--", "python",
                                                   str(script.relative_to(ROOT))])}


def _fmt(x) -> str:
    return "-" if x is None else x if isinstance(x, str) else f"{x:.3g}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--devices", default="native,cpu", help="native, cpu (the --device cpu emulation) or both")
    p.add_argument("--only", default="", help="comma-separated script stems")
    p.add_argument("--json", type=Path, help="write every cell to this file")
    p.add_argument("--keep", type=Path, help="keep compare's reports in this folder")
    args = p.parse_args(argv)
    scripts = sorted(MATRIX.glob("correct_*.py")) + sorted(MATRIX.glob("wrong_*.py"))
    if args.only:
        wanted = set(args.only.split(","))
        scripts = [s for s in scripts if s.stem in wanted]
    jobs = [(s, d) for s in scripts for d in args.devices.split(",")]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda sd: compare_one(sd[0], sd[1], args.steps, args.keep), jobs))

    print(f"| script | device | run | expected | verdict | max deviation | allowed there | first step beyond |")
    print("|---|---|---|---|---|---:|---:|---:|")
    false_alarms = must_ok = detected = must_diverge = 0
    unjudged = []
    for r in results:
        for c in r["cells"]:
            want = expected(r["script"], c["run"])
            got = c["verdict"]
            flagged = got in ("DIVERGED", "FAILED")
            if got not in ("ok", "DIVERGED", "FAILED"):
                unjudged.append((r["script"], r["device"], c["run"], got, c.get("detail", "")))
            elif want == "ok":
                must_ok += 1
                false_alarms += flagged
            else:
                must_diverge += 1
                detected += flagged
            mark = "" if (want == "ok") != flagged or got not in ("ok", "DIVERGED", "FAILED") else " **x**"
            print(f"| {r['script']} | {r['device']} | {c['run']} | {want} | {got}{mark} | {_fmt(c.get('max'))} | "
                  f"{_fmt(c.get('allowed_at_max'))} | {_fmt(c.get('first'))} |")
    print()
    print(f"false alarms (DIVERGED/FAILED where ok was expected): {false_alarms}/{must_ok}"
          f" = {false_alarms / must_ok if must_ok else 0:.2f}")
    print(f"detection (DIVERGED/FAILED where a defect exists): {detected}/{must_diverge}"
          f" = {detected / must_diverge if must_diverge else 0:.2f}")
    for u in unjudged:
        print(f"unjudged: {u}")
    print(f"compare wall time: {sum(r['seconds'] for r in results):.0f} s over {len(results)} comparisons, --steps {args.steps}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0 if not false_alarms and detected == must_diverge and not unjudged else 1


if __name__ == "__main__":
    sys.exit(main())
