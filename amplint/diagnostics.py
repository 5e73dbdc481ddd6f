"""Diagnostics, spans and edits: the one place where positions are converted.

A `Span` keeps libcst's native coordinates (1-based line, 0-based column).  Every
output format converts through the named helpers at the bottom of this module and
nowhere else, so a column off-by-one can only live here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Span:
    line: int
    col0: int
    end_line: int
    end_col0: int


class Applicability(enum.Enum):
    """Ruff's fix applicability: safe fixes apply with --fix, unsafe only with --unsafe-fixes."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass(frozen=True, order=True)
class Edit:
    """Replace the text between two (line, col0) positions with `content`.

    In a notebook, the positions count lines within `cell` (a fix may change other cells
    than its finding's: an import in the first cell, a call in the third)."""

    start: tuple[int, int]
    end: tuple[int, int]
    content: str
    cell: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Fix:
    title: str
    edits: tuple[Edit, ...]
    applicability: Applicability = Applicability.SAFE


@dataclass(frozen=True)
class Related:
    """Evidence for a finding that lies elsewhere (another module): SARIF's relatedLocations."""

    path: str
    span: Span
    message: str


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    path: str
    span: Span
    fix: Fix | None = None
    # Free-form facts a front end may show (e.g. the helper a finding was inlined through).
    notes: tuple[str, ...] = field(default=(), compare=False)
    related: tuple[Related, ...] = field(default=(), compare=False)
    # A notebook's cell (1-based among all its cells); `span` then counts lines in that cell.
    cell: int | None = None
    # Where a `# noqa` for it goes (the last line of its logical line, Ruff's `noqa_row`),
    # found while the engine has the text at hand; None: the front end works it out.
    noqa_row: int | None = field(default=None, compare=False)

    @property
    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.span.line, self.span.col0, self.code, self.message)


# --- position conversions: the only places a column changes base ---------------------


def to_flake8(span: Span) -> tuple[int, int]:
    """flake8 wants (1-based line, 0-based column); it adds 1 itself when printing."""
    return span.line, span.col0


def to_one_based(line: int, col0: int) -> dict[str, int]:
    """Ruff's JSON and SARIF use 1-based rows and columns."""
    return {"row": line, "column": col0 + 1}


def to_text(span: Span) -> str:
    """`row:col` with a 1-based column, as ruff and flake8 print it."""
    return f"{span.line}:{span.col0 + 1}"


def to_location(d: Diagnostic) -> str:
    """`row:col`, or `cell N:row:col` in a notebook (Ruff's `nb.ipynb:cell 3:4:5`)."""
    return f"cell {d.cell}:{to_text(d.span)}" if d.cell is not None else to_text(d.span)


def to_lsp(line: int, col0: int) -> tuple[int, int]:
    """LSP positions: 0-based line, 0-based column (in code points here; the server's
    position codec turns them into the UTF-16/8/32 units the client negotiated)."""
    return line - 1, col0


# --- what stops or spoils an analysis (here, not in the engine: a warm run reports them
# from the cache without importing the engine and libcst) ---------------------------------


class SourceError(Exception):
    """The file cannot be analysed (syntax error, undecodable bytes): where and why."""

    def __init__(self, path: str, line: int, col0: int, reason: str) -> None:
        super().__init__(f"{path}:{line}:{col0 + 1}: {reason}")
        self.path, self.line, self.col0, self.reason = path, line, col0, reason

    def __reduce__(self):  # results cross process boundaries (runner's --jobs)
        return (type(self), (self.path, self.line, self.col0, self.reason))


@dataclass(frozen=True)
class RuleCrash:
    """A rule raised on a file: reported, and the other rules still ran."""

    code: str
    path: str
    error: str
    trace: str
