"""The fix-safety harness: run code as written and as `--fix` leaves it, and compare what each builds.

A fix called safe must build the same objects with the same arguments in every context the code
can run in, on every Python the file parses on (CONTRIBUTING, "Style"); an unsafe one must at
least not change what AMP builds (the dtype a forward runs in, the scaler's state).  This module
checks both by execution, for any tree of files and any rule pack:

- `fixed_trees(case)`: the trees to compare, made by amplint's own fixer in this process (the
  CLI's `check --fix`, and `--unsafe-fixes`), over the tree checked whole and over each file
  checked alone, as pre-commit passes it (the other files as written);
- `run_traces(jobs)`: runs each tree's entry script (or a notebook's code cells) on the CPU in a
  child Python that imports torch once and forks per run, with a recorder patched into torch's
  modern AMP classes (the deprecated ones are subclasses of them and call into them): every
  autocast built and every region entered (device, the dtype `torch.get_autocast_dtype` gives
  inside it, enabled, cache, nesting depth), every GradScaler built (its arguments as bound, and
  `_enabled` after construction), every `custom_fwd` / `custom_bwd` function called (the autocast
  state it ran in, the dtypes in and out), every module forward (the autocast state, the output
  dtypes), the tensors, modules and scalers the script leaves in its globals, stdout, the exit
  status and the exception type.  Python subprocesses of the script record too (a
  `sitecustomize` on their PYTHONPATH);
- `compare(before, after)`: None, or a readable diff; deprecation FutureWarnings and the
  "CUDA is not available" warnings are not differences (the objects' state says what they did);
- `compile_parity(pairs)`: the fixed text must compile on every Python installed here (pyenv's
  3.10-3.13 and `pythonX.Y` on PATH) where the original compiles;
- `variants()`: generated cases, the deprecated spellings crossed with the contexts a fix can
  break them in (nested regions, a model's forward in a region, imports chosen in branches,
  re-exports, `isinstance` in another module, f-strings, notebook magics, one-line statements,
  `torch` rebound where a fix writes it, imports in class bodies, notebooks that import a module).

It lives in `amplint/runtime/` because the recorder imports torch; the module itself does not
(torch is imported only in the child), so the static tests (compile parity on CI's 3.10 and
3.13 runs without torch) and `benchmarks/fix_execution.py` import it too.  Public, like
`amplint.testing`: a rule pack can run its own fixes through it.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

TRACE_ENV = "AMPLINT_FIX_TRACE"  # set in a recorded script's environment: where subprocesses write
RUN_TIMEOUT = 60  # seconds a script may run


# --- cases and the trees a fix makes ----------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A tree of files, the scripts to run in it, and the configuration it is fixed with."""

    id: str
    files: tuple[tuple[str, str], ...]  # (relative path, text)
    entries: tuple[str, ...]  # scripts or notebooks run, in order
    select: tuple[str, ...] = ()  # extend the default selection (a fixture's own rule)
    target_torch: str | None = None
    # An unsafe fix whose stated reason is code amplint cannot read (AMP401's rebound module
    # name, the deprecated class tested in a plugin loaded by path): `--fix` must leave the case
    # as it behaves, `--unsafe-fixes` may not.  Its unsafe trees are built, not compared.
    unsafe_may_differ: bool = False

    @property
    def file_map(self) -> dict[str, str]:
        return dict(self.files)


@dataclass
class Tree:
    """One version of a case's tree: as written, or after one way of fixing it."""

    label: str  # "as written", "--fix (tree)", "--fix --unsafe-fixes (utils.py alone)"
    files: dict[str, str]
    changed: tuple[str, ...] = ()


def _write_tree(root: Path, files: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    # The project root (layout.py): the checked tree, not whatever holds the temporary folder.
    (root / "pyproject.toml").write_text("")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))


def _read_tree(root: Path, files: dict[str, str]) -> dict[str, str]:
    return {rel: (root / rel).read_bytes().decode("utf-8") for rel in files}


def fix_tree(files: dict[str, str], *, unsafe: bool, only: str | None = None, select: tuple[str, ...] = (),
             target_torch: str | None = None) -> dict[str, str]:
    """The files after `amplint check --fix [--unsafe-fixes] <tree or only>`, run in this process."""
    with tempfile.TemporaryDirectory(prefix="amplint-fix-") as tmp:
        root = Path(tmp) / "tree"
        _write_tree(root, files)
        return _fix_in(root, files, unsafe=unsafe, only=only, select=select, target_torch=target_torch)


def _config(root: Path, select: tuple[str, ...], target_torch: str | None):
    from amplint.config import Config

    # Every fix amplint can offer is held to the bar, the preview tier's included.
    return Config(extend_select=select, target_torch=target_torch, root=root, preview=True)


def _fix_in(root: Path, files: dict[str, str], *, unsafe: bool, only: str | None, select: tuple[str, ...],
            target_torch: str | None) -> dict[str, str]:
    from amplint import runner

    _write_tree(root, files)  # as written, whatever an earlier fix in this folder did
    named = [root / only] if only else [root]
    runner.check_paths(named, _config(root, select, target_torch), fix=True, unsafe=unsafe, jobs=1)
    return _read_tree(root, files)


def fixed_trees(case: Case) -> list[Tree]:
    """Every distinct tree `--fix` and `--fix --unsafe-fixes` make of `case`, whole and file by file
    (none when the tree's check offers no fix)."""
    from amplint import runner
    from amplint.diagnostics import Applicability

    original = case.file_map
    out: list[Tree] = []
    seen = {_key(original)}
    with tempfile.TemporaryDirectory(prefix="amplint-fix-") as tmp:
        root = Path(tmp) / "tree"
        _write_tree(root, original)
        checked = runner.check_paths([root], _config(root, case.select, case.target_torch), jobs=1)
        fixes: dict[str, set] = {}
        for result in checked.files:
            rel = os.path.relpath(result.path, root)
            for d in result.diagnostics:
                if d.fix is not None:
                    fixes.setdefault(rel, set()).add(d.fix.applicability)
        if not fixes:
            return out
        offered = set().union(*fixes.values())
        # `--unsafe-fixes` applies the safe fixes too: with no unsafe fix it makes the same tree.
        modes = [False] * (Applicability.SAFE in offered) + [True] * (Applicability.UNSAFE in offered)
        # Each file alone too, as pre-commit passes it, even one the tree's check fixes nothing
        # in: alone, it may be read differently.
        alone = sorted(rel for rel in original if rel.endswith((".py", ".ipynb")))
        scopes: list[str | None] = [None] + (alone if len(alone) > 1 else [])
        for unsafe, scope in itertools.product(modes, scopes):
            files = _fix_in(root, original, unsafe=unsafe, only=scope, select=case.select, target_torch=case.target_torch)
            key = _key(files)
            if key in seen:
                continue
            seen.add(key)
            flag = "--fix --unsafe-fixes" if unsafe else "--fix"
            changed = tuple(rel for rel in original if files[rel] != original[rel])
            out.append(Tree(f"{flag} ({scope + ' alone' if scope else 'tree'})", files, changed))
    return out


def offers_fixes(case: Case) -> bool:
    """Whether `amplint check` offers any fix (safe or unsafe) in the case's tree."""
    from amplint import runner

    with tempfile.TemporaryDirectory(prefix="amplint-fix-") as tmp:
        root = Path(tmp) / "tree"
        _write_tree(root, case.file_map)
        checked = runner.check_paths([root], _config(root, case.select, case.target_torch), jobs=1)
        return any(d.fix is not None for r in checked.files for d in r.diagnostics)


def _key(files: dict[str, str]) -> tuple:
    return tuple(sorted(files.items()))


# --- running: one child imports torch, forks per run -----------------------------------------


