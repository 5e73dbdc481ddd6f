"""The fix-safety harness over real wheels: every fix amplint offers in them, executed.

    python benchmarks/fix_execution.py [CACHE]      # default CACHE: ~/.cache/amplint-fix-bench

Downloads (`pip download --no-deps`, once, into CACHE) transformers 4.30.0, timm 0.6.13,
lightning 1.9.5, accelerate 0.20.3 and diffusers 0.20.0, checks each package whole with every
fix offered (`--fix --unsafe-fixes`'s diagnostics), and for each fix:

- whole modules cannot simply be run, so each *site* the fix changes is executed: a construction
  of an autocast or GradScaler, or a custom_fwd/custom_bwd decorator, as written and as the fix
  alone leaves it, evaluated in a child process with torch (CPU) with the module's torch imports
  bound (names the module binds otherwise become opaque stand-ins, the same in both), three ways:
  plainly, inside the autocast regions that enclose the site in its file (`with` items that are
  themselves AMP calls, taken from the same text), and inside an enclosing bf16 region (CPU and
  CUDA); the built objects' state (device, the dtype it will use, enabled, cache; a scaler's
  arguments; what a decorated forward sees inside and outside a region) must be equal;
- a fix that builds nothing (an inserted `unscale_`, a moved `backward`, a constant) is counted
  but not executed;
- the module after all its fixes must compile on every Python 3.10-3.13 found where the original
  compiles (amplint.runtime.fix_execution.compile_parity).

Prints a table: fixes per package, fixes executed, differences; then each difference.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amplint.runtime import fix_execution as fx  # noqa: E402

PACKAGES = ["transformers==4.30.0", "timm==0.6.13", "lightning==1.9.5", "accelerate==0.20.3", "diffusers==0.20.0"]
AMP_NAMES = {"autocast", "GradScaler", "custom_fwd", "custom_bwd"}


def fetch(cache: Path) -> dict[str, Path]:
    """Each package's unpacked wheel under CACHE/src (downloaded once)."""
    dist, src = cache / "dist", cache / "src"
    dist.mkdir(parents=True, exist_ok=True)
    out = {}
    for spec in PACKAGES:
        name, version = spec.split("==")
        stem = name.replace("-", "_")
        wheels = sorted(dist.glob(f"{stem}-{version}-*.whl"))
        if not wheels:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(dist), spec], check=True)
            wheels = sorted(dist.glob(f"{stem}-{version}-*.whl"))
        target = src / f"{stem}-{version}"
        if not target.is_dir():
            with zipfile.ZipFile(wheels[0]) as z:
                z.extractall(target)
        out[spec] = target
    return out


# --- sites: the AMP constructions a fix changes ---------------------------------------------------


def _callee_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def amp_expressions(tree: ast.AST, imported: dict[str, str]) -> list[ast.AST]:
    """AMP constructions in source order: calls of autocast/GradScaler (by their last name, or a
    name imported as one), and custom_fwd/custom_bwd decorators (called or bare)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _callee_name(node.func)
            if name in AMP_NAMES or imported.get(name or "") in AMP_NAMES:
                out.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                name = _callee_name(deco)
                if (name in ("custom_fwd", "custom_bwd") or imported.get(name or "") in ("custom_fwd", "custom_bwd")) and not isinstance(deco, ast.Call):
                    out.append(deco)
    return sorted(out, key=lambda n: (n.lineno, n.col_offset))


def imported_names(tree: ast.AST) -> dict[str, str]:
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            for alias in node.names:
                out[alias.asname or alias.name] = alias.name
    return out


def torch_imports(tree: ast.AST, source: str) -> list[str]:
    """The module's imports from torch, as text, in order (any depth: a branch's import too)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names):
            out.append(ast.get_source_segment(source, node))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch" and node.level == 0:
            out.append(ast.get_source_segment(source, node))
    return [t for t in out if t]


def enclosing_regions(tree: ast.AST, target: ast.AST, source: str, imported: dict[str, str]) -> list[str]:
    """The AMP calls of the `with` statements around `target`, outermost first, as text."""
    chain: list[str] = []

    def visit(node: ast.AST, regions: list[str]) -> bool:
        if node is target:
            chain.extend(regions)
            return True
        inner = regions
        if isinstance(node, (ast.With, ast.AsyncWith)):
            items = [ast.get_source_segment(source, i.context_expr) for i in node.items
                     if isinstance(i.context_expr, ast.Call) and (_callee_name(i.context_expr.func) in AMP_NAMES
                                                                  or imported.get(_callee_name(i.context_expr.func) or "") in AMP_NAMES)]
            if any(i.context_expr is target for i in node.items):
                chain.extend(regions)
                return True
            inner = regions + [t for t in items if t]
        return any(visit(child, inner) for child in ast.iter_child_nodes(node))

    visit(tree, [])
    return chain


