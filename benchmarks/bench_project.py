"""Does the project model cost speed?  This tree beside the commit before it (issue 13).

Two trees of amplint run side by side in one run, interleaved (baseline, new, baseline,
new, ...), because this 2-core machine is shared and its speed drifts within minutes:

  baseline  a detached git worktree of `--baseline REF` (default 636ccbc, the commit
            before the project-model work) in the temporary folder, created by
            `git worktree add --detach` and reused by later runs (`--baseline-tree DIR`
            takes any checkout as it is)
  new       this checkout

Both run as `PYTHONPATH=<tree> python -m amplint` with this interpreter, from a neutral
working directory, so neither the current folder nor an installed amplint stands in
for the tree (each run's first line says which `amplint/__init__.py` was imported).

corpus  `amplint check <transformers> --isolated -j 2 --exit-zero --output-format json`
        cold (`--no-cache`), N pairs; then warm: a cache folder per tree filled by one
        run, and N pairs reading it.  Per run: wall time, CPU time (user+sys of the
        child and the workers it reaped, from os.wait4) and peak RSS; the medians; the
        ratio new/baseline per pair and its median.  Goal: <= 1.2 cold and warm.  The
        new tree's findings must be the same in every cold, fill and warm run.
        Then, cold only, N pairs each, what the cold ratio is made of:
          rules    both trees with `--select` of the baseline's default rules (the five
                   rules added since, AMP109/110/112/206/305, are not run): the same
                   rules, before and after the project model;
          reading  this tree twice, the project index off (benchmarks/check_modules_alone.py:
                   each module alone, as before issue 13) and on: what reading other
                   modules costs, the rest of the tree being equal.
file    `amplint check <project>/train.py --isolated` (a training script whose imports
        span 8 modules of benchmarks/data/project_scale) in fresh processes, cold and
        warm, M rounds each, beside `python -c pass` and `python -m amplint --version`
        (the start-up floor).  Goal: median wall <= 0.5 s cold, <= 0.2 s warm.  It
        prints the findings whose evidence lies in another module (the reading being
        timed) and checks that `check <project>` finds the same in train.py.

Setup (once):  bash benchmarks/fetch_corpus.sh /work/corpus
Run:           python benchmarks/bench_project.py [--rounds 3] [--file-rounds 7] [--json OUT]
               [--baseline REF | --baseline-tree DIR] [--corpus DIR] [--timeout S]
               [--skip-decomposition]
Not a test: nothing asserts a time; exit 0 once the figures are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_check import machine  # noqa: E402  (one description of the machine for every benchmark)

DEFAULT_BASELINE = "636ccbc"
DEFAULT_CORPUS = Path("/work/corpus/src/transformers-5.24.0-py3-none-any")
DEFAULT_PROJECT_FILE = ROOT / "benchmarks" / "data" / "project_scale" / "train.py"
GOALS = {"cold_ratio": 1.2, "warm_ratio": 1.2, "file_cold_wall_s": 0.5, "file_warm_wall_s": 0.2}
# A module that prints where `amplint` came from: the proof that PYTHONPATH picked the tree.
WHICH = "import amplint, sys; sys.stdout.write(amplint.__file__)"


# --- the two trees ------------------------------------------------------------------------

def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def baseline_checkout(ref: str, repo: Path = ROOT, parent: Path | None = None) -> Path:
    """A clean detached worktree of `ref` under `parent` (the temporary folder): made by
    `git worktree add --detach` the first time, reused while it is still that commit,
    unmodified.  A folder of that name in any other state is an error, never overwritten."""
    try:
        sha = git("rev-parse", "--verify", f"{ref}^{{commit}}", cwd=repo)
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"bench_project: {ref!r} is not a commit of {repo}: {exc.stderr.strip()}") from None
    dest = Path(parent or tempfile.gettempdir()) / f"amplint-baseline-{sha[:12]}"
    if dest.exists():
        try:
            head = git("rev-parse", "HEAD", cwd=dest)
            dirty = git("status", "--porcelain", "--untracked-files=no", cwd=dest)
        except subprocess.CalledProcessError:
            head, dirty = "", "not a git checkout"
        if head != sha or dirty:
            raise SystemExit(f"bench_project: {dest} exists but is not a clean checkout of {sha[:12]}; "
                             f"remove it (git worktree remove --force {dest}) or pass --baseline-tree")
        return dest
    git("worktree", "add", "--detach", str(dest), sha, cwd=repo)
    return dest


@dataclass(frozen=True)
class Tree:
    name: str  # "baseline", "new" or "alone" (this tree, the project index off)
    path: Path
    runner: tuple[str, ...] = ("-m", "amplint")  # what the interpreter is given before amplint's arguments

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.path), env.get("PYTHONPATH", "")) if p)
        return env

    def amplint(self, *args: str) -> list[str]:
        return [sys.executable, *self.runner, *args]

    def default_codes(self) -> str:
        """The codes this tree runs by default, comma-separated (read from its registry): a
        preview-tier rule runs only with --preview, so it is none (trees before the tier have none)."""
        code = ("from amplint import registry; from amplint.registry import ALL_RULES; "
                "preview = getattr(registry, 'PREVIEW_CODES', ()); "
                "print(','.join(r.code for r in ALL_RULES if getattr(r, 'default_enabled', True) and r.code not in preview))")
        return subprocess.run([sys.executable, "-c", code], env=self.env(), cwd=tempfile.gettempdir(),
                              check=True, capture_output=True, text=True).stdout.strip()


    def imported_from(self) -> str:
        return subprocess.run([sys.executable, "-c", WHICH], env=self.env(), cwd=tempfile.gettempdir(),
                              check=True, capture_output=True, text=True).stdout


def alone(tree: Tree) -> Tree:
    """`tree` with the project index off (benchmarks/check_modules_alone.py)."""
    return Tree("alone", tree.path, (str(ROOT / "benchmarks" / "check_modules_alone.py"),))


def compile_tree(tree: Tree) -> None:
    """Write amplint's bytecode once, as an installed package has it.  (This machine sets
    PYTHONDONTWRITEBYTECODE=1, which would otherwise recompile the package in every run.)
    Best effort: a tree that cannot be written is timed as it is (recompiled in every run)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree.path / "amplint")], check=False,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, capture_output=True)


