"""No input takes the run down (issue 17, items 5-7): a dead worker costs its file, never the run.

The crashes here are real ones: libcst's native parser overflowing its stack on a chain
the guard would refuse (the guard is lifted by a small driver, as a libcst bug the guard
does not know would), a worker killed by a signal, an allocation failing under
`ulimit -v`.  The pool's own contract is tested directly on small functions.
"""

from __future__ import annotations

import faulthandler
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amplint import pool

ROOT = Path(__file__).resolve().parent.parent
DEPRECATED = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
# A chain CPython compiles and libcst's native parser cannot take on an 8 MiB stack.
CRASHES_LIBCST = "import torch\nscaler = torch.cuda.amp.GradScaler()\nx = " + " and ".join(["a"] * 30_000) + "\n"
LINUX = sys.platform.startswith("linux")

# Runs `amplint` with some of its protections lifted, as a defect nobody knows yet would:
# `guard` lifts the parse guard, `memory` the address-space estimate, `slow=NAME` makes
# the check of NAME take a minute (something to be killed in the middle of).
DRIVER = '''
import sys, time
from amplint import cli, parse_limits, runner
lifted = sys.argv[1].split(",")
if "guard" in lifted:
    parse_limits.plan_parse = lambda text: parse_limits.ParsePlan(None, levels=0)  # the caller's stack
if "memory" in lifted:
    parse_limits.address_space_problem = lambda text: None
for item in lifted:
    if item.startswith("slow="):
        check_file, slow = runner.check_file, item[5:]
        def check_file_slowly(path, *args, **kwargs):
            if path.name == slow:
                print("slow file started", flush=True)
                time.sleep(60)
            return check_file(path, *args, **kwargs)
        runner.check_file = check_file_slowly
sys.exit(cli.main(sys.argv[2:]))
'''


def driven(tmp_path: Path, lifted: str, *args: str, preexec_fn=None, timeout: float = 120):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(driver), lifted, "check", "--isolated", "--no-cache", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec_fn)


def _tree(tmp_path: Path, bad_name: str, bad_text: str) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.py", "m.py", "z.py"):
        (src / name).write_text(DEPRECATED)
    (src / bad_name).write_text(bad_text)
    return src


# --- the pool's contract ------------------------------------------------------------------------


def _echo(item):
    return item, os.getpid()


def _segfault_on_three(item):
    if item == 3:
        faulthandler.disable()  # pytest's would print the worker's stack: noise, not news
        os.kill(os.getpid(), signal.SIGSEGV)
    return item


def _killed_on_odd(item):
    if item % 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return item


@pytest.mark.parametrize("chunksize", [1, 4])
def test_every_item_is_answered_once(chunksize: int) -> None:
    out = dict(pool.run_isolated(_echo, list(range(40)), workers=3, chunksize=chunksize))
    assert sorted(out) == list(range(40))
    assert all(out[i][0] == i for i in out)


@pytest.mark.parametrize("chunksize", [1, 3])
def test_a_worker_that_crashes_costs_its_item_only(chunksize: int) -> None:
    out = dict(pool.run_isolated(_segfault_on_three, list(range(10)), workers=2, chunksize=chunksize))
    assert sorted(out) == list(range(10))
    assert out[3] == pool.WorkerDied(-signal.SIGSEGV)
    assert str(out[3]) == "was killed by SIGSEGV"
    assert all(out[i] == i for i in range(10) if i != 3)  # the rest of its batch went to a new worker


def test_many_deaths_one_after_another() -> None:
    out = dict(pool.run_isolated(_killed_on_odd, list(range(12)), workers=2, chunksize=2))
    assert {i: out[i] for i in range(0, 12, 2)} == {i: i for i in range(0, 12, 2)}
    assert all(out[i] == pool.WorkerDied(-signal.SIGKILL) for i in range(1, 12, 2))


def test_fresh_interpreters_where_fork_is_unsafe() -> None:
    """macOS, or a parent running other threads, gets spawned workers: the same answers."""
    assert dict(pool.run_isolated(len, ["ab", "c", ""], workers=2, start_method="spawn")) == {0: 2, 1: 1, 2: 0}


def test_workers_recycle_when_they_grow() -> None:
    """A worker past its memory budget after an item leaves and is replaced (here: after each)."""
    out = dict(pool.run_isolated(_echo, list(range(12)), workers=2, chunksize=3, recycle_rss=0))
    assert sorted(out) == list(range(12))
    assert len({pid for _, pid in out.values()}) == 12  # one fresh process per item


# --- a native crash in the real program ----------------------------------------------------------


