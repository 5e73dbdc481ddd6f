"""`amplint` command line: check | rules | explain | version | server | verify | compare.

Exit codes: 0 clean, 1 findings, 2 usage or internal error (ruff's convention).
`check` never imports torch; `verify` and `compare` import the runtime lazily.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from amplint import __version__, output, registry
from amplint.closed_output import is_write_failure, quiet_stdout
from amplint.config import Config, ConfigError, group_by_config, load

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _split(values: list[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    return tuple(v.strip() for item in values for v in item.split(",") if v.strip())


def _count(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="amplint", description="Find and prove PyTorch mixed-precision (AMP) mistakes.")
    parser.add_argument("--version", action="version", version=f"amplint {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser("check", help="static analysis (no torch import, nothing executed)")
    check.add_argument("paths", nargs="*", type=Path, help="files or directories (default: .); `-` reads stdin")
    check.add_argument("--select", action="append", help="codes, prefixes or names to enable (comma-separated)")
    check.add_argument("--extend-select", action="append", help="enable these on top of the selection")
    check.add_argument("--ignore", action="append", help="codes, prefixes or names to disable")
    check.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    check.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes (with --fix or --diff)")
    check.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; change nothing")
    check.add_argument("--output-format", default="text", choices=output.FORMATS, help="how to print findings")
    check.add_argument("--output-file", type=Path, help="write findings to this file instead of stdout")
    check.add_argument("--statistics", action="store_true", help="print counts per code instead of each finding")
    check.add_argument("--config", type=Path, help="read [tool.amplint] from this file (pyproject.toml or a bare table)")
    check.add_argument("--isolated", action="store_true", help="ignore configuration files")
    check.add_argument("--exclude", action="append", help="replace the exclude patterns (comma-separated)")
    check.add_argument("--extend-exclude", action="append", help="add exclude patterns (comma-separated)")
    check.add_argument("--no-respect-gitignore", dest="respect_gitignore", action="store_false", default=None,
                       help="walk into files and directories that .gitignore excludes")
    check.add_argument("--show-fixes", action="store_true", help="print each finding's fix title")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    check.add_argument("--preview", dest="preview", action="store_true", default=None,
                       help="also run the preview tier: rules not yet measured at precision >= 0.90 (amplint rules)")
    check.add_argument("--no-preview", dest="preview", action="store_false", help="run only the stable tier")
    check.add_argument("--force-exclude", action="store_true", help="apply excludes to files named explicitly")
    check.add_argument("--jobs", "-j", type=int, metavar="N", help="worker processes (default: all cores; 1: no pool)")
    check.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    check.add_argument("--cache-dir", type=Path, metavar="DIR", help="result cache location (default: .amplint_cache)")
    check.add_argument("--stdin-filename", type=Path, help="the name of the file read from `-` (for config and messages)")
    check.add_argument("--fix-only", action="store_true",
                       help="apply fixes, but do not report or fail on what is left (implies --fix)")
    check.add_argument("--exit-non-zero-on-fix", action="store_true",
                       help="exit 1 when a fix was applied, even if nothing is left")
    check.add_argument("--add-noqa", action="store_true",
                       help="add `# noqa: AMPnnn` to every line with a finding (to adopt amplint on existing code)")
    loudness = check.add_mutually_exclusive_group()
    loudness.add_argument("--quiet", "-q", action="store_true", help="print findings, but no summary")
    loudness.add_argument("--silent", "-s", action="store_true",
                          help="print nothing on stdout; the exit code still says whether there are findings")
    check.add_argument("--max-file-tokens", type=_count, metavar="N",
                       help="do not analyse files with more tokens (memory: ~4 KiB each; default 500000; 0: no limit)")

    rules = sub.add_parser("rules", help="list every rule")
    rules.add_argument("--format", default="text", choices=("text", "json"))

    explain = sub.add_parser("explain", help="print a rule's documentation (AMP9xx: verify's runtime findings)")
    explain.add_argument("rule", help="code (AMP101) or name (clip-before-unscale)")

    version = sub.add_parser("version", help="print amplint's version")
    version.add_argument("--output-format", default="text", choices=("text", "json"))

    sub.add_parser("server", help="run the language server on stdin/stdout (needs amplint[server])")
    # Listed for --help only: main() hands these to amplint.runtime before parsing (they take a
    # command line of their own after `--`); `amplint verify --help` prints their options.
    sub.add_parser("verify", add_help=False, help="run the training command under probes; confirm findings with evidence (needs torch)")
    sub.add_parser("compare", add_help=False, help="run the training in fp32 and in mixed precision; compare the loss curves (needs torch)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("verify", "compare"):
        from amplint.runtime import cli as runtime_cli  # imports torch only inside the run

        return runtime_cli.main(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_ERROR if exc.code not in (0, None) else EXIT_CLEAN
    try:
        code = _dispatch(parser, args)
        if sys.stdout is not None and not sys.stdout.closed:  # the language server closes it on exit
            sys.stdout.flush()  # NB: `rules > /dev/full` fails here, not at interpreter exit
        return code
    except BrokenPipeError:
        # `amplint check | head`: the reader left; not an error worth a traceback.
        quiet_stdout()
        return EXIT_FINDINGS if args.command == "check" else EXIT_CLEAN
    except OSError as exc:
        if not is_write_failure(exc):
            raise
        # `amplint rules > /dev/full`: what `check` says for its report, for every command
        print(f"amplint: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        quiet_stdout()
        return EXIT_ERROR


def _dispatch(parser, args) -> int:
    try:
        if args.command == "check":
            return cmd_check(args)
        if args.command == "rules":
            return cmd_rules(args)
        if args.command == "explain":
            return cmd_explain(args)
        if args.command == "version":
            return cmd_version(args)
        if args.command == "server":
            return cmd_server()
    except (ConfigError, registry.UnknownSelector) as exc:
        print(f"amplint: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("amplint: interrupted", file=sys.stderr)
        return 130
    parser.print_help()
    return EXIT_ERROR


def load_config(args, paths: list[Path]) -> list[tuple[Config, list[Path]]]:
    """(configuration, paths) groups: each path uses the [tool.amplint] found from it upward.

    `--isolated` ignores every file; `--config` uses one file for all paths. CLI
    selection flags then override what the file says.
    """
    if args.isolated:
        groups = [(Config(root=Path.cwd()), paths)]
    elif args.config is not None:
        groups = [(load(args.config), paths)]
    else:
        groups = group_by_config(paths)
    return [(_overrides(config, args), ps) for config, ps in groups]


def _overrides(config: Config, args) -> Config:
    # As in Ruff, `--select` starts the selection afresh: the file's `ignore` and
    # `extend-select` were written against the file's own `select`, not against this one
    # (`ignore = ["AMP401"]` in the file, `--select AMP401` on the command line: AMP401 runs).
    # Without `--select`, `--extend-select` and `--ignore` are a layer over the file's
    # selection: they win over it, whichever selector is the more specific.
    fresh = args.select is not None
    return config.with_overrides(
        select=_split(args.select),
        ignore=_split(args.ignore) or () if fresh else None,
        extend_select=_split(args.extend_select) or () if fresh else None,
        then_ignore=None if fresh else _split(args.ignore),
        then_extend_select=None if fresh else _split(args.extend_select),
        exclude=_split(args.exclude),
        extend_exclude=(config.extend_exclude + _split(args.extend_exclude)) if args.extend_exclude else None,
        respect_gitignore=args.respect_gitignore,
        max_file_tokens=args.max_file_tokens,
        preview=args.preview,
    )


def cmd_check(args) -> int:
    from amplint.cache import default_directory as default_cache_dir
    from amplint.runner import RunResult, check_paths

    if args.output_file is not None:
        problem = _output_file_problem(args.output_file, list(args.paths) or [Path(".")])
        if problem:  # before the run: a long check whose report cannot be written is wasted
            print(f"amplint: error: --output-file {args.output_file}: {problem}", file=sys.stderr)
            return EXIT_ERROR
    paths = list(args.paths) or [Path(".")]
    problem = _check_flag_problem(args)
    if problem:
        print(f"amplint: error: {problem}", file=sys.stderr)
        return EXIT_ERROR
    if args.fix_only:
        args.fix = True
    if args.add_noqa:
        return _add_noqa(args, paths)
    if any(str(p) == "-" for p in paths):
        if len(paths) != 1:
            print("amplint: error: `-` (stdin) cannot be combined with other paths", file=sys.stderr)
            return EXIT_ERROR
        return _check_stdin(args)
    if args.stdin_filename is not None:
        print("amplint: error: --stdin-filename needs `-` as the path", file=sys.stderr)
        return EXIT_ERROR
    files, missing = [], []
    warned: set = set()
    for config, group, force_exclude in _units(args, paths, unreadable=files):
        _warn_if_nothing_selected(args, config, warned)
        _warn_if_preview_named(args, config, warned)
        cache_dir = None if args.no_cache else (args.cache_dir or default_cache_dir(config.root))
        part = check_paths(
            group, config, fix=args.fix, unsafe=args.unsafe_fixes, diff=args.diff, force_exclude=force_exclude,
            jobs=args.jobs, cache_dir=cache_dir, named=paths,
        )
        files.extend(part.files)
        missing.extend(part.missing)
    result = RunResult(files, missing)
    for miss in result.missing:
        print(f"amplint: error: {miss}: no such file or directory", file=sys.stderr)
    for f in result.errors:
        _print_source_error(f.error)
    for f in result.files:  # fixes dropped or not written (issue 8): say so, never silently
        for w in getattr(f, "warnings", ()):
            if not args.silent:
                print(f"{f.path}: warning: {w}", file=sys.stderr)
    _report_crashes(result.crashes)
    if not result.files and not result.missing:
        # Never "All checks passed!" for a run that checked nothing (every path excluded, or no
        # Python file there): Ruff says the same.
        print("amplint: warning: no Python files found under the given paths (excluded, or none there)",
              file=sys.stderr)
    diagnostics = sorted(result.diagnostics, key=lambda d: d.sort_key)
    fixed = sum(len(f.fixed.applied) for f in result.files if f.fixed and f.written)
    if args.diff:
        for f in result.files:
            if f.diff and not args.silent:
                _write_diff(f.diff, f.diff_encoding)
    else:
        if not _emit(args, diagnostics, fixed, sources=None, unchecked=len(result.errors) + len(result.missing),
                     checked=len(result.files), errors=[f.error for f in result.errors]):
            return EXIT_ERROR
    if result.missing:
        return EXIT_ERROR  # a usage error: --exit-zero does not hide a path that is not there
    if args.exit_zero:
        return EXIT_CLEAN  # whatever was found, unanalysable files and internal errors included
    if result.errors or result.crashes:
        return EXIT_ERROR
    if args.diff:
        return EXIT_FINDINGS if any(f.diff for f in result.files) else EXIT_CLEAN
    return _exit_code(args, diagnostics, fixed)


def _warn_if_preview_named(args, config: Config, warned: set) -> None:
    """A preview rule named by its code or name runs only with --preview: say so (Ruff's
    "selection has no effect because preview is not enabled"), once per configuration."""
    from amplint import registry

    if config.preview or args.silent or ("preview", config.source) in warned:
        return
    named = registry.named_preview_codes((*(config.select or ()), *config.extend_select))
    if named:
        warned.add(("preview", config.source))
        print(f"amplint: warning: {', '.join(named)} {'is' if len(named) == 1 else 'are'} in the preview tier and "
              f"not run without --preview (or `preview = true`)", file=sys.stderr)


def _warn_if_nothing_selected(args, config: Config, warned: set) -> None:
    """An empty selection (`select = []`, `--select ""`) selects nothing, as in Ruff: say so
    once per configuration, since "All checks passed!" alone would read as a clean tree."""
    if config.codes() or config.source in warned or args.silent:
        return
    warned.add(config.source)
    where = f" (by {config.source})" if config.source is not None and not args.select else ""
    if config.select is not None and not config.select:
        advice = "leave `select` out for the default rules"
    else:
        advice = "`ignore` removes every rule that `select` (or the default set) chose"
    print(f"amplint: warning: no rule is selected{where}, so nothing is checked; {advice}", file=sys.stderr)


def _exit_code(args, diagnostics, fixed: int) -> int:
    """1 for findings left (not with --fix-only or --exit-zero), or for a fix applied with
    --exit-non-zero-on-fix (what the pre-commit fixing hook needs); else 0."""
    if args.exit_non_zero_on_fix and fixed:
        return EXIT_FINDINGS
    if diagnostics and not (args.exit_zero or args.fix_only):
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _print_source_error(e) -> None:
    """One format for every file that could not be analysed, read from disk or from stdin."""
    print(f"{e.path}:{e.line}:{e.col0 + 1}: error: {e.reason}", file=sys.stderr)


def _output_file_problem(path: Path, inputs=()) -> str | None:
    """Why --output-file cannot be written, found before the run (its folders are created)."""
    if path.is_dir():
        return "it is a directory"
    if path.suffix in (".py", ".pyi", ".ipynb") and path.exists() and _among(path, inputs):
        return "it is one of the files checked, and the report would replace its code"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except FileExistsError:  # mkdir met a file where a folder should be
        return "cannot write it: Not a directory"
    except OSError as exc:
        return f"cannot write it: {exc.strerror or exc}"
    return None


def _among(path: Path, inputs) -> bool:
    """`path` is one of `inputs` or lies below one of them (a checked folder)."""
    real = os.path.realpath(path)
    for given in inputs:
        if str(given) == "-":
            continue
        root = os.path.realpath(given)
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return True
    return False


def _check_flag_problem(args) -> str | None:
    """Flag combinations that cannot mean anything: an error, never a silent surprise."""
    if args.statistics and args.output_format not in output.STATISTICS_FORMATS:
        return (f"--statistics prints counts per code, which {args.output_format} cannot carry "
                f"(use --output-format {' or '.join(output.STATISTICS_FORMATS)})")
    if args.add_noqa and (args.fix or args.fix_only or args.diff):
        return "--add-noqa cannot be combined with --fix, --fix-only or --diff"
    if args.add_noqa and any(str(p) == "-" for p in args.paths):
        return "--add-noqa writes files; it cannot read stdin"
    return None


def _add_noqa(args, paths: list[Path]) -> int:
    """`--add-noqa`: suppress every current finding where it is; prints how many comments were added."""
    from amplint.noqa_writer import add_noqa
    from amplint.runner import discover

    added, failed = 0, False
    unreadable: list = []
    for config, group, force_exclude in _units(args, paths, unreadable=unreadable):
        files, missing = discover(group, config, force_exclude=force_exclude, unreadable=unreadable)
        for miss in missing:
            print(f"amplint: error: {miss}: no such file or directory", file=sys.stderr)
        result = add_noqa(files, config)
        for problem in result.errors:
            print(f"amplint: error: {problem} (file left unchanged)", file=sys.stderr)
        added += result.added
        failed = failed or bool(missing or result.errors)
    for problem in unreadable:
        print(f"amplint: error: {problem.path}: {problem.error.reason}", file=sys.stderr)
        failed = True
    if not args.silent:
        print(f"Added {added} noqa directive{'s' if added != 1 else ''}.")
    return EXIT_ERROR if failed else EXIT_CLEAN


def _units(args, paths: list[Path], unreadable: list | None = None) -> list[tuple[Config, list[Path], bool]]:
    """(configuration, files, force_exclude) to check, each file under its nearest [tool.amplint].

    Directories are walked with the configuration found from them upward; a file found
    in the walk that has a nearer pyproject.toml of its own (a sub-project) is checked
    with that one, its excludes included, as ruff's hierarchical configuration does.
    A file reached twice (named, and found in a named directory; `a.py ./a.py`) is
    checked once: its findings and warnings would otherwise be printed twice.
    A directory that cannot be listed goes to `unreadable` (a `FileResult` with its error).
    """
    from amplint.runner import discover, is_directory

    units: list[tuple[Config, list[Path], bool]] = []
    for config, group in load_config(args, paths):
        dirs = [p for p in group if is_directory(p)]
        named = [p for p in group if not is_directory(p)]
        if named:
            units.append((config, named, args.force_exclude))
        if not dirs:
            continue
        walked, _ = discover(dirs, config, force_exclude=args.force_exclude, unreadable=unreadable)
        if args.isolated or args.config is not None:
            units.append((config, walked, False))  # the walk applied the excludes
            continue
        for sub, files in group_by_config(walked):
            if sub.source == config.source:
                units.append((config, files, False))
            else:
                units.append((_overrides(sub, args), files, True))
    return _once_each(units)


def _once_each(units: list[tuple[Config, list[Path], bool]]) -> list[tuple[Config, list[Path], bool]]:
    seen: set[str] = set()
    out = []
    for config, files, force_exclude in units:
        keep = []
        for f in files:
            key = os.path.normpath(os.path.abspath(f))
            if key not in seen:
                seen.add(key)
                keep.append(f)
        if keep:
            out.append((config, keep, force_exclude))
    return out


def _check_stdin(args) -> int:
    """`amplint check -`: editors pipe the buffer in; `--fix` writes the fixed text to stdout."""
    from amplint import sources
    from amplint.engine import RuleCrash, SourceError, check_source
    from amplint.fixes import fix_text, unified_diff
    from amplint.runner import fix_warnings

    name = args.stdin_filename or Path("-")
    lookup = args.stdin_filename if args.stdin_filename is not None else Path.cwd()
    ((config, _),) = load_config(args, [lookup])
    _warn_if_nothing_selected(args, config, set())
    _warn_if_preview_named(args, config, set())
    if sys.stdin is None:  # `amplint check - <&-`: the interpreter found no descriptor 0
        print("amplint: error: cannot read stdin: it is closed", file=sys.stderr)
        return EXIT_ERROR
    try:
        raw = sys.stdin.buffer.read()
    except OSError as exc:  # stdin is a directory (`< /`), a closed pipe, ...
        print(f"amplint: error: cannot read stdin: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    unchecked = EXIT_CLEAN if args.exit_zero else EXIT_ERROR
    try:
        text, encoding, bom = sources.decode(raw, str(name))
    except sources.UnreadableSource as exc:
        error = SourceError(str(name), 1, 0, str(exc).split(": ", 1)[-1])
        _print_source_error(error)
        if args.fix:
            _write_bytes(raw)  # an editor replaces its buffer with stdout: give it back intact
        elif not args.diff and not _emit_not_analysed(args, error):
            return EXIT_ERROR
        return unchecked
    if args.force_exclude and args.stdin_filename is not None and config.is_excluded(args.stdin_filename):
        if args.fix:
            _write_bytes(raw)
        return EXIT_CLEAN
    from amplint import notebooks

    if notebooks.is_notebook(name):
        return _check_stdin_notebook(args, text, str(name), config, raw, bom)
    crashes: list[RuleCrash] = []
    fixed = 0
    try:
        if args.fix or args.diff:
            outcome = fix_text(text, lambda t: check_source(t, str(name), config, crashes=crashes), unsafe=args.unsafe_fixes)
            diagnostics = outcome.remaining
            fixed = len(outcome.applied)
            for w in fix_warnings(outcome):  # as for files: a dropped fix is said, never silent
                print(f"{name}: warning: {w}", file=sys.stderr)
            if args.diff:
                mark = "\ufeff" if bom else ""
                _write_diff(unified_diff(mark + text, mark + outcome.source, f"a/{name}", f"b/{name}"), encoding)
            else:
                _write_bytes(_encoded(outcome.source, raw, text, encoding, bom))
        else:
            diagnostics = check_source(text, str(name), config, crashes=crashes)
    except SourceError as exc:
        _print_source_error(exc)
        if args.fix:
            _write_bytes(raw)  # an editor replaces its buffer with stdout: give it back intact
        elif not args.diff and not _emit_not_analysed(args, exc):
            return EXIT_ERROR
        return unchecked
    return _finish_stdin(args, diagnostics, crashes, fixed, {str(name): text})


def _finish_stdin(args, diagnostics, crashes, fixed: int, sources: dict) -> int:
    """Report what `amplint check -` found, and its exit code."""
    from amplint.runner import unique_crashes

    crashes = unique_crashes(crashes)  # fixing lints once per pass: a crashing rule crashes each time
    _report_crashes(crashes)
    diagnostics = sorted(diagnostics, key=lambda d: d.sort_key)
    if not args.diff:
        # With --fix, stdout carries the fixed source; findings go to stderr (ruff does the same).
        if not _emit(args, diagnostics, fixed, sources=sources, stream=sys.stderr if args.fix else None):
            return EXIT_ERROR
    if args.exit_zero:
        return EXIT_CLEAN
    if crashes:
        return EXIT_ERROR
    if args.diff:
        return EXIT_FINDINGS if fixed else EXIT_CLEAN
    return _exit_code(args, diagnostics, fixed)


def _encoded(new: str, raw: bytes, text: str, encoding: str, bom: bool) -> bytes:
    """The fixed source as bytes, in the encoding (and with the BOM) it was read in: the
    bytes read when nothing changed."""
    from amplint import sources

    return raw if new == text else sources.encode(new, encoding, bom)


def _write_bytes(data: bytes) -> None:
    """Source bytes on stdout as they are, line endings and BOM included."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream (tests, embedding)
        sys.stdout.write(data.decode("utf-8", "surrogateescape"))
        return
    sys.stdout.flush()
    buffer.write(data)
    buffer.flush()


