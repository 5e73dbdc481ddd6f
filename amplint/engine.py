"""Parse once, build the model once, run every enabled rule, then resolve positions.

The only entry point for the CLI, the flake8 plugin and pre-commit:
`check_source(source, path, config) -> list[Diagnostic]`.

Cost control (see BENCHMARKS.md):
- a textual pre-filter (`amplint.prefilter`) skips files whose code contains none of
  the enabled rules' `requires_any` tokens; a rule cannot fire without its tokens, so
  this never changes findings (tests/test_prefilter.py checks that on real code);
- positions come from libcst's PositionProvider, which is computed only for files
  that have something to report.
"""

from __future__ import annotations

import gc
import os
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.model import ModuleModel
from amplint.config import Config
from amplint.diagnostics import Diagnostic, Fix, Related, Span
from amplint.edits import EditBuilder, node_ranges
from amplint.rules._base import Report, RuleOptions
from amplint.prefilter import package_of, rules_that_may_fire
from amplint.project.index import AUTO, for_path as project_for
from amplint.sources import nesting_problem
from amplint import unused_noqa
from amplint.suppression import is_suppressed, noqa_map


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


def parse(source: str, path: str) -> cst.Module:
    # NB: the guard must run first: what it refuses would crash or stall libcst's native parser.
    problem = nesting_problem(source)
    if problem is not None:
        raise SourceError(path, problem[0], 0, problem[1])
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        # CPython says it better ("expected ':'" at the `if`, where libcst lists every token
        # it could have accepted at the next line): ask it, on this rare path only.
        syntax_check(source, path)
        raise SourceError(path, exc.raw_line, max(exc.raw_column, 0), f"SyntaxError: {exc.message}") from None
    except RecursionError:
        raise SourceError(path, 1, 0, "SyntaxError: too deeply nested to parse") from None


