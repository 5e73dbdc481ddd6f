"""Step-time ratio of `amplint verify` vs a plain run, on a small transformer (CPU or CUDA).

    python benchmarks/verify_overhead.py [--steps 40] [--rounds 3] [--device cuda] [--width 1024]

Runs the same script plain, under verify, and under verify --nan-guard, interleaved for `rounds`
rounds (so machine load hits all three alike), and prints the median-step-time ratios.
Targets (issue 5): <= 1.10 without --nan-guard, <= 1.5 with it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "_overhead_train.py"


def run(kind: str, out: Path, steps: int, device: str, width: int) -> float:
    base = [sys.executable, str(TRAIN), str(out), str(steps), device, str(width)]
    if kind == "plain":
        cmd = base
    else:
        cmd = [sys.executable, "-m", "amplint", "verify", "--no-progress", *(["--nan-guard"] if kind == "nan-guard" else []), "--", *base]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=HERE.parent)
    return json.loads(out.read_text())["median"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--width", type=int, default=128, help="d_model of the transformer")
    args = ap.parse_args()
    kinds = ("plain", "verify", "nan-guard")
    got: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for k in kinds:
                got[k].append(run(k, Path(tmp) / f"{k}{r}.json", args.steps, args.device, args.width))
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"{args.device}, d_model {args.width}, {args.steps} steps x {args.rounds} rounds")
    print(f"median step time: plain {med['plain'] * 1e3:.2f} ms, verify {med['verify'] * 1e3:.2f} ms, verify --nan-guard {med['nan-guard'] * 1e3:.2f} ms")
    print(f"overhead ratio verify/plain = {med['verify'] / med['plain']:.3f} (target <= 1.10)")
    print(f"overhead ratio verify --nan-guard/plain = {med['nan-guard'] / med['plain']:.3f} (target <= 1.5)")


if __name__ == "__main__":
    main()