def _check_stdin_notebook(args, text: str, name: str, config, raw: bytes, bom: bool) -> int:
    """`amplint check --stdin-filename nb.ipynb -`: the notebook's JSON on stdin; with --fix the
    fixed notebook on stdout, findings by cell on stderr."""
    from amplint import notebooks
    from amplint.engine import RuleCrash, SourceError, check_source

    crashes: list[RuleCrash] = []
    fixed = 0

    def lint(module: str):
        return check_source(module, name, config, crashes=crashes)

    try:
        nb = notebooks.load(text, name)
        if args.fix or args.diff:
            outcome, new_text, warnings = notebooks.fix(nb, lint, unsafe=args.unsafe_fixes)
            for w in warnings:
                print(f"{name}: warning: {w}", file=sys.stderr)
            diagnostics, fixed = outcome.remaining, len(outcome.applied) if new_text is not None else 0
            if args.diff:
                sys.stdout.write(notebooks.cell_diff(nb, new_text) if new_text is not None else "")
            else:
                _write_bytes(raw if new_text is None else _encoded(new_text, raw, text, "utf-8", bom))
        else:
            diagnostics = notebooks.check(nb, lint)
    except (notebooks.NotebookError, SourceError) as exc:
        reason = exc.reason if isinstance(exc, SourceError) else str(exc)
        print(f"{name}:1:1: error: {reason}", file=sys.stderr)
        if args.fix:
            _write_bytes(raw)  # an editor replaces its buffer with stdout: give it back intact
        elif not args.diff and not _emit_not_analysed(args, SourceError(name, 1, 0, reason)):
            return EXIT_ERROR
        return EXIT_CLEAN if args.exit_zero else EXIT_ERROR
    return _finish_stdin(args, diagnostics, crashes, fixed, {name: nb.cell_sources()})