# --- one timed run -----------------------------------------------------------------------

@dataclass
class Run:
    label: str
    tree: str
    wall_s: float
    cpu_s: float  # user + sys of the child and of every descendant it waited for
    peak_mib: float  # the largest of those processes
    rc: int | str  # "timeout" when it was killed
    findings: list[str] | None = field(default=None, repr=False)  # canonical JSON of each, sorted
    stdout: str = field(default="", repr=False)
    stderr: str = field(default="", repr=False)

    @property
    def finished(self) -> bool:
        return self.rc != "timeout"


def timed(label: str, tree: Tree, argv: list[str], *, timeout: float, json_out: bool = False) -> Run:
    """Run `argv` in a fresh process of its own group; os.wait4 gives its resources.

    Output goes to files, not pipes, so reading it costs the child nothing and the wait
    is the only thing between its exit and the clock."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=tree.env(), cwd=tempfile.gettempdir(),
                                start_new_session=True)
        expired = threading.Event()

        def kill() -> None:
            expired.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the pool workers too
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait a second time
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    run = Run(label, tree.name, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
              "timeout" if expired.is_set() else proc.returncode, stdout=stdout, stderr=stderr)
    if json_out and run.finished:
        run.findings = canonical_findings(stdout)
    flag = f"  rc={run.rc}" if run.rc != 0 else ""
    count = f"  findings {len(run.findings)}" if run.findings is not None else ""
    print(f"  {label:<22} {tree.name:<8} wall {wall:8.2f} s  cpu {run.cpu_s:8.2f} s  peak {run.peak_mib:6.0f} MiB{count}{flag}",
          flush=True)
    return run


def canonical_findings(stdout: str) -> list[str]:
    try:
        data = json.loads(stdout or "[]")
    except ValueError:
        return [f"unparsable output: {stdout[:200]!r}"]
    return sorted(json.dumps(d, sort_keys=True) for d in data)


# --- the corpus: cold and warm pairs -----------------------------------------------------

def read_everything(folder: Path) -> tuple[int, int]:
    """Read every .py file once, so that the first timed run does not pay the disk."""
    files = size = 0
    for path in folder.rglob("*.py"):
        try:
            size += len(path.read_bytes())
            files += 1
        except OSError:
            pass
    return files, size


def measure_corpus(trees: tuple[Tree, Tree], corpus: Path, *, rounds: int, jobs: int, timeout: float) -> dict:
    """Cold pairs, one cache fill per tree, warm pairs: {"cold": [...], "fill": [...], "warm": [...]},
    each pair a list of two Runs in the order of `trees`."""
    common = ["check", str(corpus), "--isolated", "-j", str(jobs), "--exit-zero", "--output-format", "json"]
    out: dict[str, list] = {"cold": [], "fill": [], "warm": []}
    for r in range(rounds):
        out["cold"].append([timed(f"cold {r + 1}", t, t.amplint(*common, "--no-cache"), timeout=timeout, json_out=True)
                            for t in trees])
    with cache_folders(trees) as caches:
        out["fill"].append([timed("cache fill", t, t.amplint(*common, "--cache-dir", caches[t.name]),
                                  timeout=timeout, json_out=True) for t in trees])
        for r in range(rounds):
            out["warm"].append([timed(f"warm {r + 1}", t, t.amplint(*common, "--cache-dir", caches[t.name]),
                                      timeout=timeout, json_out=True) for t in trees])
    return out


def measure_decomposition(trees: tuple[Tree, Tree], corpus: Path, *, rounds: int, jobs: int, timeout: float) -> dict:
    """Cold pairs that split the cold ratio: {"rules": [...], "reading": [...]} (see the
    module docstring); each pair a list of two Runs, the reference first."""
    common = ["check", str(corpus), "--isolated", "-j", str(jobs), "--exit-zero", "--output-format", "json", "--no-cache"]
    base_codes = trees[0].default_codes()
    out: dict[str, list] = {"rules": [], "reading": [], "baseline_codes": base_codes}
    pairs = {"rules": (trees, ["--select", base_codes]), "reading": ((alone(trees[1]), trees[1]), [])}
    for r in range(rounds):
        for kind, (pair, extra) in pairs.items():
            out[kind].append([timed(f"{kind} {r + 1}", t, t.amplint(*common, *extra), timeout=timeout, json_out=True)
                              for t in pair])
    return out


@contextmanager
def cache_folders(trees: tuple[Tree, Tree]):
    """An empty result-cache folder per tree, removed afterwards: {tree name: path}."""
    caches = {t.name: tempfile.mkdtemp(prefix=f"amplint-bench-cache-{t.name}-") for t in trees}
    try:
        yield caches
    finally:
        for folder in caches.values():
            shutil.rmtree(folder, ignore_errors=True)


def summarise(pairs: list[list[Run]]) -> dict:
    """Medians of each tree's wall and CPU, the new/baseline ratio of every pair, their median.

    A pair with a run killed at the timeout keeps its ratio, flagged as a bound
    (`bounded`): the killed run's time is less than it would have taken."""
    base = [p[0] for p in pairs]
    new = [p[1] for p in pairs]
    out: dict = {}
    for key in ("wall_s", "cpu_s"):
        ratios = [getattr(n, key) / getattr(b, key) for b, n in zip(base, new) if getattr(b, key) > 0]
        out[key] = {
            "baseline": [getattr(b, key) for b in base],
            "new": [getattr(n, key) for n in new],
            "baseline_median": statistics.median(getattr(b, key) for b in base),
            "new_median": statistics.median(getattr(n, key) for n in new),
            "ratios": ratios,
            "ratio_median": statistics.median(ratios) if ratios else float("nan"),
        }
    out["bounded"] = {"baseline": not all(b.finished for b in base), "new": not all(n.finished for n in new)}
    return out


