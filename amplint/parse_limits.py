"""What amplint refuses to hand libcst, and why: the guards in front of `engine.parse`.

libcst parses in native code, and three kinds of valid input end a process there
instead of raising (issue 17, items 5 and 6):

- **depth**: its parser recurses once per level of nesting and overflows its C stack
  (a segfault: no exception, no message, the whole run lost).  On an 8 MiB main-thread
  stack that is a chain of about 7,000 `and` operands; CPython's own limit is about
  3,000 nested levels, but it keeps `and`/`or` chains flat (any length compiles) and
  reads implicitly concatenated strings as one constant (libcst stops at 3,000 of them);
- **size**: a whole check takes 2.4 to 4.1 KiB per token (about 600 MB per MB of dense
  code); a 50 MB generated module reached 23 GB;
- **memory limits**: when an allocation fails (`ulimit -v`) it aborts the process.

And one kind takes time and memory in the square of its nesting (`MAX_EXPRESSION_COST`):
expressions inside one another without brackets (2,000 nested conditional expressions,
24 KB, took 740 MB; 2,000 chained subscripts 11 s).

So before libcst sees a text, amplint estimates its tokens (`too_many_tokens`), the
memory it would need against the address-space limit (`address_space_problem`), and
the nesting libcst would build (`plan_parse`), and refuses with a reason and a line
instead.  The figures come from benchmarks/native_parser_limits.py and are in
BENCHMARKS.md; the limits keep a margin below them.  libcst parses where the stack is
known to hold the text's depth, or in a thread with that stack (`ParsePlan`), so the
limits do not depend on the caller's stack (flake8's worker, an editor's thread,
`ulimit -s`).

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

from amplint.sources import replace_strings_and_comments, strings_and_comments

# --- size -----------------------------------------------------------------------------------

# A file with more tokens than this is not analysed (configurable: `max-file-tokens` in
# [tool.amplint], `--max-file-tokens`; 0 turns the limit off).  The largest real modules
# seen have about 230,000 (torch's common_methods_invocations.py, 1.4 MB: 0.8 GB to check).
DEFAULT_MAX_TOKENS = 500_000
# What one token costs a whole check, parse and analysis together (measured on that module:
# 830 MiB peak for 230,000 tokens; BENCHMARKS.md), rounded up.
BYTES_PER_TOKEN = 4096

_TOKEN = re.compile(r"\w+|[^\w\s]")
_SLICE = 1 << 16  # code between strings is counted in slices this long, so no list is ever large


def estimated_tokens(text: str, *, stop_after: int | None = None) -> int:
    """About how many tokens CPython's tokenizer would make of `text` (a little more, not less).

    Strings and comments count one each; an operator like `**=` counts once per character.
    Counting stops soon after `stop_after` (the answer is then only "more than that"),
    so a 50 MB file is refused after reading the start of it: `strings_and_comments` finds
    each literal as it goes, without a scan to the end of the text.
    """
    count = pos = 0
    for literal in strings_and_comments(text):
        if stop_after is not None and count > stop_after:
            return count
        count += _code_tokens(text, pos, literal.start()) + 1
        pos = literal.end()
    if stop_after is not None and count > stop_after:
        return count
    return count + _code_tokens(text, pos, len(text), None if stop_after is None else stop_after - count)


def _code_tokens(text: str, start: int, end: int, stop_after: int | None = None) -> int:
    count = 0
    while start < end and (stop_after is None or count <= stop_after):
        cut = min(start + _SLICE, end)  # a name cut in two counts twice: one token per 64 KiB at most
        count += len(_TOKEN.findall(text, start, cut))
        start = cut
    return count


def too_many_tokens(text: str, limit: int | None) -> bool:
    """Whether `text` has more than `limit` tokens (None or 0: no limit).

    A token takes at least one character, so a text no longer than the limit is not scanned.
    """
    if not limit or len(text) <= limit:
        return False
    return estimated_tokens(text, stop_after=limit) > limit


def address_space_problem(text: str) -> str | None:
    """Why this process's address-space limit (`ulimit -v`) cannot hold a check of `text`, or None.

    libcst aborts the process when an allocation fails; refusing the file first turns
    that into an error for this file.  Without such a limit (the usual case) nothing is
    estimated.
    """
    left = _address_space_left()
    if left is None or len(text) * BYTES_PER_TOKEN <= left:
        return None
    tokens = estimated_tokens(text, stop_after=left // BYTES_PER_TOKEN)
    if tokens * BYTES_PER_TOKEN <= left:
        return None
    return (f"not analysed: at about {BYTES_PER_TOKEN >> 10} KiB a token it needs more memory than the "
            f"address-space limit (ulimit -v) leaves ({left >> 20:,} MiB)")


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
# libcst's parser keeps, for each position, what the expression starting there parsed to,
# a copy of the subtree: an expression nested d levels deep costs it time and memory in
# d squared (2,000 nested conditional expressions, 24 KB: 740 MB; 2,000 chained subscripts:
# 11 s; BENCHMARKS.md).  Nesting inside one statement is free up to EXPRESSION_LEVELS_FREE
# levels; past that each node costs one unit per level deeper, and a file is refused past
# MAX_EXPRESSION_COST units (then libcst needs about 130-210 bytes and a few microseconds
# a unit: at most ~200 MB and a few seconds).  Real code nests a few levels; BoolOp and
# Compare chains are flat in libcst's parser too, and cost nothing here.
EXPRESSION_LEVELS_FREE = 100
MAX_EXPRESSION_COST = 1_000_000
# libcst's own limit: more strings in one concatenation are a ParserSyntaxError there.
MAX_CONCATENATED_STRINGS = 3_000
# Each level of nesting takes a character of its logical line at least, and nesting across
# logical lines comes only from blocks (CPython allows 100 levels of indentation) and `elif`
# ladders; so a file's depth is at most this bound, and it is measured only when the bound
# passes a limit (a logical line of some 2,900 characters: hardly any real file).
INDENTATION_LEVELS = 100
# libcst's stack per level: between 1 and 2 KiB (BENCHMARKS.md: every construct at amplint's
# limits parses with 2 KiB a level, some crash with 1 KiB).  A main thread whose stack limit
# holds twice that (`ulimit -s`: 8 MiB is ~1,500 levels) parses where it is; any other
# caller gets a thread of its own with 8 KiB a level.  (A thread costs the parse 5-10%: its
# allocations go to a fresh malloc arena.)
NEEDED_PER_LEVEL = 2 << 10
STACK_PER_LEVEL = 8 << 10
_STACK_BASE = 1 << 20
_STACK_MAX = 512 << 20

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
    expression_cost_bound: int  # at least what `_measure` counts against MAX_EXPRESSION_COST


def _one_character(m: re.Match) -> str:
    """A string or comment as one character; an f-string with fields as one more per token in
    it (a dot each: no bracket, no line end), so the expressions in its fields are counted."""
    literal = m.group()
    if "{" in literal and m.group("string") and "f" in m.string[max(m.start() - 2, 0): m.start()].lower():
        return "0" + "." * len(_TOKEN.findall(literal))
    return "0"


def _scan(text: str, *, exact_offsets: bool = False) -> _Scan:
    """Strings and comments count as one character each (a newline in a string ends no line).

    `exact_offsets`: replace each by as many characters, so the offsets are the text's
    (slower: a call per string; only to name a line in a refusal).
    """
    if exact_offsets:
        stripped = replace_strings_and_comments(text, lambda m: "0".ljust(len(m.group())))
    else:
        stripped = replace_strings_and_comments(text, _one_character)
    depth = deepest = deepest_at = 0
    start = longest = longest_at = 0
    cost = 0
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
            if m.start() - start > _SHORT_LINE:
                cost += _expression_cost_bound(stripped, start, m.start())
            start = m.end()
    if len(stripped) - start > longest:
        longest, longest_at = len(stripped) - start, start
    if len(stripped) - start > _SHORT_LINE:
        cost += _expression_cost_bound(stripped, start, len(stripped))
    elifs = len(_ELIF.findall(stripped)) if "elif" in stripped else 0
    return _Scan(deepest, deepest_at, longest, longest_at, elifs, cost)


# The tokens a level of nesting needs: each node that nests others owns one of them (an
# operator, an opening bracket, a dot, a colon, a keyword such as `if` or `lambda`; a tuple's
# commas, a lambda's parameters and the leaves add a few levels at the end of a path, not
# along it).  So a logical line nests at most this many plus EXPRESSION_MARGIN levels.
_NESTS = re.compile(r"[^\w\s,;)\]}'\"]|\b(?:if|else|lambda|not|await|for|in|is|yield|from|and|or)\b")
EXPRESSION_MARGIN = 8
# A logical line no longer than this has too few characters for nesting past the free levels.
_SHORT_LINE = EXPRESSION_LEVELS_FREE - EXPRESSION_MARGIN


def _expression_cost_bound(stripped: str, start: int, end: int) -> int:
    """An upper bound of what `_measure` counts for one logical line (strings stand for one
    character; an f-string's fields for a character per token, see `_one_character`): each of
    its nodes, fewer than twice its tokens, at most as many levels deep as it has nesting tokens
    and the margin, less the free levels."""
    levels = len(_NESTS.findall(stripped, start, end)) + EXPRESSION_MARGIN
    if levels <= EXPRESSION_LEVELS_FREE:
        return 0
    return 2 * len(_TOKEN.findall(stripped, start, end)) * (levels - EXPRESSION_LEVELS_FREE)


@dataclass(frozen=True)
class ParsePlan:
    """How libcst may be given a text CPython accepted: not at all (`problem`), or with what stack."""

    problem: tuple[int, str] | None  # (line, reason) to refuse it with
    levels: int  # how deep libcst can nest it (a bound, or the depth measured)

    def fits_this_thread(self) -> bool:
        """This is the main thread, and its stack limit holds twice what libcst needs."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return False  # an editor's worker, a test's thread: its stack size is not known
        try:
            import resource

            soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
        except (ImportError, OSError, ValueError):
            return False
        room = 8 << 20 if soft == resource.RLIM_INFINITY else soft
        return 2 * (_STACK_BASE + self.levels * NEEDED_PER_LEVEL) <= room

    @property
    def thread_stack(self) -> int:
        """The stack of a thread of its own, with a margin of four."""
        return min(_STACK_BASE + self.levels * STACK_PER_LEVEL, _STACK_MAX)


def plan_parse(text: str) -> ParsePlan:
    """Whether, and with how much stack, libcst's native parser may be given `text`.

    Cost: one regex substitution and a loop over brackets and newlines (a few per cent
    of libcst's parse); CPython's parser runs as well only for a file whose depth bound
    passes a limit (a logical line of about MAX_NESTING characters, or an `elif` ladder
    as long).
    """
    scan = _scan(text)
    bound = INDENTATION_LEVELS + scan.longest_line + scan.elifs
    if bound <= MAX_NESTING and scan.expression_cost_bound <= MAX_EXPRESSION_COST:
        return ParsePlan(None, bound)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            tree = ast.parse(text)
    except (RecursionError, MemoryError):  # CPython compiled it, but its ast module has a lower limit
        return ParsePlan((deepest_line(text), _too_deep(None)), MAX_LIBCST_DEPTH)
    except (SyntaxError, ValueError):  # not this guard's to report: syntax_check accepted the text
        return ParsePlan(None, bound)
    problem, depth = _measure(tree, text)
    return ParsePlan(problem, depth + INDENTATION_LEVELS)


def _measure(tree: ast.AST, text: str) -> tuple[tuple[int, str] | None, int]:
    """(the first place where libcst's nesting would pass the limits, or None; the deepest
    libcst depth seen), walking iteratively.

    Each stack entry: (node, nesting as CPython counts it, depth as libcst builds it, line,
    levels inside the statement).
    """
    lines: list[int] | None = None  # offsets of line starts, computed when first needed
    stack = [(node, 1, 1, getattr(node, "lineno", 1), 0) for node in ast.iter_child_nodes(tree)]
    deepest = cost = 0
    while stack:
        node, nesting, depth, line, level = stack.pop()
        line = getattr(node, "lineno", line)  # operators (ast.Add) have no position: their parent's
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and getattr(node, "end_lineno", None):
            if lines is None:
                lines = [0] + [m.end() for m in _NEWLINE.finditer(text)]
            pieces = _concatenated_pieces(text, lines, node)
            if pieces > MAX_CONCATENATED_STRINGS:
                return (line, f"not analysed: {pieces:,} implicitly concatenated strings in one expression; "
                              f"libcst, amplint's parser, reads at most {MAX_CONCATENATED_STRINGS:,} "
                              f"(Python accepts it)"), depth
            depth += max(pieces - 1, 0)
        if nesting > MAX_NESTING:
            return (line, f"not analysed: nested more than {MAX_NESTING:,} levels deep, amplint's limit "
                          f"(libcst's parse time grows with the square of the depth; Python "
                          f"{python_version()} accepts it)"), depth
        if depth > MAX_LIBCST_DEPTH:
            return (line, _too_deep(depth)), depth
        if isinstance(node, ast.stmt):
            level = 0
        elif not isinstance(node, _NO_LEVEL):
            level += 1
            if level > EXPRESSION_LEVELS_FREE:
                cost += level - EXPRESSION_LEVELS_FREE
                if cost > MAX_EXPRESSION_COST:
                    return (line, _too_costly(level)), depth
        deepest = max(deepest, depth)
        extra = len(node.values) - 1 if isinstance(node, ast.BoolOp) else 0  # libcst: ((a and b) and c)
        stack.extend((child, nesting + 1, depth + 1 + extra, line, level) for child in ast.iter_child_nodes(node))
    return None, deepest


# Nodes with no text of their own (`Load`, `+`, `and`): no level, no cost.
_NO_LEVEL = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def _too_costly(level: int) -> str:
    return (f"not analysed: expressions nested too deeply for libcst, amplint's parser, whose time and "
            f"memory grow with the square of the nesting (here {level:,} levels inside one statement: "
            f"conditional expressions, lambdas, operators, calls, subscripts or attributes one inside "
            f"another); amplint's limit is {MAX_EXPRESSION_COST:,} node-levels past the first "
            f"{EXPRESSION_LEVELS_FREE} of each statement (Python accepts it)")


def _concatenated_pieces(text: str, lines: list[int], node: ast.AST) -> int:
    """How many string literals make up this constant (1 unless implicitly concatenated)."""
    start = _offset(text, lines, node.lineno, node.col_offset)
    end = _offset(text, lines, node.end_lineno, node.end_col_offset)
    if end - start < 2 * MAX_CONCATENATED_STRINGS:
        return 1  # each literal takes two characters at least: no room for too many
    return sum(1 for m in strings_and_comments(text, start, end) if m.group("string"))


def _offset(text: str, lines: list[int], lineno: int, col: int) -> int:
    """The text offset of an ast position (its columns count UTF-8 bytes)."""
    start = lines[min(lineno, len(lines)) - 1]
    line = text[start: lines[lineno] if lineno < len(lines) else len(text)]
    if line.isascii():
        return start + col
    return start + len(line.encode("utf-8")[:col].decode("utf-8", "ignore"))


def _too_deep(depth: int | None) -> str:
    if depth is None:
        return ("not analysed: nested deeper than Python's ast module reads (amplint measures the nesting "
                "with it before giving the file to libcst, amplint's parser, whose time and memory grow "
                f"with the square of the nesting); Python {python_version()} compiles it")
    return (f"not analysed: nested {depth:,} levels deep as libcst, amplint's parser, builds it (each `and`/`or` "
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
    return _line_at(text, scan.longest_line_at if scan.longest_line >= scan.elifs else _first_elif(text))


def _first_elif(text: str) -> int:
    m = _ELIF.search(text)
    return m.start() if m else 0


def _line_at(text: str, offset: int) -> int:
    return len(_NEWLINE.findall(text, 0, offset)) + 1


def python_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))
