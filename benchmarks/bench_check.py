"""How fast is `amplint check` on real code, next to the floor and to TorchFix?  (issue 7)

One run times, side by side on the same files:

  floor          bare `libcst.parse_module` of every file, one process (what any libcst
                 tool pays before it knows anything)
  torchfix       TorchFix's own CLI (`torchfix PATHS`), from its own virtualenv
  cold           `amplint check --no-cache` on every file, all cores
  warm           `amplint check` again on the unchanged tree, cache filled by a first run
  transformers   cold, on the transformers sources alone
  dense          `amplint check --no-cache --jobs 1` on the AMP-dense files only (they
                 mention autocast / GradScaler / custom_fwd / custom_bwd), next to
                 `dense-floor`, the bare parse of the same files

Each row reports wall time and CPU time (user + sys of the child processes, from
getrusage), and the peak resident memory of the largest process.  On a shared or busy
machine wall time is mostly noise; CPU time is what the work costs.  It also checks
that cold, warm and `--jobs 1` find exactly the same findings.

Setup (once):  bash benchmarks/fetch_corpus.sh /tmp/corpus
               python -m venv /tmp/torchfix-venv && /tmp/torchfix-venv/bin/pip install torchfix
Run:           python benchmarks/bench_check.py /tmp/corpus/src [--torchfix-scope accelerate]
               python benchmarks/bench_check.py /tmp/corpus/src --transformers-rounds 3
`--torchfix-scope` limits the TorchFix row (and a matching amplint row) to the packages
whose directory names contain the given words: TorchFix needs about a second of CPU per
file, so the whole corpus takes most of an hour on two cores.

Not a test: nothing asserts a time.  Paste the printed table into docs/benchmarks-history.md "## Speed".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AMP_API = re.compile(r"\b(autocast|GradScaler|custom_fwd|custom_bwd)\b")
PARSE_SNIPPET = """
import sys, libcst
for p in sys.stdin.read().splitlines():
    with open(p, encoding="utf-8") as f:
        text = f.read()
    try:
        libcst.parse_module(text)
    except Exception:
        pass
"""


# Runs one command and reports, on its last stderr line, the peak RSS of the largest
# process it started (ru_maxrss of RUSAGE_CHILDREN is per waiting process, so a fresh
# wrapper per row keeps rows apart).
WRAP = """
import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
sys.stderr.write(f"\\nBENCH_MAXRSS_KIB={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n")
sys.exit(rc)
"""
SNAPSHOT: Path | None = None  # a frozen copy of amplint/, so every row runs the same code


def run(name: str, argv: list[str], *, stdin: str | None = None, timeout: float | None = None) -> dict:
    """Run a child; wall, CPU (user+sys of children) and the largest child's peak RSS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ)
    if SNAPSHOT is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(SNAPSHOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", WRAP, *argv], input=stdin, capture_output=True, text=True,
                              timeout=timeout, cwd=SNAPSHOT or ROOT, env=env)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = "timeout", exc.stdout or "", exc.stderr or ""
        out, err = out.decode() if isinstance(out, bytes) else out, err.decode() if isinstance(err, bytes) else err
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = re.findall(r"BENCH_MAXRSS_KIB=(\d+)", err)
    peak = int(found[-1]) / 1024 if found else float("nan")
    row = {"name": name, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak, "rc": rc}
    row["_out"], row["_err"] = out, err
    print(f"  {name:<14} wall {wall:8.2f} s  cpu {cpu:8.2f} s  peak {row['peak_rss_mib']:7.0f} MiB  rc={rc}", flush=True)
    return row


def amplint(*args: str) -> list[str]:
    return [sys.executable, "-m", "amplint", "check", "--isolated", "--exit-zero", "--output-format", "json", *args]


