"""Does anything in a program run in reduced precision?  The project-wide question of AMP206.

A GradScaler only makes sense when some of the forward pass runs in float16: an autocast
region, a model cast to half, a library told to use fp16 mixed precision.  That evidence
is often in another module than the scaler (a model's `forward` decorated with
autocast, a `NativeScaler` helper in `util/misc.py` used by `engine.py`), so the question
is asked of the *program* the module belongs to:

- the module itself, the project modules it imports (transitively), and
- the project modules that import it (directly or not, `ProjectIndex.importers`) with
  what they import in turn: the scripts that run this code and everything they reach.

Other fixture files or unrelated scripts of the same repository are not part of it.
A module is read as text first and parsed only when its text holds a word that
reduced-precision evidence needs (`autocast`, `half`, `float16`, `fp16`, `bf16`, ...).

Evidence, per module (`module_evidence`), conservatively: an autocast context that may
be enabled (a literal `enabled=False` is none; a managed `accelerator.autocast()` is),
any other use of an autocast context as a value, a reference to `torch.float16` /
`torch.half` / `torch.bfloat16`, a `.half()` / `.bfloat16()` call, apex, a string that
names a reduced precision (`"fp16"`, `"bf16-mixed"`, `torch_dtype="float16"`), or
Lightning's `precision=16`.  When the program is too large to read (`MAX_PROGRAM_FILES`)
the answer is "unknown", which never reports.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from amplint.analysis.torch_api import AUTOCAST_CONTEXTS, HALF_DTYPES
from amplint.analysis.walk import walk

# Words without which a module's text cannot hold evidence (lowercased text).
EVIDENCE_WORDS = ("autocast", "half", "float16", "fp16", "bf16", "16-mixed", "16_mixed", "apex", "precision")
# Strings that name a reduced precision as an option value.
_PRECISION_STRINGS = frozenset({"fp16", "float16", "half", "bf16", "bfloat16", "16-mixed", "bf16-mixed", "16-true", "bf16-true"})
_HALF_METHODS = frozenset({"half", "bfloat16"})
# A program larger than this is not read through; the answer is then unknown.
MAX_PROGRAM_FILES = 600


@dataclass(frozen=True)
class Evidence:
    path: str
    why: str


def module_evidence(model) -> str | None:
    """Why this module (may) run in reduced precision, or None."""
    from amplint.analysis.precision import precision_of

    for _, _, info in precision_of(model).autocast_sites:
        if info.may_be_enabled:
            return "enters autocast" if not info.managed else "enters a library's autocast"
    disabled_funcs = _disabled_autocast_funcs(model)
    for ref in model.references:
        if ref.context != "expr":
            continue
        qual = model.imports.qualify_text(ref.text) or ""
        if qual in HALF_DTYPES:
            return f"uses `{ref.text}`"
        if qual in AUTOCAST_CONTEXTS and id(ref.node) not in disabled_funcs:
            return f"uses `{ref.text}`"
    if any(full == "apex" or full.startswith("apex.") for _, full in model.imports.items()):
        return "imports apex"
    for site in model.calls:
        func = site.node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _HALF_METHODS and not site.node.args:
            return f"calls `.{func.attr.value}()`"
    finder = _OptionFinder()
    walk(model.module, finder)
    return finder.found


def _disabled_autocast_funcs(model) -> set[int]:
    """id() of the callee expressions of autocast calls that are literally disabled."""
    out: set[int] = set()
    b = model.bindings
    for site in model.calls:
        if model.qualify(site.node.func) not in AUTOCAST_CONTEXTS:
            continue
        infos = b.autocast_of(site.node, site.scope)
        if infos and all(not i.may_be_enabled for i in infos):
            out.add(id(site.node.func))
    return out


class _OptionFinder(cst.CSTVisitor):
    """`"fp16"`, `mixed_precision="bf16"`, `precision="16-mixed"`, `precision=16`."""

    def __init__(self) -> None:
        self.found: str | None = None

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if self.found is None and len(node.value) < 20:
            value = node.evaluated_value
            if isinstance(value, str) and value.lower() in _PRECISION_STRINGS:
                self.found = f'names "{value}"'

    def visit_Arg(self, node: cst.Arg) -> None:
        if self.found is None and node.keyword is not None and "precision" in node.keyword.value:
            value = node.value
            if isinstance(value, cst.Integer) and value.value == "16":
                self.found = f"passes `{node.keyword.value}=16`"
            elif isinstance(value, cst.SimpleString) and value.evaluated_value == "16":
                self.found = f'passes `{node.keyword.value}="16"`'


# --- the program ---------------------------------------------------------------------------


def program_evidence(model) -> Evidence | None | bool:
    """Evidence of reduced precision in the module's program; None when there is none;
    False when the program could not be read through (too large): unknown."""
    own = module_evidence(model)
    if own is not None:
        return Evidence(model.path, own)
    project = model.project
    if project is None:
        return None
    here = os.path.abspath(model.path)
    seen = {here}
    queue: deque[str] = deque(_own_imports(model, project))
    upward = [p for p in project.importers(model.path) if p not in seen] + _beside_namespace_package(model, project)
    queue.extend(upward)
    while queue:
        path = os.path.abspath(queue.popleft())
        if path in seen:
            continue
        seen.add(path)
        if len(seen) > MAX_PROGRAM_FILES:
            return False
        why = _file_evidence(path, project)
        if why is not None:
            return Evidence(path, why)
        queue.extend(p for p in project.imported_files(path) if p not in seen)
    return None


def _file_evidence(path: str, project) -> str | None:
    text = project.raw_text(path)
    if text is None or not any(w in text for w in EVIDENCE_WORDS):
        return None
    other = project.model_at(path)
    return module_evidence(other) if other is not None else None


def _own_imports(model, project) -> list[str]:
    from amplint.prefilter import code_text, package_of
    from amplint.project.text_imports import imported_files

    code = code_text(model.text)
    return [os.path.abspath(p) for p in imported_files(code, Path(model.path), package_of(model.path))]


def _beside_namespace_package(model, project) -> list[str]:
    """Scripts next to a folder that Python imports as a namespace package.

    `util/misc.py` in a folder with no `__init__.py` and no project marker is imported
    as `util.misc` by `main.py` beside `util/`; the project boundary stops at `util/`, so
    those scripts are not among its importers.  Only the parent's own `.py` files are
    read (not its subfolders): the scripts that run the code."""
    from amplint.project import layout

    folder = Path(os.path.abspath(model.path)).parent
    if (folder / "__init__.py").is_file() or layout.project_root(folder) is not None:
        return []
    here = os.path.abspath(model.path)
    out = []
    try:
        names = sorted(os.listdir(folder.parent))
    except OSError:
        return []
    for name in names:
        path = os.path.join(folder.parent, name)
        if name.endswith(".py") and os.path.isfile(path) and here in project.imported_files(path):
            out.append(path)
    return out


def class_constructed_in_program(model, cls) -> bool:
    """The class is instantiated in its own module or in a project module importing it
    (directly: an instance built elsewhere still comes through an import of it)."""
    from amplint.analysis.callees import ForeignClass, resolve_class

    for site in model.calls:
        if resolve_class(site.node.func, model) is cls:
            return True
    project = model.project
    if project is None:
        return False
    here = os.path.abspath(model.path)
    word = cls.name.lower()
    candidates = project.importers_among(model.path, lambda text: word in text) + [
        p for p in _beside_namespace_package(model, project) if word in (project.raw_text(p) or "")
    ]
    for path in candidates:
        other = project.model_at(path)
        if other is None:
            continue
        for site in other.calls:
            found = resolve_class(site.node.func, other)
            if isinstance(found, ForeignClass) and os.path.abspath(found.symbol.path) == here and found.symbol.name == cls.name:
                return True
    return False
