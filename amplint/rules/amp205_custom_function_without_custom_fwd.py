"""AMP205 custom-function-without-custom-fwd."""

from __future__ import annotations

import re

import libcst as cst

from amplint.analysis.walk import walk
from amplint.analysis.bindings import autocast_entered_in
from amplint.analysis.function_dtypes import computes_in_gradient_dtype, is_float32_cast, upcasts_by_hand
from amplint.analysis.function_body import (
    autocast_sensitive,
    runs_autocast_ops,
    decorated_with,
    handed_functions,
    may_be_applied,
    recomputes_forward,
    reads_autocast_state,
    upcasts_inputs,
)
from amplint.analysis.precision import active_region, autocast_from_importers, precision_of, runs_autocast
from amplint.analysis.scaler_protocol import SCALER_USE_TOKENS
from amplint.analysis.torch_api import AUTOCAST_SENSITIVE_OPS
from amplint.prefilter import CodeWord, Word, code_text
from amplint.rules._base import Rule

_FUNCTION_BASES = ("torch.autograd.Function", "torch.autograd.function.Function")


_MATMUL_OPERATOR = re.compile(r"[\w)\]][ \t]*@=?[ \t]*[\w(]")
_CTX_CALL = re.compile(r"ctx\.(?!save_for_backward|mark_|set_materialize)\w+[ \t]*\(")
# A class with `Function` among its bases (`torch.autograd.Function`, or imported): the
# word inside a class statement's parentheses, not any `function` of the code.
_FUNCTION_CLASS = re.compile(r"class[\s\\]+\w+[\s\\]*\((?:[^()]|\([^()]*\))*\bfunction\b")
# What autocast decides the dtype of (analysis/function_body.py): an op of its lists, a
# matmul operator (`x @ w`, not a decorator), a function run again through ctx.
# A compiled kernel: an extension module's function (`_C.deform_conv_forward(`) or an operator
# the project registered (`torch.ops.detectron2.`); see function_body.compiled_kernel.
_KERNEL_CALL = re.compile(r"(?:\b_C|\w_(?:C|ext|cuda|cpp|backend|kernels?)|\b_ext|\b_backend|\b_cuda)\.\w+[ \t]*\(|\btorch\.ops\.(?!aten\b|prims\b)\w", re.I)
# An extension module imported under another name: its alias, whose calls are kernel calls.
_KERNEL_ALIAS = re.compile(
    r"\b(?:_C|_ext|_backend|_cuda|\w+_(?:C|ext|cuda|cpp|backend|kernels?))[ \t]+as[ \t]+(\w+)", re.I)
_SENSITIVE = (*(Word(op) for op in sorted(AUTOCAST_SENSITIVE_OPS)), _MATMUL_OPERATOR, _CTX_CALL, _KERNEL_CALL)
# An op imported under another name (`from torch import bmm as batched`): the class may
# then call it by a name no token knows.
_ALIASED_OP = re.compile(r"\b(?:" + "|".join(sorted(AUTOCAST_SENSITIVE_OPS, key=len, reverse=True)) + r")[\s\\]+as[\s\\]")


class _SensitiveInFunctionClass:
    """Something autocast decides the dtype of, inside the body of a Function subclass.

    The rule asks it of the Function's forward and backward only; anywhere in the module
    passed every model file of transformers that has a dropout Function beside its
    attention's matmul (12 of 15 files parsed for AMP205, none reported).  The body is
    read from the code text (strings emptied, comments gone), so indentation ends it;
    a line inside brackets or after a backslash does not.
    """

    def search(self, text: str) -> bool:
        if _ALIASED_OP.search(text):
            return True
        code = code_text(text, strings=False)
        bodies = [_class_body(code, m.start()) for m in _FUNCTION_CLASS.finditer(code)]
        if any(t.search(body) for body in bodies for t in _SENSITIVE):
            return True
        # `from . import pointnet2_batch_cuda as pointnet2`, then `pointnet2.gather_points(...)`
        aliases = _KERNEL_ALIAS.findall(code)
        if not aliases:
            return False
        called = re.compile(r"\b(?:" + "|".join(re.escape(a) for a in aliases) + r")\.\w+[ \t]*\(")
        return any(called.search(body) for body in bodies)

    def __repr__(self) -> str:
        return "_SensitiveInFunctionClass()"


