"""Probe: subscribes on enter; every subscription and hook is removed on exit, even on error."""

from __future__ import annotations

from typing import Any, ClassVar, Iterator

from amplint.runtime.observations import Observations


class Probe:
    """One probe per rule code (same stem as the rule).  Probes never print and never raise.

    `install()` yields removable handles (bus subscriptions, torch hook handles, patches).
    `finish()` runs once at the end of the process, before the handles go, for end-of-run
    judgements (an update that never came, a scaler built twice).
    """

    code: ClassVar[str]

    @property
    def needs(self) -> frozenset[str]:
        """What must be on in the run for this probe to see anything (probes.NEEDS)."""
        from amplint.runtime.probes import NEEDS

        return NEEDS.get(self.code, frozenset())

    def __init__(self, sink: Observations) -> None:
        self.sink = sink
        self.bus = sink.bus
        self.state = sink.bus.state
        self._handles: list[Any] = []

    def install(self) -> Iterator[Any]:
        raise NotImplementedError

    def on(self, event: str, fn) -> Any:
        return self.bus.subscribe(event, fn)

    def finish(self) -> None:
        """End-of-run judgements; default: nothing."""

    @property
    def ended_abnormally(self) -> bool:
        """True in `finish()` when the process ended in an error or a signal: the iteration in
        flight never finished, so an end-of-run judgement must not count what it left undone."""
        return bool(self.sink.meta.get("ended_abnormally"))

    def __enter__(self) -> "Probe":
        self._handles = list(self.install())
        return self

    def remove(self) -> None:
        self.__exit__(None, None, None)

    def __exit__(self, *exc) -> None:
        while self._handles:
            try:
                self._handles.pop().remove()
            except Exception as e:  # noqa: BLE001
                self.sink.error(f"{self.code}.remove", e)
