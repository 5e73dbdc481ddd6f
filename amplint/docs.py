"""Rule documentation, generated from the registry and the rule docstrings (never by hand).

    python -m amplint.docs --write   # regenerate rules/AMPxxx.md and the README rule table
    python -m amplint.docs --check   # exit 1 and name what is stale (tests/test_docs.py does this)

The README table lives between `<!-- rules:start -->` and `<!-- rules:end -->`; only
that block is rewritten.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- rules:start -->", "<!-- rules:end -->"
_FIX = {"none": "no fix", "sometimes": "fix sometimes available", "always": "fix always available"}


def rule_page(rule) -> str:
    """The Markdown page for one rule: title, metadata line, then its docstring, then how it
    measured on real code."""
    doc = inspect.cleandoc(rule.__doc__ or "")
    fix = _FIX[rule.fix_availability.value]
    if rule.fix_availability.value != "none":
        fix += f" ({rule.safety.value})"
    default = "on by default" if rule.default_enabled else "opt-in (select it explicitly)"
    if tier_of(rule.code) == "preview":
        default = "preview (runs with `--preview` or `preview = true`)"
    return f"# {rule.code} {rule.name}\n\n*{default}; {fix}*\n\n{doc}\n\n## Measured\n{measured_text(rule.code)}\n"


def tier_of(code: str) -> str:
    from amplint.rule_catalog import CATALOG

    return next(e.tier for e in CATALOG if e.code == code)


def measured(code: str) -> tuple[float | None, float | None, tuple[int, int, int]] | None:
    """(precision, recall, (TP, FP, FN)) of a rule on real code (rule_figures.py), None if not scored."""
    from amplint.rule_figures import FIGURES

    if code not in FIGURES:
        return None
    tp, fp, fn = FIGURES[code]
    return (tp / (tp + fp) if tp + fp else None, tp / (tp + fn) if tp + fn else None, (tp, fp, fn))


def measured_text(code: str) -> str:
    from amplint.rule_figures import MEASURED_ON

    found = measured(code)
    if found is None:
        return f"No labelled case on {MEASURED_ON}."
    precision, recall, (tp, fp, fn) = found
    shown = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    return (f"Precision {shown(precision)}, recall {shown(recall)} ({tp} true findings, {fp} false, {fn} missed) "
            f"on {MEASURED_ON}.")


def summary_line(rule) -> str:
    """The first paragraph of "What it does", on one line."""
    doc = inspect.cleandoc(rule.__doc__ or "")
    after = doc.split("## What it does", 1)[-1].strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in after.splitlines())


def _rules():
    from amplint.registry import ALL_RULES

    return sorted(ALL_RULES, key=lambda r: r.code)


def rule_table() -> str:
    """The README table: one row per code, linking its generated page."""
    rows = [
        "| Code | Name | Default | Fix | What it does |",
        "|---|---|---|---|---|",
    ]
    for r in _rules():
        fix = {"none": "", "sometimes": "sometimes", "always": "yes"}[r.fix_availability.value]
        if fix:
            fix += f" ({r.safety.value})"
        summary = summary_line(r).replace("|", "\\|")
        default = "preview" if tier_of(r.code) == "preview" else ("on" if r.default_enabled else "opt-in")
        rows.append(f"| [{r.code}](rules/{r.code}.md) | `{r.name}` | {default} | {fix} | {summary} |")
    return "\n".join(rows)


def expected_files(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file and the content it must have."""
    from amplint.runtime.runtime_findings import ALL as RUNTIME_FINDINGS

    files = {root / "rules" / f"{r.code}.md": rule_page(r) for r in _rules()}
    files.update({root / "rules" / f"{f.code}.md": f.page() for f in RUNTIME_FINDINGS})
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    if START not in text or END not in text or text.index(START) > text.index(END):
        raise SystemExit(f"{readme}: markers {START} ... {END} not found")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    files[readme] = f"{head}{START}\n{rule_table()}\n{END}{tail}"
    return files


def stale(root: Path = ROOT) -> list[str]:
    """Generated files that are missing, out of date, or left over from a removed rule."""
    want = expected_files(root)
    out = []
    for path, content in want.items():
        try:
            if path.read_text(encoding="utf-8") != content:
                out.append(f"{path.relative_to(root)}: out of date")
        except FileNotFoundError:
            out.append(f"{path.relative_to(root)}: missing")
    for extra in sorted((root / "rules").glob("AMP*.md")):
        if extra not in want:
            out.append(f"{extra.relative_to(root)}: no such rule any more")
    return out


def write(root: Path = ROOT) -> list[Path]:
    """Regenerate every page and the README table; returns the files that changed."""
    changed = []
    (root / "rules").mkdir(exist_ok=True)
    want = expected_files(root)
    for path, content in want.items():
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            path.write_text(content, encoding="utf-8")
            changed.append(path)
    for extra in sorted((root / "rules").glob("AMP*.md")):
        if extra not in want:
            extra.unlink()
            changed.append(extra)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amplint.docs", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="regenerate rules/*.md and the README table")
    group.add_argument("--check", action="store_true", help="fail if any generated file is stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    if args.write:
        for path in write(args.root):
            print(f"wrote {path.relative_to(args.root)}")
        return 0
    problems = stale(args.root)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print("run `python -m amplint.docs --write` to regenerate", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
