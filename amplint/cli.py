"""`amplint` command line: check | rules | explain | verify | compare.

Exit codes: 0 clean, 1 findings, 2 usage or internal error (ruff's convention).
`check` never imports torch; `verify` and `compare` import the runtime lazily.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from amplint import __version__, output, registry
from amplint.config import Config, ConfigError, discover, load

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _split(values: list[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    return tuple(v.strip() for item in values for v in item.split(",") if v.strip())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="amplint", description="Find and prove PyTorch mixed-precision (AMP) mistakes.")
    parser.add_argument("--version", action="version", version=f"amplint {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser("check", help="static analysis (no torch import, nothing executed)")
    check.add_argument("paths", nargs="*", type=Path, help="files or directories (default: .)")
    check.add_argument("--select", action="append", help="codes, prefixes or names to enable (comma-separated)")
    check.add_argument("--extend-select", action="append", help="enable these on top of the selection")
    check.add_argument("--ignore", action="append", help="codes, prefixes or names to disable")
    check.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    check.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes (with --fix or --diff)")
    check.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; change nothing")
    check.add_argument("--output-format", default="text", choices=("text", "json"), help="how to print findings")
    check.add_argument("--config", type=Path, help="read [tool.amplint] from this file")
    check.add_argument("--isolated", action="store_true", help="ignore configuration files")
    check.add_argument("--show-fixes", action="store_true", help="print each finding's fix title")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    check.add_argument("--force-exclude", action="store_true", help="apply excludes to files named explicitly")

    rules = sub.add_parser("rules", help="list every rule")
    rules.add_argument("--format", default="text", choices=("text", "json"))

    explain = sub.add_parser("explain", help="print a rule's documentation")
    explain.add_argument("rule", help="code (AMP101) or name (clip-before-unscale)")
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
        if args.command == "check":
            return cmd_check(args)
        if args.command == "rules":
            return cmd_rules(args)
        if args.command == "explain":
            return cmd_explain(args)
    except (ConfigError, registry.UnknownSelector) as exc:
        print(f"amplint: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("amplint: interrupted", file=sys.stderr)
        return 130
    parser.print_help()
    return EXIT_ERROR


def load_config(args) -> Config:
    if args.isolated:
        config = Config(root=Path.cwd())
    elif args.config is not None:
        config = load(args.config)
    else:
        config = discover(list(args.paths) or [Path.cwd()])
    return config.with_overrides(
        select=_split(args.select),
        ignore=(config.ignore + _split(args.ignore)) if args.ignore else None,
        extend_select=(config.extend_select + _split(args.extend_select)) if args.extend_select else None,
    )


def cmd_check(args) -> int:
    from amplint.runner import check_paths

    config = load_config(args)
    paths = list(args.paths) or [Path(".")]
    result = check_paths(
        paths, config, fix=args.fix, unsafe=args.unsafe_fixes, diff=args.diff, force_exclude=args.force_exclude
    )
    for missing in result.missing:
        print(f"amplint: error: {missing}: no such file or directory", file=sys.stderr)
    for f in result.errors:
        e = f.error
        print(f"{e.path}:{e.line}:{e.col0 + 1}: error: {e.reason}", file=sys.stderr)
    for crash in result.crashes:
        print(
            f"amplint: internal error in {crash.code} on {crash.path}: {crash.error}\n"
            f"  the other rules and files were still checked; please report this with the file if you can",
            file=sys.stderr,
        )
    diagnostics = sorted(result.diagnostics, key=lambda d: d.sort_key)
    if args.diff:
        for f in result.files:
            if f.diff:
                sys.stdout.write(f.diff)
    elif args.output_format == "json":
        print(output.format_json(diagnostics))
    else:
        srcs = {}
        for d in diagnostics:
            if d.path not in srcs:
                try:
                    srcs[d.path] = Path(d.path).read_text(encoding="utf-8", errors="replace")
                except OSError:
                    pass
        text = output.format_text(diagnostics, srcs, colour=output.stream_is_tty(sys.stdout), show_fixes=args.show_fixes)
        if text:
            print(text)
        fixed = sum(len(f.fixed.applied) for f in result.files if f.fixed and f.written)
        summary = _summary(len(diagnostics), fixed, sum(1 for d in diagnostics if d.fix is not None))
        if summary:
            print(summary)
    if result.missing or result.errors:
        return EXIT_ERROR
    if result.crashes:
        return EXIT_ERROR
    if args.diff:
        return EXIT_FINDINGS if any(f.diff for f in result.files) else EXIT_CLEAN
    if diagnostics and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _summary(found: int, fixed: int, fixable: int) -> str:
    parts = []
    if found:
        parts.append(f"Found {found} error{'s' if found != 1 else ''}.")
    if fixed:
        parts.append(f"Fixed {fixed}.")
    if fixable:
        parts.append(f"[*] {fixable} fixable with `amplint check --fix` (some may need --unsafe-fixes).")
    return " ".join(parts)


def cmd_rules(args) -> int:
    import json

    rows = [
        {
            "code": r.code,
            "name": r.name,
            "default": r.default_enabled,
            "fix": r.fix_availability.value,
            "safety": r.safety.value if r.fix_availability.value != "none" else None,
            "summary": _summary_line(r),
        }
        for r in sorted(registry.ALL_RULES, key=lambda r: r.code)
    ]
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return EXIT_CLEAN
    for row in rows:
        default = "on " if row["default"] else "opt-in"
        fix = {"none": "", "sometimes": "fix (sometimes)", "always": "fix"}[row["fix"]]
        print(f"{row['code']}  {row['name']:<40} {default:<7} {fix}")
    return EXIT_CLEAN


def _summary_line(rule) -> str:
    doc = rule.__doc__ or ""
    after = doc.split("## What it does", 1)[-1].strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in after.splitlines())


def cmd_explain(args) -> int:
    from amplint.docs import rule_page

    try:
        (rule,) = registry.expand(args.rule) if args.rule.upper() in registry.BY_CODE or args.rule in registry.BY_NAME else ()
    except ValueError:
        print(f"amplint: error: unknown rule {args.rule!r}", file=sys.stderr)
        return EXIT_ERROR
    print(rule_page(rule))
    return EXIT_CLEAN


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
