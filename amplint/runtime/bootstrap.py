"""Runs at interpreter start (from `_boot/sitecustomize.py`) in every Python process of the command.

Installs, in order: CPU emulation (`AMPLINT_DEVICE=cpu`), the interception layer, the step budget
(`AMPLINT_STEPS`), the probes, then the extension installers named in `AMPLINT_EXTENSIONS`
(`module:function`, comma-separated; each is called with this process's `Observations` sink and
returns a handle or an iterable of handles with `.remove()`).  At exit every handle is removed in
reverse order and the evidence file `AMPLINT_OUT/evidence-<pid>.json` is written, whether the script
returned, raised, called sys.exit or os._exit, or got SIGINT/SIGTERM.

Which processes write: the script's own (`AMPLINT_SCRIPT`), and any other process that made an
optimizer step or recorded something (torchrun ranks, mp.spawn workers).  A forked child starts with
an empty sink (`Observations.start_afresh`), so a DataLoader worker (fork or spawn) never writes
and is never counted twice, while a forked trainer writes its own evidence.

NB: torch is imported here, before the script's own imports, so `from torch.nn.utils import
clip_grad_norm_` in the script binds the patched function.  Environment variables the script sets
before `import torch` that torch reads at import time (OMP_NUM_THREADS) are therefore read earlier.
"""

from __future__ import annotations

import atexit
import importlib
import os
import signal
import sys
import time
from typing import Any

_session = None


class _EnoughSteps(SystemExit):
    """Raised at the start of optimizer step N+1: ends the script like sys.exit(0).

    A SystemExit so that the script's own `except Exception:` cannot swallow it and the
    interpreter exits cleanly (atexit runs, status 0, no traceback).
    """

    def __init__(self, steps: int) -> None:
        super().__init__(0)
        self.steps = steps


class StepBudget:
    """Counts optimizer step attempts per optimizer (executed or skipped by GradScaler)."""

    def __init__(self, sink, limit: int | None) -> None:
        self.sink, self.limit = sink, limit
        self.counts: dict[int, int] = {}
        self.stopped = False

    def install(self, bus):
        yield bus.subscribe("opt_step_pre", lambda opt, in_scaler: None if in_scaler else self._check(opt))
        yield bus.subscribe("opt_step_post", lambda opt, in_scaler: None if in_scaler else self._count(opt))
        yield bus.subscribe("scaler_step_pre", lambda scaler, opt: self._check(opt))
        yield bus.subscribe("scaler_step_post", lambda scaler, opt, ran: self._count(opt))

    def _check(self, opt) -> None:
        if self.limit is not None and self.counts.get(id(opt), 0) >= self.limit:
            self.stopped = True
            raise _EnoughSteps(self.limit)

    def _count(self, opt) -> None:
        n = self.counts[id(opt)] = self.counts.get(id(opt), 0) + 1
        if n > self.sink.step:
            self.sink.step = n
            self.sink.flush(force=False)  # progress for the parent's bar; throttled to 1/s


