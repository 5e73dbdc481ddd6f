"""Which files would libcst parse?  The pre-filter's reach on a corpus, rule by rule (issue 7).

For every file: the rules whose tokens match the whole lowercased text (stage 1) and
those that also match its code text, without comments and docstrings (stage 2, what
decides).  Prints, per default rule, the files (and MB) that pass each stage and those
that pass for that rule alone; per package, the files that are parsed; and the CPU the
pre-filter itself costs.  Nothing is parsed or analysed here.

Run:  python benchmarks/prefilter_report.py /tmp/corpus/src
Not a test: paste the printed tables into docs/benchmarks-history.md "## Speed".
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amplint.config import Config  # noqa: E402
from amplint.prefilter import _passing, rules_that_may_fire  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path)
    args = ap.parse_args(argv)
    rules = Config().rules_for("x.py")
    files = sorted(args.corpus.rglob("*.py"))
    texts = [(p, p.read_text(encoding="utf-8", errors="replace")) for p in files]

    stage1: collections.Counter = collections.Counter()
    stage2: collections.Counter = collections.Counter()
    size2: collections.Counter = collections.Counter()
    alone: collections.Counter = collections.Counter()
    by_package: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])
    parsed = parsed_bytes = 0
    start = time.process_time()
    for path, text in texts:
        firing = rules_that_may_fire(text, rules, str(path))
        package = path.relative_to(args.corpus).parts[0]
        row = by_package[package]
        row[0] += 1
        row[1] += len(text.encode("utf-8", "replace"))
        if firing:
            parsed += 1
            parsed_bytes += len(text.encode("utf-8", "replace"))
            row[2] += 1
            row[3] += len(text.encode("utf-8", "replace"))
            for rule in firing:
                stage2[rule.code] += 1
                size2[rule.code] += len(text)
            if len(firing) == 1:
                alone[firing[0].code] += 1
    cpu = time.process_time() - start
    for path, text in texts:  # stage 1 alone, for the table (not timed)
        for rule in _passing(rules, text.lower()):
            stage1[rule.code] += 1

    total = sum(len(t.encode("utf-8", "replace")) for _, t in texts)
    print(f"{len(files)} files, {total / 1e6:.1f} MB; pre-filter CPU {cpu:.2f} s ({cpu / len(files) * 1e3:.2f} ms per file)")
    print(f"parsed (some rule may fire): {parsed} files, {parsed_bytes / 1e6:.1f} MB\n")
    print("| rule | whole text | code text | MB | alone |")
    print("|---|---:|---:|---:|---:|")
    for rule in rules:
        c = rule.code
        print(f"| {c} | {stage1[c]} | {stage2[c]} | {size2[c] / 1e6:.1f} | {alone[c]} |")
    print("\n| package | files | MB | parsed files | parsed MB |")
    print("|---|---:|---:|---:|---:|")
    for package, (n, b, pn, pb) in sorted(by_package.items()):
        print(f"| {package} | {n} | {b / 1e6:.1f} | {pn} | {pb / 1e6:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