def run_traces(jobs: list[tuple[dict[str, str], tuple[str, ...]]], *, parallel: int = 2) -> list[dict]:
    """The trace of each (files, entries) job, in order: each tree written to its own folder and
    its entries run there, one after another, in a fresh fork of one torch-importing child."""
    with tempfile.TemporaryDirectory(prefix="amplint-runs-") as tmp:
        specs = []
        for i, (files, entries) in enumerate(jobs):
            root = Path(tmp) / f"t{i}" / "tree"
            _write_tree(root, files)
            specs.append({"root": str(root), "entries": list(entries), "out": str(Path(tmp) / f"t{i}" / "trace.json")})
        jobs_file = Path(tmp) / "jobs.json"
        jobs_file.write_text(json.dumps({"jobs": specs, "parallel": parallel}))
        env = {**os.environ, "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
        amplint_home = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (amplint_home, env.get("PYTHONPATH", "")) if p)
        proc = subprocess.run([sys.executable, "-m", "amplint.runtime.fix_execution", str(jobs_file)],
                              capture_output=True, text=True, env=env,
                              timeout=RUN_TIMEOUT * 2 + 30 * len(specs))
        if proc.returncode != 0:
            raise RuntimeError(f"the trace runner failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return [json.loads(Path(s["out"]).read_text()) for s in specs]


# What a deprecated spelling warns about, and what CUDA's absence on this machine warns about:
# neither is a difference (the objects' recorded state says what they did).
_IGNORED_WARNINGS = re.compile(
    r"is deprecated|CUDA is not available|CUDA initialization|but CUDA is not available|"
    r"User provided device_type of 'cuda', but CUDA is not available"
)


def comparable(trace: dict) -> dict:
    """What must be equal between two runs: everything but where (line numbers move when a fix
    adds a line), FutureWarnings and CUDA-unavailable warnings."""
    out = {}
    for name, run in trace["runs"].items():
        events = [{k: v for k, v in e.items() if k != "line"} for e in run["events"]]
        warnings_ = [w for w in run["warnings"]
                     if w["category"] not in ("FutureWarning", "DeprecationWarning") and not _IGNORED_WARNINGS.search(w["message"])]
        out[name] = {"events": events, "warnings": warnings_, "stdout": run["stdout"], "exit": run["exit"],
                     "exception": run["exception"], "globals": run["globals"], "subprocesses": run.get("subprocesses", [])}
    return out


def compare(before: dict, after: dict, *, labels=("as written", "fixed")) -> str | None:
    """None when the two traces agree; else a unified diff of what differs, one event a line."""
    a, b = comparable(before), comparable(after)
    if a == b:
        return None
    return "\n".join(difflib.unified_diff(_lines(a), _lines(b), labels[0], labels[1], n=2, lineterm=""))


def _lines(trace: dict) -> list[str]:
    lines = []
    for name, run in trace.items():
        lines.append(f"== {name}: exit {run['exit']}, exception {run['exception']}")
        lines.extend(f"  {json.dumps(e, sort_keys=True)}" for e in run["events"])
        lines.extend(f"  warning {w['category']}: {w['message']}" for w in run["warnings"])
        lines.extend(f"  global {k} = {json.dumps(v, sort_keys=True)}" for k, v in sorted(run["globals"].items()))
        lines.extend(f"  stdout| {line}" for line in run["stdout"].splitlines())
        lines.extend(f"  subprocess {json.dumps(s, sort_keys=True)}" for s in run["subprocesses"])
    return lines


def summary(diff: str, limit: int = 6) -> str:
    """The first changed lines of a diff, for a report."""
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    more = f" (+{len(changed) - limit} more)" if len(changed) > limit else ""
    return "; ".join(line.strip() for line in changed[:limit]) + more


@dataclass
class Outcome:
    """A case's verdict: the trees compared and the differences found."""

    case: Case
    trees: list[Tree]
    differences: list[tuple[str, str]] = field(default_factory=list)  # (tree label, diff)

    def report(self) -> str:
        parts = []
        for label, diff in self.differences:
            tree = next(t for t in self.trees if t.label == label)
            fixed = "\n".join(f"--- {rel} as fixed ---\n{tree.files[rel]}" for rel in tree.changed)
            parts.append(f"{self.case.id}: {label} changes what runs\n{diff}\n{fixed}")
        return "\n\n".join(parts)


def execute(cases: list[Case], *, parallel: int = 2) -> list[Outcome]:
    """Fix each case every way, run every distinct tree, compare each fixed tree with the original."""
    outcomes = [Outcome(c, fixed_trees(c)) for c in cases]
    jobs, index = [], []
    for n, o in enumerate(outcomes):
        if not o.trees:
            continue
        jobs.append((o.case.file_map, o.case.entries))
        index.append((n, None))
        for t in o.trees:
            jobs.append((t.files, o.case.entries))
            index.append((n, t.label))
    traces = run_traces(jobs, parallel=parallel) if jobs else []
    originals: dict[int, dict] = {}
    for (n, label), trace in zip(index, traces):
        if label is None:
            originals[n] = trace
            continue
        if outcomes[n].case.unsafe_may_differ and "--unsafe-fixes" in label:
            continue
        diff = compare(originals[n], trace, labels=("as written", label))
        if diff is not None:
            outcomes[n].differences.append((label, diff))
    return outcomes


# --- compile parity on every installed Python -------------------------------------------------


@functools.lru_cache(maxsize=1)
def interpreters() -> tuple[tuple[str, str], ...]:
    """(version, executable) of each Python 3.10-3.13 found: pyenv's versions and pythonX.Y on PATH."""
    found: dict[str, str] = {}
    candidates = []
    for minor in (10, 11, 12, 13):
        version = f"3.{minor}"
        candidates += sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
        on_path = shutil.which(f"python{version}")
        if on_path:
            candidates.append(Path(on_path))
    for exe in candidates:
        try:
            proc = subprocess.run([str(exe), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        version = proc.stdout.strip()
        if proc.returncode == 0 and version not in found:
            found[version] = str(exe)
    return tuple(sorted(found.items()))


_COMPILE_ALL = """
import json, sys
out = []
for path, text in json.load(sys.stdin):
    try:
        compile(text, path, "exec")
        out.append(None)
    except (SyntaxError, ValueError) as exc:
        out.append(f"{type(exc).__name__}: {exc}")
json.dump(out, sys.stdout)
"""


def compile_all(sources: list[tuple[str, str]]) -> dict[str, list[str | None]]:
    """Per Python version found: for each (path, text), None when it compiles, else the error."""
    payload = json.dumps(sources)
    out = {}
    for version, exe in interpreters():
        proc = subprocess.run([exe, "-I", "-c", _COMPILE_ALL], input=payload, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"Python {version} ({exe}) could not compile-check: {proc.stderr}")
        out[version] = json.loads(proc.stdout)
    return out


def python_sources(rel: str, text: str) -> list[tuple[str, str]]:
    """The Python code of a file: a .py file's text, or a notebook's code cells (each cell, as a
    kernel compiles it, with magic lines left out)."""
    if not rel.endswith(".ipynb"):
        return [(rel, text)]
    return [(f"{rel}#cell{i}", notebook_cell_code(src)) for i, src in enumerate(_code_cells(text), 1)]


def compile_parity(pairs: list[tuple[str, str, str]]) -> list[str]:
    """For (name, original, fixed) text pairs: each Python where the original compiles and the
    fixed text does not, as a message."""
    sources: list[tuple[str, str]] = []
    for name, before, after in pairs:
        a, b = python_sources(name, before), python_sources(name, after)
        if len(a) != len(b):
            raise ValueError(f"{name}: the fix changed the number of code cells")
        for (path, x), (_, y) in zip(a, b):
            sources += [(path, x), (path, y)]
    problems = []
    for version, results in compile_all(sources).items():
        for i in range(0, len(sources), 2):
            if results[i] is None and results[i + 1] is not None:
                problems.append(f"{sources[i][0]}: compiles on Python {version} as written, not as fixed: {results[i + 1]}")
    return problems


# --- notebooks --------------------------------------------------------------------------------


def _code_cells(text: str) -> list[str]:
    nb = json.loads(text)
    cells = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            src = cell.get("source", "")
            cells.append("".join(src) if isinstance(src, list) else src)
    return cells


_LINE_MAGIC = re.compile(r"^(?P<indent>[ \t]*)%(?P<name>timeit|time)\b(?P<opts>(?:\s+-[a-zA-Z]+(?:\s*\d+)?)*)\s+(?P<stmt>.*)$")


def notebook_cell_code(cell: str) -> str:
    """A cell as IPython would run it, for the magics amplint's notebooks use: `%time stmt` and
    `%timeit [-n N -r R] stmt` run the statement (once), `%%time` / `%%timeit` the cell; any other
    magic or shell line does nothing (`pass`)."""
    lines = cell.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        if lines[0].split()[0] in ("%%time", "%%timeit"):
            lines = lines[1:]
        else:
            return ""
    out = []
    for line in lines:
        m = _LINE_MAGIC.match(line)
        if m:
            out.append(m.group("indent") + m.group("stmt"))
        elif line.lstrip().startswith(("%", "!")):
            out.append(line[: len(line) - len(line.lstrip())] + "pass")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def notebook_program(text: str) -> str:
    """A notebook's code cells, magics emulated, concatenated in order."""
    return "".join(notebook_cell_code(c) for c in _code_cells(text))


def notebook(*cells: str) -> str:
    """An nbformat 4 notebook of these code cells."""
    return json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                   "source": c.splitlines(keepends=True)} for i, c in enumerate(cells)],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }, indent=1) + "\n"


# --- the fixtures -------------------------------------------------------------------------------