class Session:
    def __init__(self) -> None:
        from amplint.runtime.observations import Observations

        env = os.environ
        self.out = env["AMPLINT_OUT"]
        self.pid = os.getpid()
        argv0 = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
        self.is_script = bool(env.get("AMPLINT_SCRIPT")) and argv0 == os.path.realpath(env["AMPLINT_SCRIPT"])
        self.is_script = self.is_script and "--multiprocessing-fork" not in sys.argv
        self.forked = False
        self.sink = Observations(self._path(), label=_label())
        steps = env.get("AMPLINT_STEPS")
        self.budget = StepBudget(self.sink, int(steps) if steps else None)
        self._ended: str | None = None
        self._ended_at: float | None = None
        self.handles: list[Any] = []
        self.probes: list[Any] = []
        self.finished = False
        self._dies_by_sigint = False  # the script ended in an unhandled KeyboardInterrupt
        # A marker while this process runs: verify ends, after the command, what still runs of it
        # outside its process group (`start_new_session` children), so nothing prints after it.
        self._alive: str | None = os.path.join(self.out, f"alive-{self.pid}")
        try:
            open(self._alive, "w").close()
        except OSError:
            self._alive = None
        self.sink.meta.update(
            pid=self.pid,
            argv=list(sys.argv),
            is_script=self.is_script,
            device=env.get("AMPLINT_DEVICE") or "native",
            emulated=env.get("AMPLINT_DEVICE") == "cpu",
            started=time.time(),
        )

    @property
    def ended(self) -> str | None:
        """Why this process ended (None while it runs or when it simply completed)."""
        return self._ended

    @ended.setter
    def ended(self, value: str | None) -> None:
        # NB: the time of the first ending (an exception reaching the top, sys.exit, a signal),
        # not of the evidence write: verify orders the ranks' failures by it to name the first.
        if value is not None and self._ended_at is None:
            self._ended_at = time.time()
        self._ended = value

    def _path(self) -> str:
        return os.path.join(self.out, f"evidence-{os.getpid()}.json")

    # --- start -------------------------------------------------------------------------
    def start(self) -> None:
        import torch  # (so probes bind before the script imports anything)

        self.sink.meta["native_device"] = "cuda" if torch.cuda.is_available() else "cpu"
        self.sink.meta["torch"] = torch.__version__

        from amplint.runtime import interception, probes

        bus = interception.Bus(self.sink)
        self.sink.bus = bus
        if self.sink.meta["emulated"]:
            from amplint.runtime import emulation

            log: dict = {}
            self.sink.put("emulation", log, on_fork=lambda: log)
            self._add(emulation.install(log))
        self._add(interception.install(bus))
        self._add(self.budget.install(bus))
        wanted = os.environ.get("AMPLINT_PROBES", "all")
        for cls in probes.probe_classes(nan_guard=os.environ.get("AMPLINT_NAN_GUARD") == "1"):
            if wanted != "all" and cls.code not in wanted.split(","):
                continue
            try:
                probe = cls(self.sink).__enter__()
            except Exception as exc:  # noqa: BLE001
                self.sink.error(f"install {cls.code}", exc)
                continue
            self.probes.append(probe)
            self.handles.append(probe)
        for spec in filter(None, (s.strip() for s in os.environ.get("AMPLINT_EXTENSIONS", "").split(","))):
            try:
                mod, _, fn = spec.partition(":")
                result = getattr(importlib.import_module(mod), fn)(self.sink)
                if result is not None:
                    self._add([result] if hasattr(result, "remove") else result)
            except Exception as exc:  # noqa: BLE001
                self.sink.error(f"extension {spec}", exc)
        from amplint.runtime import reach

        try:
            tracker = reach.from_environment()
        except Exception as exc:  # noqa: BLE001 - lines then come from intercepted calls only
            self.sink.error("reach", exc)
            tracker = None
        if tracker is not None:
            self.sink.reach = tracker
            self.handles.append(tracker)
        self._hook_exits()

    def _add(self, handles) -> None:
        for h in handles:
            self.handles.append(h)

    def _hook_exits(self) -> None:
        atexit.register(self.finish)
        self._orig_excepthook = sys.excepthook
        self._orig_exit = sys.exit
        self._orig_os_exit = os._exit

        def excepthook(tp, value, tb):
            if issubclass(tp, KeyboardInterrupt):
                self.ended = "interrupted (SIGINT)"
                self._dies_by_sigint = True
            else:
                self.ended = f"raised {tp.__name__}: {_one_line(str(value))}"[:300]
            return self._orig_excepthook(tp, value, tb)

        def sys_exit(code=None):
            if self.ended is None:
                self.ended = f"sys.exit({code!r})"
            return self._orig_exit(code)

        def os_exit(code):
            if os.getpid() == self.pid:
                if self.ended is None:
                    self.ended = f"os._exit({code})"
                self.finish()
            return self._orig_os_exit(code)

        sys.excepthook, sys.exit, os._exit = excepthook, sys_exit, os_exit

        # A training loop in a thread: the budget's _EnoughSteps ends that thread as sys.exit(0)
        # ends the main one. threading ignores SystemExit itself but not a subclass, so without
        # this it printed "Exception in thread ...: _EnoughSteps: 0" on stderr.
        import threading

        self._orig_thread_hook = threading.excepthook

        def thread_excepthook(args):
            if isinstance(args.exc_value, _EnoughSteps):
                return None
            return self._orig_thread_hook(args)

        self._thread_hook = threading.excepthook = thread_excepthook
        self._sigterm_set = False
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            try:
                signal.signal(signal.SIGTERM, self._on_sigterm)
                self._sigterm_set = True
            except ValueError:  # not the main thread
                pass
        os.register_at_fork(after_in_child=self._after_fork)

    def _on_sigterm(self, signum, frame) -> None:
        self.ended = "terminated (SIGTERM)"
        self.finish()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def _after_fork(self) -> None:
        """A forked child (DataLoader worker, fork-started trainer) starts with empty evidence.

        It writes its evidence only if it steps an optimizer (a Hogwild trainer does; a DataLoader
        worker does not), and then with its own autocast/scaler facts and losses.
        """
        if self.finished:
            return
        self.forked = True
        self.is_script = False
        self.pid = os.getpid()
        self.budget.counts.clear()
        self.sink.start_afresh(self._path())
        self.sink.meta.update(pid=self.pid, is_script=False, forked=True)

    def _ended_abnormally(self) -> bool:
        if self.budget.stopped or self.ended is None:
            return False
        return self.ended.startswith(("raised", "interrupted", "terminated"))

    # --- finish ------------------------------------------------------------------------
    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        # NB: before the probes' end-of-run judgements: an iteration cut short by an error (or a
        # signal) proves nothing about what its unfinished calls would have done.
        self.sink.meta["ended_abnormally"] = self._ended_abnormally()
        for probe in self.probes:
            try:
                probe.finish()
            except Exception as exc:  # noqa: BLE001
                self.sink.error(f"finish {probe.code}", exc)
        while self.handles:
            try:
                self.handles.pop().remove()
            except Exception as exc:  # noqa: BLE001
                self.sink.error("remove", exc)
        if sys.excepthook is not self._orig_excepthook:
            sys.excepthook = self._orig_excepthook
        sys.exit, os._exit = self._orig_exit, self._orig_os_exit
        import threading

        if getattr(self, "_thread_hook", None) is not None and threading.excepthook is self._thread_hook:
            threading.excepthook = self._orig_thread_hook
        if getattr(self, "_sigterm_set", False) and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            except ValueError:
                pass
        if self.budget.stopped:
            self.ended = f"stopped after {self.budget.limit} steps"
        self.sink.label = _label()
        self.sink.meta.update(
            ended=self.ended or "completed",
            ended_at=self._ended_at or time.time(),
            stopped_by_budget=self.budget.stopped,
            rank=_rank(),
            finished=time.time(),
        )
        if self.is_script or self.sink.step > 0 or (self.sink.records and not self.forked):
            self.sink.flush(force=True)
        if getattr(self, "_alive", None) and not self.forked:
            try:
                os.unlink(self._alive)
            except OSError:
                pass
        if self._dies_by_sigint:
            _rearm_exit_by_sigint()


