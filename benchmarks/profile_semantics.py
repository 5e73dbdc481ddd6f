"""Where does checking an AMP-dense file spend its time?  (issue 7, "cheap semantics")

For every AMP-dense file of the corpus (it mentions `autocast`, `GradScaler`,
`custom_fwd` or `custom_bwd`: the few percent of a tree that uses AMP APIs), time
separately:

  parse           libcst.parse_module (the floor every libcst tool pays)
  model           ModuleModel.build: the one-pass import table / scopes / calls
  bindings        scaler and optimizer keys (model.bindings)
  steps           every scope's step graph (model.steps), built in full
  casts           module casts and optimizer inputs (model.casts)
  deprecations    AMP401 references and their fixes (model.deprecations)
  rules           every default rule's check() on the warmed model
  positions       libcst PositionProvider over the whole module (the engine
                  resolves it only for files that report something)
  qualnames       libcst QualifiedNameProvider (for comparison; amplint does not use it)

Usage:  python benchmarks/profile_semantics.py [CORPUS_DIR] [--limit N] [--no-qualnames]
Prints per-stage totals and their ratio to parse, then the 10 slowest files.
Not a test; nothing here asserts.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amplint.analysis.model import ModuleModel  # noqa: E402
from amplint.config import Config  # noqa: E402
from amplint.prefilter import package_of  # noqa: E402

AMP_API = re.compile(r"\b(autocast|GradScaler|custom_fwd|custom_bwd)\b")
DEFAULT_CORPUS = Path("/work/corpus/src")


def amp_dense_files(root: Path) -> list[tuple[Path, str]]:
    out = []
    for p in sorted(root.rglob("*.py")):
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if AMP_API.search(text):
            out.append((p, text))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--no-qualnames", action="store_true", help="skip the (slow) QualifiedNameProvider row")
    args = ap.parse_args(argv)
    files = amp_dense_files(args.corpus)
    if args.limit:
        files = files[: args.limit]
    rules = Config().rules()
    stages = ["parse", "model", "bindings", "steps", "casts", "deprecations", "rules", "positions"]
    if not args.no_qualnames:
        stages.append("qualnames")
    totals = dict.fromkeys(stages, 0.0)
    per_file = []
    for path, text in files:
        t: dict[str, float] = {}
        c = time.process_time  # CPU time: wall time on a shared machine is noise
        t0 = c()
        module = cst.parse_module(text)
        t["parse"] = c() - t0
        t0 = c()
        model = ModuleModel.build(module, str(path), package_of(str(path)))
        t["model"] = c() - t0
        t0 = c()
        b = model.bindings
        b.scaler_keys, b.optimizer_keys, b.uses_enabled_scaler
        t["bindings"] = c() - t0
        t0 = c()
        for graph in model.steps:
            graph.events
        t["steps"] = c() - t0
        t0 = c()
        model.casts.module_casts, model.casts.optimizer_inputs
        t["casts"] = c() - t0
        t0 = c()
        model.deprecations.references
        t["deprecations"] = c() - t0
        t0 = c()
        for r in rules:
            r(model).check()
        t["rules"] = c() - t0
        t0 = c()
        MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        t["positions"] = c() - t0
        if "qualnames" in stages:
            t0 = c()
            MetadataWrapper(module, unsafe_skip_copy=True).resolve(QualifiedNameProvider)
            t["qualnames"] = c() - t0
        for k, v in t.items():
            totals[k] += v
        per_file.append((sum(v for k, v in t.items() if k not in ("positions", "qualnames")) / max(t["parse"], 1e-9), path, t))
    size = sum(len(t) for _, t in files)
    print(f"{len(files)} AMP-dense files, {size / 1e6:.1f} MB, under {args.corpus}")
    parse = totals["parse"] or 1e-9
    for k in stages:
        print(f"  {k:<13} {totals[k]:8.2f} s   {totals[k] / parse:6.2f}x parse")
    analysis = sum(totals[k] for k in ("model", "bindings", "steps", "casts", "deprecations", "rules"))
    print(f"  analysis after parse: {analysis:.2f} s = {analysis / parse:.2f}x parse (+positions: {(analysis + totals['positions']) / parse:.2f}x)")
    print("slowest files (analysis / parse):")
    for ratio, path, t in sorted(per_file, key=lambda x: x[0], reverse=True)[:10]:
        detail = " ".join(f"{k}={v * 1000:.0f}ms" for k, v in t.items())
        print(f"  {ratio:5.2f}x {path}  {detail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
