"""libcst's `parse_module` without validating each node its parser builds.

libcst checks every node when it is constructed (`CSTNode.__post_init__` calls
`_validate`: a keyword followed by its required space, balanced parentheses, ...), also
the seventy thousand nodes its own parser builds from a module it has just accepted, which
are valid by construction. libcst says so itself, next to that call: "PERF: It might make
more sense to move validation work into the visitor, which would allow us to avoid
validating the tree when parsing a file." It is 13% of a parse of real code (BENCHMARKS.md,
2026-12-02), and parsing is a fifth of a cold check.

So `__post_init__` skips the check while *this thread* is inside `parse_module`, and only
then: a node amplint builds itself (a fix's replacement, `with_changes`) is validated as
libcst intends, and so is every node another thread or another libcst user builds, during
a parse or not. The method is replaced only while libcst's is the one-line method this
module knows (same bytecode and names, as `deep_codegen` does): a libcst that changed it
keeps its own, and parses validate as before.
"""

from __future__ import annotations

import threading

import libcst as cst


class _ParseState(threading.local):
    parsing = False  # NB: a class default, so every thread reads False until it parses


_STATE = _ParseState()


# libcst's `CSTNode.__post_init__` as libcst 1.x writes it, compared by bytecode below (NB: no
# docstring or comment that would change the constants).
def _libcst_post_init(self) -> None:
    self._validate()


def _post_init(self) -> None:
    if not _STATE.parsing:
        self._validate()


def _install() -> bool:
    """Put `_post_init` in place of libcst's method, once; False when libcst's is not the
    method this module replaces."""
    from libcst._nodes.base import CSTNode

    current = CSTNode.__dict__.get("__post_init__")
    if current is _post_init:
        return True
    code, theirs = getattr(current, "__code__", None), _libcst_post_init.__code__
    if code is None or (code.co_code, code.co_names) != (theirs.co_code, theirs.co_names):
        return False
    CSTNode.__post_init__ = _post_init
    return True


INSTALLED = _install()


def parse_module(source: str) -> cst.Module:
    """`libcst.parse_module(source)`, its nodes unvalidated (see the module docstring)."""
    if _STATE.parsing:  # NB: re-entered (a parse inside a parse): the outer one restores the flag
        return cst.parse_module(source)
    _STATE.parsing = True
    try:
        return cst.parse_module(source)
    finally:
        _STATE.parsing = False