def _emit_not_analysed(args, error) -> bool:
    """stdin that could not be analysed, in a machine-readable format too (text has it on stderr)."""
    if args.output_format == "text" or args.statistics or args.fix_only:
        return True
    return _emit(args, [], 0, sources={}, unchecked=1, checked=0, errors=[error])


def _write_diff(diff: str, encoding: str) -> None:
    """A file's diff in the file's own encoding, as git prints one: `git apply` compares bytes."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream (tests, embedding): it chooses the encoding
        sys.stdout.write(diff)
        return
    sys.stdout.flush()
    buffer.write(diff.encode(encoding))
    buffer.flush()


def _report_crashes(crashes) -> None:
    for crash in crashes:
        print(
            f"amplint: internal error in {crash.code} on {crash.path}: {crash.error}\n"
            f"  the other rules and files were still checked; please report this with the file if you can",
            file=sys.stderr,
        )


def _emit(args, diagnostics, fixed: int, *, sources: dict | None, stream=None, unchecked: int = 0,
          checked: int | None = None, errors=()) -> bool:
    """Print findings in the chosen format to --output-file, `stream`, or stdout.

    `--quiet` leaves out the summary, `--silent` everything (an --output-file is still
    written: it was asked for by name); `--fix-only` prints only what was fixed.
    `errors`: the files that could not be analysed (already on stderr), which the
    machine-readable formats carry too.
    False (after saying why) when the report could not be written: the caller exits 2,
    also under --exit-zero, since nobody will see these findings.
    """
    fmt = args.output_format
    target = args.output_file
    if target is None and args.silent:
        return True
    shown = stream or sys.stdout
    if target is None and shown is None:  # `amplint check x.py >&-`
        print("amplint: error: cannot write the report: stdout is closed", file=sys.stderr)
        return False
    # The whole report is rendered before anything is opened: a report that cannot be rendered
    # must not have truncated the one already at --output-file.
    parts: list[str] = []
    if args.fix_only:
        text = output.fix_only_summary(fixed) if fmt == "text" and not args.quiet else ""
        if text:
            parts.append(text + "\n")
    else:
        if sources is None and not args.statistics and fmt in ("text", "json", "json-lines", "sarif"):
            sources = _read_sources(diagnostics)  # the lines under findings, noqa rows, fingerprints
        if args.statistics:
            text = output.format_statistics(diagnostics, fmt, args.unsafe_fixes)
        elif fmt == "text":
            colour = target is None and output.use_colour(shown)
            text = output.format_text(diagnostics, sources, colour=colour,
                                      show_fixes=args.show_fixes, unsafe_fixes=args.unsafe_fixes)
        else:
            text = output.render(fmt, diagnostics, sources=sources, errors=errors)
        if text:
            parts.append(text + "\n")
        if fmt == "text" and not args.statistics and not args.quiet:
            if checked == 0 and not unchecked:
                parts.append("No files checked.\n")
            else:
                fixable = sum(1 for d in diagnostics if output.shows_fix_marker(d, args.unsafe_fixes))
                hidden = sum(1 for d in diagnostics if d.fix is not None) - fixable
                parts.append(output.summary(len(diagnostics), fixed, fixable, hidden, unchecked) + "\n")
    try:
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
        # NB: a file name that is not UTF-8 reaches here as surrogate escapes (os.fsdecode):
        # written back as its own bytes, as a terminal shows it
        out = open(target, "w", encoding="utf-8", errors="surrogateescape") if target is not None else shown  # noqa: SIM115
    except OSError as exc:
        print(f"amplint: error: --output-file {target}: cannot write it: {exc.strerror or exc}", file=sys.stderr)
        return False
    try:
        for part in parts:
            out.write(part)
        out.flush()  # NB: a file's last buffer is written here, not at close: a full disk is said below
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise  # `| head`: main() keeps that quiet
        where = f"--output-file {target}" if target is not None else "the report"
        print(f"amplint: error: cannot write {where}: {exc.strerror or exc}", file=sys.stderr)
        return False
    except UnicodeEncodeError as exc:
        where = f"--output-file {target}" if target is not None else "the report"
        print(f"amplint: error: cannot write {where}: {exc.reason} ({exc.object[exc.start:exc.end]!a})", file=sys.stderr)
        return False
    finally:
        if out is not sys.stdout and out is not sys.stderr:
            with contextlib.suppress(OSError):  # a failed write was reported above
                out.close()
    return True


def _read_sources(diagnostics) -> dict:
    """path -> text (for a notebook: cell number -> the cell's text) of each file with findings."""
    from amplint import notebooks

    srcs: dict = {}
    for d in diagnostics:
        if d.path not in srcs:
            try:
                text = Path(d.path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if d.cell is not None:
                try:
                    srcs[d.path] = notebooks.load(text, d.path).cell_sources()
                except notebooks.NotebookError:
                    continue
            else:
                srcs[d.path] = text
    return srcs


def cmd_rules(args) -> int:
    import json

    from amplint.docs import measured, tier_of
    from amplint.rule_figures import MEASURED_ON

    rows = []
    for r in sorted(registry.ALL_RULES, key=lambda r: r.code):
        figures = measured(r.code)
        rows.append({
            "code": r.code,
            "name": r.name,
            "default": r.default_enabled,
            "tier": tier_of(r.code),
            "fix": r.fix_availability.value,
            "safety": r.safety.value if r.fix_availability.value != "none" else None,
            "precision": figures[0] if figures else None,
            "recall": figures[1] if figures else None,
            "measured": dict(zip(("tp", "fp", "fn"), figures[2])) if figures else None,
            "summary": _summary_line(r),
        })
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return EXIT_CLEAN
    shown = lambda x: "   -" if x is None else f"{x:4.2f}"  # noqa: E731
    print(f"{'code':<7} {'name':<40} {'default':<7} {'tier':<8} {'prec':>4} {'rec':>4}  fix")
    for row in rows:
        default = "on" if row["default"] else "opt-in"
        fix = {"none": "", "sometimes": "fix (sometimes)", "always": "fix"}[row["fix"]]
        print(f"{row['code']:<7} {row['name']:<40} {default:<7} {row['tier']:<8} "
              f"{shown(row['precision'])} {shown(row['recall'])}  {fix}")
    print(f"\nprecision and recall: {MEASURED_ON}; preview rules run with --preview")
    return EXIT_CLEAN


def _summary_line(rule) -> str:
    from amplint.docs import summary_line

    return summary_line(rule)


# AMP000 is no rule: it is how the reports that have only codes (JSON, SARIF, flake8) say that
# a file was not analysed; `explain` says so, since users meet the code there.
_AMP000_PAGE = """# AMP000: not analysed

Not a rule: amplint could not analyse this file, and every report says why instead of
showing it as clean. `amplint check` prints the reason as an error line and exits 2; the
JSON, SARIF and flake8 outputs, which speak in codes, report it as AMP000 at the line the
reason names.

Reasons: a syntax error (flake8 reports its own E999 instead), a file that cannot be decoded,
a file past `max-file-tokens` or nested deeper than the parser can read, a notebook that is
not valid JSON, a notebook handed to flake8 (run `amplint check` on it), a mistake in
`[tool.amplint]`, or an internal error (please report it with the file).

It cannot be selected or ignored like a rule: fix the reason, or exclude the file
(`extend-exclude`, or flake8's own `--extend-ignore AMP000`)."""


def cmd_explain(args) -> int:
    from amplint.docs import rule_page

    from amplint.runtime.runtime_findings import lookup

    found = lookup(args.rule)  # AMP9xx: found only by verify, documented next to the runtime
    if found is not None:
        print(found.page())
        return EXIT_CLEAN
    if args.rule.strip().upper() == "AMP000":
        print(_AMP000_PAGE)
        return EXIT_CLEAN
    try:
        (rule,) = registry.expand(args.rule) if args.rule.upper() in registry.BY_CODE or args.rule in registry.BY_NAME else ()
    except ValueError:
        print(f"amplint: error: unknown rule {args.rule!r}", file=sys.stderr)
        return EXIT_ERROR
    print(rule_page(rule))
    return EXIT_CLEAN


def cmd_version(args) -> int:
    """`amplint version`: the version, as `--version` prints it (Ruff's `ruff version`)."""
    if args.output_format == "json":
        import json
        import platform

        print(json.dumps({"version": __version__, "python": platform.python_version()}))
    else:
        print(f"amplint {__version__}")
    return EXIT_CLEAN


def cmd_server() -> int:
    """`amplint server`: the language server over stdio (amplint/server/)."""
    try:
        from amplint.server import serve
    except ImportError as exc:
        print(f"amplint: error: the language server needs pygls ({exc}): pip install 'amplint[server]'", file=sys.stderr)
        return EXIT_ERROR
    serve()
    return EXIT_CLEAN


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
