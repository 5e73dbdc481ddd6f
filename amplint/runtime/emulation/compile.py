"""`torch.compile` under CPU emulation runs the model eagerly, and the report says so.

Compiling a CUDA script here would either fail (Inductor believes the emulated CUDA device and
asks for CUDA kernels: "Torch not compiled with CUDA enabled") or compile C++ for the CPU for
minutes, and neither answers a question about the GPU run.  Eager execution runs the same
operations under the same autocast regions, so the probes still see what they check.
NB: what compilation itself changes (fused kernels, a compiled backward's autocast state) is not
emulated; `log["compile"]` counts the calls so the report can say it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from amplint.runtime.patching import Patch


def install(log: dict[str, Any]) -> Iterator[Any]:
    def note() -> None:
        log["compile_ran_eagerly"] = log.get("compile_ran_eagerly", 0) + 1

    def compile(model: Callable | None = None, *args: Any, **kwargs: Any) -> Any:
        note()
        if model is None:  # @torch.compile(mode=...)
            return lambda fn: fn
        return model

    def module_compile(self: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        note()

    yield Patch(torch, "compile", compile)
    yield Patch(torch.nn.Module, "compile", module_compile)
