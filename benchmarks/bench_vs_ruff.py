"""amplint beside the linter users already run: cold, warm and one-file ratios, measured side by side.

For each tree (a wheel's sources from benchmarks/fetch_corpus.sh), in interleaved rounds:

  ruff cold      ruff check --isolated --no-cache --select ALL --exit-zero -q TREE
  amplint cold   amplint check --isolated --no-cache --exit-zero -q -j JOBS TREE
  amplint warm   the same with a cache filled by the round's first (cache) run
  one file       amplint check --isolated --exit-zero -q FILE (pre-commit's shape; the project
                 index reads what FILE imports), cold, beside a process that only imports
                 libcst and parses FILE

and prints the median wall time of each and the ratios (amplint cold / ruff cold, warm / cold,
one file / libcst parse).  Interleaving and medians are there because the machine is shared:
read the ratios, not the seconds.  Not a test: nothing asserts a time.

    python benchmarks/bench_vs_ruff.py /work/corpus/src/transformers-5.24.0-py3-none-any \
        [--file transformers/trainer.py] [--rounds 3] [--jobs 2] [--ruff ruff]

Ruff uses every core it is given; amplint uses `--jobs` worker processes (default: the cores).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], cwd: Path | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("--file", help="a file of the tree (relative) for the one-file ratio")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--ruff", default=shutil.which("ruff") or "ruff")
    args = parser.parse_args(argv)
    amplint = [sys.executable, "-m", "amplint", "check", "--isolated", "--exit-zero", "-q"]
    times: dict[str, list[float]] = {k: [] for k in ("ruff", "cold", "warm", "file", "parse")}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            cache = Path(tmp) / f"cache{r}"
            times["ruff"].append(timed([args.ruff, "check", "--isolated", "--no-cache", "--select", "ALL",
                                        "--exit-zero", "-q", str(args.tree)]))
            times["cold"].append(timed([*amplint, "--no-cache", "-j", str(args.jobs), str(args.tree)]))
            timed([*amplint, "--cache-dir", str(cache), "-j", str(args.jobs), str(args.tree)])  # fill
            times["warm"].append(timed([*amplint, "--cache-dir", str(cache), "-j", str(args.jobs), str(args.tree)]))
            if args.file:
                target = args.tree / args.file
                times["file"].append(timed([*amplint, "--no-cache", str(target)]))
                times["parse"].append(timed([sys.executable, "-c",
                                             "import sys, libcst; libcst.parse_module(open(sys.argv[1], encoding='utf-8').read())",
                                             str(target)]))
    med = {k: statistics.median(v) for k, v in times.items() if v}
    print(f"tree: {args.tree}  rounds: {args.rounds}  amplint -j {args.jobs}  ruff: "
          f"{subprocess.run([args.ruff, '--version'], capture_output=True, text=True).stdout.strip()}")
    print(f"{'measure':<34} {'median s':>9}   all runs")
    labels = {"ruff": "ruff --select ALL, cold", "cold": "amplint cold", "warm": "amplint warm",
              "file": f"amplint one file, cold ({args.file})", "parse": "import libcst + parse that file"}
    for key, label in labels.items():
        if key in med:
            print(f"{label:<34} {med[key]:>9.2f}   {', '.join(f'{t:.2f}' for t in times[key])}")
    print(f"ratio amplint cold / ruff cold: {med['cold'] / med['ruff']:.2f}   (goal <= 2.0)")
    print(f"ratio amplint warm / amplint cold: {med['warm'] / med['cold']:.3f}   (goal <= 0.05)")
    if "file" in med:
        print(f"ratio one file / libcst parse: {med['file'] / med['parse']:.2f}   (goal <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