def fixture_cases(root: Path) -> list[Case]:
    """Each fixture file, and each fixture project (its entries: the files no other file imports)."""
    from amplint.testing import fixture_cases as files_of, fixture_selection

    out = []
    for path in files_of(root):
        text = path.read_text(encoding="utf-8")
        m = re.search(r"^#\s*amplint:\s*target-torch=([0-9.]+)\s*$", text, re.MULTILINE)
        out.append(Case(f"{path.parent.name}/{path.stem}", ((path.name, text),), (path.name,),
                        select=tuple(fixture_selection(path, text)), target_torch=m.group(1) if m else None))
    projects = root / "projects"
    for project in sorted(p for p in projects.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        files = {str(f.relative_to(project)): f.read_text(encoding="utf-8") for f in sorted(project.rglob("*.py"))}
        codes = sorted({code for text in files.values() for code in re.findall(r"expect(?:\([+-]\d+\))?:\s*(AMP\d{3})", text)})
        out.append(Case(f"projects/{project.name}", tuple(files.items()), tuple(project_entries(project)), select=tuple(codes)))
    return out


def project_entries(project: Path) -> list[str]:
    """The files of a project that no other file of it imports (a package's __init__ is no script)."""
    from amplint.prefilter import code_text, package_of
    from amplint.project.text_imports import imported_files

    files = sorted(project.rglob("*.py"))
    imported = set()
    for f in files:
        for target in imported_files(code_text(f.read_text(encoding="utf-8")), f, package_of(str(f))):
            imported.add(Path(target).resolve())
    return [str(f.relative_to(project)) for f in files if f.resolve() not in imported and f.name != "__init__.py"]


# --- generated variants -------------------------------------------------------------------------

# How a deprecated name reaches the code: (spelling id, import lines, expression of `torch.<dev>.amp.<name>`).
SPELLINGS = {
    "full": lambda dev, name: ("import torch", f"torch.{dev}.amp.{name}"),
    "torch_alias": lambda dev, name: ("import torch\nimport torch as th", f"th.{dev}.amp.{name}"),
    "from": lambda dev, name: (f"import torch\nfrom torch.{dev}.amp import {name}", name),
    "from_alias": lambda dev, name: (f"import torch\nfrom torch.{dev}.amp import {name} as legacy_{name}", f"legacy_{name}"),
    "module": lambda dev, name: (f"import torch\nfrom torch.{dev} import amp", f"amp.{name}"),
    "module_alias": lambda dev, name: (f"import torch\nimport torch.{dev}.amp as legacy_amp", f"legacy_amp.{name}"),
    # bound to another name by an assignment, or partially applied
    "assigned": lambda dev, name: (f"import torch\nLegacy = torch.{dev}.amp.{name}", "Legacy"),
    "partial": lambda dev, name: (f"import functools\nimport torch\nLegacy = functools.partial(torch.{dev}.amp.{name})", "Legacy"),
}

AUTOCAST_ARGS = {
    "noargs": "()",
    "positional": "(True, torch.bfloat16)",
    "dtype": "(dtype=torch.bfloat16)",
    "kwargs": "(**opts)",
    "disabled": "(enabled=False)",
    "nocache": "(cache_enabled=False)",
    "enabled_positional_only": "(False)",
    "cache_none": "(dtype=torch.bfloat16, cache_enabled=None)",
    "dtype_none": "(dtype=None)",
}
SCALER_ARGS = {
    "noargs": "()",
    "positional": "(2.0**10)",
    "keywords": "(init_scale=2.0**10, growth_interval=7)",
    "kwargs": "(**opts)",
    "disabled": "(enabled=False)",
}
_OPTS = {"autocast": "opts = {'dtype': torch.bfloat16}", "GradScaler": "opts = {'init_scale': 2.0**10, 'growth_interval': 7}"}

_MODEL = """
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
x = torch.randn(2, 4)
"""

_REPORT_AUTOCAST = 'print("region", torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), y.dtype)'
_REPORT_SCALER = 'print("scaler", s.is_enabled(), s.get_scale(), s.get_growth_interval() if s.is_enabled() else None)'


def _autocast_contexts(call: str, dev: str) -> dict[str, str]:
    """Programs (after the imports) that use an autocast built by `call` in one context each; an
    enclosing region is on the same device (a disabled CUDA region still sets CUDA's dtype)."""
    return {
        "plain": f"{_MODEL}with {call}:\n    y = model(x)\n    {_REPORT_AUTOCAST}\n",
        "nested_bf16": f"{_MODEL}with torch.autocast('{dev}', dtype=torch.bfloat16):\n    with {call}:\n        y = model(x)\n        {_REPORT_AUTOCAST}\n",
        "nested_fp16": f"{_MODEL}with torch.autocast('{dev}', dtype=torch.float16):\n    with {call}:\n        y = model(x)\n        {_REPORT_AUTOCAST}\n",
        # The legacy classes pass cache_enabled=True; `torch.autocast` without it takes the
        # enclosing region's: a weight updated in place inside the region is then read afresh
        # where the legacy region reused its stale cast copy.
        "nested_no_cache": (
            f"{_MODEL}with torch.autocast('{dev}', dtype=torch.bfloat16, cache_enabled=False):\n    with {call}:\n"
            f"        y = model(x)\n        with torch.no_grad():\n            model.weight.add_(1.0)\n"
            f"        y2 = model(x)\n        {_REPORT_AUTOCAST}\n        print('stale', torch.equal(y, y2))\n"
        ),
        "forward_in_bf16_region": (
            "class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.lin = torch.nn.Linear(4, 4)\n\n"
            f"    def forward(self, x):\n        with {call}:\n            y = self.lin(x)\n            {_REPORT_AUTOCAST}\n            return y\n\n"
            "torch.manual_seed(0)\nnet = Net()\nx = torch.randn(2, 4)\n"
            f"with torch.autocast('{dev}', dtype=torch.bfloat16):\n    out = net(x)\nprint(out.dtype)\n"
        ),
        "lambda_in_bf16_region": (
            f"{_MODEL}make = lambda: {call}\nwith torch.autocast('{dev}', dtype=torch.bfloat16):\n    with make():\n"
            f"        y = model(x)\n        {_REPORT_AUTOCAST}\n"
        ),
        "conditional_in_fp16_region": (
            f"import contextlib\n{_MODEL}with torch.autocast('{dev}', dtype=torch.float16):\n"
            f"    ctx = {call} if x.numel() else contextlib.nullcontext()\n    with ctx:\n        y = model(x)\n        {_REPORT_AUTOCAST}\n"
        ),
        "decorator_in_fp16_region": (
            f"{_MODEL}@{call}\ndef run(x):\n    y = model(x)\n    {_REPORT_AUTOCAST}\n    return y\n\n"
            f"with torch.autocast('{dev}', dtype=torch.float16):\n    print(run(x).dtype)\nprint(run(x).dtype)\n"
        ),
    }


def _scaler_contexts(call: str, dev: str) -> dict[str, str]:
    return {
        "plain": f"s = {call}\n{_REPORT_SCALER}\n",
        "default_argument": f"def make(factory={call.split('(')[0]}):\n    return factory{call[len(call.split('(')[0]):]}\n\ns = make()\n{_REPORT_SCALER}\n",
        "in_function_in_bf16_region": (
            f"def make():\n    return {call}\n\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n    s = make()\n{_REPORT_SCALER}\n"
        ),
    }


def _single(code: str, context: str, spelling: str, dev: str, name: str, args: str, program: str, imports: str,
            opts: str) -> Case:
    text = f"{imports}\n{opts}\n\n{program}"
    return Case(f"{code}-{context}-{name}-{dev}-{spelling}-{args}", (("train.py", text),), ("train.py",))


def _single_file_variants() -> list[Case]:
    out = []
    for name, arg_table, contexts in (("autocast", AUTOCAST_ARGS, _autocast_contexts), ("GradScaler", SCALER_ARGS, _scaler_contexts)):
        for dev in ("cuda", "cpu"):
            # Every spelling with no arguments, and every argument shape with two spellings: the
            # spellings and the argument shapes are independent parts of a fix.
            combos = [(sp, "noargs") for sp in SPELLINGS] + [(sp, a) for a in arg_table if a != "noargs" for sp in ("full", "from")]
            for spelling, args in combos:
                imports, expr = SPELLINGS[spelling](dev, name)
                call = expr + arg_table[args]
                for context, program in contexts(call, dev).items():
                    if context != "plain" and args not in ("noargs", "positional", "kwargs", "dtype_none"):
                        continue
                    out.append(_single("AMP401", context, spelling, dev, name, args, program, imports, _OPTS[name]))
    # custom_fwd / custom_bwd: a Function whose forward and backward the decorators wrap, run
    # inside and outside a bf16 region.
    for spelling in SPELLINGS:
        for fwd_args in ("bare", "cast_inputs"):
            imports, fwd = SPELLINGS[spelling]("cuda", "custom_fwd")
            _, bwd = SPELLINGS[spelling]("cuda", "custom_bwd")
            if spelling in ("from", "from_alias"):
                imports += "\n" + SPELLINGS[spelling]("cuda", "custom_bwd")[0].splitlines()[-1]
            deco = fwd if fwd_args == "bare" else f"{fwd}(cast_inputs=torch.float32)"
            program = (
                "class Mul(torch.autograd.Function):\n"
                f"    @staticmethod\n    @{deco}\n    def forward(ctx, a, b):\n        ctx.save_for_backward(a, b)\n"
                "        print('fwd', torch.is_autocast_enabled('cpu'), a.dtype)\n        return a @ b\n\n"
                f"    @staticmethod\n    @{bwd}\n    def backward(ctx, g):\n        a, b = ctx.saved_tensors\n"
                "        print('bwd', torch.is_autocast_enabled('cpu'), g.dtype)\n        g = g.to(a.dtype)\n"
                "        return g @ b.to(a.dtype).t(), a.t() @ g\n\n"
                "torch.manual_seed(0)\na = torch.randn(3, 3, requires_grad=True)\nb = torch.randn(3, 3, requires_grad=True)\n"
                "with torch.autocast('cpu', dtype=torch.bfloat16):\n    out = Mul.apply(a, b)\nprint(out.dtype)\n"
                "out.float().sum().backward()\nprint(a.grad.dtype)\nprint(Mul.apply(a, b).dtype)\n"
            )
            out.append(Case(f"AMP401-custom_function-custom_fwd-cuda-{spelling}-{fwd_args}", (("train.py", f"{imports}\n\n{program}"),), ("train.py",)))
    return out


def _branch_variants() -> list[Case]:
    """The device chosen by which import runs (issue 26, item 2)."""
    out = []
    for names in (("autocast",), ("GradScaler",), ("GradScaler", "autocast")):
        imported = ", ".join(names)
        for layout in ("if_else", "try_except"):
            if layout == "if_else":
                head = (f"import torch\nif torch.cuda.is_available():\n    from torch.cuda.amp import {imported}\n"
                        f"else:\n    from torch.cpu.amp import {imported}\n")
            else:
                head = (f"import torch\ntry:\n    assert torch.cuda.is_available()\n    from torch.cuda.amp import {imported}\n"
                        f"except AssertionError:\n    from torch.cpu.amp import {imported}\n")
            body = _MODEL
            if "GradScaler" in names:
                body += f"s = GradScaler()\n{_REPORT_SCALER}\n"
            if "autocast" in names:
                body += f"with autocast(dtype=torch.bfloat16):\n    y = model(x)\n    {_REPORT_AUTOCAST}\n"
            out.append(Case(f"AMP401-branch_import-{'_'.join(names)}-{layout}", (("train.py", head + body),), ("train.py",)))
    return out


def _reexport_variants() -> list[Case]:
    """Deprecated names imported in one module and used by another (issue 26, item 3)."""
    out = []
    for dev in ("cpu", "cuda"):
        utils = f"import torch\nfrom torch.{dev}.amp import GradScaler, autocast\n\n\ndef helper():\n    return GradScaler(enabled=False)\n"
        uses = {
            "from_import_positional": (
                "from utils import GradScaler, autocast\n",
                "s = GradScaler(2.0**10)\nwith autocast(True, torch.bfloat16):\n    y = model(x)\n",
            ),
            "module_attribute": ("import utils\n", "s = utils.GradScaler(2.0**10)\nwith utils.autocast(True, torch.bfloat16):\n    y = model(x)\n"),
            "star_import": ("from utils import *\n", "s = GradScaler()\nwith autocast(dtype=torch.bfloat16):\n    y = model(x)\n"),
        }
        for use, (imports, body) in uses.items():
            train = f"import torch\n{imports}{_MODEL}{body}{_REPORT_SCALER}\nprint('region output', y.dtype)\n"
            if use != "from_import_positional":  # the helper's own scaler, built where the name was imported
                train += f"print('helper', {'utils.' if use == 'module_attribute' else ''}helper().is_enabled())\n"
            out.append(Case(f"AMP401-reexport-{use}-{dev}", (("utils.py", utils), ("train.py", train)), ("train.py",)))
        # a package re-exporting through its __init__
        pkg_init = f"from torch.{dev}.amp import GradScaler, autocast\n"
        train = f"import torch\nfrom amp_compat import GradScaler, autocast\n{_MODEL}s = GradScaler(2.0**10)\n{_REPORT_SCALER}\nwith autocast(True, torch.bfloat16):\n    y = model(x)\n    {_REPORT_AUTOCAST}\n"
        out.append(Case(f"AMP401-reexport-package_init-{dev}", (("amp_compat/__init__.py", pkg_init), ("train.py", train)), ("train.py",)))
    return out


def _isinstance_variants() -> list[Case]:
    """A scaler built in one module and tested with `isinstance` in another (issue 26, item 4)."""
    out = []
    for spelling in ("full", "from", "module"):
        for dev in ("cuda", "cpu"):
            imports, expr = SPELLINGS[spelling](dev, "GradScaler")
            builder = f"{imports}\n\nscaler = {expr}(enabled=False)\n"
            for test in ("deprecated_class", "modern_class"):
                cls = f"torch.{dev}.amp.GradScaler" if test == "deprecated_class" else "torch.amp.GradScaler"
                check = f"import torch\nfrom builder import scaler\n\nprint('isinstance', isinstance(scaler, {cls}))\n"
                out.append(Case(f"AMP401-isinstance_across_modules-{dev}-{spelling}-{test}",
                                (("builder.py", builder), ("check.py", check)), ("check.py",)))
    return out


def _fstring_variants() -> list[Case]:
    """Deprecated calls inside f-strings: both quotes, nested (issue 26, item 5).  The 3.12-only
    shapes (the same quote inside) are kept: a fix must not make them parse less widely."""
    out = []
    shapes = {
        "double": 'print(f"{EXPR}")',
        "single": "print(f'{EXPR}')",
        "nested": "print(f\"{f'{EXPR}'}\")",
        "nested_single_outer": "print(f'{f\"{EXPR}\"}')",
        "format_spec": 'print(f"{EXPR!s:>10}")',
        "same_quote_312": 'print(f"{f"{EXPR}"}")',
    }
    exprs = {
        "scaler_enabled": "torch.{dev}.amp.GradScaler().is_enabled()",
        "scaler_positional": "torch.{dev}.amp.GradScaler(2.0**10).get_scale()",
        "autocast_dtype": "torch.{dev}.amp.autocast().fast_dtype",
        "autocast_kwargs": "torch.{dev}.amp.autocast(dtype=torch.bfloat16)._enabled",
    }
    for (shape, template), (what, expr), dev in itertools.product(shapes.items(), exprs.items(), ("cuda", "cpu")):
        text = "import torch\n\n" + template.replace("EXPR", expr.format(dev=dev)) + "\n"
        out.append(Case(f"AMP401-fstring-{shape}-{what}-{dev}", (("train.py", text),), ("train.py",)))
    return out


def _notebook_variants() -> list[Case]:
    """Notebooks whose magic lines use the deprecated names (issue 26, item 6)."""
    out = []
    for dev in ("cuda", "cpu"):
        for magic in ("%time", "%timeit -n1 -r1", "%%time"):
            first = f"import torch\nfrom torch.{dev}.amp import GradScaler, autocast\n" + _MODEL
            if magic == "%%time":
                cells = (first, "%%time\ns = GradScaler(2.0**10)\n", f"{_REPORT_SCALER}\nwith autocast():\n    y = model(x)\nprint(y.dtype)\n")
            else:
                cells = (first, f"{magic} s = GradScaler(2.0**10)\n{magic} ctx = autocast()\n",
                         f"{_REPORT_SCALER}\nwith ctx:\n    y = model(x)\nprint(y.dtype, ctx.fast_dtype)\n")
            name = magic.split()[0].strip("%")
            out.append(Case(f"AMP401-notebook_magic-{'cell_' if magic.startswith('%%') else ''}{name}-{dev}",
                            (("train.ipynb", notebook(*cells)),), ("train.ipynb",)))
        # module-style import used in a magic line
        cells = (f"import torch\nfrom torch.{dev} import amp\n", "%time s = amp.GradScaler(2.0**10)\n", _REPORT_SCALER + "\n")
        out.append(Case(f"AMP401-notebook_magic-module-{dev}", (("train.ipynb", notebook(*cells)),), ("train.ipynb",)))
    return out


def _one_line_variants() -> list[Case]:
    """Statements sharing a line with the backward AMP201 moves out of autocast (issue 26, item 7):
    the trace shows each forward's autocast state, and the script prints `aux`'s dtype."""
    out = []
    head = ("import torch\n\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(4, 4)\nx = torch.randn(2, 4)\n"
            "scaler = torch.amp.GradScaler('cpu', enabled=False)\n")
    lines = {
        "scaled_then_forward": "scaler.scale(loss).backward(); aux = model(x).sum()",
        "plain_then_forward": "loss.backward(); aux = model(x).sum()",
        "three_statements": "scaler.scale(loss).backward(); aux = model(x).sum(); n = 1",
        "forward_then_backward": "aux = model(x).sum(); scaler.scale(loss).backward()",
        "with_comment": "scaler.scale(loss).backward(); aux = model(x).sum()  # both",
        "trailing_semicolon": "scaler.scale(loss).backward();",
    }
    for name, line in lines.items():
        for dtype in ("bfloat16", "float16"):
            body = (f"with torch.autocast('cpu', dtype=torch.{dtype}):\n    loss = model(x).float().sum()\n    {line}\n"
                    "print('aux', globals().get('aux', torch.zeros(())).dtype)\n"
                    "print('grad', model.weight.grad.dtype)\n")
            out.append(Case(f"AMP201-one_line-{name}-{dtype}", (("train.py", head + body),), ("train.py",)))
            if name in ("scaled_then_forward", "forward_then_backward"):  # in a loop in a function, as training code has it
                body = (f"def step():\n    for _ in range(2):\n        with torch.autocast('cpu', dtype=torch.{dtype}):\n"
                        f"            loss = model(x).float().sum()\n            {line}\n    return aux\n\n"
                        "print('aux', step().dtype)\n")
                out.append(Case(f"AMP201-one_line-in_loop-{name}-{dtype}", (("train.py", head + body),), ("train.py",)))
    return out


# A decorator that tests each argument against its parameter's annotation, as pydantic's
# `validate_call`, typeguard and beartype do (written out: the harness needs none of them).
_CHECKER = """
import functools, inspect

def checked(f):
    sig = inspect.signature(f)
    @functools.wraps(f)
    def run(*args, **kwargs):
        for name, value in sig.bind(*args, **kwargs).arguments.items():
            kind = sig.parameters[name].annotation
            if isinstance(kind, type) and not isinstance(value, kind):
                raise TypeError(f"{name} is no {kind.__module__}.{kind.__qualname__}")
        return f(*args, **kwargs)
    return run
"""


def _checked_annotation_variants() -> list[Case]:
    """A scaler passed to a function whose annotation a decorator checks with isinstance: the
    constructions must stay instances of the deprecated class the annotation names."""
    out = []
    for spelling in ("full", "from", "module_alias"):
        for dev in ("cuda", "cpu"):
            imports, expr = SPELLINGS[spelling](dev, "GradScaler")
            program = (f"{_CHECKER}\n@checked\ndef report(s: {expr}):\n    {_REPORT_SCALER}\n\n"
                       f"s = {expr}(2.0**10)\nreport(s)\n")
            out.append(Case(f"AMP401-checked_annotation-GradScaler-{dev}-{spelling}", (("train.py", f"{imports}\n{program}"),), ("train.py",)))
    return out


def _star_import_variants() -> list[Case]:
    """A star import after the fixed import binds the name again: to the legacy class (from the
    deprecated module), or to what a project module re-exports."""
    out = []
    for source in ("deprecated_module", "project_module"):
        for dev in ("cuda", "cpu"):
            star = f"from torch.{dev}.amp import *" if source == "deprecated_module" else "from helpers import *"
            train = (f"import torch\nfrom torch.{dev}.amp import autocast\n{star}\n{_MODEL}"
                     f"with autocast():\n    y = model(x)\n    {_REPORT_AUTOCAST}\n")
            files = [("train.py", train)]
            if source == "project_module":
                files.append(("helpers.py", f"from torch.{dev}.amp import autocast as autocast\n\ndef helper():\n    pass\n"))
            out.append(Case(f"AMP401-star_import_after-autocast-{dev}-{source}", tuple(files), ("train.py",)))
    return out


def _finfo_variants() -> list[Case]:
    """AMP501's `torch.finfo(s.dtype).min` where `torch` may not read the module there: an
    import for type checkers only, an import in another function, a parameter `torch`.  The
    fill runs in float32 here (no overflow), and the script prints whether it masked."""
    fill = ("def attend(q, mask{param}):\n{local}    s = q @ q.t()\n    if q.dtype == torch_half:\n        s = s.half()\n"
            "    return s.masked_fill(mask, -1e9)\n\n"
            "q = randn(3, 4)\nout = attend(q, eye(3, dtype=bool_))\nprint(out.dtype, bool((out < -1e8).any()))\n")
    heads = {
        "type_checking_import": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n",
        "import_in_other_function": "def version():\n    import torch\n    return torch.__version__\n",
        "parameter_named_torch": "import torch\n",
        "module_import": "import torch\n",
        # `torch` bound to something else where the fill runs (hostile3 c37), or unbound by then
        "import_as_in_function": "import torch\n",
        "deleted": "import torch\n",
    }
    out = []
    for name, head in heads.items():
        param = ", torch=None" if name == "parameter_named_torch" else ""
        local = "    import fractions as torch\n" if name == "import_as_in_function" else ""
        text = (f"{head}from torch import randn, eye, bool as bool_, half as torch_half\n"
                + ("del torch\n" if name == "deleted" else "") + "\n" + fill.format(param=param, local=local))
        out.append(Case(f"AMP501-finfo_name-{name}", (("train.py", text),), ("train.py",)))
    return out


def _torch_rebound_variants() -> list[Case]:
    """The legacy autocast's fix writes `dtype=torch.bfloat16`, read where the call runs: there
    `torch` may be unbound or another object, whatever binds it (hostile3 c33-c36)."""
    run = "def run():\n{local}    with autocast():\n        y = model(x)\n        print('region', y.dtype)\n{after}\n"
    shapes = {
        "del": ("", "", "del torch\nrun()\n"),
        "except_as": ("", "", "try:\n    import amplint_no_such_module\nexcept ImportError as torch:\n    pass\nrun()\n"),
        "match_capture": ("", "", "match 'x':\n    case torch:\n        pass\nrun()\n"),
        "import_as_in_function": ("    import fractions as torch\n", "", "run()\n"),
        "import_after_use_in_function": ("", "    import torch\n", "run()\n"),
    }
    out = []
    for dev in ("cpu", "cuda"):
        for name, (local, after, tail) in shapes.items():
            text = (f"import torch\nfrom torch.{dev}.amp import autocast\n{_MODEL}\n"
                    + run.format(local=local, after=after) + tail)
            out.append(Case(f"AMP401-torch_rebound-{name}-{dev}", (("train.py", text),), ("train.py",)))
    return out


def _class_body_import_variants() -> list[Case]:
    """An import in a class body binds a class attribute, reached through `self` or the class
    from anywhere (hostile3 c28): no fix sees those uses."""
    autocast = ("import torch\n\nclass Trainer:\n    from torch.cpu.amp import autocast\n\n"
                "    def run(self, model, x):\n        with self.autocast(dtype=torch.bfloat16):\n"
                "            y = model(x)\n            print('region', y.dtype)\n\n    ctx = autocast()\n\n"
                f"{_MODEL}Trainer().run(model, x)\n")
    scaler = ("import torch\n\nclass Holder:\n    from torch.cpu.amp import GradScaler\n"
              "    default = GradScaler(init_scale=8.0)\n\ns = Holder.GradScaler(2.0**10)\n"
              f"{_REPORT_SCALER}\n")
    return [Case("AMP401-class_body_import-autocast-cpu", (("train.py", autocast),), ("train.py",)),
            Case("AMP401-class_body_import-GradScaler-cpu", (("train.py", scaler),), ("train.py",))]


def _notebook_importer_variants() -> list[Case]:
    """A notebook that imports the module whose import the fix renames (hostile3 c30): it calls
    the name the legacy way, so the renamed class took its scale for the device."""
    mod = "import torch\nfrom torch.cpu.amp import GradScaler\n\n\ndef make():\n    return GradScaler(init_scale=8.0)\n"
    uses = {
        "from_import": "from mod import GradScaler\ns = GradScaler(2.0**10)\n",
        "module_attribute": "import mod\ns = mod.GradScaler(2.0**10)\n",
    }
    return [Case(f"AMP401-notebook_importer-{name}-cpu",
                 (("mod.py", mod), ("nb.ipynb", notebook(use, _REPORT_SCALER + "\n"))),
                 ("nb.ipynb",))
            for name, use in uses.items()]


def _optional_scaler_variants() -> list[Case]:
    """AMP103's `scaler.scale(loss)` where the scaler exists only with AMP on (`GradScaler() if
    use_amp else None`, a step under `if scaler is not None:`): run with AMP off, the backward
    runs and the scaler is None."""
    out = []
    guards = {"is_not_none": "if scaler is not None:", "flag": "if use_amp:", "truthiness": "if scaler:"}
    for name, guard in guards.items():
        text = ("import torch\n\nuse_amp = False\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(4, 4)\n"
                "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                "scaler = torch.amp.GradScaler('cpu') if use_amp else None\n"
                "for _ in range(2):\n    opt.zero_grad()\n"
                "    with torch.autocast('cpu', dtype=torch.float16, enabled=use_amp):\n"
                "        loss = model(torch.randn(2, 4)).float().sum()\n    loss.backward()\n"
                f"    {guard}\n        scaler.step(opt)\n        scaler.update()\n    else:\n        opt.step()\n"
                "print(model.weight.sum().item())\n")
        out.append(Case(f"AMP103-optional_scaler-{name}", (("train.py", text),), ("train.py",)))
    return out


# The hostile tester's reproducers of wrong step-rule fixes (issue: D5-D11): each prints what the
# training did (weights, norms, exceptions caught), so a fix that changes it shows in stdout.
_STEP_RULE_CASES = {
    ('AMP102', 'scaler_escapes', 'alias_update', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'model = torch.nn.Linear(4, 1)\n'
        'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        's = scaler\n'
        'for i in range(3):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        loss = model(x).float().pow(2).mean()\n'
        '    scaler.scale(loss).backward()\n'
        '    scaler.step(optimizer)\n'
        '    optimizer.zero_grad()\n'
        '    s.update()\n'
        '    print(scaler.get_scale(), model.weight.detach().tolist())\n'
    ),
    ('AMP102', 'scaler_escapes', 'update_via_list', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'model = torch.nn.Linear(4, 1)\n'
        'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        'hooks = [scaler.update]\n'
        'for i in range(3):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        loss = model(x).float().pow(2).mean()\n'
        '    scaler.scale(loss).backward()\n'
        '    scaler.step(optimizer)\n'
        '    optimizer.zero_grad()\n'
        '    for h in hooks:\n'
        '        h()\n'
        '    print(scaler.get_scale(), model.weight.detach().tolist())\n'
    ),
    ('AMP102', 'scaler_escapes', 'update_in_other_obj', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'model = torch.nn.Linear(4, 1)\n'
        'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
        'class Box:\n'
        '    def __init__(self, sc):\n'
        '        self.sc = sc\n'
        '    def finish(self):\n'
        '        self.sc.update()\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        'box = Box(scaler)\n'
        'for i in range(3):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        loss = model(x).float().pow(2).mean()\n'
        '    scaler.scale(loss).backward()\n'
        '    scaler.step(optimizer)\n'
        '    optimizer.zero_grad()\n'
        '    box.finish()\n'
        '    print(scaler.get_scale(), model.weight.detach().tolist())\n'
    ),
    ('AMP101', 'clip_shares_line', 'backward_then_clip', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'model = torch.nn.Linear(4, 1)\n'
        'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        'for _ in range(2):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        loss = model(x).float().pow(2).mean()\n'
        '    scaler.scale(loss).backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n'
        '    scaler.step(optimizer)\n'
        '    scaler.update()\n'
        '    optimizer.zero_grad()\n'
        '    print(model.weight.detach().tolist())\n'
    ),
    ('AMP101', 'clip_shares_line', 'semicolons', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'model = torch.nn.Linear(4, 1)\n'
        'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        'for _ in range(2):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.bfloat16):\n'
        '        loss = model(x).float().pow(2).mean()\n'
        '    scaler.scale(loss).backward(); n = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); scaler.step(optimizer)\n'
        '    scaler.update()\n'
        '    optimizer.zero_grad()\n'
        '    print(float(n), model.weight.detach().tolist())\n'
    ),
    ('AMP101', 'optimizer_rebound', 'between_clip_and_step', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'm1 = torch.nn.Linear(4, 1); m2 = torch.nn.Linear(4, 1)\n'
        'o1 = torch.optim.SGD(m1.parameters(), lr=0.1); o2 = torch.optim.SGD(m2.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        'for _ in range(2):\n'
        '    x = torch.randn(8, 4)\n'
        '    optimizer = o1\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        loss = (m1(x) + m2(x)).float().pow(2).mean()\n'
        '    scaler.scale(loss).backward()\n'
        '    n = torch.nn.utils.clip_grad_norm_(m2.parameters(), 1.0)\n'
        '    optimizer = o2\n'
        '    scaler.step(optimizer)\n'
        '    scaler.update()\n'
        '    print("clip saw norm", float(n), "m1 grad", float(m1.weight.grad.abs().sum())); o1.zero_grad(); o2.zero_grad()\n'
        'print(m1.weight.detach().tolist(), m2.weight.detach().tolist())\n'
    ),
    ('AMP108', 'optimizer_rebound', 'between_unscales', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'm1 = torch.nn.Linear(4, 1); m2 = torch.nn.Linear(4, 1)\n'
        'o1 = torch.optim.SGD(m1.parameters(), lr=0.1); o2 = torch.optim.SGD(m2.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        'for _ in range(2):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        loss = (m1(x) + m2(x)).float().pow(2).mean()\n'
        '    scaler.scale(loss).backward()\n'
        '    optimizer = o1\n'
        '    scaler.unscale_(optimizer)\n'
        '    optimizer = o2\n'
        '    scaler.unscale_(optimizer)\n'
        '    n = torch.nn.utils.clip_grad_norm_(list(m1.parameters()) + list(m2.parameters()), 1.0)\n'
        '    scaler.step(o1)\n'
        '    scaler.step(o2)\n'
        '    scaler.update()\n'
        '    print("clip saw", float(n))\n'
        '    o1.zero_grad(); o2.zero_grad()\n'
        'print(m1.weight.detach().tolist(), m2.weight.detach().tolist())\n'
    ),
    ('AMP108', 'unscale_in_try', 'except_runtime_error', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'm1 = torch.nn.Linear(4, 1)\n'
        'o1 = torch.optim.SGD(m1.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        'for _ in range(2):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        loss = m1(x).float().pow(2).mean()\n'
        '    scaler.scale(loss).backward()\n'
        '    scaler.unscale_(o1)\n'
        '    try:\n'
        '        scaler.unscale_(o1)\n'
        '        print("second unscale succeeded")\n'
        '    except RuntimeError:\n'
        '        print("already unscaled")\n'
        '    scaler.step(o1)\n'
        '    scaler.update()\n'
        '    o1.zero_grad()\n'
    ),
    ('AMP103', 'scaled_elsewhere', 'through_scaler_alias', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'model = torch.nn.Linear(4, 1)\n'
        'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        's = scaler\n'
        'for i in range(3):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        loss = model(x).float().pow(2).mean()\n'
        '    loss = s.scale(loss)\n'
        '    loss.backward()\n'
        '    scaler.step(optimizer)\n'
        '    scaler.update()\n'
        '    optimizer.zero_grad()\n'
        '    print(scaler.get_scale(), model.weight.detach().tolist())\n'
    ),
    ('AMP103', 'scaled_elsewhere', 'scaled_list', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'model = torch.nn.Linear(4, 1)\n'
        'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        'for i in range(3):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        l1 = model(x).float().pow(2).mean()\n'
        '        l2 = model(x).float().abs().mean()\n'
        '    scaled = scaler.scale([l1, l2])\n'
        '    (scaled[0] + scaled[1]).backward()\n'
        '    scaler.step(optimizer)\n'
        '    scaler.update()\n'
        '    optimizer.zero_grad()\n'
        '    print(scaler.get_scale(), model.weight.detach().tolist())\n'
    ),
    ('AMP103', 'scaled_elsewhere', 'bound_scale_method', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'model = torch.nn.Linear(4, 1)\n'
        'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        'scale = scaler.scale\n'
        'for i in range(3):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        loss = model(x).float().pow(2).mean()\n'
        '    scale(loss).backward()\n'
        '    scaler.step(optimizer)\n'
        '    scaler.update()\n'
        '    optimizer.zero_grad()\n'
        '    print(scaler.get_scale(), model.weight.detach().tolist())\n'
    ),
    ('AMP103', 'scaled_elsewhere', 'rebound_scaled_loss', ()): (
        'import torch\n'
        'torch.manual_seed(0)\n'
        'model = torch.nn.Linear(4, 1)\n'
        'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
        'for i in range(3):\n'
        '    x = torch.randn(8, 4)\n'
        '    with torch.autocast("cpu", dtype=torch.float16):\n'
        '        loss = model(x).float().pow(2).mean()\n'
        '    loss = scaler.scale(loss)\n'
        '    loss.backward()\n'
        '    scaler.step(optimizer)\n'
        '    scaler.update()\n'
        '    optimizer.zero_grad()\n'
        '    print(scaler.get_scale(), model.weight.detach().tolist())\n'
    ),
    ('AMP302', 'input_dtype_unknown', 'float64_int64_inplace', ('AMP302',)): (
        'import numpy as np\n'
        'import torch\n'
        'torch.manual_seed(0)\n'
        'model = torch.nn.Linear(4, 1)\n'
        'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
        'scaler = torch.amp.GradScaler("cpu")\n'
        'x64 = torch.from_numpy(np.random.RandomState(0).randn(8, 4))   # float64\n'
        'xi = torch.arange(32).reshape(8, 4)                            # int64\n'
        'x = torch.randn(8, 4)\n'
        'with torch.autocast("cpu", dtype=torch.bfloat16):\n'
        '    try:\n'
        '        out = model(x64.bfloat16())\n'
        '        print("float64 ok", out.dtype)\n'
        '    except RuntimeError as e:\n'
        '        print("float64 err", type(e).__name__)\n'
        '    try:\n'
        '        out = model(xi.bfloat16())\n'
        '        print("int ok", out.dtype)\n'
        '    except RuntimeError as e:\n'
        '        print("int err", type(e).__name__)\n'
        '    y = x.to(torch.bfloat16)\n'
        '    y.mul_(0)\n'
        '    out = model(y)\n'
        'print("x sum after", float(x.sum()))\n'
    ),
}


