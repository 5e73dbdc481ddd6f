"""What placing fixes exactly costs (issue 17): a fix-dense module, this tree beside another.

    python benchmarks/bench_fix_placement.py [--baseline /work/main] [--rounds 5] [--functions 300]

Writes a module of N training helpers, each with a multi-line deprecated GradScaler call
and a deprecated autocast (2N AMP401 findings, all with fixes), then times
`check_source(..., select=["AMP401"])` in fresh interpreters of both trees, alternating,
best of 5 per interpreter, and prints the best of each tree and their ratio.  The fixes
are placed by one print of the module that records both position kinds
(amplint/edits.py `NodeRanges`) and verified node by node.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TIMER = """
import sys, time
from amplint.engine import check_source
src = open(sys.argv[1]).read()
best = 1e9
for _ in range(5):
    t = time.perf_counter()
    found = check_source(src, "many.py", select=["AMP401"])
    best = min(best, time.perf_counter() - t)
print(best, len(found), sum(1 for d in found if d.fix))
"""


def module(functions: int) -> str:
    lines = ["import torch", ""]
    for i in range(functions):
        lines += [
            f"def step_{i}(model, x):",
            f"    scaler = torch.cuda.amp.GradScaler(init_scale=2.0 ** {i % 16},",
            f"                                       growth_interval={i + 1})",
            "    with torch.cuda.amp.autocast(dtype=torch.float16):",
            "        loss = model(x).sum()",
            "    return scaler, loss",
            "",
        ]
    return "\n".join(lines) + "\n"


def run(tree: Path, path: Path) -> tuple[float, int, int]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", TIMER, str(path)], capture_output=True, text=True, env=env,
                         cwd=tempfile.gettempdir(), check=True).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, default=Path("/work/main"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--functions", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "many.py"
        path.write_text(module(args.functions))
        best = {"this tree": [], "baseline": []}
        counts = {}
        for _ in range(args.rounds):
            for name, tree in (("baseline", args.baseline), ("this tree", ROOT)):
                seconds, found, fixed = run(tree, path)
                best[name].append(seconds)
                counts[name] = (found, fixed)
    for name, times in best.items():
        print(f"{name:10s} {min(times) * 1000:7.0f} ms  (findings, with fixes: {counts[name]})")
    print(f"ratio this tree / baseline: {min(best['this tree']) / min(best['baseline']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
