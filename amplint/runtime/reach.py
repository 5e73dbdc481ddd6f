"""Which agenda lines ran: tells NOT REACHED (the line never ran) from a line that ran.

Intercepted calls already mark their call sites (interception.SITE_EVENTS); this covers every
other agenda line: a rule without a probe (NO PROBE needs to know that the line ran), a class or
an import at module level, a statement with no intercepted call.  Cheap by construction:

- Python 3.12+: `sys.monitoring`.  A code object with no agenda line turns its PY_START event off
  the first time it runs, and an agenda line turns its LINE event off once seen, so a finished
  warm-up costs nothing.
- Python 3.11 and older: `sys.settrace` that only traces frames of code objects spanning an agenda
  line.  Every Python call still pays one check while any agenda line is unseen (measured 1.17x
  on an overhead-bound 0.6 ms/step toy, OMP_NUM_THREADS=1), and tracing stops as soon as every
  line has run.  NB: when a tracer is already set (coverage, a debugger) nothing is installed and
  `mode` says so; only intercepted calls mark lines then.

No torch here: the agenda is `{file: [[line, end_line], ...]}` (real paths), read from the JSON
file `AMPLINT_AGENDA` names.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, Callable

AGENDA_ENV = "AMPLINT_AGENDA"


class ReachTracker:
    """Records `(file, line, end_line)` for every agenda span that started running."""

    def __init__(self, agenda: dict[str, list[list[int]]]) -> None:
        self.spans: dict[str, list[tuple[int, int]]] = {
            os.path.realpath(f): [(int(a), int(b)) for a, b in spans] for f, spans in agenda.items()
        }
        self.by_line: dict[str, dict[int, list[tuple[int, int]]]] = {}
        for f, spans in self.spans.items():
            table = self.by_line.setdefault(f, {})
            for a, b in spans:
                for ln in range(a, max(a, b) + 1):
                    table.setdefault(ln, []).append((a, b))
        self.reached: set[tuple[str, int, int]] = set()
        self.unseen = sum(len(v) for v in self.spans.values())
        self.mode = "off"
        self._real: dict[str, str | None] = {}  # co_filename -> real path if it is an agenda file
        self._spanning: dict[Any, bool] = {}
        self._remove: Callable[[], None] | None = None

    # --- shared ------------------------------------------------------------------------------
    def _agenda_file(self, filename: str) -> str | None:
        hit = self._real.get(filename, "")
        if hit == "":
            real = os.path.realpath(filename) if not filename.startswith("<") else None
            hit = self._real[filename] = real if real in self.by_line else None
        return hit

    def _spans_agenda(self, code: Any, real: str) -> bool:
        hit = self._spanning.get(code)
        if hit is None:
            lines = [ln for _, _, ln in code.co_lines() if ln is not None] or [code.co_firstlineno]
            lo, hi = min(lines + [code.co_firstlineno]), max(lines)
            hit = self._spanning[code] = any(lo <= ln <= hi for ln in self.by_line[real])
        return hit

    def _seen(self, real: str, line: int) -> None:
        for a, b in self.by_line[real].get(line, ()):
            key = (real, a, b)
            if key not in self.reached:
                self.reached.add(key)
                self.unseen -= 1
        if self.unseen <= 0:
            self.remove()

    # --- install -----------------------------------------------------------------------------
    def install(self) -> "ReachTracker":
        if not self.by_line:
            return self
        if hasattr(sys, "monitoring"):
            self._install_monitoring()
        else:
            self._install_settrace()
        return self

    def _install_monitoring(self) -> None:  # Python 3.12+
        mon = sys.monitoring
        tool = next((t for t in (3, 4) if mon.get_tool(t) is None), None)
        if tool is None:
            self.mode = "off (no free sys.monitoring tool id)"
            return
        mon.use_tool_id(tool, "amplint-verify")
        events = mon.events

        def on_start(code: Any, offset: int) -> Any:
            real = self._agenda_file(code.co_filename)
            if real is not None and self._spans_agenda(code, real):
                mon.set_local_events(tool, code, events.LINE)
            return mon.DISABLE

        def on_line(code: Any, line: int) -> Any:
            real = self._agenda_file(code.co_filename)
            if real is not None:
                self._seen(real, line)
            return mon.DISABLE

        mon.register_callback(tool, events.PY_START, on_start)
        mon.register_callback(tool, events.LINE, on_line)
        mon.set_events(tool, events.PY_START)
        self.mode = "lines"

        def remove() -> None:
            mon.set_events(tool, 0)
            mon.register_callback(tool, events.PY_START, None)
            mon.register_callback(tool, events.LINE, None)
            mon.free_tool_id(tool)

        self._remove = remove

    def _install_settrace(self) -> None:  # Python 3.11 and older
        if sys.gettrace() is not None:
            self.mode = "off (another tracer is active)"
            return

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line":
                real = self._agenda_file(frame.f_code.co_filename)
                if real is not None:
                    self._seen(real, frame.f_lineno)
            return local if self._remove is not None else None

        def start(frame: Any, event: str, arg: Any) -> Any:
            code = frame.f_code
            real = self._agenda_file(code.co_filename)
            if real is None or not self._spans_agenda(code, real):
                return None
            return local

        sys.settrace(start)
        threading.settrace(start)
        self.mode = "lines"

        def remove() -> None:
            if sys.gettrace() is start:
                sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]

        self._remove = remove

    def remove(self) -> None:
        remove, self._remove = self._remove, None
        if remove is not None:
            remove()


def from_environment() -> ReachTracker | None:
    """The tracker for this process's agenda (None when verify gave none)."""
    path = os.environ.get(AGENDA_ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            agenda = json.load(fh)
    except (OSError, ValueError):
        return None
    return ReachTracker(agenda).install()


def write_agenda(path: str, spans: list[tuple[str, int, int]]) -> None:
    """Write the agenda file the children read (`spans`: (file, line, end_line))."""
    agenda: dict[str, list[list[int]]] = {}
    for f, a, b in spans:
        agenda.setdefault(os.path.realpath(f), []).append([a, b])
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(agenda, fh)