def _step_rule_variants() -> list[Case]:
    """Scalers and optimizers under other names, statements sharing a line, a `try` around
    an `unscale_`, inputs of unknown dtype: where AMP101-AMP108 and AMP302 must not fix."""
    return [Case(f"{rule}-{context}-{name}", (("train.py", text),), ("train.py",), select=select)
            for (rule, context, name, select), text in _STEP_RULE_CASES.items()]


# A fourth hostile pass: names rebound by a call between two protocol calls, a RuntimeError
# caught by `contextlib.suppress` or a caller's `try`, a scaler updated or scaling in a base
# class's method or a helper, NumPy arrays and lists written under autocast.
_HOSTILE4_CASES = {
    ('AMP103', 'rebound_by_call', 'scaler_parameter_rebound'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'model = torch.nn.Linear(4, 4)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'x = torch.randn(8, 4)\n'
            '\n'
            'def train(scaler, other):\n'
            '    for i in range(3):\n'
            '        opt.zero_grad()\n'
            '        with torch.autocast("cpu", dtype=torch.bfloat16):\n'
            '            loss = model(x).float().pow(2).mean()\n'
            '        loss.backward()\n'
            '        scaler = other\n'
            '        scaler.step(opt)\n'
            '        scaler.update()\n'
            '\n'
            's1 = torch.amp.GradScaler("cpu", init_scale=4.0)\n'
            's2 = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            's2.scale(torch.ones(()))\n'
            's1.scale(torch.ones(()))\n'
            'train(s1, s2)\n'
            'print(s1._scale, s2._scale)\n'
            'print([p.sum().item() for p in model.parameters()])\n'
        )),
    ),
    ('AMP103', 'rebound_by_call', 'self_scaler_refreshed'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            '\n'
            'class Trainer:\n'
            '    def __init__(self):\n'
            '        self.model = torch.nn.Linear(4, 4)\n'
            '        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n'
            '        self.scaler = torch.amp.GradScaler("cpu", init_scale=4.0)\n'
            '        self.scaler.scale(torch.ones(()))\n'
            '\n'
            '    def refresh(self):\n'
            '        # swap in a fresh scaler on the first step\n'
            '        old = self.scaler\n'
            '        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            '        self.scaler.scale(torch.ones(()))\n'
            '        return old\n'
            '\n'
            '    def step(self, x):\n'
            '        self.opt.zero_grad()\n'
            '        with torch.autocast("cpu", dtype=torch.float16):\n'
            '            loss = self.model(x).float().pow(2).mean()\n'
            '        loss.backward()\n'
            '        self.refresh()\n'
            '        self.scaler.step(self.opt)\n'
            '        self.scaler.update()\n'
            '\n'
            't = Trainer()\n'
            'x = torch.randn(8, 4)\n'
            'for _ in range(3):\n'
            '    t.step(x)\n'
            'print(t.scaler._scale)\n'
            'print([p.sum().item() for p in t.model.parameters()])\n'
        )),
    ),
    ('AMP101', 'rebound_by_call', 'self_optimizer_rebuilt'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            '\n'
            'class Trainer:\n'
            '    def __init__(self):\n'
            '        self.model = torch.nn.Linear(4, 4)\n'
            '        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n'
            '        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            '        self.n = 0\n'
            '\n'
            '    def maybe_rebuild(self):\n'
            '        # rebuild the optimizer on the second step (e.g. after unfreezing)\n'
            '        self.n += 1\n'
            '        if self.n == 2:\n'
            '            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n'
            '\n'
            '    def step(self, x):\n'
            '        self.opt.zero_grad()\n'
            '        with torch.autocast("cpu", dtype=torch.float16):\n'
            '            loss = self.model(x).float().pow(2).mean()\n'
            '        self.scaler.scale(loss).backward()\n'
            '        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1e9)\n'
            '        self.maybe_rebuild()\n'
            '        self.scaler.step(self.opt)\n'
            '        self.scaler.update()\n'
            '\n'
            't = Trainer()\n'
            'x = torch.randn(8, 4)\n'
            'for _ in range(3):\n'
            '    t.step(x)\n'
            'print(t.scaler._scale)\n'
            'print([p.sum().item() for p in t.model.parameters()])\n'
        )),
    ),
    ('AMP108', 'error_caught_elsewhere', 'contextlib_suppress'): (
        ('train.py', (
            'import contextlib\n'
            'import torch\n'
            'torch.manual_seed(0)\n'
            'model = torch.nn.Linear(4, 4)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            '\n'
            'for i in range(3):\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean()\n'
            '    scaler.scale(loss).backward()\n'
            '    scaler.unscale_(opt)\n'
            '    with contextlib.suppress(RuntimeError):\n'
            '        scaler.unscale_(opt)\n'
            '        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.001)\n'
            '    scaler.step(opt)\n'
            '    scaler.update()\n'
            'print(scaler._scale)\n'
            'print([p.sum().item() for p in model.parameters()])\n'
        )),
    ),
    ('AMP108', 'error_caught_elsewhere', 'caller_try'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'model = torch.nn.Linear(4, 4)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            '\n'
            'def unscale_and_clip():\n'
            '    scaler.unscale_(opt)\n'
            '    scaler.unscale_(opt)\n'
            '    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.001)\n'
            '\n'
            'for i in range(3):\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean()\n'
            '    scaler.scale(loss).backward()\n'
            '    try:\n'
            '        unscale_and_clip()\n'
            '    except RuntimeError:\n'
            '        pass\n'
            '    scaler.step(opt)\n'
            '    scaler.update()\n'
            'print(scaler._scale)\n'
            'print([p.sum().item() for p in model.parameters()])\n'
        )),
    ),
    ('AMP102', 'inherited_method', 'update_in_base_module'): (
        ('base.py', (
            'class Base:\n'
            '    def after_step(self):\n'
            '        self.scaler.update()\n'
        )),
        ('train.py', (
            'import torch\n'
            'from base import Base\n'
            'torch.manual_seed(0)\n'
            '\n'
            'class T(Base):\n'
            '    def __init__(self):\n'
            '        self.model = torch.nn.Linear(4, 4)\n'
            '        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n'
            '        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            '\n'
            '    def step(self, x):\n'
            '        with torch.autocast("cpu", dtype=torch.float16):\n'
            '            loss = self.model(x).float().pow(2).mean()\n'
            '        self.scaler.scale(loss).backward()\n'
            '        self.scaler.step(self.opt)\n'
            '        self.after_step()\n'
            '        self.opt.zero_grad()\n'
            '\n'
            't = T()\n'
            'x = torch.randn(8, 4)\n'
            'for i in range(3):\n'
            '    t.step(x)\n'
            'print(t.scaler._scale, [p.sum().item() for p in t.model.parameters()])\n'
        )),
    ),
    ('AMP102', 'inherited_method', 'update_in_base_class'): (
        ('train.py', (
            'import torch\n'
            'class Base:\n'
            '    def after_step(self):\n'
            '        self.scaler.update()\n'
            '\n'
            'torch.manual_seed(0)\n'
            '\n'
            'class T(Base):\n'
            '    def __init__(self):\n'
            '        self.model = torch.nn.Linear(4, 4)\n'
            '        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n'
            '        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            '\n'
            '    def step(self, x):\n'
            '        with torch.autocast("cpu", dtype=torch.float16):\n'
            '            loss = self.model(x).float().pow(2).mean()\n'
            '        self.scaler.scale(loss).backward()\n'
            '        self.scaler.step(self.opt)\n'
            '        self.after_step()\n'
            '        self.opt.zero_grad()\n'
            '\n'
            't = T()\n'
            'x = torch.randn(8, 4)\n'
            'for i in range(3):\n'
            '    t.step(x)\n'
            'print(t.scaler._scale, [p.sum().item() for p in t.model.parameters()])\n'
        )),
    ),
    ('AMP103', 'inherited_method', 'scale_in_base_class'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            '\n'
            'class Base:\n'
            '    def scale_loss(self, loss):\n'
            '        return self.scaler.scale(loss)\n'
            '\n'
            'class T(Base):\n'
            '    def __init__(self):\n'
            '        self.model = torch.nn.Linear(4, 4)\n'
            '        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n'
            '        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            '\n'
            '    def step(self, x):\n'
            '        with torch.autocast("cpu", dtype=torch.float16):\n'
            '            loss = self.model(x).float().pow(2).mean()\n'
            '        loss = self.scale_loss(loss)\n'
            '        loss.backward()\n'
            '        self.scaler.step(self.opt)\n'
            '        self.scaler.update()\n'
            '        self.opt.zero_grad()\n'
            '\n'
            't = T()\n'
            'x = torch.randn(8, 4)\n'
            'for i in range(3):\n'
            '    t.step(x)\n'
            'print(t.scaler._scale, [p.sum().item() for p in t.model.parameters()])\n'
        )),
    ),
    ('AMP103', 'scaled_elsewhere', 'helper_returns_scaled'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'model = torch.nn.Linear(4, 4)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            '\n'
            'def scaled(loss):\n'
            '    return scaler.scale(loss)\n'
            '\n'
            'for i in range(3):\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean()\n'
            '    loss = scaled(loss)\n'
            '    loss.backward()\n'
            '    scaler.step(opt)\n'
            '    scaler.update()\n'
            '    opt.zero_grad()\n'
            'print(scaler._scale, [p.sum().item() for p in model.parameters()])\n'
        )),
    ),
    ('AMP501', 'not_a_tensor', 'numpy_array_and_list'): (
        ('train.py', (
            'import numpy as np\n'
            'import torch\n'
            'torch.manual_seed(0)\n'
            '\n'
            'def attend(q, k, mask_np, lst):\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        scores = q @ k.T\n'
            '        bias = np.zeros(scores.shape, dtype=np.float32)\n'
            '        bias[mask_np] = -1e9\n'
            '        lst[0] = -1e9\n'
            '        scores = scores + torch.from_numpy(bias)\n'
            '        scores = scores.masked_fill(torch.from_numpy(mask_np), -1e9)\n'
            '        return scores.softmax(-1), lst\n'
            '\n'
            'q = torch.randn(2, 3); k = torch.randn(2, 3)\n'
            'm = np.array([[True, False], [False, False]])\n'
            'print(attend(q, k, m, [0.0]))\n'
        )),
    ),
}