def syntax_check(source: str, path: str) -> None:
    """Raise SourceError if CPython cannot parse `source` (nothing is executed).

    Used for files the pre-filter skips.  CPython's parser and symbol table (what
    `compile` does before generating bytecode) cost about a fifteenth of libcst's parse
    and a third less than `compile`; like libcst they accept `return` outside a
    function, which only bytecode generation refuses.  Deep nesting is refused with an
    exception, never a crash, so the nesting guard runs only to explain a failure.  The
    parser's warnings (invalid escapes and the like) are not amplint's to print.
    """
    import symtable
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            symtable.symtable(source, path, "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        problem = nesting_problem(source)  # names the level and the line where CPython does not
        if problem is not None:
            raise SourceError(path, problem[0], 0, problem[1]) from None
        if isinstance(exc, SyntaxError):
            line = exc.lineno or 1
            col0 = max((exc.offset or 1) - 1, 0)
            raise SourceError(path, line, col0, f"{type(exc).__name__}: {exc.msg}") from None
        raise SourceError(path, 1, 0, f"SyntaxError: {exc}" if isinstance(exc, ValueError) else  # NUL bytes
                          "too deeply nested to analyse (CPython cannot compile it either)") from None


def check_source(
    source: str,
    path: str = "<string>",
    config: Config | None = None,
    *,
    select=None,
    crashes: list[RuleCrash] | None = None,
    prefilter: bool = True,
    project=AUTO,
    reads=None,
) -> list[Diagnostic]:
    """Diagnostics for one module's text; raises SourceError when it does not parse.

    `prefilter=False` parses every file (tests/test_prefilter.py compares both ways).
    `project`: the index through which the project's other modules are read
    (amplint/project); by default the process's shared one when `path` is a file on
    disk, None to analyse the module alone.  `reads` (a `project.index.Reads`) collects
    the other files the result depends on, for the result cache.
    """
    if project is AUTO:
        project = project_for(path)
    if config is None:
        config = Config(select=tuple(select)) if select else Config()
    elif select:
        config = config.with_overrides(select=tuple(select))
    rules = config.rules_for(path)
    if not rules:
        return []
    # AMP001 judges the other rules' suppressed findings, so it runs after them (unused_noqa.py).
    enabled = {r.code for r in rules}
    unused_noqa_on = unused_noqa.CODE in enabled
    rules = tuple(r for r in rules if r.code != unused_noqa.CODE)
    suppressed: list[tuple[int, str]] = []
    if prefilter:
        rules = rules_that_may_fire(source, rules, path, project=project, reads=reads)
        if not rules:
            # Nothing can fire, but a file that does not compile is still reported (issue 8:
            # every file ends with findings or a parse error).  CPython's compiler costs a
            # fraction of libcst's parse, and the text is not even looked at otherwise.
            syntax_check(source, path)
            return _with_unused_noqa([], source, path, suppressed, enabled) if unused_noqa_on else []
    elif not rules:
        syntax_check(source, path)
        return _with_unused_noqa([], source, path, suppressed, enabled) if unused_noqa_on else []
    options = RuleOptions(target_torch=config.torch_version)
    with _cyclic_gc_paused():
        module = parse(source, path)
    # Crashes are collected per attempt, so a retry does not report them twice; without a
    # `crashes` list a rule's exception propagates unchanged (API and test callers).
    found: list[RuleCrash] | None = [] if crashes is not None else None
    try:
        with _cyclic_gc_paused():
            out = analyse(module, source, path, rules, crashes=found, suppressed=suppressed, project=project, reads=reads, options=options)
    except RecursionError:
        # Deep but legal code (CPython compiles ~2,900 levels; the model and the libcst
        # visitors recurse in Python, several frames per level): once more, with room.
        found = [] if crashes is not None else None
        suppressed.clear()
        try:
            out = _with_deep_stack(lambda: analyse(module, source, path, rules, crashes=found, suppressed=suppressed, project=project, reads=reads, options=options))
        except RecursionError:
            raise SourceError(path, 1, 0, "too deeply nested to analyse") from None
    if crashes is not None:
        crashes.extend(found)
    return _with_unused_noqa(out, source, path, suppressed, enabled) if unused_noqa_on else out


def _with_unused_noqa(out: list[Diagnostic], source: str, path: str, suppressed, enabled: set[str]) -> list[Diagnostic]:
    """`out` plus AMP001's findings, themselves subject to `# noqa: AMP001`."""
    noqa = noqa_map(source)
    extra = [d for d in unused_noqa.findings(source, path, suppressed, enabled) if not is_suppressed(d.code, d.span.line, noqa)]
    return sorted(out + extra, key=lambda d: d.sort_key) if extra else out


@contextmanager
def _cyclic_gc_paused():
    """Pause Python's cyclic garbage collector around a parse or an analysis.

    libcst builds several objects per source token, and the collector, triggered by the
    allocations, walks the growing tree again and again although it holds no cycles: a
    third of the parse time (BENCHMARKS.md).  Whatever cycles the analysis leaves behind
    are collected at the next collection after the file.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# Room for deep (legal) code: Python frames per nesting level times CPython's ~3,000
# levels, and a C stack that holds them (threads reserve it lazily; untouched pages cost nothing).
_DEEP_RECURSION_LIMIT = 60_000
_DEEP_STACK_BYTES = 512 * 1024 * 1024


def _with_deep_stack(fn):
    """Run `fn` in a thread with a large stack and a raised recursion limit; return or raise its result."""
    import sys
    import threading

    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    old_limit = sys.getrecursionlimit()
    old_stack = threading.stack_size()
    try:
        threading.stack_size(_DEEP_STACK_BYTES)
        sys.setrecursionlimit(max(old_limit, _DEEP_RECURSION_LIMIT))
        worker = threading.Thread(target=run, name="amplint-deep")
        worker.start()
        worker.join()
    except (ValueError, RuntimeError, MemoryError):  # no such stack here: answer as before
        raise RecursionError("no room for a deeper stack") from None
    finally:
        threading.stack_size(old_stack)
        sys.setrecursionlimit(old_limit)
    if "error" in box:
        raise box["error"]
    return box["value"]


def analyse(module: cst.Module, source: str, path: str, rules, *, crashes=None, suppressed=None, project=None,
            reads=None, options: RuleOptions | None = None) -> list[Diagnostic]:
    """Run `rules` over one parsed module.

    A rule that raises is recorded in `crashes` (rule, file, error) and the others still
    run; so is a failure to build the model, under the code "model".  RecursionError is
    the exception: it propagates, so that `check_source` can retry with a deeper stack.
    `suppressed`, when given, collects the (line, code) of each finding a noqa dropped.
    """
    try:
        model = ModuleModel.build(module, path, package_of(path), project=project)
    except RecursionError:
        raise
    except Exception as exc:  # noqa: BLE001 - a model bug on one file must not stop the run
        _record_crash(crashes, "model", path, exc)
        return []
    with (project.checking(model) if project is not None else nullcontext()) as used:
        reports = _run_rules(model, rules, path, crashes, options)
    if reads is not None and used is not None:
        reads.merge(used)
    if not reports:
        return []
    positions, inclusive = node_ranges(module, inclusive=any(r.fix for r in reports))
    noqa = noqa_map(source)
    edits = EditBuilder(module, source, positions, inclusive)
    out = []
    for r in reports:
        pos = positions.get(r.node)
        if pos is None:
            continue
        span = Span(pos.start.line, pos.start.column, pos.end.line, pos.end.column)
        if is_suppressed(r.code, span.line, noqa):
            if suppressed is not None:
                suppressed.append((span.line, r.code))
            continue
        fix = edits.fix(r.fix) if r.fix else None
        if fix is not None and _edits_suppressed_line(fix, r.code, noqa):
            fix = None  # NB: `# noqa: AMP401` on a use keeps that line as written, so no shared fix may rewrite it
        related = tuple(filter(None, (_related(path, *item) for item in r.related)))
        notes = r.notes + tuple(f"{rel.message} ({rel.path}:{rel.span.line})" for rel in related)
        out.append(Diagnostic(r.code, r.message, path, span, fix, notes, related))
    return sorted(set(out), key=lambda d: d.sort_key)


def _related(path: str, model, node, message: str) -> Related | None:
    """Where `node` of another module is, named as the checked file's path is (relative or absolute)."""
    positions = model.__dict__.get("_amplint_positions")
    if positions is None:
        positions, _ = node_ranges(model.module, inclusive=False)
        model.__dict__["_amplint_positions"] = positions
    pos = positions.get(node)
    if pos is None:
        return None
    where = model.path
    if not os.path.isabs(path):
        try:
            where = os.path.relpath(where)
        except ValueError:  # another drive (Windows)
            pass
    return Related(where, Span(pos.start.line, pos.start.column, pos.end.line, pos.end.column), message)


def _run_rules(model, rules, path: str, crashes, options: RuleOptions | None = None) -> list[Report]:
    reports: list[Report] = []
    for rule_cls in rules:
        rule = rule_cls(model, options)
        try:
            rule.check()
            reports.extend(rule.finish())
        except RecursionError:
            raise
        except Exception as exc:  # noqa: BLE001 - one rule's bug must not hide the others' findings
            _record_crash(crashes, rule_cls.code, path, exc)
            continue
    return reports


def _record_crash(crashes, code, path, exc) -> None:
    if crashes is not None:
        crashes.append(RuleCrash(code, path, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    else:
        raise exc


def _edits_suppressed_line(fix: Fix, code: str, noqa) -> bool:
    return any(
        is_suppressed(code, line, noqa) for e in fix.edits for line in range(e.start[0], e.end[0] + 1)
    )
