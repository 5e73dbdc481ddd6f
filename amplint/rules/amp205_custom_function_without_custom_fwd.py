"""AMP205 custom-function-without-custom-fwd."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.bindings import autocast_entered_in
from amplint.analysis.precision import autocast_from_importers, precision_of, runs_autocast
from amplint.analysis.scaler_protocol import SCALER_USE_TOKENS
from amplint.prefilter import CodeWord
from amplint.rules._base import Rule

_FUNCTION_BASES = ("torch.autograd.Function", "torch.autograd.function.Function")


def _decorated_with(fn: cst.FunctionDef, suffix: str) -> bool:
    for d in fn.decorators:
        expr = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        if (dotted(expr) or "").split(".")[-1] == suffix:
            return True
    return False


class CustomFunctionWithoutCustomFwd(Rule):
    """
    ## What it does
    Flags a `torch.autograd.Function` subclass whose `forward` lacks
    `@torch.amp.custom_fwd` or whose `backward` lacks `@torch.amp.custom_bwd`, in a
    module that runs code under autocast (it enters an autocast context that may be
    enabled, or builds an enabled GradScaler). A `forward` that switches autocast off
    itself (`with torch.autocast(..., enabled=False)`) is not reported. The diagnostic
    points at the `class` line.

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
            ...

        @staticmethod
        def backward(ctx, grad):
            ...

    with torch.autocast("cuda", dtype=torch.float16):
        y = ScaledSoftmax.apply(x)
    ```

    Use instead:
    ```python
    class ScaledSoftmax(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
        def forward(ctx, x):
            ...

        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, grad):
            ...

    with torch.autocast("cuda", dtype=torch.float16):
        y = ScaledSoftmax.apply(x)
    ```

    ## Runtime confirmation
    `amplint verify` records a Function's forward running while autocast is enabled.
    """

    code = "AMP205"
    name = "custom-function-without-custom-fwd"
    message = "autograd.Function `{cls}` runs under autocast without `{missing}`"
    requires_any = (CodeWord("function"),)  # a base's last part: `Function`, not `functional`
    # NB: the module must enter autocast (a word, as in AMP201) or build or use a
    # GradScaler (`enabled_scaler`: a scaler handed in is found by its use alone).
    and_requires_any = ((CodeWord("autocast"), "GradScaler", *SCALER_USE_TOKENS),)
    importer_tokens = (1,)  # the autocast may be entered by a module that uses this one

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
            if backward is not None and autocast_entered_in(backward, model):
                continue  # custom_bwd by hand: backward re-enters the autocast state forward saw
            missing = []
            if not _decorated_with(forward, "custom_fwd"):
                missing.append("custom_fwd")
            if backward is not None and not _decorated_with(backward, "custom_bwd"):
                missing.append("custom_bwd")
            if missing:
                undecorated.append((cls, missing))
        if not undecorated:
            return
        notes: tuple[str, ...] = ()
        if not runs_autocast(model):
            # The module may be applied under autocast entered elsewhere in the project
            # (a model's forward, inside the training loop's autocast of engine.py).
            origin = autocast_from_importers(model)
            if origin is None:
                return
            notes = (f"runs under the autocast of {_relative(origin, model.path)}, which imports this module",)
        for cls, missing in undecorated:
            self.report(cls.node, cls=cls.name, missing="` / `".join(missing), notes=notes)

    def _disables_autocast(self, forward: cst.FunctionDef) -> bool:
        scope = self.model.scope_of.get(forward)
        return any(r.scope is scope and r.info.enabled is False for r in precision_of(self.model).regions)


def _relative(path: str, beside: str) -> str:
    import os

    try:
        return os.path.relpath(path, os.path.dirname(os.path.abspath(beside)))
    except ValueError:
        return path