def free_names(expr: str) -> list[str]:
    tree = ast.parse(expr, mode="eval")
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)})


def unpacked_names(expr: str) -> tuple[list[str], list[str]]:
    """Names spread with `**` (bound to `{}`) and with `*` (bound to `()`): the same empty
    options in both runs, where an opaque stand-in could not be spread at all."""
    tree = ast.parse(expr, mode="eval")
    mappings = [k.value.id for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords
                if k.arg is None and isinstance(k.value, ast.Name)]
    sequences = [a.value.id for n in ast.walk(tree) if isinstance(n, ast.Call) for a in n.args
                 if isinstance(a, ast.Starred) and isinstance(a.value, ast.Name)]
    return mappings, sequences


def sites_of_fix(source: str, fixed: str) -> list[dict] | None:
    """The AMP constructions the fix changed: [{before, after, imports_before, imports_after,
    regions_before, regions_after}], or None when the two texts do not pair up."""
    try:
        a, b = ast.parse(source), ast.parse(fixed)
    except SyntaxError:
        return None
    ia, ib = imported_names(a), imported_names(b)
    ea, eb = amp_expressions(a, ia), amp_expressions(b, ib)
    if len(ea) != len(eb):
        return None
    out = []
    for x, y in zip(ea, eb):
        tx, ty = ast.get_source_segment(source, x), ast.get_source_segment(fixed, y)
        if tx == ty and imported_names(a) == imported_names(b):
            continue
        out.append({
            "before": tx, "after": ty, "decorator": not isinstance(x, ast.Call) or _is_decorator(a, x),
            "imports_before": torch_imports(a, source), "imports_after": torch_imports(b, fixed),
            "regions_before": enclosing_regions(a, x, source, ia), "regions_after": enclosing_regions(b, y, fixed, ib),
        })
    return out


def _is_decorator(tree: ast.AST, node: ast.AST) -> bool:
    return any(node in getattr(n, "decorator_list", ()) for n in ast.walk(tree))


# --- evaluation in a child with torch -----------------------------------------------------------

_EVALUATE = r'''
import json, sys, warnings
warnings.simplefilter("ignore")
import torch

class Opaque:
    """A name the module binds elsewhere: any attribute, callable, true."""
    def __getattr__(self, name): return Opaque()
    def __call__(self, *a, **k): return Opaque()
    def __bool__(self): return True
    def __repr__(self): return "<opaque>"

def state(obj):
    if isinstance(obj, torch.amp.autocast_mode.autocast):
        return {"autocast": obj.device, "dtype": str(obj.fast_dtype), "enabled": bool(obj._enabled),
                "cache": obj._cache_enabled if isinstance(obj._cache_enabled, bool) else repr(obj._cache_enabled)}
    if isinstance(obj, torch.amp.GradScaler):
        s = {"scaler": obj._device if isinstance(obj._device, str) else repr(obj._device), "enabled": bool(obj._enabled)}
        if obj._enabled:
            s.update(init_scale=repr(obj._init_scale), growth=repr(obj._growth_factor), backoff=repr(obj._backoff_factor),
                     interval=repr(obj._growth_interval))
        return s
    return {"other": type(obj).__name__}

def decorated(deco):
    """What a forward/backward wrapped by `deco` sees, outside and inside bf16 regions."""
    seen = []
    class Ctx:  # what autograd passes as ctx
        pass
    def fn(ctx, x):
        seen.append((torch.is_autocast_enabled("cpu"), str(torch.get_autocast_dtype("cpu")),
                     torch.is_autocast_enabled("cuda"), str(torch.get_autocast_dtype("cuda")), str(x.dtype)))
        return x
    wrapped = deco(fn)
    ctx = Ctx(); ctx._fwd_used_autocast = False; ctx._dtype = torch.float16
    wrapped(ctx, torch.ones(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ctx2 = Ctx(); ctx2._fwd_used_autocast = True; ctx2._dtype = torch.bfloat16
        wrapped(ctx2, torch.ones(2))
    return {"decorated": seen}

def evaluate(site, side):
    ns = {"__name__": "site"}
    for line in site["imports_" + side]:
        try:
            exec(line, ns)
        except Exception:
            pass
    expr = site[side]
    regions = site["regions_" + side]
    for name in site["mappings"]:
        ns.setdefault(name, {})
    for name in site["sequences"]:
        ns.setdefault(name, ())
    for name in site["free"]:
        ns.setdefault(name, Opaque())
    results = {}
    for how in ("plain", "enclosing", "bf16_region"):
        try:
            stack = []
            if how == "enclosing":
                stack = [eval(r, ns) for r in regions]
            elif how == "bf16_region":
                stack = [torch.autocast("cpu", dtype=torch.bfloat16), torch.autocast("cuda", dtype=torch.bfloat16)]
            entered = []
            try:
                for s in stack:
                    s.__enter__(); entered.append(s)
                value = eval(expr, ns)
                results[how] = decorated(value) if site["decorator"] else state(value)
            finally:
                for s in reversed(entered):
                    s.__exit__(None, None, None)
        except Exception as exc:
            results[how] = {"error": type(exc).__name__}
    return results

out = []
for site in json.load(sys.stdin):
    out.append({"before": evaluate(site, "before"), "after": evaluate(site, "after")})
json.dump(out, sys.stdout)
'''


