"""The CST-level changes a fix is made of: Replace, InsertBefore, RemoveStatement.

A rule reports them and the engine turns them into text edits (amplint/edits.py); an
analysis that builds a fix for its rules (analysis/deprecations.py) spells them too, and
the analysis never imports the rules, so they live here, below both.  `rules._base`
re-exports them for the rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst


@dataclass(frozen=True, eq=False)
class Replace:
    """Replace `node` with `new` (a CST node or source text for an expression/statement, or
    a `FlattenSentinel` of statements in place of the statement `node`, printed in order)."""

    node: cst.CSTNode
    new: cst.CSTNode | cst.FlattenSentinel | str


@dataclass(frozen=True, eq=False)
class InsertBefore:
    """Insert `code` as its own line(s) before `statement`, at the statement's indentation."""

    statement: cst.CSTNode
    code: str


@dataclass(frozen=True, eq=False)
class RemoveStatement:
    """Delete a whole statement, leaving its lines empty (later lines keep their numbers)."""

    statement: cst.CSTNode
