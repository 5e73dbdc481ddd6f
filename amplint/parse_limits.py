"""What amplint refuses to hand libcst, and why: the guards in front of `engine.parse`.

libcst parses in native code, and three kinds of valid input end a process there
instead of raising (issue 17, items 5 and 6):

- **depth**: its parser recurses once per level of nesting and overflows its C stack
  (a segfault: no exception, no message, the whole run lost).  On an 8 MiB main-thread
  stack that is a chain of about 8,000 `and` operands, or 8,000 `a + a + ...`;
  CPython's own limit is about 3,000 nested levels, but it keeps `and`/`or` chains flat
  (any length compiles) and reads implicitly concatenated strings as one constant;
- **size**: its tree takes about 3.5 KiB per token (about 600 MB per MB of dense
  code); a 50 MB generated module reached 23 GB;
- **memory limits**: when an allocation fails (`ulimit -v`) it aborts the process.

So before libcst sees a text, amplint estimates its tokens (`too_many_tokens`), the
memory it would need against the address-space limit (`address_space_problem`), and
the nesting libcst would build (`plan_parse`), and refuses with a reason and a line
instead.  The figures come from benchmarks/native_parser_limits.py and are in
BENCHMARKS.md; the limits keep a margin below them.  Deep input that is allowed is
parsed in a thread with a large stack (`ParsePlan.deep_stack`), so the limits do not
depend on the caller's stack (flake8's worker, an editor's thread, `ulimit -s`).

What CPython refuses is never measured here: `engine.syntax_check` asks CPython first,
and `explain_refusal` only finds the line where CPython's own "too deeply nested"
errors, which have none, come from.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import warnings
from dataclasses import dataclass

from amplint.sources import STRINGS_AND_COMMENTS

# --- size -----------------------------------------------------------------------------------

# A file with more tokens than this is not analysed (configurable: `max-file-tokens` in
# [tool.amplint], `--max-file-tokens`; 0 turns the limit off).  The largest real modules
# seen have about 230,000 (torch's common_methods_invocations.py, 1.4 MB: 0.8 GB to check).
DEFAULT_MAX_TOKENS = 500_000
# What one token costs a whole check, parse and analysis together (measured on that module:
# 830 MiB peak for 230,000 tokens; BENCHMARKS.md), rounded up.
BYTES_PER_TOKEN = 4096

_TOKEN = re.compile(r"\w+|[^\w\s]")


def estimated_tokens(text: str) -> int:
    """About how many tokens CPython's tokenizer would make of `text` (a little more, not less).

    Strings and comments count one each; an operator like `**=` counts once per
    character.  Linear, about 0.1 s per MB.
    """
    return len(_TOKEN.findall(STRINGS_AND_COMMENTS.sub("0", text)))


def too_many_tokens(text: str, limit: int | None) -> int | None:
    """The estimated token count when it is over `limit` (None or 0: no limit), else None.

    A token takes at least one character, so a text no longer than the limit is not scanned.
    """
    if not limit or len(text) <= limit:
        return None
    tokens = estimated_tokens(text)
    return tokens if tokens > limit else None


def address_space_problem(text: str) -> str | None:
    """Why this process's address-space limit (`ulimit -v`) cannot hold a check of `text`, or None.

    libcst aborts the process when an allocation fails; refusing the file first turns
    that into an error for this file.  Without such a limit (the usual case) nothing is
    estimated.
    """
    left = _address_space_left()
    if left is None or len(text) * BYTES_PER_TOKEN <= left:
        return None
    need = estimated_tokens(text) * BYTES_PER_TOKEN
    if need <= left:
        return None
    return (f"not analysed: it would need about {need >> 20:,} MiB, and the address-space limit "
            f"(ulimit -v) leaves {left >> 20:,} MiB")


def _address_space_left() -> int | None:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm", "rb") as fh:  # first field: the address space in use, in pages
            used = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError, IndexError):
        return None  # not Linux, or no way to tell: the worker pool is the safety net
    return max(soft - used, 0)


# --- depth ------------------------------------------------------------------------------------

# Levels of nesting, as libcst builds them: each expression, statement and block one level,
# and, unlike CPython, each further `and`/`or` operand and each further implicitly
# concatenated string.  amplint analyses about 19,900 (benchmarks/native_parser_limits.py:
# then its visitors pass Python's recursion limit, even in the deep-stack thread); libcst
# crashes at about 7,000 on an 8 MiB stack, which is why deep input is parsed in a thread.
MAX_LIBCST_DEPTH = 10_000
# Levels of nesting as CPython counts them.  CPython 3.10-3.12 compile about 2,980, 3.13 up
# to ~10,000; libcst's parse time grows with the square of this depth (a 2,975-deep
# subscript chain takes 15 s), so amplint stops where 3.11 and 3.12 stop.
MAX_NESTING = 3_000
# libcst's own limit: more strings in one concatenation are a ParserSyntaxError there.
MAX_CONCATENATED_STRINGS = 3_000
# A logical line shorter than this, in a file without a long `elif` ladder, cannot nest
# deeper than this (a level takes at least a character), which any thread's stack parses;
# only longer ones are measured, and parsed in a thread with a large stack.
LONG_LOGICAL_LINE = 400
LONG_ELIF_LADDER = 100

_STRUCTURE = re.compile(r"[(\[{]|[)\]}]|\\\r?\n|\n")
_ELIF = re.compile(r"\belif\b")
_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class _Scan:
    """One pass over the text without its strings and comments: brackets and logical lines."""

    deepest_bracket: int
    deepest_bracket_at: int  # offset into the text
    longest_line: int  # characters in the longest logical line
    longest_line_at: int  # offset where it starts
    elifs: int


def _scan(text: str, *, exact_offsets: bool = False) -> _Scan:
    """Strings and comments count as one character each (a newline in a string ends no line).

    `exact_offsets`: replace each by as many characters, so the offsets are the text's
    (slower: a call per string; only to name a line in a refusal).
    """
    if exact_offsets:
        stripped = STRINGS_AND_COMMENTS.sub(lambda m: "0".ljust(len(m.group())), text)
    else:
        stripped = STRINGS_AND_COMMENTS.sub("0", text)
    depth = deepest = deepest_at = 0
    start = longest = longest_at = 0
    for m in _STRUCTURE.finditer(stripped):
        c = m.group()
        if c in "([{":
            depth += 1
            if depth > deepest:
                deepest, deepest_at = depth, m.start()
        elif c in ")]}":
            depth = max(depth - 1, 0)
        elif c[0] == "\\":
            continue  # a backslash continuation does not end the logical line
        elif depth == 0:
            if m.start() - start > longest:
                longest, longest_at = m.start() - start, start
            start = m.end()
    if len(stripped) - start > longest:
        longest, longest_at = len(stripped) - start, start
    elifs = len(_ELIF.findall(stripped)) if stripped.count("elif") > LONG_ELIF_LADDER else 0
    return _Scan(deepest, deepest_at, longest, longest_at, elifs)


@dataclass(frozen=True)
class ParsePlan:
    """How libcst may be given a text CPython accepted: not at all (`problem`), or in which stack."""

    problem: tuple[int, str] | None  # (line, reason) to refuse it with
    deep_stack: bool  # it may nest deeper than a small thread stack holds


def plan_parse(text: str) -> ParsePlan:
    """Whether, and how, libcst's native parser may be given `text` (which CPython accepted).

    Cost: one regex substitution and a loop over brackets and newlines (a few per cent
    of libcst's parse); CPython's parser runs as well only for a file with a logical
    line longer than LONG_LOGICAL_LINE characters or a long `elif` ladder.
    """
    scan = _scan(text)
    if scan.longest_line <= LONG_LOGICAL_LINE and scan.elifs <= LONG_ELIF_LADDER:
        return ParsePlan(None, deep_stack=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            tree = ast.parse(text)
    except (RecursionError, MemoryError):  # CPython compiled it, but its ast module has a lower limit
        return ParsePlan((deepest_line(text), _too_deep(None)), deep_stack=True)
    except (SyntaxError, ValueError):  # not this guard's to report: syntax_check accepted the text
        return ParsePlan(None, deep_stack=True)
    return ParsePlan(_measure(tree, text), deep_stack=True)


def _measure(tree: ast.AST, text: str) -> tuple[int, str] | None:
    """The first place where libcst's nesting would pass the limits, walking iteratively.

    Each stack entry: (node, nesting as CPython counts it, depth as libcst builds it, line).
    """
    lines: list[int] | None = None  # offsets of line starts, computed when first needed
    stack = [(node, 1, 1, getattr(node, "lineno", 1)) for node in ast.iter_child_nodes(tree)]
    while stack:
        node, nesting, depth, line = stack.pop()
        line = getattr(node, "lineno", line)  # operators (ast.Add) have no position: their parent's
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and getattr(node, "end_lineno", None):
            if lines is None:
                lines = [0] + [m.end() for m in _NEWLINE.finditer(text)]
            pieces = _concatenated_pieces(text, lines, node)
            if pieces > MAX_CONCATENATED_STRINGS:
                return line, (f"not analysed: {pieces:,} implicitly concatenated strings in one expression; "
                              f"libcst, amplint's parser, reads at most {MAX_CONCATENATED_STRINGS:,} "
                              f"(Python accepts it)")
            depth += max(pieces - 1, 0)
        if nesting > MAX_NESTING:
            return line, (f"not analysed: nested more than {MAX_NESTING:,} levels deep, amplint's limit "
                          f"(libcst's parse time grows with the square of the depth; Python "
                          f"{python_version()} accepts it)")
        if depth > MAX_LIBCST_DEPTH:
            return line, _too_deep(depth)
        extra = len(node.values) - 1 if isinstance(node, ast.BoolOp) else 0  # libcst: ((a and b) and c)
        stack.extend((child, nesting + 1, depth + 1 + extra, line) for child in ast.iter_child_nodes(node))
    return None


def _concatenated_pieces(text: str, lines: list[int], node: ast.AST) -> int:
    """How many string literals make up this constant (1 unless implicitly concatenated)."""
    start = _offset(text, lines, node.lineno, node.col_offset)
    end = _offset(text, lines, node.end_lineno, node.end_col_offset)
    if end - start < 2 * MAX_CONCATENATED_STRINGS:
        return 1  # each literal takes two characters at least: no room for too many
    return sum(1 for m in STRINGS_AND_COMMENTS.finditer(text, start, end) if m.group("string"))


def _offset(text: str, lines: list[int], lineno: int, col: int) -> int:
    """The text offset of an ast position (its columns count UTF-8 bytes)."""
    start = lines[min(lineno, len(lines)) - 1]
    line = text[start: lines[lineno] if lineno < len(lines) else len(text)]
    if line.isascii():
        return start + col
    return start + len(line.encode("utf-8")[:col].decode("utf-8", "ignore"))


def _too_deep(depth: int | None) -> str:
    levels = f"{depth:,} levels" if depth is not None else "deeper than Python's ast module goes"
    return (f"not analysed: nested {levels} deep as libcst, amplint's parser, builds it (each `and`/`or` "
            f"operand and each implicitly concatenated string is one level more); amplint's limit is "
            f"{MAX_LIBCST_DEPTH:,} (Python accepts it)")


# --- explaining CPython's refusals --------------------------------------------------------------

MAX_BRACKET_DEPTH = 200  # CPython's tokenizer limit (MAXLEVEL)


def explain_refusal(text: str) -> tuple[int, str] | None:
    """(line, reason) for text CPython refused as too deep (RecursionError, MemoryError: no line of its own)."""
    scan = _scan(text, exact_offsets=True)
    if scan.deepest_bracket > MAX_BRACKET_DEPTH:
        return (_line_at(text, scan.deepest_bracket_at),
                f"SyntaxError: too many nested parentheses ({scan.deepest_bracket} levels; "
                f"Python allows {MAX_BRACKET_DEPTH})")
    return deepest_line(text), f"too deeply nested: Python {python_version()} cannot compile it either"


def deepest_line(text: str) -> int:
    """Where the deepest nesting most likely is: the longest logical line, or an elif ladder."""
    scan = _scan(text, exact_offsets=True)
    return _line_at(text, scan.longest_line_at if scan.longest_line > LONG_LOGICAL_LINE or not scan.elifs
                    else _first_elif(text))


def _first_elif(text: str) -> int:
    m = _ELIF.search(text)
    return m.start() if m else 0


def _line_at(text: str, offset: int) -> int:
    return len(_NEWLINE.findall(text, 0, offset)) + 1


def python_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))
