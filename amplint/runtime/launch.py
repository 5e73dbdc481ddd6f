"""Run the user's command with the bootstrap active in every Python process; merge the evidence.

`run_instrumented(command, steps=..., device=..., out_dir=...)` is the one way the runtime starts a
training command (verify and compare both use it).  Configuration travels in `AMPLINT_*`
environment variables, so `python`, `torchrun` and `accelerate launch` behave the same.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

BOOT_DIR = Path(__file__).resolve().parent / "_boot"
AMPLINT_HOME = Path(__file__).resolve().parents[2]


@dataclass
class RunOutcome:
    """What one instrumented run produced.

    exit_code: the command's own status (negative signals mapped to 128+N); 0 when every process
    that ended early was stopped by the step budget.  processes: one evidence dict per instrumented
    process that wrote one, each with `label` ("main", "rank0", ...).  observations: all processes'
    observations, each with a "rank" key.  extras: extension data, {key: {label: value}}.
    """

    command: list[str]
    exit_code: int
    returncode: int
    steps: int
    ended: str
    device: str
    emulated: bool
    processes: list[dict[str, Any]] = field(default_factory=list)
    observations: list[dict[str, Any]] = field(default_factory=list)
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    timed_out: bool = False
    interrupted_by: str | None = None  # "SIGINT" / "SIGTERM": a signal sent to verify itself

    @property
    def stopped_by_budget(self) -> bool:
        return any(p.get("stopped_by_budget") for p in self.processes)


def script_of(command: list[str]) -> str | None:
    """The training script a command runs (`python x.py`, `torchrun ... x.py`, `accelerate launch x.py`)."""
    for arg in command[1:] if command and not command[0].endswith(".py") else command:
        if arg.endswith(".py") and not arg.startswith("-"):
            return arg
    return None


def build_env(
    out_dir: Path,
    *,
    steps: int | None,
    device: str | None,
    script: str | None,
    extra_env: dict[str, str] | None = None,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), old) if p)
    env.update(
        AMPLINT_ACTIVE="1",
        AMPLINT_OUT=str(out_dir),
        AMPLINT_HOME=str(AMPLINT_HOME),
    )
    for key in ("AMPLINT_STEPS", "AMPLINT_DEVICE", "AMPLINT_SCRIPT", "AMPLINT_ROOT"):
        env.pop(key, None)
    if steps is not None:
        env["AMPLINT_STEPS"] = str(steps)
    if device:
        env["AMPLINT_DEVICE"] = device
    if script:
        env["AMPLINT_SCRIPT"] = str(Path(script).resolve())
        env["AMPLINT_ROOT"] = str(Path(script).resolve().parent)
    env.update(extra_env or {})
    return env


def run_instrumented(
    command: list[str],
    *,
    steps: int | None,
    device: str | None,
    out_dir: Path,
    extra_env: dict[str, str] = {},  # noqa: B006 - read only
    on_progress: Callable[[int], None] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
    agenda: list[tuple[str, int, int]] | None = None,
) -> RunOutcome:
    """Run `command` under the bootstrap; wait; merge the per-process evidence in `out_dir`.

    The command runs as a process group of its own (`supervise.Supervisor`): a signal to this
    process, or `timeout` seconds, ends all of it and the outcome says so (`interrupted_by`,
    `timed_out`).  `agenda`: (file, line, end_line) spans whose execution the children track."""
    from amplint.runtime.reach import AGENDA_ENV, write_agenda
    from amplint.runtime.supervise import Supervisor

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("evidence-*.json"):
        old.unlink()
    script = script_of(command)
    env = build_env(out_dir, steps=steps, device=device, script=script, extra_env=extra_env)
    if agenda:
        write_agenda(str(out_dir / "agenda.json"), agenda)
        env[AGENDA_ENV] = str(out_dir / "agenda.json")
    start = time.monotonic()
    supervisor = Supervisor(command, env=env, cwd=cwd, timeout=timeout)
    try:
        supervisor.start()
    except OSError as exc:
        return RunOutcome(command, 127, 127, 0, f"could not start: {exc}", device or "native", device == "cpu", errors=[str(exc)])
    stop = threading.Event()
    if on_progress is not None:
        t = threading.Thread(target=_poll, args=(out_dir, on_progress, stop), daemon=True)
        t.start()
    try:
        ending = supervisor.wait()
    finally:
        stop.set()
    stragglers = end_stragglers(out_dir) if ending.reason is not None else []
    outcome = collect(out_dir, command, ending.returncode, device)
    outcome.wall_s = time.monotonic() - start
    outcome.timed_out = ending.timed_out
    if ending.signal_received is not None:
        outcome.interrupted_by = signal.Signals(ending.signal_received).name
    if ending.timed_out:
        outcome.ended = f"timed out after {timeout:g} s ({outcome.ended})"
    elif outcome.interrupted_by:
        outcome.ended = f"{outcome.interrupted_by} sent to verify ({outcome.ended})"
    if ending.killed_leftovers or stragglers:
        outcome.errors.append("processes still running after the command ended were killed")
    if on_progress is not None:
        on_progress(outcome.steps)
    return outcome


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has ended: only its parent's wait is missing
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def end_stragglers(out_dir: Path, grace: float = 2.0) -> list[int]:
    """End the command's Python processes that still run after it was ended (timeout, signal).

    The process group covers what the command starts, except what starts a session of its own
    (`start_new_session=True`, as torch elastic does for binary entry points): such a process
    outlived verify and printed its KeyboardInterrupt traceback after verify had exited.  Every
    instrumented process leaves an `alive-PID` marker in `out_dir` while it runs; each one still
    running gets SIGINT (what the group got), then SIGTERM, then SIGKILL, `grace` seconds apart.
    Returns the pids signalled."""
    pids = []
    for marker in Path(out_dir).glob("alive-*"):
        try:
            pid = int(marker.name.split("-", 1)[1])
        except ValueError:
            continue
        if pid != os.getpid() and _running(pid):
            pids.append(pid)
    signalled: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if pids:
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    continue
                if pid not in signalled:
                    signalled.append(pid)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = [p for p in pids if _running(p)]
        if not pids:
            break
    return signalled


def _poll(out_dir: Path, on_progress, stop: threading.Event) -> None:
    last = -1
    while not stop.wait(0.25):
        steps = max((_read(p).get("steps", 0) for p in out_dir.glob("evidence-*.json")), default=0)
        if steps != last:
            last = steps
            on_progress(steps)


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def collect(out_dir: Path, command: list[str], returncode: int, device: str | None) -> RunOutcome:
    """Merge every process's evidence; label ranks; decide why the run ended."""
    procs = [p for p in (_read(f) for f in sorted(Path(out_dir).glob("evidence-*.json"))) if p]
    procs.sort(key=lambda p: (p.get("rank") is None, p.get("rank") or 0, p.get("pid", 0)))
    labels: dict[str, int] = {}
    for p in procs:
        label = p.get("label") or "main"
        labels[label] = labels.get(label, 0) + 1
        if labels[label] > 1:
            label = f"{label}.{p.get('pid')}"
        p["label"] = label
    observations = [dict(o, rank=p["label"]) for p in procs for o in p.get("observations", [])]
    extras: dict[str, dict[str, Any]] = {}
    for p in procs:
        for key, value in (p.get("extra") or {}).items():
            extras.setdefault(key, {})[p["label"]] = value
    steps = max((p.get("steps", 0) for p in procs), default=0)
    budget = any(p.get("stopped_by_budget") for p in procs)
    status = exit_status(returncode)
    if budget and status != 0 and all(p.get("stopped_by_budget") or p.get("ended") == "completed" for p in procs):
        status = 0  # a launcher may report the budget's early exit of a rank as a failure
    ended = _ended(procs, status, steps)
    return RunOutcome(
        command=list(command),
        exit_code=status,
        returncode=returncode,
        steps=steps,
        ended=ended,
        device=device or "native",
        emulated=device == "cpu",
        processes=procs,
        observations=observations,
        extras=extras,
        errors=[e for p in procs for e in p.get("errors", [])],
    )