def findings(row: dict) -> list:
    try:
        data = json.loads(row["_out"] or "[]")
    except ValueError:
        return [("unparsable output", row["_out"][:200])]
    return sorted(json.dumps(d, sort_keys=True) for d in data)


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        libcst_version = version("libcst")
    except PackageNotFoundError:
        libcst_version = "?"
    return {
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": model,
        "memory": mem,
        "python": platform.python_version(),
        "libcst": libcst_version,
        "os": platform.platform(),
        "load_avg_start": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?", type=Path, default=Path("/work/corpus/src"))
    ap.add_argument("--jobs", type=int, default=None, help="amplint --jobs (default: all cores)")
    ap.add_argument("--torchfix", default="/tmp/torchfix-venv/bin/torchfix", help="TorchFix executable")
    ap.add_argument("--torchfix-scope", default="", help="comma-separated words: only packages whose directory contains one")
    ap.add_argument("--torchfix-timeout", type=float, default=3600)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--serial", action="store_true", help="also time a cold --jobs 1 run (and compare its findings)")
    ap.add_argument("--transformers-rounds", type=int, default=0, metavar="N",
                    help="only time transformers alone, N times, each next to the dense floor (this VM's speed drifts)")
    args = ap.parse_args(argv)

    corpus = args.corpus.resolve()
    global SNAPSHOT
    # The cache key includes a fingerprint of amplint's own files: in a checkout others
    # are editing, a live tree would turn the warm run into a cold one.
    SNAPSHOT = Path(tempfile.mkdtemp(prefix="amplint-bench-code-"))
    shutil.copytree(ROOT / "amplint", SNAPSHOT / "amplint", ignore=shutil.ignore_patterns("__pycache__"))
    packages = sorted(p for p in corpus.iterdir() if p.is_dir())
    files = sorted(str(p) for p in corpus.rglob("*.py"))
    dense = [f for f in files if AMP_API.search(Path(f).read_text(encoding="utf-8", errors="replace"))]
    transformers = [p for p in packages if p.name.startswith("transformers")]
    jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
    info = machine()
    size = sum(os.path.getsize(f) for f in files)
    print(f"machine: {info}")
    print(f"corpus: {len(files)} files, {size / 1e6:.1f} MB, {len(packages)} packages; AMP-dense: {len(dense)} files")

    rows: dict[str, dict] = {}
    parse = [sys.executable, "-c", PARSE_SNIPPET]
    if args.transformers_rounds:
        for _ in range(args.transformers_rounds):
            run("dense floor", parse, stdin="\n".join(dense))
            run("transformers", amplint("--no-cache", *jobs, *map(str, transformers)))
        return 0
    rows["floor"] = run("floor", parse, stdin="\n".join(files))
    rows["cold"] = run("cold", amplint("--no-cache", *jobs, str(corpus)))
    if args.serial:
        rows["cold-j1"] = run("cold --jobs 1", amplint("--no-cache", "--jobs", "1", str(corpus)))
    cache_dir = Path(tempfile.mkdtemp(prefix="amplint-bench-cache-"))
    try:
        rows["fill"] = run("cache fill", amplint("--cache-dir", str(cache_dir), *jobs, str(corpus)))
        # A file written less than 2 s before its entry is re-hashed once (racy-write rule);
        # the corpus is old, so the warm run below is the steady state.
        rows["warm"] = run("warm", amplint("--cache-dir", str(cache_dir), *jobs, str(corpus)))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    if transformers:
        rows["transformers"] = run("transformers", amplint("--no-cache", *jobs, *map(str, transformers)))
    rows["dense-floor"] = run("dense floor", parse, stdin="\n".join(dense))
    rows["dense"] = run("dense", amplint("--no-cache", "--jobs", "1", *dense))

    scope = [w for w in args.torchfix_scope.split(",") if w]
    tf_paths = [str(p) for p in packages if not scope or any(w in p.name for w in scope)]
    if scope:
        rows["scoped-cold"] = run("amplint scope", amplint("--no-cache", *jobs, *tf_paths))
    if Path(args.torchfix).exists():
        rows["torchfix"] = run("torchfix", [args.torchfix, *tf_paths], timeout=args.torchfix_timeout)
    else:
        print(f"  torchfix       not run: {args.torchfix} does not exist (see the setup lines in this file's docstring)")

    same = findings(rows["cold"]) == findings(rows["warm"]) == findings(rows["fill"]) == findings(rows.get("cold-j1", rows["cold"]))
    n = len(findings(rows["cold"]))
    info["load_avg_end"] = os.getloadavg()

    def ratio(a: str, b: str, key: str) -> str:
        if a not in rows or b not in rows or not rows[b][key]:
            return "n/a"
        return f"{rows[a][key] / rows[b][key]:.1f}x"

    cold_ref = "scoped-cold" if scope else "cold"
    print()
    print(f"findings: {n}; identical cold / cache fill / warm{' / cold --jobs 1' if args.serial else ''}: {same}")
    print(f"load average start {info['load_avg_start']}, end {info['load_avg_end']}")
    print("| run | wall s | CPU s | peak MiB |")
    print("|---|---:|---:|---:|")
    for key, row in rows.items():
        print(f"| {row['name']} | {row['wall_s']:.1f} | {row['cpu_s']:.1f} | {row['peak_rss_mib']:.0f} |")
    print()
    print(f"- TorchFix / amplint cold{' (same packages)' if scope else ''}: wall {ratio('torchfix', cold_ref, 'wall_s')}, CPU {ratio('torchfix', cold_ref, 'cpu_s')}")
    print(f"- cold / warm: wall {ratio('cold', 'warm', 'wall_s')}, CPU {ratio('cold', 'warm', 'cpu_s')}")
    print(f"- cold / floor (bare parse of everything): wall {ratio('cold', 'floor', 'wall_s')}, CPU {ratio('cold', 'floor', 'cpu_s')}")
    print(f"- AMP-dense amplint / bare parse of the same files: wall {ratio('dense', 'dense-floor', 'wall_s')}, CPU {ratio('dense', 'dense-floor', 'cpu_s')}")
    for key, row in rows.items():
        if row["rc"] not in (0, 1, 2):  # 2: some corpus file does not parse (reported, not fatal)
            print(f"  NB: {row['name']} exited {row['rc']}: {row['_err'][-500:]}")
    shutil.rmtree(SNAPSHOT, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "files": len(files), "dense": len(dense), "findings": n,
                                         "identical": same, "rows": {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")}
                                                                     for k, v in rows.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