# A fifth hostile pass: a property and a bound method as other names of the scaler, context
# managers and decorators that swallow the RuntimeError, flags that guard a second unscale_, a
# scaler rebuilt between two unscale_, an exception edge after the clip, a stand-in scaler
# without `scale`, integer tensors, NumPy arrays and lists, an explicit dtype, in-place arithmetic.
_HOSTILE5_CASES = {
    ('AMP102', 'hidden_alias', 'scaler_property'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            '\n'
            '\n'
            'class Trainer:\n'
            '    def __init__(self):\n'
            '        self.model = torch.nn.Linear(4, 1)\n'
            '        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n'
            '        self._scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            '\n'
            '    @property\n'
            '    def scaler(self):\n'
            '        return self._scaler\n'
            '\n'
            '    def after_step(self):\n'
            '        self._scaler.update()\n'
            '\n'
            '    def train_step(self, x):\n'
            '        self.opt.zero_grad()\n'
            '        with torch.autocast("cpu", dtype=torch.float16):\n'
            '            loss = self.model(x).float().pow(2).mean()\n'
            '        self.scaler.scale(loss).backward()\n'
            '        self.scaler.step(self.opt)\n'
            '        print(loss.item())\n'
            '\n'
            '\n'
            't = Trainer()\n'
            'x = torch.randn(8, 4)\n'
            'for i in range(3):\n'
            '    t.train_step(x)\n'
            '    t.after_step()\n'
            'print(t.model.weight.data, t.scaler._scale)\n'
        )),
    ),
    ('AMP108', 'error_caught_elsewhere', 'swallowing_contextmanager'): (
        ('train.py', (
            'import contextlib\n'
            'import torch\n'
            'torch.manual_seed(0)\n'
            '\n'
            '\n'
            '@contextlib.contextmanager\n'
            'def best_effort():\n'
            '    try:\n'
            '        yield\n'
            '    except RuntimeError as e:\n'
            '        print("skipped:", e)\n'
            '\n'
            '\n'
            'model = torch.nn.Linear(4, 1)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            'for i in range(3):\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean() * 100\n'
            '    scaler.scale(loss).backward()\n'
            '    scaler.unscale_(opt)\n'
            '    with best_effort():\n'
            '        scaler.unscale_(opt)\n'
            '        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)\n'
            '    scaler.step(opt)\n'
            '    scaler.update()\n'
            '    print(i, loss.item())\n'
            'print(model.weight.data, scaler._scale)\n'
        )),
    ),
    ('AMP108', 'error_caught_elsewhere', 'decorator_catches'): (
        ('train.py', (
            'import functools\n'
            'import torch\n'
            'torch.manual_seed(0)\n'
            '\n'
            '\n'
            'def tolerant(fn):\n'
            '    @functools.wraps(fn)\n'
            '    def wrapper(*a, **k):\n'
            '        try:\n'
            '            return fn(*a, **k)\n'
            '        except RuntimeError as e:\n'
            '            print("step failed:", e)\n'
            '    return wrapper\n'
            '\n'
            '\n'
            'model = torch.nn.Linear(4, 1)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            '\n'
            '\n'
            '@tolerant\n'
            'def clip_and_step():\n'
            '    scaler.unscale_(opt)\n'
            '    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n'
            '    scaler.unscale_(opt)\n'
            '    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)\n'
            '    scaler.step(opt)\n'
            '\n'
            '\n'
            'for i in range(3):\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean() * 100\n'
            '    scaler.scale(loss).backward()\n'
            '    clip_and_step()\n'
            '    scaler.update()\n'
            '    print(i, loss.item())\n'
            'print(model.weight.data, scaler._scale)\n'
        )),
    ),
    ('AMP108', 'flag_guarded', 'unscale_unless_done'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'model = torch.nn.Linear(4, 1)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            'clip_norm = 0.5\n'
            'log_every = 2\n'
            'for i in range(3):\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean() * 100\n'
            '    scaler.scale(loss).backward()\n'
            '    unscaled = False\n'
            '    if clip_norm:\n'
            '        scaler.unscale_(opt)\n'
            '        unscaled = True\n'
            '        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)\n'
            '    if i % log_every == 0:\n'
            '        if not unscaled:\n'
            '            scaler.unscale_(opt)\n'
            '        print("grad norm", model.weight.grad.norm().item())\n'
            '    scaler.step(opt)\n'
            '    scaler.update()\n'
            '    print(i, loss.item())\n'
            'print(model.weight.data, scaler._scale)\n'
        )),
    ),
    ('AMP101', 'flag_guarded', 'unscale_in_try_unless_done'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            '\n'
            '\n'
            'def log_grad_norm(model, i):\n'
            '    if i == 1:\n'
            '        raise ValueError("logging backend down")\n'
            '    print("norm", sum(p.grad.norm() for p in model.parameters()).item())\n'
            '\n'
            '\n'
            'model = torch.nn.Linear(4, 1)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            'for i in range(3):\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean() * 100\n'
            '    scaler.scale(loss).backward()\n'
            '    unscaled = False\n'
            '    try:\n'
            '        log_grad_norm(model, i)\n'
            '        scaler.unscale_(opt)\n'
            '        unscaled = True\n'
            '    except ValueError:\n'
            '        pass\n'
            '    if not unscaled:\n'
            '        scaler.unscale_(opt)\n'
            '    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n'
            '    scaler.step(opt)\n'
            '    scaler.update()\n'
            '    print(i, loss.item())\n'
            'print(model.weight.data, scaler._scale)\n'
        )),
    ),
    ('AMP108', 'hidden_alias', 'bound_update_callback'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'model = torch.nn.Linear(4, 1)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            'on_step_end = scaler.update  # e.g. registered as a callback\n'
            '\n'
            '\n'
            'def half_step():\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean() * 100\n'
            '    scaler.scale(loss).backward()\n'
            '    print(loss.item())\n'
            '\n'
            '\n'
            'half_step()\n'
            'scaler.unscale_(opt)\n'
            'torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n'
            'scaler.step(opt)\n'
            'on_step_end()\n'
            'half_step()\n'
            'scaler.unscale_(opt)\n'
            'torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n'
            'scaler.step(opt)\n'
            'scaler.update()\n'
            'print(model.weight.data, scaler._scale)\n'
        )),
    ),
    ('AMP108', 'hidden_alias', 'update_callbacks_in_a_list'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'model = torch.nn.Linear(4, 1)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            'finish = [scaler.update]\n'
            '\n'
            '\n'
            'def half_step():\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean() * 100\n'
            '    scaler.scale(loss).backward()\n'
            '    print(loss.item())\n'
            '\n'
            '\n'
            'half_step()\n'
            'scaler.unscale_(opt)\n'
            'torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n'
            'scaler.step(opt)\n'
            'for f in finish:\n'
            '    f()\n'
            'half_step()\n'
            'scaler.unscale_(opt)\n'
            'torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n'
            'scaler.step(opt)\n'
            'scaler.update()\n'
            'print(model.weight.data, scaler._scale)\n'
        )),
    ),
    ('AMP108', 'rebound_by_call', 'scaler_rebuilt_between'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'model = torch.nn.Linear(4, 1)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            '\n'
            '\n'
            'def backward():\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean() * 100\n'
            '    scaler.scale(loss).backward()\n'
            '    print(loss.item())\n'
            '\n'
            '\n'
            'backward()\n'
            'scaler.unscale_(opt)\n'
            'if not all(torch.isfinite(p.grad).all() for p in model.parameters()):\n'
            '    print("bad")\n'
            '# warm-up probe done: start the real run with a fresh scaler\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=512.0)\n'
            'backward()\n'
            'scaler.unscale_(opt)\n'
            'torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n'
            'scaler.step(opt)\n'
            'scaler.update()\n'
            'print(model.weight.data, scaler._scale)\n'
        )),
    ),
    ('AMP101', 'exception_edge', 'handler_continues'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'model = torch.nn.Linear(4, 1)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
            'x = torch.randn(8, 4)\n'
            '\n'
            '\n'
            'def check_loss(loss, i):\n'
            '    if i == 1:\n'
            '        raise FloatingPointError("loss spike")\n'
            '\n'
            '\n'
            'for i in range(4):\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16):\n'
            '        loss = model(x).float().pow(2).mean() * 100\n'
            '    scaler.scale(loss).backward()\n'
            '    try:\n'
            '        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n'
            '        check_loss(loss, i)\n'
            '        scaler.step(opt)\n'
            '        scaler.update()\n'
            '    except FloatingPointError as e:\n'
            '        print("skip", e)\n'
            '        continue\n'
            '    print(i, loss.item())\n'
            'print(model.weight.data, scaler._scale)\n'
        )),
    ),
    ('AMP103', 'stand_in_scaler', 'no_scale_method'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            '\n'
            '\n'
            'class NoScaler:\n'
            '    """fp32 stand-in: steps plainly."""\n'
            '    def step(self, optimizer):\n'
            '        optimizer.step()\n'
            '\n'
            '    def update(self):\n'
            '        pass\n'
            '\n'
            '\n'
            'model = torch.nn.Linear(4, 1)\n'
            'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'use_amp = False\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0) if use_amp else NoScaler()\n'
            'x = torch.randn(8, 4)\n'
            'for i in range(3):\n'
            '    opt.zero_grad()\n'
            '    with torch.autocast("cpu", dtype=torch.float16, enabled=use_amp):\n'
            '        loss = model(x).float().pow(2).mean()\n'
            '    loss.backward()\n'
            '    scaler.step(opt)\n'
            '    scaler.update()\n'
            '    print(i, loss.item())\n'
            'print(model.weight.data)\n'
        )),
    ),
    ('AMP501', 'not_a_tensor', 'integer_tensor'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16\n'
            'm = torch.tensor([[True, False, True], [False, False, True]])\n'
            '\n'
            'ids = torch.arange(6).view(2, 3)\n'
            'ids = ids.masked_fill(m, -1e9)  # int64 sentinel, fits\n'
            'print(ids.dtype, ids)\n'
        )),
    ),
    ('AMP501', 'explicit_dtype', 'new_full_float32'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16\n'
            'm = torch.tensor([[True, False, True], [False, False, True]])\n'
            '\n'
            'h = torch.randn(2, 3, dtype=torch.float16)\n'
            'bias = h.new_full((2, 3), -1e9, dtype=torch.float32)  # explicitly float32\n'
            'print(bias.dtype, bias)\n'
        )),
    ),
    ('AMP501', 'not_a_tensor', 'numpy_from_tensor'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16\n'
            'm = torch.tensor([[True, False, True], [False, False, True]])\n'
            '\n'
            'scores = torch.randn(2, 3)\n'
            'arr = scores.numpy()\n'
            'arr[0] = -1e9\n'
            'print(arr)\n'
        )),
    ),
    ('AMP501', 'not_a_tensor', 'list_from_tolist'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16\n'
            'm = torch.tensor([[True, False, True], [False, False, True]])\n'
            '\n'
            'row = torch.zeros(3).tolist()\n'
            'row[0] = -1e9\n'
            'print(row)\n'
        )),
    ),
    ('AMP501', 'arithmetic', 'in_place_scale_and_shift'): (
        ('train.py', (
            'import torch\n'
            'torch.manual_seed(0)\n'
            'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # the module trains in fp16\n'
            'lin = torch.nn.Linear(3, 3)\n'
            'x = torch.randn(2, 3)\n'
            's = lin(x)  # float32 (no autocast here)\n'
            's.mul_(1e5)  # rescale to fixed-point units\n'
            'print(s.dtype, s)\n'
            't = lin(x)\n'
            't.add_(1e5)  # shift, then undo\n'
            't.sub_(1e5)\n'
            'print(t)\n'
        )),
    ),
}


