"""A process pool in which a worker's death costs one file, never the run (issue 17, items 5-7).

concurrent.futures' pool breaks as a whole when one worker dies (a segfault in libcst's
native parser, the kernel's out-of-memory killer, an abort under `ulimit -v`): every
pending result is lost and nobody can tell which file killed it.  Here each worker takes
a few items at a time and answers item by item, so the parent always knows which item
a dead worker was on: that item's result is the death (`WorkerDied`), the rest of its
batch goes to a new worker, and the other workers go on.

- Workers die with their parent, however it ends (SIGKILL included): on Linux the kernel
  sends them SIGKILL (PR_SET_PDEATHSIG), elsewhere a thread watches the parent's pid.  An
  idle worker also leaves when its pipe to the parent closes.
- Workers recycle: one whose resident memory has grown past `recycle_rss` after an item
  (libcst's tree costs ~600 MB per MB of source, and CPython keeps much of the memory it
  freed) answers, leaves, and is replaced.
- Ctrl-C reaches the workers too (same process group): they unwind (a fix being written
  removes its temporary file) and leave quietly; the parent stops and kills the rest.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait

# A worker past this resident size after an item is replaced (a fresh one forks in ~10 ms).
RECYCLE_RSS = 768 << 20
# Batches a worker holds at once: the one it works on and the next, so it never waits.
_PREFETCH = 2


@dataclass(frozen=True)
class WorkerDied:
    """The result of an item whose worker process ended while working on it."""

    exitcode: int | None  # negative: killed by that signal

    @property
    def signal_name(self) -> str | None:
        if self.exitcode is None or self.exitcode >= 0:
            return None
        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:
            return f"signal {-self.exitcode}"

    def __str__(self) -> str:
        if self.signal_name:
            return f"was killed by {self.signal_name}"
        return f"exited with status {self.exitcode}"


class PoolUnavailable(Exception):
    """Not a single worker process could be started (no fork, no pipes): the caller works in-process."""


def run_isolated(fn: Callable, items: list, *, workers: int, initializer: Callable | None = None,
                 initargs: tuple = (), chunksize: int = 1, recycle_rss: int = RECYCLE_RSS,
                 start_method: str | None = None) -> Iterator[tuple[int, object]]:
    """(position in `items`, fn(item) or WorkerDied) for each item, in the order they finish.

    `fn` and `initializer` run in the workers (`initializer(*initargs)` once per worker).
    Raises PoolUnavailable before yielding anything when no worker can be started.
    """
    ctx = multiprocessing.get_context(start_method or _start_method())
    batches = deque(_batches(list(enumerate(items)), max(chunksize, 1)))
    live: dict[object, _Worker] = {}
    spec = (fn, initializer, initargs, recycle_rss)
    try:
        for _ in range(min(workers, len(batches))):
            _start(ctx, spec, live)
        if not live and batches:
            raise PoolUnavailable("no worker process could be started")
        for w in list(live.values()):
            _feed(w, batches)
        while batches or any(w.outstanding for w in live.values()):
            # NB: who owns each ready handle is decided before any is handled: a worker buried
            # in this round closes its pipe, and the replacement started meanwhile may get the
            # same descriptor numbers, so a stale sentinel number would bury the live newcomer.
            owner = {**{id(w.conn): w for w in live.values()}, **{w.process.sentinel: w for w in live.values()}}
            for ready in wait([*(w.conn for w in live.values()), *(w.process.sentinel for w in live.values())]):
                w = owner.get(ready if isinstance(ready, int) else id(ready))
                if w is None or live.get(w.conn) is not w:
                    continue  # both its pipe and its sentinel were ready: handled already
                if ready is w.conn:
                    yield from _receive(w, live, batches, ctx, spec)
                else:
                    yield from _bury(w, live, batches, ctx, spec)
    finally:
        for w in live.values():
            _stop(w)


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: object
    outstanding: deque  # (position, item) sent and not yet answered, in the order sent

    def __hash__(self) -> int:
        return id(self)


def _start_method() -> str:
    # fork is cheapest and shares what the parent has loaded, but forking a process that runs
    # other threads can deadlock the child (a lock held mid-call), and macOS's system
    # libraries do not survive it: there, and then, a fresh interpreter (the platform default).
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return "fork"
    return "spawn"


def _batches(pairs: list, size: int) -> list[list]:
    return [pairs[i:i + size] for i in range(0, len(pairs), size)]


def _start(ctx, spec, live: dict) -> _Worker | None:
    try:
        parent_end, child_end = ctx.Pipe(duplex=True)
        process = ctx.Process(target=_worker_main, args=(child_end, os.getpid(), *spec), daemon=True,
                              name="amplint-worker")
        process.start()
    except OSError:  # out of processes or descriptors: the others carry on
        return None
    child_end.close()
    w = _Worker(process, parent_end, deque())
    live[parent_end] = w
    return w


def _feed(w: _Worker, batches: deque) -> None:
    """Keep `_PREFETCH` batches with the worker (counted in items of the batch size)."""
    while batches and len(w.outstanding) < _PREFETCH * max(len(batches[0]), 1):
        batch = batches.popleft()
        try:
            w.conn.send(batch)
        except OSError:  # it died meanwhile: its sentinel says so next
            batches.appendleft(batch)
            return
        w.outstanding.extend(batch)


def _receive(w: _Worker, live: dict, batches: deque, ctx, spec) -> Iterator[tuple[int, object]]:
    try:
        message = w.conn.recv()
    except (EOFError, OSError):
        yield from _bury(w, live, batches, ctx, spec)
        return
    if message[0] == "result":
        position, _ = w.outstanding.popleft()
        assert position == message[1], "a worker answers in the order it was given"
        yield position, message[2]
        _feed(w, batches)
    elif message[0] == "retire":  # grown too large: what it still holds goes to a fresh worker
        del live[w.conn]
        batches.extendleft(reversed(_batches(list(w.outstanding), 1)))
        _stop(w)
        _replace(live, batches, ctx, spec)


def _bury(w: _Worker, live: dict, batches: deque, ctx, spec) -> Iterator[tuple[int, object]]:
    """The worker ended: answers it sent before dying count; the item it was on gets its death."""
    del live[w.conn]
    retired = False
    while True:
        try:
            if not w.conn.poll():
                break
            message = w.conn.recv()
        except (EOFError, OSError):
            break
        if message[0] == "result":
            position, _ = w.outstanding.popleft()
            yield position, message[2]
        elif message[0] == "retire":  # it left on purpose (its sentinel came first): nothing died
            retired = True
    w.process.join(timeout=5)
    if retired:
        batches.extendleft(reversed(_batches(list(w.outstanding), 1)))
    elif w.outstanding:
        position, _ = w.outstanding.popleft()
        yield position, WorkerDied(w.process.exitcode)
        batches.extendleft(reversed(_batches(list(w.outstanding), 1)))
    w.conn.close()
    _replace(live, batches, ctx, spec)


def _replace(live: dict, batches: deque, ctx, spec) -> None:
    if batches:
        new = _start(ctx, spec, live)
        if new is not None:
            _feed(new, batches)
        elif not live:  # nobody left to do the rest: say so rather than stop short
            raise PoolUnavailable("no worker process could be started")


def _stop(w: _Worker) -> None:
    try:
        w.conn.send(None)
    except OSError:
        pass
    w.process.join(timeout=1)
    if w.process.is_alive():
        w.process.kill()
        w.process.join(timeout=5)
    w.conn.close()


# --- the worker's side ------------------------------------------------------------------------


def _worker_main(conn, parent_pid: int, fn, initializer, initargs, recycle_rss: int) -> None:
    _die_with_parent(parent_pid)
    try:
        if initializer is not None:
            initializer(*initargs)
        while True:
            try:
                batch = conn.recv()
            except (EOFError, OSError):
                return  # the parent is gone
            if batch is None:
                return
            for position, item in batch:
                conn.send(("result", position, fn(item)))
                if _resident_bytes() > recycle_rss:
                    conn.send(("retire",))
                    return
    except KeyboardInterrupt:
        os._exit(130)  # Ctrl-C: unwound (temporary files removed); the parent reports the interruption
    except BrokenPipeError:
        os._exit(1)


def _die_with_parent(parent_pid: int) -> None:
    """End this process when the parent ends, however it ends."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            if libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) == 0:
                if os.getppid() != parent_pid:  # it ended before the request took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass  # no libc to ask: watch instead

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="amplint-parent-watch", daemon=True).start()


def _resident_bytes() -> int:
    """This process's resident memory now (Linux), or its peak where only that is known."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere
