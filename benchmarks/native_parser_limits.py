"""What libcst's native parser, and amplint as a whole, survive, per construct (issue 17, item 5).

    python benchmarks/native_parser_limits.py [--constructs and,plus,...] [--probe-timeout 60]

libcst parses in native code: input nested too deeply overflows its C stack and kills the
process (no exception to catch), and its time grows with the square of the depth for some
constructs.  `amplint.parse_limits.plan_parse` refuses such input before libcst sees
it; its limits come from this script's figures, with a margin.

For each construct (a chain of `and`, of `+`, of implicitly concatenated strings, nested
calls, an `elif` ladder, ...) and this Python, it prints the largest size that

- CPython accepts (its parser and symbol table, as `amplint check` asks it);
- libcst parses on an ordinary 8 MiB main-thread stack (where flake8 and a naive caller
  run it), each probe in a subprocess so that a crash is a data point;
- `amplint.engine.check_source` analyses with the guard lifted (the parse in amplint's
  deep-stack thread, the analysis retried there), within `--probe-timeout` seconds;

and the time the last one took at that size.  Sizes are searched by doubling, then
bisection; a search never goes past CPython's own limit (what CPython refuses, amplint
reports as CPython's error and never parses).  Figures go into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AMP = (ROOT / "fixtures" / "AMP101" / "bad_clip_between_backward_and_step.py").read_text(encoding="utf-8")
CEILING = 100_000

CONSTRUCTS = {
    "and": ("x = a and a and ... (one BoolOp)", lambda n: "x = " + " and ".join(["a"] * n) + "\n"),
    "or-in-call": ("f(a or a or ...)", lambda n: "f(" + " or ".join(["a"] * n) + ")\n"),
    "plus": ("x = a + a + ...", lambda n: "x = " + " + ".join(["a"] * n) + "\n"),
    "power": ("x = a ** a ** ...", lambda n: "x = " + " ** ".join(["a"] * n) + "\n"),
    "compare": ("x = a < a < ...", lambda n: "x = " + " < ".join(["a"] * n) + "\n"),
    "strings": ('x = ("a" "a" ...)', lambda n: "x = (" + " ".join(['"a"'] * n) + ")\n"),
    "fstrings": ('x = (f"{a}" f"{a}" ...)', lambda n: "x = (" + " ".join(['f"{a}"'] * n) + ")\n"),
    "not": ("x = not not ... a", lambda n: "x = " + "not " * n + "a\n"),
    "minus": ("x = - - ... a", lambda n: "x = " + "-" * n + "a\n"),
    "attribute": ("x = a.b.b...", lambda n: "x = a" + ".b" * n + "\n"),
    "subscript": ("x = a[0][0]...", lambda n: "x = a" + "[0]" * n + "\n"),
    "call": ("x = f()()...", lambda n: "x = f" + "()" * n + "\n"),
    "ternary": ("x = a if c else a if c else ...", lambda n: "x = " + "a if c else " * n + "a\n"),
    "lambda": ("x = lambda: lambda: ...", lambda n: "x = " + "lambda: " * n + "a\n"),
    "parentheses": ("x = ((...))", lambda n: "x = " + "(" * n + "a" + ")" * n + "\n"),
    "elif": ("if/elif ladder", lambda n: "if a:\n    pass\n" + "elif a:\n    pass\n" * n),
    "list": ("x = [a, a, ...] (flat)", lambda n: "x = [" + ", ".join(["a"] * n) + "]\n"),
}

CPYTHON = r"""
import sys, symtable, warnings
warnings.simplefilter("ignore")
try:
    symtable.symtable(sys.stdin.read(), "x.py", "exec")
except (SyntaxError, ValueError, RecursionError, MemoryError):
    sys.exit(1)
"""

LIBCST_MAIN_THREAD = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_STACK, (8 << 20, resource.getrlimit(resource.RLIMIT_STACK)[1]))
import libcst
try:
    libcst.parse_module(sys.stdin.read())
except Exception:
    sys.exit(1)
"""