def _hostile_variants() -> list[Case]:
    """Where the step rules and AMP501 must not fix (or not report): the object a name
    denotes changes out of sight, the error a fix removes is caught, the value is no
    float16 tensor (hostile passes 4 to 26)."""
    from amplint.runtime.hostile_pass6 import CASES as pass6
    from amplint.runtime.hostile_pass7 import CASES as pass7
    from amplint.runtime.hostile_pass8 import CASES as pass8
    from amplint.runtime.hostile_pass9 import CASES as pass9
    from amplint.runtime.hostile_pass10 import CASES as pass10
    from amplint.runtime.hostile_pass12 import CASES as pass12
    from amplint.runtime.hostile_pass12 import ENTRIES as pass12_entries
    from amplint.runtime.hostile_pass12 import UNSAFE_MAY_DIFFER as pass12_unsafe
    from amplint.runtime.hostile_pass13 import CASES as pass13
    from amplint.runtime.hostile_pass13 import SELECT as pass13_select
    from amplint.runtime.hostile_pass13 import UNSAFE_MAY_DIFFER as pass13_unsafe
    from amplint.runtime.hostile_pass15 import CASES as pass15
    from amplint.runtime.hostile_pass17 import CASES as pass17
    from amplint.runtime.hostile_pass18 import CASES as pass18
    from amplint.runtime.hostile_pass20 import CASES as pass20
    from amplint.runtime.hostile_pass20 import ENTRIES as pass20_entries
    from amplint.runtime.hostile_pass22 import CASES as pass22
    from amplint.runtime.hostile_pass24 import CASES as pass24
    from amplint.runtime.hostile_pass24 import ENTRIES as pass24_entries
    from amplint.runtime.hostile_pass26 import CASES as pass26

    return [Case(f"{rule}-{context}-{name}", files, ("train.py",))
            for (rule, context, name), files in (*_HOSTILE4_CASES.items(), *_HOSTILE5_CASES.items())] + [
        Case(case_id, tuple(files.items()), ("train.py",)) for case_id, files in (*pass6.items(), *pass7.items(), *pass8.items(), *pass9.items(), *pass10.items())] + [
        Case(case_id, tuple(files.items()), pass12_entries.get(case_id, ("train.py",)), unsafe_may_differ=case_id in pass12_unsafe)
        for case_id, files in pass12.items()] + [
        Case(case_id, tuple(files.items()), ("train.py",), select=pass13_select.get(case_id, ()),
             unsafe_may_differ=case_id in pass13_unsafe)
        for case_id, files in pass13.items()] + [
        Case(case_id, tuple(files.items()), ("train.py",)) for case_id, files in (*pass15.items(), *pass17.items(), *pass18.items())] + [
        Case(case_id, tuple(files.items()), pass20_entries.get(case_id, ("train.py",))) for case_id, files in pass20.items()] + [
        Case(case_id, tuple(files.items()), ("train.py",)) for case_id, files in pass22.items()] + [
        Case(case_id, tuple(files.items()), pass24_entries.get(case_id, ("train.py",))) for case_id, files in pass24.items()] + [
        Case(case_id, tuple(files.items()), ("train.py",)) for case_id, files in pass26.items()]