def _class_body(code: str, at: int) -> str:
    """The text of the class statement at `at`, header and indented body."""
    line_start = code.rfind("\n", 0, at) + 1
    header = code[line_start:at]
    indent = _width(header[: len(header) - len(header.lstrip())])
    depth = 0
    continued = False
    pos = line_start
    first = True
    while pos < len(code):
        end = code.find("\n", pos)
        end = len(code) if end == -1 else end
        line = code[pos:end]
        stripped = line.strip()
        if not first and depth <= 0 and not continued and stripped and _width(line[: len(line) - len(line.lstrip())]) <= indent:
            return code[line_start:pos]
        first = False
        depth += sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")
        continued = line.rstrip().endswith("\\")
        pos = end + 1
    return code[line_start:]


def _width(blanks: str) -> int:
    return len(blanks.replace("\f", "").expandtabs(8))


class CustomFunctionWithoutCustomFwd(Rule):
    """
    ## What it does
    Flags a `torch.autograd.Function` subclass whose `forward` lacks
    `@torch.amp.custom_fwd` or whose `backward` lacks `@torch.amp.custom_bwd`, when it
    runs under autocast: its module enters an autocast context that may be enabled (or
    builds an enabled GradScaler), or a module of the project that imports it, directly
    or through others, does (the Function of `layers.py`, applied in `model.py`'s
    forward, inside `engine.py`'s autocast).

    Only Functions whose forward or backward computes something autocast decides the
    dtype of: an op of autocast's float16 or float32 lists (`@`, `matmul`, `linear`,
    convolutions, softmax, norms, losses), a compiled kernel (a function of a C++/CUDA
    extension module such as `_C` or `*_cuda`, also under an import alias, `import
    pointnet2_cuda as pointnet2`, an operator the project registered under
    `torch.ops`; not a Triton launch, whose kernels convert per element), or a function
    handed over (`ctx.run_function`). One
    that only moves, gathers or communicates tensors computes the same in any autocast
    state, and so does an op whose every tensor is complex, an FFT's result
    (`torch.einsum(eq, ifft(x), fft(w))`: autocast casts floating-point tensors only). Not
    reported either: a `forward` that switches autocast off itself
    (`with torch.autocast(..., enabled=False)`) or turns its inputs into float32
    (`x.float()`); a `forward` that asks torch for the autocast state
    (`torch.get_autocast_dtype(d) if torch.is_autocast_enabled(d) else x.dtype`, also
    through a helper of its module) and computes in that dtype; a Function whose every
    `Cls.apply(...)` in its module sits inside `autocast(enabled=False)`, or receives an
    input its caller made float32 first (`x = x.float()`; also through a module-level
    alias, `roi_align = _ROIAlign.apply`); one without any
    backward (a namespace of inference kernels) or whose backward gives no input a
    gradient (`return None, None`: an index or sampling kernel); a `backward` that re-enters the
    autocast state the forward recorded (a hand-written `custom_bwd`); a `backward` whose
    every matmul meets its operands in the gradient's dtype (`w.to(grad.dtype)`: the
    dtype autocast gave the forward's output); and a Function with no op autocast casts
    down (no matmul, linear or convolution in either pass) whose backward upcasts its
    tensors itself (`logits[rows].float()`) or runs no op of autocast's float32 list
    (`custom_bwd` would change none of its ops). An autocast that only asks for float32
    (`autocast(dtype=torch.float32)`, which torch disables) is no autocast here, nor is a
    project's own helper that enters autocast disabled. A Function that nothing names
    (no `Cls.apply`, alias, subclass or registry in its module, nor in another file of
    the project) never runs under the project's autocast and is not reported, unless
    the autocast is a library engine's that runs the code its users plug in (the
    Functions of a library are applied by its users, though not one its module keeps
    private: a `_Name`, or one left out of a literal `__all__`); nor one applied only
    in a module-level wrapper function that nothing calls. The decorators count however
    they are spelled: an import alias, or a name bound to `custom_fwd(...)` or to a
    `functools.partial` of it. A hand-written activation checkpoint, whose backward runs
    again the function the forward was handed (`ctx.run_function(...)`) without
    re-entering the autocast state the forward ran in, is reported with that reason:
    the recompute runs in other dtypes than the forward did (torch.utils.checkpoint
    saves and restores that state). The diagnostic points at the `class` line.

    ## Why is this bad?
    Autocast does not know a custom Function's forward: its inputs arrive in whatever
    dtype the surrounding autocast produced (often float16), and ops inside are cast
    op by op. The backward runs outside autocast, so it computes in different dtypes
    than the forward did; custom CUDA kernels that expect float32 receive float16 or
    mixed inputs. `custom_fwd(device_type=..., cast_inputs=torch.float32)` runs the
    forward in float32 (or records the autocast state), and `custom_bwd` replays that
    state in backward.

    ## Example
    ```python
    class ScaledSoftmax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.softmax(x, dim=-1)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return y * (grad - (grad * y).sum(dim=-1, keepdim=True))

    with torch.autocast("cuda", dtype=torch.float16):
        y = ScaledSoftmax.apply(x)
    ```

    Use instead:
    ```python
    class ScaledSoftmax(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
        def forward(ctx, x):
            y = torch.softmax(x, dim=-1)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return y * (grad - (grad * y).sum(dim=-1, keepdim=True))

    with torch.autocast("cuda", dtype=torch.float16):
        y = ScaledSoftmax.apply(x)
    ```

    ## Runtime confirmation
    `amplint verify` records a Function's forward running while autocast is enabled.
    """

    code = "AMP205"
    name = "custom-function-without-custom-fwd"
    message = "autograd.Function `{cls}` runs under autocast without `{missing}`{why}"
    requires_any = (_FUNCTION_CLASS,)
    # NB: the module must enter autocast (a word, as in AMP201) or build or use a
    # GradScaler (`enabled_scaler`: a scaler handed in is found by its use alone).
    and_requires_any = (
        (CodeWord("autocast"), "GradScaler", *SCALER_USE_TOKENS),
        # and, in a Function's body, something autocast decides the dtype of
        (_SensitiveInFunctionClass(),),
    )
    importer_tokens = (1,)  # the autocast may be entered by a module that uses this one
    # ... which `autocast_from_importers` finds by its text naming autocast or a GradScaler
    # (a scaler's use alone, `scale` and `backward`, is in nearly every module of a library)
    elsewhere_tokens = {1: (and_requires_any[0][0], and_requires_any[0][1])}

    def check(self) -> None:
        model = self.model
        undecorated = []
        for cls in model.classes.values():
            if not any(model.imports.qualify_text(b) in _FUNCTION_BASES for b in cls.bases):
                continue
            forward = cls.methods.get("forward")
            if forward is None or self._disables_autocast(forward):
                continue
            backward = cls.methods.get("backward")
            if backward is not None and (_only_raises(backward) or _returns_no_gradient(backward)):
                # An inference-only Function, or one whose outputs carry no gradient (an index
                # or sampling kernel: `return None, None`): no backward to run in another precision.
                continue
            if backward is None and all(model.imports.qualify_text(b) in _FUNCTION_BASES for b in cls.bases):
                continue  # no backward at all (none inherited): forward-only, cast op by op like inline code
            if reads_autocast_state(forward, model):
                continue  # asks torch for the autocast state and computes in that dtype: custom_fwd by hand
            if self._applied_only_without_autocast(cls.name):
                continue  # every apply of its module runs inside `autocast(enabled=False)`
            if backward is not None and autocast_entered_in(backward, model):
                continue  # custom_bwd by hand: backward re-enters the autocast state forward saw
            rerun = handed_functions(forward)
            if not any(autocast_sensitive(fn, model, rerun) for fn in (forward, backward) if fn is not None):
                continue  # communication, indexing, copies: the autocast state changes nothing
            if upcasts_inputs(forward, model):
                continue  # it computes in float32 by itself, as custom_fwd(cast_inputs=float32) would
            if not runs_autocast_ops(forward, model) and self._applied_only_to_upcast_inputs(cls.name):
                continue  # its callers hand it float32 (`input = input.float()` before the apply)
            # By hand, in place of both decorators (a custom_bwd without custom_fwd raises in
            # backward: it reads the autocast state custom_fwd records on ctx).
            by_hand = backward is not None and not decorated_with(backward, model, "custom_bwd")
            if by_hand and computes_in_gradient_dtype(backward, model):
                continue  # the backward's matmuls meet in the gradient's dtype, the forward's
            if by_hand and upcasts_by_hand(forward, backward, model):
                continue  # no op autocast casts down, and autocast would change no op of the backward
            missing = []
            if not decorated_with(forward, model, "custom_fwd"):
                missing.append("custom_fwd")
            if backward is not None and not decorated_with(backward, model, "custom_bwd"):
                missing.append("custom_bwd")
            if missing:
                undecorated.append((cls, missing, recomputes_forward(forward, backward)))
        if not undecorated:
            return
        notes: tuple[str, ...] = ()
        # NB: a Function nothing in the project names never runs under the project's own
        # autocast; but a library's engine running the code its users plug in (the
        # `imports_it` False case below) runs the Functions those users apply.
        plugged_in = False
        if not runs_autocast(model):
            # The module may be applied under autocast entered elsewhere in the project
            # (a model's forward, inside the training loop's autocast of engine.py).
            found = autocast_from_importers(model)
            if found is None:
                return
            origin, imports_it = found
            plugged_in = not imports_it
            where = _relative(origin, model.path)
            notes = (f"runs under the autocast of {where}, which imports this module",) if imports_it else (
                f"the project runs autocast ({where}), and the code it trains may apply this Function",)
        for cls, missing, rerun in undecorated:
            if not may_be_applied(cls, model) and (not plugged_in or _private(cls.name, model)):
                # Nothing names it: never applied by the project; and a library's users
                # cannot import what its module keeps private (`_Name`, left out of `__all__`).
                continue
            why = (f": its backward runs the forward again (`{rerun}`) without the autocast state the forward ran in"
                   if rerun else "")
            self.report(cls.node, cls=cls.name, missing="` / `".join(missing), why=why, notes=notes)

    def _applied_only_without_autocast(self, name: str) -> bool:
        """`Cls.apply` is used in this module, always called, and every call sits inside an
        autocast-disabled `with` (`with torch.autocast(dev, enabled=False): Cls.apply(...)`)."""
        finder = _ApplyFinder(name)
        walk(self.model.module, finder)
        if not finder.calls or finder.other_uses:
            return False
        precision = precision_of(self.model)
        for call in finder.calls:
            regions = precision.regions_of(call)
            if not any(r.info.enabled is False for r in regions) or active_region(regions) is not None:
                return False
        return True

    def _applied_only_to_upcast_inputs(self, name: str) -> bool:
        """Every call of `Cls.apply` in this module (also through a module-level alias,
        `roi_align = _ROIAlign.apply`) passes as its first argument a name its function
        made float32 before (`input = input.float()`): custom_fwd(cast_inputs=float32)
        written at the caller (detectron2's ROIAlignRotated)."""
        finder = _ApplyFinder(name)
        walk(self.model.module, finder)
        calls = list(finder.calls)
        aliases = [target for target, values in self.model.module_scope.assignments.items()
                   if any(finder._is_apply(v) for v in values)]
        if finder.other_uses != len(aliases):
            return False  # handed over somewhere: where it runs is not known
        calls += [site.node for site in self.model.calls
                  if isinstance(site.node.func, cst.Name) and site.node.func.value in aliases]
        if not calls:
            return False
        values = self.model.bindings.values
        scope_of = {id(site.node): site.scope for site in self.model.calls}
        for call in calls:
            first = call.args[0].value if call.args and call.args[0].keyword is None and not call.args[0].star else None
            site_scope = scope_of.get(id(call))
            if isinstance(first, cst.Call) and is_float32_cast(first, self.model):
                continue  # `Cls.apply(x.float(), ...)`: cast right there
            if not isinstance(first, cst.Name) or site_scope is None:
                return False
            if not any(isinstance(v, cst.Call) and is_float32_cast(v, self.model) for v, _ in values.assigned(first, site_scope)):
                return False
        return True

    def _disables_autocast(self, forward: cst.FunctionDef) -> bool:
        scope = self.model.scope_of.get(forward)
        return any(r.scope is scope and r.info.enabled is False for r in precision_of(self.model).regions)