def same_findings(runs: list[Run]) -> bool:
    """Every run finished and reported exactly the same findings."""
    found = [r.findings for r in runs]
    return all(f is not None for f in found) and all(f == found[0] for f in found)


def codes(run: Run) -> dict[str, int]:
    return dict(sorted(Counter(json.loads(f)["code"] for f in run.findings or ()).items()))


# --- one file of a multi-module project --------------------------------------------------

def measure_file(trees: tuple[Tree, Tree], script: Path, *, rounds: int, timeout: float) -> dict:
    """Fresh-process timings of a single-file check, cold and warm, beside the start-up
    floor; rows keyed by name, each a list of Runs (M rounds, interleaved)."""
    check = ["check", str(script), "--isolated", "--exit-zero", "--output-format", "json"]
    rows: dict[str, list[Run]] = {}

    def add(name: str, run: Run) -> None:
        rows.setdefault(name, []).append(run)

    base, new = trees
    for r in range(rounds):
        add("python -c pass", timed(f"start-up {r + 1}", new, [sys.executable, "-c", "pass"], timeout=timeout))
        for t in trees:
            add(f"amplint --version ({t.name})", timed(f"--version {r + 1}", t, t.amplint("--version"), timeout=timeout))
        for t in trees:
            add(f"train.py cold ({t.name})", timed(f"file cold {r + 1}", t, t.amplint(*check, "--no-cache"),
                                                   timeout=timeout, json_out=True))
    with cache_folders(trees) as caches:
        for t in trees:
            add(f"train.py fill ({t.name})", timed("file fill", t, t.amplint(*check, "--cache-dir", caches[t.name]),
                                                   timeout=timeout, json_out=True))
        for r in range(rounds):
            for t in trees:
                add(f"train.py warm ({t.name})", timed(f"file warm {r + 1}", t, t.amplint(*check, "--cache-dir", caches[t.name]),
                                                       timeout=timeout, json_out=True))
    whole = timed("whole project", new, new.amplint("check", str(script.parent), "--isolated", "--no-cache", "--exit-zero",
                                                    "--output-format", "json"), timeout=timeout, json_out=True)
    in_script = sorted(f for f in whole.findings or () if json.loads(f)["filename"] == str(script))
    alone = [r for name, runs in rows.items() if name.endswith("(new)") and "train.py" in name for r in runs]
    return {"rows": rows, "same_as_whole_project": same_findings(alone) and alone[0].findings == in_script,
            "findings_new": [json.loads(f) for f in (alone[0].findings or ())],
            "findings_baseline": [json.loads(f) for f in (rows[f"train.py cold ({base.name})"][0].findings or ())]}