def variants() -> list[Case]:
    """Every generated case; ids name the rule, the context, the object, the device, the spelling."""
    cases = (_single_file_variants() + _branch_variants() + _reexport_variants() + _isinstance_variants()
             + _fstring_variants() + _notebook_variants() + _one_line_variants() + _checked_annotation_variants()
             + _star_import_variants() + _finfo_variants() + _optional_scaler_variants() + _torch_rebound_variants()
             + _class_body_import_variants()
             + _notebook_importer_variants()
             + _step_rule_variants() + _hostile_variants())
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "variant ids must be unique"
    return cases


# --- the child: record what a script builds -----------------------------------------------------


class _Recorder:
    """Patches torch's modern AMP classes (the deprecated ones call into them) and module forwards."""

    MAX_EVENTS = 4000

    def __init__(self, root: str) -> None:
        self.root = root
        self.events: list[dict] = []
        self.warnings: list[dict] = []
        self.depth = 0

    def event(self, kind: str, **data) -> None:
        if len(self.events) < self.MAX_EVENTS:
            where = self._where()
            self.events.append({"event": kind, **data, "where": where[0], "line": where[1]})
        elif len(self.events) == self.MAX_EVENTS:
            self.events.append({"event": "truncated", "where": "", "line": 0})

    def _where(self) -> tuple[str, int]:
        frame = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith(self.root):
                return f"{os.path.relpath(filename, self.root)}:{frame.f_code.co_name}", frame.f_lineno
            frame = frame.f_back
        return "", 0

    def install(self) -> None:
        import torch
        from torch.amp import autocast_mode, grad_scaler

        rec = self
        state = _autocast_state

        Autocast = autocast_mode.autocast
        init, enter, exit_ = Autocast.__init__, Autocast.__enter__, Autocast.__exit__

        @functools.wraps(init)
        def autocast_init(self, *args, **kwargs):
            init(self, *args, **kwargs)
            rec.event("autocast built", device=self.device, dtype=str(self.fast_dtype), enabled=bool(self._enabled),
                      cache=bool(getattr(self, "_cache_enabled", True)))

        @functools.wraps(enter)
        def autocast_enter(self):
            result = enter(self)
            rec.depth += 1
            rec.event("autocast entered", device=self.device, dtype=str(torch.get_autocast_dtype(self.device)),
                      enabled=torch.is_autocast_enabled(self.device), cache=torch.is_autocast_cache_enabled(),
                      depth=rec.depth, state=state())
            return result

        @functools.wraps(exit_)
        def autocast_exit(self, *exc):
            rec.depth -= 1
            return exit_(self, *exc)

        Autocast.__init__, Autocast.__enter__, Autocast.__exit__ = autocast_init, autocast_enter, autocast_exit

        Scaler = grad_scaler.GradScaler
        scaler_init = Scaler.__init__
        import inspect

        signature = inspect.signature(scaler_init)

        @functools.wraps(scaler_init)
        def scaler_built(self, *args, **kwargs):
            try:
                bound = signature.bind(self, *args, **kwargs)
                bound.apply_defaults()
                arguments = {k: _plain(v) for k, v in bound.arguments.items() if k != "self"}
            except TypeError:
                arguments = None
            scaler_init(self, *args, **kwargs)
            rec.event("GradScaler built", arguments=arguments, enabled=bool(self._enabled))

        Scaler.__init__ = scaler_built

        def recorded(kind, function):
            @functools.wraps(function)
            def wrapper(*args, **kwargs):
                rec.event(f"{kind} runs", function=function.__qualname__, state=state(), inputs=_dtypes(args[1:]))
                result = function(*args, **kwargs)
                rec.event(f"{kind} returns", function=function.__qualname__, outputs=_dtypes(result))
                return result

            return wrapper

        real_fwd, real_bwd = autocast_mode.custom_fwd, autocast_mode.custom_bwd

        # NB: the parameter names are torch's own (`torch.cuda.amp.custom_fwd` passes `fwd=`).
        def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
            if fwd is None:
                real_fwd(None, device_type=device_type, cast_inputs=cast_inputs)  # its own argument checks
                return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
            return real_fwd(recorded("custom_fwd forward", fwd), device_type=device_type, cast_inputs=cast_inputs)

        def custom_bwd(bwd=None, *, device_type):
            if bwd is None:
                real_bwd(None, device_type=device_type)
                return functools.partial(custom_bwd, device_type=device_type)
            return real_bwd(recorded("custom_bwd backward", bwd), device_type=device_type)

        functools.update_wrapper(custom_fwd, real_fwd)
        functools.update_wrapper(custom_bwd, real_bwd)
        for owner in (autocast_mode, torch.amp):
            owner.custom_fwd, owner.custom_bwd = custom_fwd, custom_bwd

        def forward_hook(module, args, output):
            rec.event("forward", module=type(module).__name__, state=state(), outputs=_dtypes(output))

        torch.nn.modules.module.register_module_forward_hook(forward_hook)

        import warnings

        show = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):
            rec.warnings.append({"category": category.__name__, "message": str(message).replace(rec.root, "<root>")})
            return show(message, category, filename, lineno, file, line)

        warnings.showwarning = showwarning