AMPLINT = r"""
import sys, time
from amplint import engine, parse_limits
parse_limits.plan_parse = lambda text: parse_limits.ParsePlan(None, 100_000)  # guard lifted, a 512 MiB thread
src = sys.stdin.read()
start = time.perf_counter()
try:
    found = engine.check_source(src, "x.py", select=["AMP101"], crashes=[])
except engine.SourceError as exc:
    print(exc.reason, file=sys.stderr)
    sys.exit(1)
print(f"{time.perf_counter() - start:.2f}")
sys.exit(0 if [d.code for d in found] == ["AMP101"] else 1)
"""


def probe(script: str, text: str, timeout: float) -> tuple[str, str]:
    """('ok' | 'refused' | 'crashed (signal N)' | 'timeout', stdout) of one run in a fresh interpreter."""
    env_path = str(ROOT)
    try:
        proc = subprocess.run([sys.executable, "-c", script], input=text, capture_output=True, text=True,
                              timeout=timeout, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    except subprocess.TimeoutExpired:
        return "timeout", ""
    if proc.returncode == 0:
        return "ok", proc.stdout.strip()
    if proc.returncode < 0:
        return f"crashed (signal {-proc.returncode})", ""
    return "refused", proc.stderr.strip()[-200:]


def largest(ok, ceiling: int) -> tuple[int, str]:
    """The largest n <= ceiling with ok(n) true (assumed monotone), and how the first failure above it ended."""
    lo, hi, how = 0, None, ""
    n = 100
    while True:
        n = min(n, ceiling)
        good, why = ok(n)
        if good:
            lo = n
            if n == ceiling:
                return lo, "no failure up to the search's ceiling"
            n *= 2
        else:
            hi, how = n, why
            break
    while hi - lo > max(1, lo // 100):  # one per cent is precise enough for a limit with a margin
        mid = (lo + hi) // 2
        good, why = ok(mid)
        if good:
            lo = mid
        else:
            hi, how = mid, why
    return lo, how


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--constructs", default=",".join(CONSTRUCTS), help="comma-separated names")
    parser.add_argument("--probe-timeout", type=float, default=60.0, help="seconds one amplint probe may take")
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}; sizes searched to 1%; ceiling {CEILING:,}\n")
    print("| construct | CPython accepts up to | libcst, 8 MiB main thread | amplint analyses up to | "
          "amplint's time there | what happens above |")
    print("|---|---:|---:|---:|---:|---|")
    for name in args.constructs.split(","):
        words, make = CONSTRUCTS[name]
        started = time.perf_counter()
        cpython, _ = largest(lambda n: (probe(CPYTHON, make(n), 600)[0] == "ok", "refused"), CEILING)
        native, native_how = largest(lambda n: _outcome(probe(LIBCST_MAIN_THREAD, make(n), 600)), cpython)
        if native == cpython:
            native_how = "as far as CPython goes"
        timing: dict[int, str] = {}

        def analysed(n: int) -> tuple[bool, str]:
            how, out = probe(AMPLINT, AMP + make(n), args.probe_timeout)
            if how == "ok":
                timing[n] = out
            return how == "ok", how

        whole, whole_how = largest(analysed, cpython)
        if whole < cpython:
            above = whole_how
        else:
            above = "CPython refuses it (its error is reported)" if cpython < CEILING else "not searched further"
        print(f"| {name}: `{words}` | {_n(cpython)} | {_n(native)} ({native_how}) | {_n(whole)} | "
              f"{timing.get(whole, '?')} s | {above} |", flush=True)
        print(f"<!-- {name}: searched in {time.perf_counter() - started:.0f} s -->", file=sys.stderr)


def _outcome(result: tuple[str, str]) -> tuple[bool, str]:
    how, _ = result
    return how == "ok", how


def _n(n: int) -> str:
    return f">{CEILING:,}" if n >= CEILING else f"{n:,}"


if __name__ == "__main__":
    main()