def cross_module(findings: list[dict], script: Path) -> list[str]:
    """`train.py:LINE CODE message (via ...)` for each finding whose notes name another file."""
    lines = []
    for f in sorted(findings, key=lambda f: (f["location"]["row"], f["code"])):
        others = [n for n in f.get("notes") or () if ".py" in n and script.name not in n.split("(")[-1]]
        if others:
            lines.append(f"{Path(f['filename']).name}:{f['location']['row']} {f['code']} {f['message'][:70]}  "
                         f"[{others[0].split(' (')[0]}]")
    return lines


# --- printing ----------------------------------------------------------------------------

def _s(runs: list[Run], key: str) -> str:
    value = statistics.median(getattr(r, key) for r in runs)
    return f"{value:.2f}" + ("+" if not all(r.finished for r in runs) else "")


def print_corpus(corpus: dict, label: str) -> dict:
    summaries = {}
    print(f"\n{label}: each row a pair run back to back (baseline first); ratio = new / baseline")
    print("| run | baseline wall s | new wall s | wall ratio | baseline CPU s | new CPU s | CPU ratio | new peak MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind in ("cold", "fill", "warm"):
        pairs = corpus[kind]
        for b, n in pairs:
            print(f"| {n.label} | {b.wall_s:.2f} | {n.wall_s:.2f} | {n.wall_s / b.wall_s:.2f} | {b.cpu_s:.2f} | "
                  f"{n.cpu_s:.2f} | {n.cpu_s / b.cpu_s:.2f} | {n.peak_mib:.0f} |")
        if kind != "fill" and len(pairs) > 0:
            s = summarise(pairs)
            summaries[kind] = s
            bound = " (a run hit the timeout: a bound)" if any(s["bounded"].values()) else ""
            print(f"| **{kind} median** | {s['wall_s']['baseline_median']:.2f} | {s['wall_s']['new_median']:.2f} | "
                  f"**{s['wall_s']['ratio_median']:.2f}** | {s['cpu_s']['baseline_median']:.2f} | "
                  f"{s['cpu_s']['new_median']:.2f} | **{s['cpu_s']['ratio_median']:.2f}**{bound} | |")
    for kind, goal in (("cold", GOALS["cold_ratio"]), ("warm", GOALS["warm_ratio"])):
        if kind in summaries:
            w, c = summaries[kind]["wall_s"]["ratio_median"], summaries[kind]["cpu_s"]["ratio_median"]
            verdict = "met" if max(w, c) <= goal else "NOT met"
            print(f"- goal {kind} ratio <= {goal}: {verdict} (median of pair ratios: wall {w:.2f}, CPU {c:.2f})")
    return summaries


def print_decomposition(measured: dict) -> dict:
    """The cold ratio's parts, each a table of pairs and its median."""
    summaries = {}
    titles = {
        "rules": f"same rules in both trees (`--select {measured['baseline_codes']}`): new / baseline",
        "reading": "reading other modules: this tree with the project index on / off (same rules: the default)",
    }
    for kind in ("rules", "reading"):
        pairs = measured[kind]
        print(f"\ncold, {titles[kind]}")
        print("| run | reference wall s | new wall s | wall ratio | reference CPU s | new CPU s | CPU ratio | findings ref / new |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for b, n in pairs:
            print(f"| {n.label} ({b.tree} / {n.tree}) | {b.wall_s:.2f} | {n.wall_s:.2f} | {n.wall_s / b.wall_s:.2f} | "
                  f"{b.cpu_s:.2f} | {n.cpu_s:.2f} | {n.cpu_s / b.cpu_s:.2f} | "
                  f"{len(b.findings or ())} / {len(n.findings or ())} |")
        if pairs:
            s = summarise(pairs)
            summaries[kind] = s
            print(f"| **median** | {s['wall_s']['baseline_median']:.2f} | {s['wall_s']['new_median']:.2f} | "
                  f"**{s['wall_s']['ratio_median']:.2f}** | {s['cpu_s']['baseline_median']:.2f} | "
                  f"{s['cpu_s']['new_median']:.2f} | **{s['cpu_s']['ratio_median']:.2f}** | |")
            print(f"- findings by code: reference {codes(pairs[0][0])}, new {codes(pairs[0][1])}")
    return summaries


def print_file(result: dict, script: Path) -> None:
    rows = result["rows"]
    print(f"\nsingle file: {script} (fresh process per run; median of {len(rows['python -c pass'])})")
    print("| run | median wall s | min wall s | max wall s | median CPU s |")
    print("|---|---:|---:|---:|---:|")
    for name, runs in rows.items():
        walls = [r.wall_s for r in runs]
        print(f"| {name} | {_s(runs, 'wall_s')} | {min(walls):.2f} | {max(walls):.2f} | {_s(runs, 'cpu_s')} |")
    cold = statistics.median(r.wall_s for r in rows["train.py cold (new)"])
    warm = statistics.median(r.wall_s for r in rows["train.py warm (new)"])
    for what, value, goal in (("cold", cold, GOALS["file_cold_wall_s"]), ("warm", warm, GOALS["file_warm_wall_s"])):
        print(f"- goal single-file {what} <= {goal} s wall: {'met' if value <= goal else 'NOT met'} (median {value:.2f} s)")
    via = cross_module(result["findings_new"], script)
    print(f"- findings in {script.name}: new {len(result['findings_new'])} ({len(via)} with evidence in another module), "
          f"baseline {len(result['findings_baseline'])}; new alone = whole-project check of {script.parent.name}: "
          f"{result['same_as_whole_project']}")
    for line in via:
        print(f"    {line}")


def _plain(value):
    if isinstance(value, Run):
        return {k: v for k, v in asdict(value).items() if k not in ("findings", "stdout", "stderr")}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git ref of the baseline (default: %(default)s)")
    ap.add_argument("--baseline-tree", type=Path, help="use this checkout as the baseline, as it is (no git)")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="tree to check (default: transformers of the corpus)")
    ap.add_argument("--project-file", type=Path, default=DEFAULT_PROJECT_FILE, help="the single file to check")
    ap.add_argument("--rounds", type=int, default=3, help="cold and warm pairs on the corpus")
    ap.add_argument("--file-rounds", type=int, default=7, help="rounds of the single-file rows")
    ap.add_argument("--jobs", type=int, default=2, help="amplint -j on the corpus (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds before a run is killed (its figure is then a bound)")
    ap.add_argument("--skip-corpus", action="store_true", help="only the single-file rows")
    ap.add_argument("--skip-decomposition", action="store_true", help="no same-rules and project-index-off pairs")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)

    corpus = args.corpus.resolve()
    script = args.project_file.resolve()
    if not args.skip_corpus and not corpus.is_dir():
        raise SystemExit(f"bench_project: no corpus at {corpus} (bash benchmarks/fetch_corpus.sh /work/corpus)")
    if not script.is_file():
        raise SystemExit(f"bench_project: no file {script}")
    baseline_path = args.baseline_tree.resolve() if args.baseline_tree else baseline_checkout(args.baseline)
    trees = (Tree("baseline", baseline_path), Tree("new", ROOT))
    info = machine()
    info["commits"] = {}
    for t in trees:
        compile_tree(t)
        try:
            info["commits"][t.name] = git("rev-parse", "--short", "HEAD", cwd=t.path) + (
                " + uncommitted changes under amplint/" if git("status", "--porcelain", "--", "amplint", cwd=t.path) else "")
        except (subprocess.CalledProcessError, FileNotFoundError):
            info["commits"][t.name] = "not a git checkout"
        print(f"{t.name:<8} {info['commits'][t.name]:<12} imports {t.imported_from()}")
    print(f"machine: {info['cores']} cores, {info['cpu']}, Python {info['python']}, libcst {info['libcst']}; "
          f"load average {' '.join(f'{x:.1f}' for x in info['load_avg_start'])}")

    report: dict = {"machine": info, "goals": GOALS, "trees": {t.name: str(t.path) for t in trees}}
    if not args.skip_corpus:
        files, size = read_everything(corpus)
        print(f"\ncorpus: {corpus} ({files} files, {size / 1e6:.1f} MB), -j {args.jobs}, {args.rounds} rounds")
        measured = measure_corpus(trees, corpus, rounds=args.rounds, jobs=args.jobs, timeout=args.timeout)
        new_runs = [p[1] for kind in ("cold", "fill", "warm") for p in measured[kind]]
        base_runs = [p[0] for kind in ("cold", "fill", "warm") for p in measured[kind]]
        summaries = print_corpus(measured, f"{corpus.name}, `check --isolated -j {args.jobs} --exit-zero`")
        identical = same_findings(new_runs)
        print(f"- new tree's findings identical cold / cache fill / warm: {identical}; "
              f"new {codes(new_runs[0])}, baseline {codes(base_runs[0])} "
              f"(baseline identical across its runs: {same_findings(base_runs)})")
        report["corpus"] = {"path": str(corpus), "files": files, "bytes": size, "jobs": args.jobs, "rounds": args.rounds,
                            "runs": _plain(measured), "summary": summaries, "new_findings_identical": identical,
                            "findings_by_code": {"new": codes(new_runs[0]), "baseline": codes(base_runs[0])}}
        if not args.skip_decomposition:
            parts = measure_decomposition(trees, corpus, rounds=args.rounds, jobs=args.jobs, timeout=args.timeout)
            report["decomposition"] = {"runs": _plain({k: v for k, v in parts.items() if k != "baseline_codes"}),
                                       "baseline_codes": parts["baseline_codes"], "summary": print_decomposition(parts)}
    print(f"\nsingle file, {args.file_rounds} rounds:")
    single = measure_file(trees, script, rounds=args.file_rounds, timeout=args.timeout)
    print_file(single, script)
    info["load_avg_end"] = os.getloadavg()
    print(f"\nload average at the end {' '.join(f'{x:.1f}' for x in info['load_avg_end'])} "
          f"(on {info['cores']} cores: wall times above include waiting for a core)")
    report["single_file"] = {"path": str(script), "rounds": args.file_rounds, **_plain(single),
                             "cross_module": cross_module(single["findings_new"], script)}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
