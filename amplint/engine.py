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
from dataclasses import replace

import libcst as cst

from amplint import parse_limits
from amplint.analysis import memo
from amplint.analysis.model import ModuleModel
from amplint.config import Config
from amplint.deep_codegen import codegen_without_c_recursion
from amplint.diagnostics import Diagnostic, Fix, Related, RuleCrash, SourceError, Span
from amplint.edits import EditBuilder, NodeRanges, fix_nodes
# NB: parse, syntax_check and refuse_oversized are also engine.* for their many callers (and tests patch engine.parse)
from amplint.parsing import _ANALYSIS_STACK_BYTES, _NoThread, _in_thread, _out_of_memory, parse, refuse_oversized, syntax_check
from amplint.rules._base import Report, RuleOptions
from amplint.prefilter import package_of, rules_that_may_fire
from amplint import unused_noqa
from amplint.suppression import is_suppressed, logical_line_ends, noqa_map, noqa_row

# `check_source(project=AUTO)`: find the project index from the path (a sentinel, since
# None means "analyse the module alone").  NB: the index is imported when first needed: a
# run that the result cache answers never loads it.
AUTO = object()


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
        from amplint.project.index import for_path

        project = for_path(path)
    if config is None:
        # NB: the API runs exactly the rules it is given by code, preview ones included
        config = Config(select=tuple(select), preview=True) if select else Config()
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
    # Before anything reads the text closely: the same refusal whether or not the pre-filter skips it.
    refuse_oversized(source, path, config.max_file_tokens)
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
    options = RuleOptions(target_torch=config.torch_version_for(path, reads))
    # NB: one pause for the parse and the analysis (see `_cyclic_gc_paused`)
    with _cyclic_gc_paused():
        out, found = _parse_and_analyse(source, path, rules, config, crashes is not None, suppressed, project, reads,
                                        options)
    if crashes is not None:
        crashes.extend(found)
    return _with_unused_noqa(out, source, path, suppressed, enabled) if unused_noqa_on else out


def _parse_and_analyse(source: str, path: str, rules, config: Config, collect_crashes: bool, suppressed: list,
                       project, reads, options: RuleOptions) -> tuple[list[Diagnostic], list[RuleCrash] | None]:
    """(findings, rule crashes) of one module that the pre-filter let through."""
    module = project.parsed_tree(path, source) if project is not None else None
    if module is None:
        module = parse(source, path, max_tokens=config.max_file_tokens)
    # Crashes are collected per attempt, so a retry does not report them twice; without a
    # `crashes` list a rule's exception propagates unchanged (API and test callers).
    found: list[RuleCrash] | None = [] if collect_crashes else None
    try:
        try:
            out = _with_room(lambda: analyse(module, source, path, rules, crashes=found, suppressed=suppressed,
                                             project=project, reads=reads, options=options))
        except RecursionError:
            # Deep but legal code (CPython compiles ~3,000 levels; the model and the libcst
            # visitors recurse in Python, several frames per level): once more, with room.
            found = [] if collect_crashes else None
            suppressed.clear()

            def again() -> list[Diagnostic]:
                with codegen_without_c_recursion():
                    return analyse(module, source, path, rules, crashes=found, suppressed=suppressed,
                                   project=project, reads=reads, options=options)

            out = _with_deep_stack(again)
    except RecursionError:
        raise SourceError(path, parse_limits.deepest_line(source), 0,
                          f"not analysed: too deeply nested for amplint's analysis on Python "
                          f"{parse_limits.python_version()}") from None
    except MemoryError:
        raise SourceError(path, 1, 0, _out_of_memory(source)) from None
    return out, found


def _with_unused_noqa(out: list[Diagnostic], source: str, path: str, suppressed, enabled: set[str]) -> list[Diagnostic]:
    """`out` plus AMP001's findings, themselves subject to `# noqa: AMP001`."""
    noqa = noqa_map(source)
    extra = [d for d in unused_noqa.findings(source, path, suppressed, enabled) if not is_suppressed(d.code, d.span.line, noqa)]
    return sorted(out + extra, key=lambda d: d.sort_key) if extra else out


