"""Qualified names from the module's own import table.

libcst's QualifiedNameProvider resolves every name in the module and costs about ten
times a bare parse on real code (see BENCHMARKS.md).  The rules only need to know what
a handful of dotted expressions refer to, so we read the import statements once and
resolve on demand: `th.cuda.amp.autocast` -> `torch.cuda.amp.autocast` when the module
says `import torch as th`.
"""

from __future__ import annotations

import libcst as cst


def dotted(expr: cst.BaseExpression | None) -> str | None:
    """`self.scaler` for Attribute/Name chains, else None (calls, subscripts, ...)."""
    parts: list[str] = []
    node = expr
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def attr_name(node: cst.BaseExpression) -> str | None:
    """Last component of a Name or Attribute (`clip_grad_norm_` of `nn.utils.clip_grad_norm_`)."""
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Name):
        return node.value
    return None


def module_name_of(import_from: cst.ImportFrom, package: str | None) -> str | None:
    """Absolute module named by a (possibly relative) `from X import ...`."""
    from amplint.project.text_imports import absolute_module

    base = dotted(import_from.module) if import_from.module is not None else None
    return absolute_module(base, len(import_from.relative), package)


class ImportTable:
    """Maps a local name to the qualified name it was imported as.

    Every import in the module counts, whatever its depth: scripts import inside
    `main()` and inside `if args.amp:` as often as at the top.  A name imported twice
    under different meanings (a `try`/`except ImportError` fallback) keeps the torch
    one if there is one, else the first.
    """

    def __init__(self, package: str | None = None) -> None:
        self.package = package
        self._names: dict[str, str] = {}
        # Every meaning a local name was imported with (`try: from torch_npu.npu.amp
        # import GradScaler` / `except ImportError: from torch.amp import GradScaler`).
        self._alternatives: dict[str, list[str]] = {}

    def _bind(self, local: str, full: str) -> None:
        options = self._alternatives.setdefault(local, [])
        if full not in options:
            options.append(full)
        current = self._names.get(local)
        if current is None or (not _is_torch(current) and _is_torch(full)):
            # torch's meaning wins: it is the API amplint knows what to make of; a
            # backend's drop-in (torch_npu, intel_extension_for_pytorch) mirrors it.
            self._names[local] = full

    def add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._bind(alias.asname.name.value, full)
            else:
                head = full.split(".")[0]
                self._bind(head, head)

    def add_import_from(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        module = module_name_of(node, self.package)
        if module is None:
            return
        for alias in node.names:
            name = dotted(alias.name)
            if name is None:
                continue
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self._bind(local, f"{module}.{name}")

    def qualify(self, expr: cst.BaseExpression | None) -> str | None:
        """Qualified name of a dotted expression, or None when its head is not imported."""
        text = dotted(expr)
        if text is None:
            return None
        return self.qualify_text(text)

    def qualify_text(self, text: str) -> str | None:
        head, _, rest = text.partition(".")
        target = self._names.get(head)
        if target is None:
            return None
        return f"{target}.{rest}" if rest else target

    def local_names_for(self, qualified: str) -> list[str]:
        """Local names bound to `qualified` (used by fixes that rewrite imports)."""
        return [local for local, full in self._names.items() if full == qualified]

    def items(self):
        return self._names.items()


def _is_torch(qualified: str) -> bool:
    return qualified == "torch" or qualified.startswith("torch.")