@pytest.mark.parametrize("jobs", ["2", "3"])
def test_a_segfault_in_libcst_is_that_files_error_and_the_others_finish(tmp_path: Path, jobs: str) -> None:
    src = _tree(tmp_path, "deep.py", CRASHES_LIBCST)
    proc = driven(tmp_path, "guard", "--jobs", jobs, "src")
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)  # not -11: the run survived
    assert proc.stderr.splitlines() == [
        "src/deep.py:1:1: error: not analysed: the process checking it was killed by SIGSEGV "
        "(a crash in native code, most likely libcst's parser: please report this file)"]
    assert sorted(line.split(":")[0] for line in proc.stdout.splitlines() if "AMP401" in line) == [
        "src/a.py", "src/m.py", "src/z.py"]
    assert src.exists()


def test_one_file_alone_is_checked_in_a_worker_too(tmp_path: Path) -> None:
    (tmp_path / "deep.py").write_text(CRASHES_LIBCST)
    proc = driven(tmp_path, "guard", "deep.py")
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "deep.py:1:1: error: not analysed: the process checking it was killed by SIGSEGV" in proc.stderr


def test_the_guard_itself_refuses_the_chain_in_process(tmp_path: Path) -> None:
    """With the guard in place nothing crashes, not even with --jobs 1 (where nothing isolates)."""
    (tmp_path / "deep.py").write_text(CRASHES_LIBCST)
    (tmp_path / "a.py").write_text(DEPRECATED)
    proc = driven(tmp_path, "", "--jobs", "1", ".")
    assert proc.returncode == 2, proc.stderr
    assert "deep.py:3:1: error: not analysed: nested 30,002 levels deep as libcst" in proc.stderr
    assert "a.py:3:10: AMP401" in proc.stdout


# --- memory -----------------------------------------------------------------------------------


def _big_amp_module(tmp_path: Path) -> Path:
    """About 240,000 tokens with one finding: some 600 MB to check (4 KiB a token by the estimate)."""
    body = "".join(f"value_{i} = compute({i}, {i} + 1, key=k{i}, scale=s[{i}] * 2.0)\n" for i in range(12_000))
    big = tmp_path / "src" / "big.py"
    big.write_text(DEPRECATED + body)
    return big


def _address_space(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.skipif(not LINUX, reason="the address-space estimate reads /proc")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_under_ulimit_v_a_file_too_large_is_its_error(tmp_path: Path, jobs: str) -> None:
    _tree(tmp_path, "a.py", DEPRECATED)
    _big_amp_module(tmp_path)
    proc = driven(tmp_path, "", "--jobs", jobs, "src", preexec_fn=_address_space(600 << 20))
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    (error,) = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert error.startswith("src/big.py:1:1: error: not analysed: at about 4 KiB a token it needs more memory "
                            "than the address-space limit (ulimit -v) leaves (")
    assert proc.stdout.count("AMP401") == 3  # a.py, m.py, z.py: big.py's is not reported


@pytest.mark.skipif(not LINUX, reason="needs fork and RLIMIT_AS")
def test_an_allocation_failing_in_a_worker_costs_that_file_only(tmp_path: Path) -> None:
    """Without the estimate, libcst aborts (or Python raises MemoryError) in the worker."""
    _tree(tmp_path, "a.py", DEPRECATED)
    _big_amp_module(tmp_path)
    proc = driven(tmp_path, "memory", "--jobs", "2", "src", preexec_fn=_address_space(350 << 20))
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    (error,) = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert error.startswith("src/big.py:1:1: error: not analysed: "), error
    assert "SIGABRT" in error or "out of memory" in error, error
    assert proc.stdout.count("AMP401") == 3


def test_the_token_limit_is_a_clear_error_and_configurable(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    proc = driven(tmp_path, "", "--max-file-tokens", "10", "a.py")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "a.py:1:1: error: not analysed: too large (more than 10 tokens, the limit: max-file-tokens in "
        "[tool.amplint], or --max-file-tokens)"]
    assert driven(tmp_path, "", "--max-file-tokens", "0", "a.py").returncode == 1  # 0: no limit
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\nmax-file-tokens = 10\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    configured = subprocess.run([sys.executable, "-m", "amplint", "check", "--no-cache", "a.py"], cwd=tmp_path,
                                env=env, capture_output=True, text=True, timeout=60)
    assert configured.returncode == 2 and "more than 10 tokens, the limit" in configured.stderr


# --- workers die with their parent --------------------------------------------------------------


def _children(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.add(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not LINUX, reason="reads /proc to find the workers")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_workers_die_with_their_parent(tmp_path: Path, sig: signal.Signals) -> None:
    _tree(tmp_path, "slow.py", DEPRECATED)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, str(driver), "slow=slow.py", "check", "--isolated", "--no-cache",
                               "--jobs", "2", "src"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    workers: set[int] = set()
    try:
        assert parent.stdout.readline() == "slow file started\n"  # a worker is busy in the middle of a file
        workers = _children(parent.pid)
        assert workers, "the pool's workers should be the parent's children"
        parent.send_signal(sig)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "workers outlived their parent"
    finally:
        parent.kill()
        parent.wait(timeout=30)
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
