"""The per-process evidence sink: probes record, the bootstrap writes one JSON file at exit.

`record(code, file, line, evidence)` is what a probe calls; `record_here(code, evidence)` finds
the user's frame through `attribution`.  The same (code, file, line) recorded twice keeps the first
evidence and counts repeats, so a probe firing every step stays cheap and the file stays small.
Extensions (fp32 mode, loss capture, profiling) keep their own data with `put(key, value)`.

A forked child (a DataLoader worker, a Hogwild trainer from `torch.multiprocessing` with the fork
start method) inherits this object with the parent's evidence in it.  `start_afresh()` empties it;
what a producer wants to keep counting in the child it re-creates through `put(..., on_fork=...)`
or an `on_fork(callback)`: without that, the child's autocast regions and losses went nowhere and
verify said mixed precision never ran in training that ran only in forked children.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

from amplint.runtime.attribution import Site, user_stack


class Observations:
    def __init__(self, path: str | None = None, label: str = "main") -> None:
        self.path, self.label = path, label
        self.records: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.extra: dict[str, Any] = {}
        self.errors: list[str] = []
        self.meta: dict[str, Any] = {}
        self.step = 0  # optimizer steps attempted so far (the step budget's count)
        self.bus = None  # interception.Bus, set by the bootstrap
        self.reach = None  # reach.ReachTracker, set by the bootstrap when verify sent an agenda
        self._last_flush = 0.0
        self._fresh_extra: dict[str, Callable[[], Any]] = {}  # key -> its value for a forked child
        self._fork_callbacks: list[Callable[[], None]] = []

    # --- recording -----------------------------------------------------------------
    def record(
        self,
        code: str,
        file: str,
        line: int,
        evidence: dict[str, Any] | None = None,
        *,
        end_line: int | None = None,
        stack: list[Site] | None = None,
        update: bool = False,
    ) -> dict[str, Any]:
        key = (code, file, line)
        rec = self.records.get(key)
        if rec is None:
            rec = self.records[key] = {
                "code": code,
                "file": file,
                "line": line,
                "end_line": end_line or line,
                "stack": [s.as_list() for s in (stack or [])],
                "step": self.step,
                "count": 0,
                "evidence": dict(evidence or {}),
            }
        elif update and evidence:
            rec["evidence"].update(evidence)
        rec["count"] += 1
        return rec

    def record_site(self, code: str, site: Site | None, evidence=None, *, stack=None, update=False):
        if site is None:
            site = Site("<unknown>", 0, 0)
        return self.record(code, site.file, site.line, evidence, end_line=site.end_line, stack=stack, update=update)

    def record_here(self, code: str, evidence=None, *, skip: int = 1, update=False):
        stack = user_stack(skip + 1)
        return self.record_site(code, stack[0] if stack else None, evidence, stack=stack, update=update)

    def put(self, key: str, value: Any, *, on_fork: Callable[[], Any] | None = None) -> None:
        """Extension data (JSON-serialisable), merged per rank by the launcher.

        `on_fork` gives the key's value in a forked child (its own, empty, counts); a key put
        without one is dropped there.
        """
        self.extra[key] = value
        if on_fork is not None:
            self._fresh_extra[key] = on_fork

    def on_fork(self, callback: Callable[[], None]) -> None:
        """Call `callback` in a forked child before it records anything of its own."""
        self._fork_callbacks.append(callback)

    def start_afresh(self, path: str | None) -> None:
        """In a forked child: no evidence of the parent's, only what producers re-create."""
        self.path = path
        self.records.clear()
        self.errors.clear()
        self.step = 0
        self._last_flush = 0.0
        self.extra = {}
        for callback in self._fork_callbacks:
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - a producer's reset must not kill the child
                self.error("fork reset", exc)
        for key, fresh in self._fresh_extra.items():
            try:
                self.extra[key] = fresh()
            except Exception as exc:  # noqa: BLE001
                self.error(f"fork reset {key}", exc)

    def error(self, where: str, exc: BaseException) -> None:
        if len(self.errors) < 20:
            self.errors.append(f"{where}: {type(exc).__name__}: {exc}")

    # --- writing -------------------------------------------------------------------
    def payload(self) -> dict[str, Any]:
        return {
            **self.meta,
            "label": self.label,
            "steps": self.step,
            "observations": list(self.records.values()),
            "reached": sorted(self._reached()),
            "reach_mode": self.reach.mode if self.reach is not None else "calls",
            "extra": self.extra,
            "errors": self.errors,
        }

    def _reached(self) -> set:
        lines = set(self.bus.reached) if self.bus is not None else set()
        if self.reach is not None:
            lines |= self.reach.reached
        return lines

    def flush(self, *, force: bool = True) -> None:
        """Write the evidence atomically (tmp + rename); throttled unless `force`."""
        if self.path is None:
            return
        now = time.monotonic()
        if not force and now - self._last_flush < 1.0:
            return
        self._last_flush = now
        tmp = f"{self.path}.tmp{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self.payload(), fh, default=_jsonable)
            os.replace(tmp, self.path)
        except OSError as exc:  # pragma: no cover - disk full etc.
            self.errors.append(f"flush: {exc}")


def _jsonable(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)
