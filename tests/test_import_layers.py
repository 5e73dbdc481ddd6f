"""The package is a house without circles: no module imports itself back, and the lower
floors never reach up.

Read from the source with `ast`, so nothing is imported: every `import` and `from ...
import` of a module counts, at module level and inside functions (an import in a function
is deferred, not absent: it still ties the two modules together), relative imports
resolved from the importing module's package.  `from pkg import name` is an import of
`pkg.name` when that is a module of the package, else of `pkg`.  An import names the
module it names (the parent packages Python also runs are not counted).

Two rules:

1. No cycle among amplint's modules (amplint/runtime included).  A shared concept has one
   home below every module that uses it; a module that needs something from a higher one
   is handed it (a callable, a value), it does not import it.
2. The project index (amplint/project/) and the analysis (amplint/analysis/) are below the
   engine layer: they never import `amplint.engine`, `amplint.registry`, `amplint.config`,
   `amplint.rules` or any rule, `amplint.unused_noqa` (a rule's companion), nor the
   front ends above them (`amplint.runner`, `amplint.cli`, the package's own `__init__`,
   whose `check_source` / `check_paths` import the engine and the runner).  Rules depend on
   the analysis, never the reverse.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "amplint"

LOWER_FLOORS = ("amplint.project", "amplint.analysis")
ENGINE_LAYER = ("amplint.engine", "amplint.registry", "amplint.config", "amplint.rules", "amplint.unused_noqa",
                "amplint.runner", "amplint.cli")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {imported module of the package: the line of the first such import}."""
    edges: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    out.setdefault(target, node.lineno)
        edges[name] = out
    return edges


def _strongly_connected(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def _a_cycle(component: list[str], edges: dict[str, dict[str, int]], modules: dict[str, Path]) -> str:
    """One shortest cycle through the component's first module, each import with its line."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in edges[v]:
            if w not in members or w in came_from:
                continue
            came_from[w] = v
            if w == start:
                queue.clear()
                break
            queue.append(w)
    path, v = [start], start
    while True:
        v = came_from[v]
        path.append(v)
        if v == start:
            break
    path.reverse()
    return "\n".join(f"  {a} imports {b} ({modules[a].relative_to(PACKAGE.parent)}:{edges[a][b]})"
                     for a, b in zip(path, path[1:]))


def _engine_layer(module: str) -> bool:
    return module == "amplint" or any(module == top or module.startswith(top + ".") for top in ENGINE_LAYER)


def test_no_module_imports_itself_back() -> None:
    modules = _modules()
    edges = _imports(modules)
    components = _strongly_connected(edges)
    report = "\n\n".join(f"{len(c)} modules in a cycle: {', '.join(c)}\n{_a_cycle(c, edges, modules)}"
                         for c in components)
    assert not components, "import cycles (module and function-level imports):\n" + report


def test_project_index_and_analysis_never_import_the_engine_layer() -> None:
    modules = _modules()
    edges = _imports(modules)
    upward = [f"{modules[m].relative_to(PACKAGE.parent)}:{line} imports {target}"
              for m in modules if m.startswith(tuple(f + "." for f in LOWER_FLOORS)) or m in LOWER_FLOORS
              for target, line in edges[m].items() if _engine_layer(target)]
    assert not upward, "the project index and the analysis import the engine layer:\n" + "\n".join(upward)


def test_the_reader_sees_function_level_and_relative_imports() -> None:
    """The checks above are only as good as the reading: it finds a deferred import and
    resolves a relative one (the package has both)."""
    modules = _modules()
    edges = _imports(modules)
    assert "amplint.engine" in edges["amplint"]  # `check_source` imports the engine in its body
    assert len(modules) > 100 and sum(map(len, edges.values())) > len(modules)
