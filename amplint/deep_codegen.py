"""libcst's codegen (positions, `code_for_node`) of deep trees on CPython 3.12.0 and 3.12.1.

Used by `engine.check_source` when it retries the analysis of a deep (legal) tree; see
docs/benchmarks-history.md "Parser limits, isolation and memory" for what it changes (737 levels to
CPython's own 2,975 on 3.12.1).
"""

from __future__ import annotations

from contextlib import contextmanager


# libcst's `CSTNode._codegen` as libcst 1.x writes it, compared by bytecode below (NB: no
# docstring: it would shift the constants and so the bytecode).
def _libcst_codegen(self, state, **kwargs) -> None:
    state.before_codegen(self)
    self._codegen_impl(state, **kwargs)
    state.after_codegen(self)


def _codegen_flat(self, state, **kwargs) -> None:
    state.before_codegen(self)
    if kwargs:
        self._codegen_impl(state, **kwargs)
    else:
        self._codegen_impl(state)  # NB: a plain call stays in the interpreter loop, off the C stack
    state.after_codegen(self)


@contextmanager
def codegen_without_c_recursion():
    """Positions (libcst's codegen) of a deep tree without CPython 3.12's C recursion limit.

    libcst's `_codegen` forwards `**kwargs` to the node's `_codegen_impl`, a call CPython
    makes through C; one per level of the tree.  CPython 3.12 counts such calls against a
    fixed C recursion limit that `sys.setrecursionlimit` cannot raise (1,500 in 3.12.0 and
    3.12.1: an 800-term `a + a + ...` could not be analysed, which CPython compiles).  While
    the analysis is retried for a deep tree, the method is replaced by the same one that
    makes the plain call when there is nothing to forward, and put back after.  Only when
    libcst's method is still the one it replaces (same bytecode and names): a libcst that
    changed it keeps its own, and deep code stays refused with a reason.
    """
    from libcst._nodes.base import CSTNode

    original = CSTNode.__dict__.get("_codegen")
    code, ours = getattr(original, "__code__", None), _libcst_codegen.__code__
    if code is None or (code.co_code, code.co_names) != (ours.co_code, ours.co_names):
        yield
        return
    CSTNode._codegen = _codegen_flat
    try:
        yield
    finally:
        CSTNode._codegen = original