def _one_line(message: str) -> str:
    """An exception's message on one line, with its root cause when it spans several: torch
    re-raises a DataLoader worker's error as "Caught ValueError in DataLoader worker process 0.
    Original Traceback (most recent call last): ...", whose last line is the error itself
    (hostile pass 21: the summary was cut inside torch's own frames)."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else ""
    return f"{lines[0]} ... {lines[-1]}"


def _rearm_exit_by_sigint() -> None:
    """Keep CPython's promise that a program ended by an unhandled KeyboardInterrupt dies by SIGINT.

    CPython sets a flag when the main code ends in KeyboardInterrupt and, after finalisation,
    re-raises SIGINT on itself so the parent sees a signal death (-2, "130" in a shell).  But every
    string `exec`/`eval` (`PyRun_String`: dataclass and namedtuple creation, for one) clears that
    flag first, so an exit hook that creates a dataclass turns the death into a plain exit 1.  Our
    finish runs probe and torch code at exit (it did exactly that on a CUDA build of torch, found
    on an H200), so we set the flag again the only way CPython offers: one string eval that ends in
    KeyboardInterrupt.
    """
    if sys.implementation.name != "cpython":
        return
    try:
        import ctypes

        run = ctypes.pythonapi.PyRun_String
        run.argtypes = (ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object)
        run.restype = ctypes.py_object
        file_input = 257  # Py_file_input
        run(b"raise KeyboardInterrupt", file_input, {}, {})
    except KeyboardInterrupt:
        pass
    except Exception:  # noqa: BLE001 - no ctypes, no symbol: the exit status is all that is lost
        pass


def _rank() -> int | None:
    for var in ("RANK", "LOCAL_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:  # noqa: BLE001
        pass
    return None


def _label() -> str:
    r = _rank()
    return f"rank{r}" if r is not None else "main"


def start() -> None:
    """Entry point from sitecustomize; a second call in the same process does nothing."""
    global _session
    if _session is not None or not os.environ.get("AMPLINT_OUT"):
        return
    try:
        _session = Session()
        _session.start()
    except Exception as exc:  # noqa: BLE001 - never break the user's program
        print(f"amplint verify: instrumentation failed in pid {os.getpid()}: {exc}", file=sys.stderr)


def current():
    """The live session in this process (None when verify is not active)."""
    return _session
