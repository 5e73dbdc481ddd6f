"""Run a training script in a chosen precision without touching its code (used by `amplint compare`).

`install` makes the run an fp32 reference: every autocast region is disabled, every GradScaler is
built disabled (`scale()` returns the loss unchanged, `step()` steps, `unscale_()` does nothing), and
explicit reduced-precision casts are kept in fp32. `install_bf16` makes the bf16 variant of the run:
autocast regions keep their `enabled` flag but compute in bfloat16, GradScalers are disabled (bf16 has
the fp32 exponent range and needs no loss scaling; Lightning and Accelerate refuse a scaler with
bf16), and explicit fp16 casts become bf16.

Why the casts too: a `.half()` model (the classic "fp16 without master weights" bug) would otherwise
stay fp16 in the fp32 run, and there would be nothing to compare against. So in the reference run
`Module.half()`, `Module.bfloat16()`, `Module.to(torch.float16)` keep the module in fp32, and
`Tensor.half()`, `Tensor.bfloat16()`, `Tensor.to(torch.float16)` give fp32 tensors, so the inputs a
script casts to match its `.half()` model still match. A cast that would have copied still copies,
so in-place writes into the result never reach the source tensor.

Limits (NB, said plainly): tensors created directly in a reduced dtype (`torch.zeros(..., dtype=
torch.float16)`, loading fp16 checkpoints), `Tensor.type("torch.HalfTensor")`, `Module.type()`,
`torch.set_default_dtype` and `torch.set_autocast_enabled()` are not rewritten. Patches are applied at
interpreter start by the verify bootstrap (extension `amplint.runtime.fp32_mode:install`), before the
script imports anything, and every patch is removed by the handles this returns.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Iterable

import torch

_MISSING = object()


class Patch:
    """One attribute replaced on one object; `remove()` puts the original back (idempotent)."""

    def __init__(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        self.owner, self.name = owner, name
        # NB: torch.Tensor inherits most methods from the C base class; restoring must delete
        # the override rather than write the inherited descriptor into torch.Tensor's own dict.
        self._own = owner.__dict__.get(name, _MISSING)
        self.original = getattr(owner, name)
        setattr(owner, name, make(self.original))

    def remove(self) -> None:
        if self.owner is None:
            return
        if self._own is _MISSING:
            try:
                delattr(self.owner, self.name)
            except AttributeError:
                pass
        else:
            setattr(self.owner, self.name, self._own)
        self.owner = None


class Handles:
    """The handles an installer returns, as one handle: `remove()` undoes them, last first.

    NB: not a list subclass: the bootstrap treats anything with a `remove` attribute as a single
    handle, and `list.remove(x)` would be called without its argument.
    """

    def __init__(self) -> None:
        self._items: list[Any] = []

    def append(self, handle: Any) -> None:
        self._items.append(handle)

    def extend(self, handles: "Handles | Iterable[Any]") -> None:
        self._items.extend(handles._items if isinstance(handles, Handles) else handles)
        if isinstance(handles, Handles):
            handles._items = []

    def __len__(self) -> int:
        return len(self._items)

    def remove(self) -> None:
        while self._items:
            self._items.pop().remove()

    close = remove


def _rebind(original: Callable, change: Callable[[inspect.BoundArguments], None]) -> Callable:
    """Wrap `original` so that `change` can rewrite its bound arguments before the call."""
    sig = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # let torch raise its own error message
        bound.apply_defaults()
        change(bound)
        return original(*bound.args, **bound.kwargs)

    return wrapper


class _Precision:
    """The casts and AMP settings of one run variant: fp32 reference or bf16."""

    def __init__(self, target: torch.dtype, reduced: Iterable[torch.dtype], autocast: str) -> None:
        self.target = target
        self.reduced = frozenset(reduced)
        self.autocast = autocast  # "off" (fp32) or "bf16"

    # -- autocast and GradScaler ------------------------------------------------------------
    def autocast_args(self, bound: inspect.BoundArguments) -> None:
        if self.autocast == "off":
            bound.arguments["enabled"] = False
        else:
            bound.arguments["dtype"] = torch.bfloat16

    @staticmethod
    def scaler_args(bound: inspect.BoundArguments) -> None:
        bound.arguments["enabled"] = False

    # -- explicit casts ---------------------------------------------------------------------
    def map_to_args(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, torch.dtype | None]:
        """Rewrite `.to(...)` arguments; returns them and the reduced dtype asked for, if any."""
        asked = None
        new_args = []
        for i, arg in enumerate(args):
            if isinstance(arg, torch.dtype) and arg in self.reduced:
                asked, arg = arg, self.target
            elif i == 0 and isinstance(arg, torch.Tensor) and arg.dtype in self.reduced:
                # `.to(other)` means other's device and dtype
                asked = arg.dtype
                new_args.extend([arg.device, self.target])
                continue
            new_args.append(arg)
        if kwargs.get("dtype") in self.reduced:
            asked = kwargs["dtype"]
            kwargs = {**kwargs, "dtype": self.target}
        return tuple(new_args), kwargs, asked

    def tensor_to(self, original: Callable) -> Callable:
        precision = self

        @functools.wraps(original)
        def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            new_args, new_kwargs, asked = precision.map_to_args(args, kwargs)
            if asked is not None and self.dtype != asked and "copy" not in new_kwargs:
                # the unpatched call would have returned a new tensor: keep it that way
                new_kwargs = {**new_kwargs, "copy": True}
            return original(self, *new_args, **new_kwargs)

        return to

    def tensor_cast(self, dtype: torch.dtype) -> Callable[[Callable], Callable]:
        """`Tensor.half()` / `Tensor.bfloat16()` when `dtype` is reduced in this variant."""
        precision = self

        def make(original: Callable) -> Callable:
            if dtype not in precision.reduced:
                return original

            @functools.wraps(original)
            def cast(self: torch.Tensor, memory_format: torch.memory_format = torch.preserve_format) -> Any:
                return torch._C.TensorBase.to(
                    self, precision.target, memory_format=memory_format, copy=self.dtype != dtype
                )

            return cast

        return make

    def module_to(self, original: Callable) -> Callable:
        precision = self

        @functools.wraps(original)
        def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            new_args, new_kwargs, _ = precision.map_to_args(args, kwargs)
            return original(self, *new_args, **new_kwargs)

        return to

    def module_cast(self, dtype: torch.dtype) -> Callable[[Callable], Callable]:
        precision = self

        def make(original: Callable) -> Callable:
            if dtype not in precision.reduced:
                return original

            @functools.wraps(original)
            def cast(self: torch.nn.Module) -> torch.nn.Module:
                return self._apply(lambda t: t.to(precision.target) if t.is_floating_point() else t)

            return cast

        return make

    def install(self) -> Handles:
        handles = Handles()
        try:
            handles.append(Patch(torch.amp.autocast_mode.autocast, "__init__",
                                 lambda f: _rebind(f, self.autocast_args)))
            handles.append(Patch(torch.amp.GradScaler, "__init__", lambda f: _rebind(f, self.scaler_args)))
            handles.append(Patch(torch.Tensor, "to", self.tensor_to))
            handles.append(Patch(torch.Tensor, "half", self.tensor_cast(torch.float16)))
            handles.append(Patch(torch.Tensor, "bfloat16", self.tensor_cast(torch.bfloat16)))
            handles.append(Patch(torch.nn.Module, "to", self.module_to))
            handles.append(Patch(torch.nn.Module, "half", self.module_cast(torch.float16)))
            handles.append(Patch(torch.nn.Module, "bfloat16", self.module_cast(torch.bfloat16)))
        except BaseException:
            handles.close()
            raise
        return handles


FP32 = _Precision(torch.float32, (torch.float16, torch.bfloat16), autocast="off")
BF16 = _Precision(torch.bfloat16, (torch.float16,), autocast="bf16")


def install(sink: Any = None) -> Handles:
    """Extension entry point: make this process an fp32 reference run (see module docstring)."""
    return FP32.install()


def install_bf16(sink: Any = None) -> Handles:
    """Extension entry point: run autocast in bf16 without loss scaling, fp16 casts become bf16."""
    return BF16.install()
