"""The long fuzzing run (issue 8): the properties of tests/test_fuzz.py, many more examples.

    python benchmarks/fuzz_long.py [--examples N] [--corpus /work/corpus/src] [--json out.json]

Campaigns: hypothesmith's grammar (valid Python), line mutations of the fixtures
and of real files (AMP-heavy files of the corpus when it is there: deleted lines,
swapped statements, inserted autocast/scaler calls), arbitrary bytes behind
encoding headers, and (issue 17) the line-ending and encoding variants of mutated
fixtures and real files (`test_fuzz.assert_variants_hold`: same findings and fixes in
CRLF, CR, mixed, BOM and latin-1, the diff patches into the fix, every fix on its
finding's statement, the pre-filter changes nothing), plus one sweep of every fixture in
every ending and encoding.  Every rule runs, the opt-in ones too.  For each it prints the examples run, how they ended (findings,
clean, parse error) and any property violation, with the input that shows it (shrunk by
hypothesis).  Figures go into docs/benchmarks-history.md "## Robustness".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import hypothesmith  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import test_fuzz  # noqa: E402  (the properties and the mutation strategy live there)


def corpus_seeds(corpus: Path, limit: int) -> list[str]:
    """AMP-heavy real files (they mention a scaler or autocast), small enough to fuzz quickly."""
    out = []
    for p in sorted(corpus.rglob("*.py")):
        try:
            if p.stat().st_size > 60_000:
                continue
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "GradScaler" in text or "autocast" in text or "clip_grad" in text:
            out.append(text)
            if len(out) >= limit:
                break
    return out


def campaign(name: str, strategy, examples: int, holds) -> dict:
    outcomes: Counter = Counter()
    failures: list[str] = []

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(value) -> None:
        outcomes[holds(value)] += 1

    start = time.perf_counter()
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - a property violation: record it with its input
        failures.append(f"{type(exc).__name__}: {exc}"[:2000])
    elapsed = time.perf_counter() - start
    result = {"campaign": name, "examples": sum(outcomes.values()), "outcomes": dict(outcomes),
              "violations": failures, "seconds": round(elapsed, 1)}
    print(json.dumps(result), flush=True)
    return result


def bytes_holds(args) -> str:
    raw, prefix = args
    from amplint import sources

    try:
        text, encoding, bom = sources.decode(prefix + raw, "fuzz.py")
    except sources.UnreadableSource:
        return "unreadable"
    outcome = test_fuzz.assert_holds(text)
    assert sources.encode(text, encoding, bom) == prefix + raw
    return outcome


def variant_holds(args) -> str:
    source, (ending, encoding) = args
    return test_fuzz.assert_variants_hold(source, ending, encoding)


def sweep_fixtures() -> dict:
    """Every fixture (good and bad) in every line ending and encoding, no sampling."""
    outcomes: Counter = Counter()
    failures: list[str] = []
    start = time.perf_counter()
    for path, source in zip(test_fuzz.FIXTURES, test_fuzz.SEEDS):
        for ending in test_fuzz.ENDINGS:
            for encoding in test_fuzz.ENCODINGS:
                try:
                    outcomes[test_fuzz.assert_variants_hold(source, ending, encoding)] += 1
                except Exception as exc:  # noqa: BLE001 - a property violation: record it
                    failures.append(f"{path.parent.name}/{path.name} {ending} {encoding}: {type(exc).__name__}: {exc}"[:2000])
    result = {"campaign": "every fixture x ending x encoding", "examples": sum(outcomes.values()) + len(failures),
              "outcomes": dict(outcomes), "violations": failures, "seconds": round(time.perf_counter() - start, 1)}
    print(json.dumps(result), flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=500, help="examples per campaign")
    ap.add_argument("--corpus", type=Path, default=Path("/work/corpus/src"))
    ap.add_argument("--corpus-files", type=int, default=80)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    seeds = list(test_fuzz.SEEDS)
    real = corpus_seeds(args.corpus, args.corpus_files) if args.corpus.is_dir() else []
    print(f"seeds: {len(seeds)} fixtures and amplint files, {len(real)} corpus files", flush=True)
    results = [
        campaign("hypothesmith grammar", hypothesmith.from_grammar(), args.examples, test_fuzz.assert_holds),
        campaign("mutated fixtures", test_fuzz.mutated(seeds=[s for s in seeds[: len(test_fuzz.FIXTURES)]]),
                 args.examples, test_fuzz.assert_holds),
        campaign("mutated real files", test_fuzz.mutated(seeds=real or seeds), args.examples, test_fuzz.assert_holds),
        campaign("bytes behind encoding headers",
                 st.tuples(st.binary(max_size=2000),
                           st.sampled_from([b"", b"\xef\xbb\xbf", b"# coding: latin-1\n", b"# coding: utf-16\n",
                                            b"# -*- coding: cp1252 -*-\n"])),
                 args.examples, bytes_holds),
    ]
    variants = st.tuples(st.sampled_from(test_fuzz.ENDINGS), st.sampled_from(test_fuzz.ENCODINGS))
    results += [
        campaign("variants of mutated fixtures", st.tuples(test_fuzz.mutated(seeds=test_fuzz.FIXABLE_SEEDS), variants),
                 args.examples, variant_holds),
        campaign("variants of mutated real files", st.tuples(test_fuzz.mutated(seeds=real or seeds), variants),
                 args.examples, variant_holds),
        sweep_fixtures(),
    ]
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if any(r["violations"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