def evaluate(sites: list[dict]) -> list[dict]:
    for s in sites:
        names = set(free_names(s["before"])) | set(free_names(s["after"]))
        for r in s["regions_before"] + s["regions_after"]:
            names |= set(free_names(r))
        s["free"] = sorted(names)
        s["mappings"], s["sequences"] = (sorted(set(x) | set(y)) for x, y in zip(unpacked_names(s["before"]), unpacked_names(s["after"])))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _EVALUATE], input=json.dumps(sites), capture_output=True, text=True,
                          env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return json.loads(proc.stdout)


# --- the run -------------------------------------------------------------------------------------


def main() -> int:
    from amplint import fixes, runner
    from amplint.config import Config

    cache = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / ".cache" / "amplint-fix-bench"
    trees = fetch(cache)
    rows, problems, notes = [], [], []
    for spec, tree in trees.items():
        result = runner.check_paths([tree], Config(root=tree, preview=True), jobs=None)
        counts = Counter()
        sites, owners = [], []
        pairs = []
        skipped: list[str] = []
        for f in result.files:
            with_fix = [d for d in f.diagnostics if d.fix is not None]
            if not with_fix:
                continue
            source = Path(f.path).read_text(encoding="utf-8")
            rel = os.path.relpath(f.path, tree)
            for d in with_fix:
                counts["fixes"] += 1
                counts[d.fix.applicability.value] += 1
                single, accepted = fixes.apply_fixes(source, [d.fix])
                found = sites_of_fix(source, single) if accepted else None
                label = f"{rel}:{d.span.line} {d.code} ({d.fix.applicability.value})"
                if not found:
                    counts["not executed: builds no AMP object"] += 1
                    skipped.append(f"{spec} {label}: builds no AMP object ({d.fix.title})")
                    continue
                for s in found:
                    sites.append(s)
                    owners.append(label)
            fixed = fixes.fix_text(source, lambda text, p=f.path: _check(text, p, tree), unsafe=True).source
            pairs.append((rel, source, fixed))
        executed: set[str] = set()
        differing: set[str] = set()
        failed: dict[str, str] = {}
        for label, site, outcome in zip(owners, sites, evaluate(sites) if sites else []):
            if all("error" in v for v in outcome["before"].values()):
                failed[label] = f"{site['before']}: {outcome['before']['plain']['error']} as written, in every context"
                continue
            executed.add(label)
            if outcome["before"] != outcome["after"]:
                differing.add(label)
                problems.append(f"{spec} {label}\n    {site['before']}  ->  {site['after']}\n"
                                f"    as written: {json.dumps(outcome['before'], sort_keys=True)}\n"
                                f"    fixed:      {json.dumps(outcome['after'], sort_keys=True)}")
        not_run = {k: v for k, v in failed.items() if k not in executed}
        skipped += [f"{spec} {k}: {v}" for k, v in sorted(not_run.items())]
        notes.extend(skipped)
        parity = fx.compile_parity(pairs)
        problems += [f"{spec} {p}" for p in parity]
        rows.append((spec, counts["fixes"], counts["safe"], counts["unsafe"], len(executed), len(differing),
                     counts["not executed: builds no AMP object"], len(not_run), len(pairs), len(parity)))
    print(f"Pythons for compile parity: {', '.join(v for v, _ in fx.interpreters())}; torch in the child: CPU")
    header = ("package", "fixes", "safe", "unsafe", "executed", "differ", "builds nothing", "did not run", "files fixed",
              "parse regressions")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    total = [sum(r[i] for r in rows) for i in range(1, len(header))]
    print("  ".join(str(c).ljust(w) for c, w in zip(["total", *total], widths)))
    if notes:
        print("\nNot executed:")
        print("\n".join(notes))
    if problems:
        print("\nDifferences:")
        print("\n".join(problems))
    return 1 if problems else 0


def _check(text: str, path: str, tree: Path):
    from amplint.config import Config
    from amplint.engine import check_source

    return check_source(text, path, Config(root=tree, preview=True))


if __name__ == "__main__":
    sys.exit(main())
