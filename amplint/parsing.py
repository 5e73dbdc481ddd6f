"""Text to a libcst Module: the one parse every part of amplint goes through.

It lives below the engine because the project index parses the modules it reads for
another file's sake the same way the engine parses the file checked, and the index must
not import the engine (which imports the rules, whose analyses ask the index).  The
engine re-exports `parse`, `syntax_check` and `refuse_oversized` for its many callers.
"""

from __future__ import annotations

import libcst as cst

from amplint import parse_limits
from amplint.diagnostics import SourceError
from amplint.libcst_parse import parse_module
from amplint.parse_limits import DEFAULT_MAX_TOKENS


def parse(source: str, path: str, *, max_tokens: int | None = DEFAULT_MAX_TOKENS) -> cst.Module:
    """The one way amplint turns text into a libcst Module: every parse goes through here.

    CPython decides what is Python (`syntax_check`): what it refuses is its error, at its
    line, and libcst never sees it; so a file is an error or not whatever the pre-filter
    does, on every Python version (libcst reads PEP 695 on 3.11, CPython does not).
    What CPython accepts but libcst must not be given (too many tokens for memory,
    nesting that crashes its native parser: amplint.parse_limits) is refused with a
    reason.  Deep input is parsed in a thread with a large stack, so the outcome does
    not depend on the caller's stack.  `max_tokens`: None or 0 for no size limit.
    """
    refuse_oversized(source, path, max_tokens)
    syntax_check(source, path)
    plan = parse_limits.plan_parse(source)
    if plan.problem is not None:
        raise SourceError(path, plan.problem[0], 0, plan.problem[1])
    try:
        if plan.fits_this_thread():
            return parse_module(source)
        return _in_thread(lambda: parse_module(source), plan.thread_stack)
    except cst.ParserSyntaxError as exc:
        # CPython accepted the text: this is a gap in libcst's grammar, not the user's error.
        raise SourceError(path, exc.raw_line, max(exc.raw_column, 0),
                          f"not analysed: libcst, amplint's parser, cannot read this valid Python "
                          f"({exc.message})") from None
    except RecursionError:
        raise SourceError(path, 1, 0, "not analysed: too deeply nested for libcst, amplint's parser, "
                                      "in the stack this process can give it") from None
    except MemoryError:
        raise SourceError(path, 1, 0, _out_of_memory(source)) from None


def refuse_oversized(source: str, path: str, max_tokens: int | None) -> None:
    """Raise SourceError when `source` is too large to analyse: the token limit, or the memory left."""
    if parse_limits.too_many_tokens(source, max_tokens):
        raise SourceError(path, 1, 0, f"not analysed: too large (more than {max_tokens:,} tokens, the limit: "
                                      f"max-file-tokens in [tool.amplint], or --max-file-tokens)")
    problem = parse_limits.address_space_problem(source)
    if problem is not None:
        raise SourceError(path, 1, 0, problem)


def _out_of_memory(source: str) -> str:
    # NB: nothing here may allocate much: memory has just run out.
    return (f"not analysed: out of memory ({len(source) / 1e6:.1f} MB of source; "
            f"max-file-tokens in [tool.amplint] sets how large a file amplint tries)")


def syntax_check(source: str, path: str) -> None:
    """Raise SourceError if CPython cannot parse `source` (nothing is executed).

    CPython's parser and symbol table (what `compile` does before generating bytecode)
    cost about a fifteenth of libcst's parse and a third less than `compile`; like
    libcst they accept `return` outside a function, which only bytecode generation
    refuses.  Deep nesting is refused with an exception, never a crash, so the guard
    runs only to find the line CPython does not give.  The parser's warnings (invalid
    escapes and the like) are not amplint's to print.
    """
    import symtable
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            symtable.symtable(source, path, "exec")
    except SyntaxError as exc:
        line = exc.lineno or 1
        col0 = max((exc.offset or 1) - 1, 0)
        raise SourceError(path, line, col0, f"{type(exc).__name__}: {exc.msg}") from None
    except ValueError as exc:  # NUL bytes
        raise SourceError(path, 1, 0, f"SyntaxError: {exc}") from None
    except (RecursionError, MemoryError):
        # NB: the symbol table's recursion limit counts the frames of the caller (amplint's
        # own, an editor's thread): what `python file.py` compiles can fail here.  Only what
        # compile() refuses from a thread of its own is CPython's refusal; the rest goes on
        # to the parse guard, which says what amplint's parser cannot take.
        if not _compiles(source, path):
            line, reason = parse_limits.explain_refusal(source)
            raise SourceError(path, line, 0, reason) from None


def _compiles(source: str, path: str) -> bool:
    """Whether compile() accepts `source` as `python file.py` does: on a fresh thread, with the
    recursion limit raised by the frames of that thread (Python 3.11's compiler allows 3
    levels per frame left below the limit).  Nothing is run."""
    import sys
    import warnings

    def attempt() -> bool:
        frames, frame = 0, sys._getframe()
        while frame is not None:
            frames, frame = frames + 1, frame.f_back
        limit = sys.getrecursionlimit()
        try:
            sys.setrecursionlimit(limit + frames)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(source, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
        finally:
            sys.setrecursionlimit(limit)
        return True

    try:
        return _in_thread(attempt, _ANALYSIS_STACK_BYTES, required=True)
    except RecursionError:  # no thread could be started
        return False


# The stack the analysis gets when it is asked for on a thread other than the main one.
_ANALYSIS_STACK_BYTES = 64 << 20


class _NoThread(RecursionError):
    """No thread with the stack asked for could be started (not a recursion of the code)."""


# Where a thread cannot be had (an address-space limit, no threads), a stack this small is
# asked of the caller's own thread instead (8 MiB on a main thread).
_SMALL_STACK = 8 << 20


def _in_thread(fn, stack_bytes: int, *, required: bool = False):
    """Run `fn` in a thread with `stack_bytes` of stack; return or raise its result.

    libcst's native parser needs stack in proportion to the nesting (amplint.parse_limits
    plans it), and a caller's thread may have little (an editor's worker, musl's 128 KiB).
    If no such thread can be started, a small need is met on this thread; a large one, or
    `required`, is a RecursionError (the caller reports the file as too deep here).
    """
    import threading

    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    old_stack = threading.stack_size()
    try:
        threading.stack_size(stack_bytes)
        worker = threading.Thread(target=run, name="amplint-deep")
        worker.start()
        worker.join()
    except (ValueError, RuntimeError, MemoryError):  # no such stack here
        if required or stack_bytes > _SMALL_STACK:
            raise _NoThread("no room for a deeper stack") from None
        return fn()
    finally:
        threading.stack_size(old_stack)
    if "error" in box:
        raise box["error"]
    return box["value"]
