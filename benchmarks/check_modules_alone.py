"""`amplint check` with the project index off: each module analysed alone, as amplint did
before the project model (issue 13).

For benchmarks/bench_project.py's "what reading other modules costs" rows (the same tree,
the same rules, with and without the index); not a mode users are offered.  The index is
off in the pool's workers too: they are forked from this process.

Run:   PYTHONPATH=<tree> python benchmarks/check_modules_alone.py check PATH [options]
"""

from __future__ import annotations

import sys

import amplint.project.index as index

index.for_path = lambda path: None  # NB: what `engine.check_source(project=AUTO)` asks

from amplint.cli import main  # noqa: E402  (after the index is switched off)

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