class _ApplyFinder(cst.CSTVisitor):
    """The calls `Cls.apply(...)` of a module, and whether `Cls.apply` is also used otherwise
    (bound to a name, handed over: then where it runs is not known)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[cst.Call] = []
        self.mentions = 0

    def visit_Call(self, node: cst.Call) -> None:
        if self._is_apply(node.func):
            self.calls.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if self._is_apply(node):
            self.mentions += 1

    def _is_apply(self, node: cst.BaseExpression) -> bool:
        return (isinstance(node, cst.Attribute) and node.attr.value == "apply" and isinstance(node.value, cst.Name)
                and node.value.value == self.name)

    @property
    def other_uses(self) -> int:
        return self.mentions - len(self.calls)  # each call's func is a mention too


def _relative(path: str, beside: str) -> str:
    import os

    try:
        return os.path.relpath(path, os.path.dirname(os.path.abspath(beside)))
    except ValueError:
        return path


def _only_raises(fn: cst.FunctionDef) -> bool:
    """The body (docstring aside) is one `raise`: `backward` of an inference-only Function."""
    body = [st for st in fn.body.body if not (isinstance(st, cst.SimpleStatementLine) and all(
        isinstance(x, cst.Expr) and isinstance(x.value, (cst.SimpleString, cst.ConcatenatedString)) for x in st.body))]
    return len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Raise)


def _returns_no_gradient(fn: cst.FunctionDef) -> bool:
    """Every `return` of the backward (its own, not a nested function's) gives None for
    every input: `return None, None, None` of a ball query or a farthest-point sampler."""
    finder = _Returns()
    for stmt in fn.body.body:
        walk(stmt, finder)
    if not finder.values:
        return False
    return all(_all_none(v) for v in finder.values)


def _all_none(value: cst.BaseExpression | None) -> bool:
    if value is None:
        return True
    if isinstance(value, cst.Name):
        return value.value == "None"
    if isinstance(value, cst.Tuple):
        return bool(value.elements) and all(
            not isinstance(e, cst.StarredElement) and _all_none(e.value) for e in value.elements)
    return False


class _Returns(cst.CSTVisitor):
    def __init__(self) -> None:
        self.values: list[cst.BaseExpression | None] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Return(self, node: cst.Return) -> None:
        self.values.append(node.value)


def _private(name: str, model) -> bool:
    """`name` is not part of its module's interface: it starts with `_`, or the module
    lists what it exports in one literal `__all__` (`may_be_applied` already found the
    name is not among its strings)."""
    if name.startswith("_"):
        return True
    values = model.module_scope.assignments.get("__all__", [])
    return len(values) == 1 and isinstance(values[0], (cst.List, cst.Tuple)) and all(
        isinstance(e.value, cst.SimpleString) for e in values[0].elements)