def _autocast_state() -> dict:
    import torch

    return {dev: (str(torch.get_autocast_dtype(dev)) if torch.is_autocast_enabled(dev) else None) for dev in ("cpu", "cuda")}


def _dtypes(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [f"{value.dtype}@{value.device.type}"]
    if isinstance(value, (list, tuple)):
        return [d for v in value for d in _dtypes(v)]
    if isinstance(value, dict):
        return [d for v in value.values() for d in _dtypes(v)]
    return []


def _plain(value):
    """A JSON-able, comparable form of a recorded value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return f"<{type(value).__name__} {value}>"


def _globals_of(namespace: dict, root: str) -> dict:
    """The tensors, modules and scalers a script leaves in its globals: what it built."""
    import torch

    out = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, torch.Tensor):
            out[name] = {"tensor": f"{value.dtype}@{value.device.type}", "shape": list(value.shape)}
        elif isinstance(value, torch.nn.Module):
            out[name] = {"module": type(value).__name__,
                         "parameters": sorted({f"{p.dtype}@{p.device.type}" for p in value.parameters()})}
        elif isinstance(value, torch.amp.GradScaler):
            # NB: not its scale: an unsafe fix that adds `scaler.update()` (AMP102) is meant to
            # change it.  What it was built with is in its "GradScaler built" event.
            out[name] = {"scaler": _plain(value._device), "enabled": value.is_enabled()}
        elif isinstance(value, torch.amp.autocast_mode.autocast):
            out[name] = {"autocast": value.device, "dtype": str(value.fast_dtype), "enabled": bool(value._enabled)}
        elif isinstance(value, torch.dtype):
            out[name] = {"dtype": str(value)}
    return out


def _run_one(entry: str, root: str, recorder: _Recorder) -> dict:
    """Run one script or notebook as __main__ in this (forked) process; its part of the trace."""
    import runpy
    import types

    import torch

    torch.manual_seed(0)
    import random

    random.seed(0)
    path = os.path.join(root, entry)
    sys.argv = [path]
    sys.path[0] = os.path.dirname(path)
    os.chdir(os.path.dirname(path))
    namespace: dict = {}
    exit_code, exception = 0, None
    try:
        if entry.endswith(".ipynb"):
            with open(path, encoding="utf-8") as f:
                program = notebook_program(f.read())
            module = types.ModuleType("__main__")
            module.__file__ = path
            sys.modules["__main__"] = module
            namespace = module.__dict__
            exec(compile(program, path, "exec"), namespace)
        else:
            namespace = runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: BLE001 - recorded, as the interpreter would report it
        import traceback

        traceback.print_exc()
        exit_code, exception = 1, f"{type(exc).__name__}: {str(exc).replace(root, '<root>')}"
        namespace = getattr(sys.modules.get("__main__"), "__dict__", {}) or namespace
    sys.stdout.flush()
    sys.stderr.flush()
    return {"exit": exit_code, "exception": exception, "globals": _globals_of(namespace, root)}


def _child(spec: dict, recorder_factory) -> None:
    """In a forked process: run each entry of one tree, write the trace, exit."""
    import signal

    os.environ[TRACE_ENV] = os.path.join(os.path.dirname(spec["out"]), "sub")
    runs = {}
    out_dir = os.path.dirname(spec["out"])
    for n, entry in enumerate(spec["entries"]):
        pid = os.fork()
        if pid == 0:  # each entry in its own fork: its own modules and autocast state
            stdout = os.open(os.path.join(out_dir, f"stdout{n}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            stderr = os.open(os.path.join(out_dir, f"stderr{n}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(stdout, 1)
            os.dup2(stderr, 2)
            signal.alarm(RUN_TIMEOUT)  # NB: an alarm is not inherited by a fork: set in the run's own process
            recorder = recorder_factory(spec["root"])
            result = _run_one(entry, spec["root"], recorder)
            result.update(events=recorder.events, warnings=recorder.warnings)
            with open(os.path.join(out_dir, f"run{n}.json"), "w") as f:
                json.dump(result, f)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        try:
            with open(os.path.join(out_dir, f"run{n}.json")) as f:
                run = json.load(f)
        except (OSError, ValueError):
            run = {"exit": None, "exception": f"the run ended without a trace (wait status {status})", "globals": {},
                   "events": [], "warnings": []}
        with open(os.path.join(out_dir, f"stdout{n}"), errors="replace") as f:
            run["stdout"] = f.read().replace(spec["root"], "<root>")
        with open(os.path.join(out_dir, f"stderr{n}"), errors="replace") as f:
            run["stderr"] = f.read().replace(spec["root"], "<root>")
        run["subprocesses"] = _subprocess_traces(os.environ[TRACE_ENV], spec["root"])
        runs[entry] = run
    with open(spec["out"], "w") as f:
        json.dump({"runs": runs}, f)
    os._exit(0)


def _subprocess_traces(folder: str, root: str) -> list:
    """The traces Python subprocesses of a run wrote (sitecustomize), in the order they started."""
    if not os.path.isdir(folder):
        return []
    traces = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            trace = json.load(f)
        traces.append({"events": [{k: v for k, v in e.items() if k != "line"} for e in trace["events"]],
                       "argv": [a.replace(root, "<root>") for a in trace["argv"]]})
    shutil.rmtree(folder, ignore_errors=True)
    return sorted(traces, key=lambda t: json.dumps(t, sort_keys=True))


_SITECUSTOMIZE = """\
import os
if os.environ.get({env!r}):
    from amplint.runtime import fix_execution
    fix_execution.record_this_process()
"""


def record_this_process() -> None:
    """In a Python subprocess of a recorded script: record it too, and write its trace at exit."""
    import atexit
    import time

    folder = os.environ[TRACE_ENV]
    root = os.environ.get("AMPLINT_FIX_ROOT", "/")
    recorder = _Recorder(root)
    recorder.install()

    def write() -> None:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{time.monotonic_ns()}-{os.getpid()}.json"), "w") as f:
            json.dump({"events": recorder.events, "argv": sys.argv}, f)

    atexit.register(write)


def _serve(jobs_file: str) -> None:
    """The child: import torch once, install the recorder, fork once per tree (two at a time)."""
    with open(jobs_file) as f:
        plan = json.load(f)
    site = os.path.join(os.path.dirname(jobs_file), "site")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write(_SITECUSTOMIZE.format(env=TRACE_ENV))
    os.environ["PYTHONPATH"] = os.pathsep.join([site, os.environ.get("PYTHONPATH", "")])
    import torch  # noqa: F401 - once, before the forks

    torch.set_num_threads(1)

    def factory(root: str) -> _Recorder:
        os.environ["AMPLINT_FIX_ROOT"] = root
        recorder = _Recorder(root)
        recorder.install()
        return recorder

    running: dict[int, dict] = {}
    pending = list(plan["jobs"])
    while pending or running:
        while pending and len(running) < max(1, plan.get("parallel", 1)):
            spec = pending.pop(0)
            pid = os.fork()
            if pid == 0:
                try:
                    _child(spec, factory)
                finally:
                    os._exit(1)
            running[pid] = spec
        pid, _ = os.wait()
        running.pop(pid, None)


if __name__ == "__main__":
    _serve(sys.argv[1])