@contextmanager
def _cyclic_gc_paused():
    """Pause Python's cyclic garbage collector around a parse and its analysis.

    libcst builds several objects per source token, and the collector, triggered by the
    allocations, walks the growing tree again and again although it holds no cycles: a
    third of the parse time (BENCHMARKS.md).  The pause spans the parse *and* the
    analysis: between two pauses, the first allocation made the collector walk the whole
    new tree once more and promote it, so that older collections walked it again while
    the analysis ran.  The tree is freed by reference counting when the check returns;
    the few cycles the analysis leaves (step graphs' loops) go at the next collection.
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

    old_limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(old_limit, _DEEP_RECURSION_LIMIT))
        return _in_thread(fn, _DEEP_STACK_BYTES, required=True)
    finally:
        sys.setrecursionlimit(old_limit)



def _with_room(fn):
    """`fn()` with room for the analysis' recursion: on the main thread as it is, else in a
    thread of `_ANALYSIS_STACK_BYTES`.  A caller's thread may be small (an editor's worker,
    musl's 128 KiB, a test's 256 KiB), and before Python 3.11 every Python call also takes
    C stack, so the recursion limit is reached only after the stack ran out: a segfault.
    Where no such thread can be started, `fn` runs here (RecursionError then retries deeper)."""
    import threading

    if threading.current_thread() is threading.main_thread():
        return fn()
    try:
        return _in_thread(fn, _ANALYSIS_STACK_BYTES, required=True)
    except _NoThread:
        return fn()


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
    except (RecursionError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - a model bug on one file must not stop the run
        _record_crash(crashes, "model", path, exc)
        return []
    with (project.checking(model) if project is not None else nullcontext()) as used, memo.one_analysis():
        reports = _run_rules(model, rules, path, crashes, options)
    if reads is not None and used is not None:
        reads.merge(used)
    if not reports:
        return []
    # Only the reported nodes and those their fixes change are placed (a whole position
    # map of a large module costs more than its analysis).
    wanted = {r.node for r in reports}
    wanted.update(node for r in reports if r.fix for node in fix_nodes(r.fix))
    try:
        positions = NodeRanges(module, inclusive=any(r.fix for r in reports), wanted=wanted)
    except Exception as exc:  # noqa: BLE001 - re-raised
        if _during_recursion_error(exc):  # libcst's context managers turn it into a KeyError on the way out
            raise RecursionError("positions of a deep tree") from exc
        raise
    noqa = noqa_map(source)
    edits = EditBuilder(module, source, positions)
    _want_related(reports)
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
    if out:
        # NB: here, where the text is at hand, so that a cached result needs no tokenizing
        # when the JSON output asks where its noqa goes
        ends = logical_line_ends(source, until=max(d.span.line for d in out))
        out = [replace(d, noqa_row=noqa_row(d.span.line, ends)) for d in out]
    return merge_same_line(sorted(set(out), key=lambda d: d.sort_key), {r.code for r in rules if r.one_per_reference})


def merge_same_line(diagnostics: list[Diagnostic], per_reference=frozenset()) -> list[Diagnostic]:
    """One diagnostic per (path, cell, line, code), with every reason in it.

    Two paths to one finding (a helper inlined into two graphs, two scalers stepping
    after one clip) are one finding for a reader and for a score: the first (leftmost)
    is kept, the other messages are added to it, and so are their notes and related
    locations; the fix is the first one offered.  A rule that reports each reference
    (`one_per_reference`: AMP401 for `from torch.cuda.amp import autocast, GradScaler`)
    keeps one diagnostic per position instead.  `diagnostics` are sorted (sort_key).
    """
    out: list[Diagnostic] = []
    index: dict[tuple, int] = {}
    for d in diagnostics:
        key = (d.path, d.cell, d.span.line, d.code)
        if d.code in per_reference:
            key = (*key, d.span.col0)
        i = index.get(key)
        if i is None:
            index[key] = len(out)
            out.append(d)
            continue
        first = out[i]
        message = first.message if d.message in first.message.split("; also: ") else f"{first.message}; also: {d.message}"
        out[i] = replace(
            first,
            message=message,
            fix=first.fix if first.fix is not None else d.fix,
            notes=first.notes + tuple(n for n in d.notes if n not in first.notes),
            related=first.related + tuple(r for r in d.related if r not in first.related),
        )
    return out


def _want_related(reports) -> None:
    """Place, in one print per other module, the nodes the findings point to there."""
    by_model: dict[int, tuple] = {}
    for r in reports:
        for model, node, _ in r.related:
            by_model.setdefault(id(model), (model, set()))[1].add(node)
    for model, nodes in by_model.values():
        _ranges_in(model, nodes)


def _ranges_in(model, nodes) -> NodeRanges:
    """The ranges of another module's nodes, kept on its model for the next finding there."""
    ranges = model.__dict__.get("_amplint_ranges")
    if ranges is None:
        ranges = model.__dict__["_amplint_ranges"] = NodeRanges(model.module, inclusive=False, wanted=nodes)
    else:
        ranges.want(nodes)
    return ranges


def _related(path: str, model, node, message: str) -> Related | None:
    """Where `node` of another module is, named as the checked file's path is (relative or absolute)."""
    pos = _ranges_in(model, (node,)).get(node)
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
        except (RecursionError, MemoryError):  # the file's limits, not a rule's bug: check_source says so
            raise
        except Exception as exc:  # noqa: BLE001 - one rule's bug must not hide the others' findings
            _record_crash(crashes, rule_cls.code, path, exc)
            continue
    return reports


def _during_recursion_error(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, RecursionError):
            return True
        seen.add(id(exc))
        exc = exc.__context__
    return False


def _record_crash(crashes, code, path, exc) -> None:
    if crashes is not None:
        crashes.append(RuleCrash(code, path, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    else:
        raise exc


def _edits_suppressed_line(fix: Fix, code: str, noqa) -> bool:
    return any(
        is_suppressed(code, line, noqa) for e in fix.edits for line in range(e.start[0], e.end[0] + 1)
    )