KILLED = "killed before it could write its evidence"


# Endings that are a success: a process that calls `sys.exit(0)` (or `sys.exit()`, `os._exit(0)`)
# finished as it meant to; multiprocessing children end that way.
_CLEAN_EXITS = frozenset({"sys.exit(0)", "sys.exit(None)", "sys.exit(False)", "os._exit(0)"})


def _failed(reason: str) -> bool:
    return not (reason == "completed" or reason.startswith("stopped after") or reason in _CLEAN_EXITS)


def rank_ends(procs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """How each process (rank) ended, in rank order; the one that failed first is marked.

    The first failure is the earliest by the time each process recorded its ending (its exception
    reaching the top, sys.exit, a signal): when one rank dies, the others fail after it (a gloo or
    NCCL error, torchrun's SIGTERM), so the first failure is the cause and the rest consequences.
    A process killed before it wrote its ending has no time and counts as the latest."""
    ends = [{"rank": p.get("label"), "ended": p.get("ended") or KILLED, "steps": p.get("steps", 0),
             "at": p.get("ended_at")} for p in procs]
    failed = [e for e in ends if _failed(e["ended"])]
    first = min(failed, key=lambda e: (e["at"] is None, e["at"] or 0.0), default=None)
    for e in ends:
        e["first_failure"] = e is first
    return ends


def _ended(procs: list[dict[str, Any]], status: int, steps: int) -> str:
    if not procs:
        return f"no evidence written (exit status {status}): the command may not have run Python with torch"
    reasons = [p.get("ended") or KILLED for p in procs]
    ends = rank_ends(procs)
    first = next((e for e in ends if e["first_failure"]), None)
    if first is not None and len(procs) > 1:
        then = [f"{e['rank']}: {_short(e['ended'])}" for e in sorted(ends, key=lambda e: (e["at"] is None, e["at"] or 0.0))
                if _failed(e["ended"]) and e is not first]
        reason = f"{first['rank']} {first['ended']} (the first to fail" + (f"; then {'; '.join(then)})" if then else ")")
    elif first is not None:
        reason = first["ended"]
    elif any(r.startswith("stopped after") for r in reasons):
        reason = next(r for r in reasons if r.startswith("stopped after"))
    elif len(procs) == 1 and reasons[0] in _CLEAN_EXITS:
        reason = reasons[0]
    else:
        reason = "completed"
    if steps == 0:
        reason += "; no optimizer step was taken"
    return reason


def _short(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def clean(out_dir: Path) -> None:
    shutil.rmtree(out_dir, ignore_errors=True)


def parse_with_command(parser, argv: list[str]):
    """Parse `[options] -- COMMAND...` or `[options] COMMAND...` (verify and compare alike).

    `--` separates the options from the command only where it comes before the command: in
    `verify train.py -- --flag` the command started at `train.py`, so `--` and what follows are
    the script's own arguments (`python train.py -- --flag`), not a new command.
    """
    if "--" in argv:
        i = argv.index("--")
        args = parser.parse_args(argv[:i])
        # argparse.REMAINDER: a command begun before `--` keeps the `--` and the rest
        args.command = (args.command + argv[i:]) if args.command else argv[i + 1 :]
    else:
        args = parser.parse_args(argv)
    return args


def unwritable(path: Path, *, directory: bool = False) -> str | None:
    """Why `path` cannot be written (None if it can): checked before a run, not after it.

    `directory`: the path is a folder to create or fill (`--evidence-dir`), else a file
    (`--report`, `--plot`).  Nothing is created: the nearest existing ancestor must be a folder
    we can create entries in (tried with a temporary file, which root's bypass of permission bits
    and a read-only file system both answer truthfully), and an existing path must be of the
    right kind and writable.
    """
    path = Path(path)
    if path.exists():
        if directory and not path.is_dir():
            return f"{path} exists and is not a directory"
        if not directory and path.is_dir():
            return f"{path} is a directory"
        if not directory:
            try:
                with open(path, "ab"):
                    pass
            except OSError as exc:
                return f"{path} cannot be written: {exc.strerror or exc}"
            return None
        return _creatable_in(path, path)
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{path} cannot be created: {parent} is not a directory"
    return _creatable_in(parent, path)


def _creatable_in(folder: Path, path: Path) -> str | None:
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".amplint-probe-"):
            pass
    except OSError as exc:
        return f"{path} cannot be written: {folder}: {exc.strerror or exc}"
    return None


def python_command(script: str, args: list[str]) -> list[str]:
    """`amplint verify train.py ARGS` is shorthand for `python train.py ARGS` (this interpreter)."""
    return [sys.executable, script, *args]
