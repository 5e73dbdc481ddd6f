"""What a custom autograd Function computes: does the autocast state matter to it?

AMP205 is about `torch.autograd.Function` subclasses run under autocast without
`custom_fwd` / `custom_bwd`: their forward sees autocast (each op cast on its own) and
their backward does not.  That matters for the ops whose dtype autocast decides: those
of its float16 and float32 lists (`@`, `torch.matmul`, `F.linear`, convolutions,
softmax, exp and log, norms, losses: `AUTOCAST_SENSITIVE_OPS`), as functions or tensor
methods, and for a function the Function was handed and runs again (`ctx.run_function`
recomputing a checkpointed forward in backward).  The forward then computes in the
dtypes autocast chose and the backward in whatever the saved tensors and gradients
hold: mismatched matmuls raise, or the backward quietly runs another precision.

A Function that only moves, gathers, permutes or communicates tensors, or calls a
dtype-generic kernel, computes the same under any autocast state.

A Function that asks for the autocast state itself (`torch.is_autocast_enabled(...)`,
`torch.get_autocast_dtype(...)`, directly or through a helper of its module) and
computes in the dtype it learns handles autocast by hand: what `custom_fwd` records for
backward, the Function records in `ctx` (`reads_autocast_state`).
"""

from __future__ import annotations

import re

import libcst as cst

from amplint.analysis.torch_api import AUTOCAST_SENSITIVE_OPS
from amplint.analysis.walk import walk


def autocast_sensitive(fn: cst.FunctionDef, model, rerun: frozenset[str] = frozenset()) -> bool:
    """`rerun`: the callables the forward was handed and called; the backward calling one
    of them again through `ctx` recomputes the forward (activation checkpointing)."""
    finder = _SensitiveFinder(model, _ctx_name(fn), rerun)
    walk(fn.body, finder)
    return finder.found


def called_parameters(fn: cst.FunctionDef) -> frozenset[str]:
    """The parameters of `fn` that it calls: `run_function(*args)` in a checkpoint forward."""
    names = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)}
    finder = _CalledNames(names)
    walk(fn.body, finder)
    return frozenset(finder.found)


class _CalledNames(cst.CSTVisitor):
    def __init__(self, names: set[str]) -> None:
        self.names, self.found = names, set()

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value in self.names:
            self.found.add(node.func.value)


def _ctx_name(fn: cst.FunctionDef) -> str | None:
    params = fn.params.params
    return params[0].name.value if params else None


class _SensitiveFinder(cst.CSTVisitor):
    def __init__(self, model, ctx: str | None, rerun: frozenset[str]) -> None:
        self.model = model
        self.ctx = ctx
        self.rerun = rerun
        self.found = False

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply):
            self.found = True

    def visit_Call(self, node: cst.Call) -> None:
        if self.found:
            return
        func = node.func
        qual = self.model.qualify(func)
        if qual is not None:
            if qual.split(".")[0] == "torch":
                self.found = qual.rsplit(".", 1)[-1] in AUTOCAST_SENSITIVE_OPS
            return
        if isinstance(func, cst.Attribute):
            if func.attr.value in AUTOCAST_SENSITIVE_OPS:
                self.found = True  # `x.matmul(w)`, `grad.mm(weight)`, `scores.softmax(-1)`
            elif isinstance(func.value, cst.Name) and func.value.value == self.ctx and func.attr.value in self.rerun:
                self.found = True  # `ctx.run_function(...)`: the forward handed over, run again


def upcasts_inputs(forward: cst.FunctionDef, model) -> bool:
    """The forward turns one of its tensor arguments into float32 itself (`x.float()`,
    `x.to(torch.float32)`): what `custom_fwd(cast_inputs=torch.float32)` would do."""
    names = {p.name.value for p in forward.params.params[1:]}
    finder = _UpcastFinder(model, names)
    walk(forward.body, finder)
    return finder.found


class _UpcastFinder(cst.CSTVisitor):
    def __init__(self, model, names: set[str]) -> None:
        self.model, self.names, self.found = model, names, False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in self.names):
            return
        if func.attr.value == "float" and not node.args:
            self.found = True
        elif func.attr.value in ("to", "type") and node.args:
            target = node.args[0].value if node.args[0].keyword is None else None
            for a in node.args:
                if a.keyword is not None and a.keyword.value == "dtype":
                    target = a.value
            if target is not None and self.model.qualify(target) in ("torch.float32", "torch.float"):
                self.found = True


# `torch.is_autocast_enabled`, `torch.is_autocast_cpu_enabled`, `torch.get_autocast_dtype`,
# `torch.get_autocast_gpu_dtype`, ...: the readers of the autocast state, old and new.
_AUTOCAST_STATE_READER = re.compile(r"torch\.(is_autocast_\w*enabled|get_autocast_\w*dtype)")
# How deep helpers of the same module are followed (`_compute_dtype(hidden)` in forward).
_MAX_HELPER_DEPTH = 2


def reads_autocast_state(fn: cst.FunctionDef, model, depth: int = 0) -> bool:
    """`fn` (or a function of its module that it calls) asks torch for the autocast state:
    `torch.get_autocast_dtype(d) if torch.is_autocast_enabled(d) else x.dtype`."""
    finder = _StateReaderFinder(model)
    walk(fn.body, finder)
    if finder.found:
        return True
    if depth >= _MAX_HELPER_DEPTH:
        return False
    return any(
        reads_autocast_state(model.functions[name], model, depth + 1)
        for name in finder.helpers
        if model.functions.get(name) is not None and model.functions[name] is not fn
    )


class _StateReaderFinder(cst.CSTVisitor):
    def __init__(self, model) -> None:
        self.model, self.found, self.helpers = model, False, set()

    def visit_Call(self, node: cst.Call) -> None:
        qual = self.model.qualify(node.func)
        if qual is not None and _AUTOCAST_STATE_READER.fullmatch(qual):
            self.found = True
        elif isinstance(node.func, cst.Name) and node.func.value in self.model.functions:
            self.helpers.add(node.func.value)
