"""Answers kept for the length of one module's analysis.

The step graphs, the precision regions and several rules ask the same questions of the
same names: which autocast a `with` item enters, which dtypes a name may hold.  Real code
rebinds a name from itself many times (`module = checkpoint_wrapper(module) if flag else
module`, fifteen times in one method), and a walk that asks again at every use grows as
branches ** depth.  The engine opens one analysis per module (`one_analysis`); inside it,
`slot(name, make)` gives the analyses one shared object each.  Outside one (a test that
builds a model and asks directly), `slot` answers None and nothing is kept.

Nothing outlives the analysis: models of other modules are kept across checks by the
project index, and what a name holds may depend on modules that change in between.
"""

from __future__ import annotations

from contextlib import contextmanager

_current: dict | None = None


@contextmanager
def one_analysis():
    global _current
    outer = _current
    _current = {}
    try:
        yield
    finally:
        _current = outer


def slot(name: str, make):
    """The analysis' object called `name` (made by `make()` on first use), or None outside one."""
    if _current is None:
        return None
    found = _current.get(name)
    if found is None:
        found = _current[name] = make()
    return found
