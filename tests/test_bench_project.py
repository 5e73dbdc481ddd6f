"""benchmarks/bench_project.py keeps working: its pieces on a tiny synthetic tree.

The benchmark itself takes minutes on the real corpus; here every piece runs once on a
three-file tree and a two-module project, with this checkout standing in for the baseline
(the figures are then meaningless, the plumbing is not).  The git part makes and reuses a
worktree of a throw-away repository.  No time is asserted anywhere.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the benchmark's baseline is a git worktree")

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_project", ROOT / "benchmarks" / "bench_project.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_project"] = bench  # dataclasses look their module up by name
_spec.loader.exec_module(bench)


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return folder


CORPUS = {
    "pkg/__init__.py": "",
    "pkg/legacy.py": """\
        import torch

        scaler = torch.cuda.amp.GradScaler()
        """,
    "pkg/plain.py": "def add(a, b):\n    return a + b\n",
}
# The unscaled step lives in utils.py: train.py's AMP104 exists only if utils.py was read.
# (A stable rule: the benchmark times the default selection, which has no preview rule.)
PROJECT = {
    "utils.py": """\
        import torch


        def step_optimizer(optimizer):
            return optimizer.step()
        """,
    "train.py": """\
        import torch

        from utils import step_optimizer

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        for step in range(3):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.randn(2, 4)).sum()
            scaler.scale(loss).backward()
            step_optimizer(optimizer)
            scaler.update()
            optimizer.zero_grad()
        """,
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    (r / "a.txt").write_text("one\n")
    git(r, "add", "a.txt")
    git(r, "commit", "-q", "-m", "one")
    return r


def test_baseline_is_a_detached_worktree_made_once_and_reused(repo: Path, tmp_path: Path):
    first = bench.baseline_checkout("HEAD", repo=repo, parent=tmp_path)
    sha = git(repo, "rev-parse", "HEAD")
    assert first == tmp_path / f"amplint-baseline-{sha[:12]}"
    assert git(first, "rev-parse", "HEAD") == sha
    assert subprocess.run(["git", "symbolic-ref", "-q", "HEAD"], cwd=first).returncode != 0  # detached
    (repo / "a.txt").write_text("two\n")
    git(repo, "commit", "-qam", "two")
    again = bench.baseline_checkout(sha[:7], repo=repo, parent=tmp_path)
    assert again == first and (again / "a.txt").read_text() == "one\n"


def test_a_modified_baseline_folder_is_refused_not_reused(repo: Path, tmp_path: Path):
    tree = bench.baseline_checkout("HEAD", repo=repo, parent=tmp_path)
    (tree / "a.txt").write_text("edited\n")
    with pytest.raises(SystemExit, match="not a clean checkout"):
        bench.baseline_checkout("HEAD", repo=repo, parent=tmp_path)
    assert (tree / "a.txt").read_text() == "edited\n"  # nothing overwritten


def test_an_unknown_ref_is_a_clear_error(repo: Path, tmp_path: Path):
    with pytest.raises(SystemExit, match="'no-such-ref' is not a commit"):
        bench.baseline_checkout("no-such-ref", repo=repo, parent=tmp_path)


def test_cpu_time_counts_the_workers_a_run_waits_for():
    # The child burns no CPU itself; its grandchild does, and reports how much.
    burn = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint(time.process_time())"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"
    run = bench.timed("burn", bench.Tree("new", ROOT), [sys.executable, "-c", parent], timeout=60)
    assert run.rc == 0
    assert run.cpu_s >= float(run.stdout.split()[-1])


def test_a_run_past_its_timeout_is_killed_and_flagged():
    run = bench.timed("sleep", bench.Tree("new", ROOT), [sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)
    assert run.rc == "timeout" and not run.finished
    assert run.wall_s < 30


def _run(tree: str, wall: float, cpu: float, rc=0) -> "bench.Run":
    return bench.Run("x", tree, wall, cpu, 0.0, rc)


def test_summary_is_the_median_of_the_pair_ratios():
    pairs = [[_run("baseline", 10, 20), _run("new", 11, 30)],
             [_run("baseline", 20, 20), _run("new", 10, 20)],
             [_run("baseline", 10, 10), _run("new", 30, 10)]]
    s = bench.summarise(pairs)
    assert s["wall_s"]["ratios"] == [1.1, 0.5, 3.0] and s["wall_s"]["ratio_median"] == 1.1
    assert s["cpu_s"]["ratios"] == [1.5, 1.0, 1.0] and s["cpu_s"]["ratio_median"] == 1.0
    assert s["wall_s"]["baseline_median"] == 10 and s["wall_s"]["new_median"] == 11
    assert s["bounded"] == {"baseline": False, "new": False}
    assert bench.summarise([[_run("baseline", 1, 1), _run("new", 5, 5, rc="timeout")]])["bounded"]["new"]


def test_same_findings_needs_every_run_finished_and_equal():
    a, b = _run("new", 1, 1), _run("new", 1, 1)
    a.findings, b.findings = ["x"], ["x"]
    assert bench.same_findings([a, b])
    b.findings = ["y"]
    assert not bench.same_findings([a, b])
    b.findings = None
    assert not bench.same_findings([a, b])


def test_end_to_end_on_a_tiny_tree_with_this_tree_as_baseline(tmp_path: Path, capsys):
    # The corpus holds the two-module project too: the index-off run must miss its AMP104.
    corpus = write(tmp_path / "corpus", {**CORPUS, **{f"pkg/{name}": text for name, text in PROJECT.items()}})
    project = write(tmp_path / "project", PROJECT)
    out = tmp_path / "figures.json"
    rc = bench.main(["--baseline-tree", str(ROOT), "--corpus", str(corpus), "--project-file", str(project / "train.py"),
                     "--rounds", "1", "--file-rounds", "1", "--jobs", "1", "--json", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "goal cold ratio <= 1.2" in printed and "goal single-file warm <= 0.2 s wall" in printed
    report = json.loads(out.read_text())

    c = report["corpus"]
    assert [len(c["runs"][k]) for k in ("cold", "fill", "warm")] == [1, 1, 1]
    assert all(run["rc"] == 0 and run["wall_s"] > 0 for k in ("cold", "fill", "warm") for run in c["runs"][k][0])
    assert c["new_findings_identical"] is True
    assert c["findings_by_code"] == {"new": {"AMP104": 1, "AMP401": 1}, "baseline": {"AMP104": 1, "AMP401": 1}}
    for kind in ("cold", "warm"):
        assert c["summary"][kind]["wall_s"]["ratio_median"] > 0 and len(c["summary"][kind]["cpu_s"]["ratios"]) == 1

    d = report["decomposition"]
    assert "AMP104" in d["baseline_codes"].split(",") and "AMP001" not in d["baseline_codes"].split(",")
    # the default selection: a preview rule is no default code, though enabled in its tier
    assert "AMP101" not in d["baseline_codes"].split(",")
    (same_ref, same_new), = d["runs"]["rules"]
    (off, on), = d["runs"]["reading"]
    assert (same_ref["tree"], same_new["tree"], off["tree"], on["tree"]) == ("baseline", "new", "alone", "new")
    assert all(run["rc"] == 0 for run in (same_ref, same_new, off, on))
    assert d["summary"]["reading"]["cpu_s"]["ratio_median"] > 0
    assert "reading other modules: this tree with the project index on / off" in printed
    assert "{'AMP401': 1}, new {'AMP104': 1, 'AMP401': 1}" in printed  # the index off misses the helper's step

    f = report["single_file"]
    assert set(f["rows"]) >= {"python -c pass", "amplint --version (new)", "train.py cold (new)", "train.py warm (new)",
                              "train.py cold (baseline)", "train.py warm (baseline)"}
    assert f["same_as_whole_project"] is True
    assert [(d["code"], d["location"]["row"]) for d in f["findings_new"]] == [("AMP104", 12)]
    assert len(f["cross_module"]) == 1 and "via utils.step_optimizer" in f["cross_module"][0]
