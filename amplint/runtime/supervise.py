"""Run the user's command as a process group that verify can always end: signals, timeout, no orphans.

The command (torchrun, its ranks, DataLoader workers: everything it starts) runs in a process group
of its own, so verify can signal all of it at once and nothing is left behind:

- SIGINT or SIGTERM sent to verify (Ctrl-C at a terminal, `kill`, a CI runner cancelling a job) is
  passed to the whole group; Python processes under the bootstrap write their evidence as they go.
  A second signal of the same kind ends the group at once (SIGKILL).
- `timeout` seconds after the start the group gets SIGINT (the bootstrap writes evidence on it).
- Whatever does not end is escalated: SIGINT -> SIGTERM -> SIGKILL, `grace` seconds apart.
- After a run that was ended this way, any process left in the group is killed, so no training
  process outlives verify.

Terminal: when verify's stdin is a terminal whose foreground group is verify's, the command's group
becomes the foreground for the run (as a shell does for a job), so a script that reads the
terminal (`input()`, `pdb`) works and Ctrl-C reaches it directly; the terminal is handed back after.

NB: signal handlers can only be installed from the main thread; from another thread the command
still runs in its own group and is still ended on timeout, but signals to verify are not caught.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

GRACE_S = 10.0
_ESCALATION = {signal.SIGINT: signal.SIGTERM, signal.SIGTERM: signal.SIGKILL}


@dataclass
class Ending:
    """How the supervised command ended: its return code and what verify did to end it."""

    returncode: int
    signal_received: int | None = None  # a signal sent to verify (forwarded to the command)
    timed_out: bool = False
    killed_leftovers: bool = False

    @property
    def reason(self) -> str | None:
        if self.timed_out:
            return "timed-out"
        if self.signal_received is not None:
            return "interrupted" if self.signal_received == signal.SIGINT else "terminated"
        return None


class Supervisor:
    """One supervised run: `start()`, then `wait()` returns an `Ending`."""

    def __init__(self, command: list[str], *, env: dict[str, str], cwd: str | None = None,
                 timeout: float | None = None, grace: float | None = None) -> None:
        self.command, self.env, self.cwd = command, env, cwd
        self.timeout, self.grace = timeout, GRACE_S if grace is None else grace
        self.proc: subprocess.Popen | None = None
        self._signal: int | None = None
        self._sent: int | None = None  # the last signal sent to the group
        self._sent_at = 0.0
        self._timed_out = False
        self._saved_handlers: dict[int, Any] = {}
        self._tty: int | None = None

    # --- start -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the command in a new process group (raises OSError if it cannot start)."""
        kwargs: dict[str, Any] = {"env": self.env, "cwd": self.cwd}
        if sys.version_info >= (3, 11):
            kwargs["process_group"] = 0
        else:  # pragma: no cover - 3.10
            kwargs["preexec_fn"] = os.setpgrp
        self.proc = subprocess.Popen(self.command, **kwargs)
        self._started = time.monotonic()
        self._take_terminal()
        self._catch_signals()

    def _catch_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._saved_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._signal == signum:  # the same signal again: the user means it
            self._send(signal.SIGKILL)
            return
        self._signal = signum
        self._send(signum)

    def _take_terminal(self) -> None:
        """Make the command's group the terminal's foreground group (see the module docstring)."""
        try:
            if os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp():
                os.tcsetpgrp(0, self.proc.pid)
                self._tty = 0
        except OSError:
            self._tty = None

    def _give_back_terminal(self) -> None:
        if self._tty is None:
            return
        # NB: verify is a background group right now; taking the terminal back from there sends it
        # SIGTTOU unless that is ignored for the call.
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN) if threading.current_thread() is threading.main_thread() else None
        try:
            os.tcsetpgrp(self._tty, os.getpgrp())
        except OSError:
            pass
        finally:
            if old is not None:
                signal.signal(signal.SIGTTOU, old)
            self._tty = None

    # --- ending ------------------------------------------------------------------------------
    def _send(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        self._sent, self._sent_at = sig, time.monotonic()

    def _escalate(self) -> None:
        nxt = _ESCALATION.get(self._sent) if self._sent is not None else None
        if nxt is not None and time.monotonic() - self._sent_at >= self.grace:
            self._send(nxt)

    def wait(self, on_tick: Callable[[], None] | None = None) -> Ending:
        assert self.proc is not None, "start() first"
        try:
            while True:
                try:
                    self.proc.wait(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if on_tick is not None:
                    on_tick()
                if (self.timeout is not None and not self._timed_out
                        and time.monotonic() - self._started >= self.timeout):
                    self._timed_out = True
                    self._send(signal.SIGINT)
                self._escalate()
        finally:
            self._give_back_terminal()
            for sig, handler in self._saved_handlers.items():
                signal.signal(sig, handler)
            self._saved_handlers.clear()
        ending = Ending(self.proc.returncode, self._signal, self._timed_out)
        if ending.reason is not None:
            ending.killed_leftovers = self._kill_leftovers()
        return ending

    def _kill_leftovers(self) -> bool:
        """SIGKILL whatever is still in the command's group (a rank, a worker); True if any was."""
        try:
            os.killpg(self.proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        deadline = time.monotonic() + min(self.grace, 2.0)
        while time.monotonic() < deadline:  # let them finish writing their evidence first
            time.sleep(0.1)
            try:
                os.killpg(self.proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                return False
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return False
        return True
