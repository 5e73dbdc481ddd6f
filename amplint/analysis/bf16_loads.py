"""Weights loaded in bfloat16 that then run under float16 mixed precision.

A checkpoint trained in bfloat16 (most recent LLMs and diffusion models) has activations
and gradients sized for bfloat16's range, which is float32's: values past float16's 65,504
are normal for it.  Loading it with `from_pretrained(..., torch_dtype=torch.bfloat16)` says
so; fine-tuning it under float16 mixed precision then overflows in the forward, and the
GradScaler halves its scale step after step ("loss scale already at minimum"), or the loss
is NaN from the first steps (pytorch/pytorch#99640, ymcui/Chinese-LLaMA-Alpaca#534).

This module pairs such a load with the float16 mixed precision that runs the same model,
only where both are literal facts of one module:

- the model is handed to a transformers `Trainer` whose `args` ask for `fp16=True`
  (`frameworks.fp16_scaling`);
- it is prepared by an `Accelerator(mixed_precision="fp16")`;
- it is called inside a `torch.autocast` region whose dtype is float16 (also cuda's
  default), in the function that loaded it, or anywhere when it is a module-level name.

A load whose dtype may be another (`torch.bfloat16 if args.bf16 else torch.float16`) is
not a bfloat16 load: an option that also switches the autocast dtype is the common shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.frameworks import fp16_scaling
from amplint.analysis.names import dotted
from amplint.analysis.precision import precision_of
from amplint.analysis.syntax import call_arg
from amplint.analysis.trainers import model_argument, trainer_constructed

_DTYPE_KEYWORDS = ("torch_dtype", "dtype")
# Methods through which a module runs its forward.
_FORWARD_METHODS = ("forward", "generate", "__call__")


@dataclass(frozen=True, eq=False)
class Bf16Load:
    call: cst.Call  # the `from_pretrained(...)` call
    scope: object
    target: str  # the dotted name that holds the model
    keyword: str  # `torch_dtype` or `dtype`


@dataclass(frozen=True, eq=False)
class Fp16Run:
    """Float16 mixed precision that runs a bfloat16-loaded model."""

    load: Bf16Load
    node: cst.CSTNode  # where float16 is asked for: the arguments' call, the Accelerator, the `with`
    how: str  # a phrase: "`TrainingArguments(fp16=True)` for the `Trainer` that trains it"


def bf16_loads(model) -> list[Bf16Load]:
    """Every `from_pretrained` of this module whose dtype keyword is only ever bfloat16."""
    found = []
    values = model.bindings.values
    for cast in model.casts.module_casts:
        call = cast.call
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "from_pretrained"):
            continue
        for keyword in _DTYPE_KEYWORDS:
            expr = call_arg(call, None, keyword)
            if expr is None:
                continue
            if values.dtypes(expr, cast.scope) == frozenset({"bfloat16"}):
                found.append(Bf16Load(call, cast.scope, cast.target_text, keyword))
            break
    return found


def fp16_runs(model) -> list[Fp16Run]:
    """Each float16 mixed-precision configuration that runs a model loaded in bfloat16."""
    loads = bf16_loads(model)
    if not loads:
        return []
    out: list[Fp16Run] = []
    for load in loads:
        out.extend(_trainer_runs(model, load))
        out.extend(_accelerator_runs(model, load))
        out.extend(_autocast_runs(model, load))
    return out


def _sees(load: Bf16Load, scope) -> bool:
    """Code in `scope` names the loaded model by the same text: the loading scope itself,
    or any scope for a module-level name it does not bind again."""
    if scope is load.scope:
        return True
    head = load.target.split(".")[0]
    return load.scope.is_module and "." not in load.target and not scope.binds(head)


def _trainer_runs(model, load: Bf16Load) -> list[Fp16Run]:
    settings = [s for s in fp16_scaling(model) if s.framework == "transformers"]
    if not settings:
        return []
    out = []
    for site in model.calls:
        call, scope = site.node, site.scope
        if not _sees(load, scope) or trainer_constructed(call, scope) is None:
            continue
        if dotted(model_argument(call)) != load.target:
            continue
        args = call_arg(call, 1, "args")
        for setting in settings:
            given = setting.call if args is setting.call else None
            if given is None and args is not None and setting.target is not None and dotted(args) == setting.target \
                    and (setting.scope is scope or setting.scope.is_module):
                given = setting.call
            if given is not None:
                out.append(Fp16Run(load, given, f"`{setting.setting}` for the trainer that trains it"))
    return out


def _accelerator_runs(model, load: Bf16Load) -> list[Fp16Run]:
    out = []
    for setting in fp16_scaling(model):
        if setting.framework != "Accelerate" or setting.target is None:
            continue
        for site in model.calls:
            func = site.node.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "prepare" and dotted(func.value) == setting.target):
                continue
            if _sees(load, site.scope) and any(dotted(a.value) == load.target for a in site.node.args if not a.star):
                out.append(Fp16Run(load, setting.call, f"`Accelerator({setting.setting})`, which prepares it"))
                break
    return out


def _autocast_runs(model, load: Bf16Load) -> list[Fp16Run]:
    precision = precision_of(model)
    out, seen = [], set()
    for site in model.calls:
        func = site.node.func
        text = dotted(func)
        if text is None:
            continue
        runs = text == load.target or any(text == f"{load.target}.{m}" for m in _FORWARD_METHODS)
        if not runs or not _sees(load, site.scope):
            continue
        region = precision.active(site.node)
        if region is None or id(region.node) in seen:
            continue
        info = region.info
        if info.managed or not info.may_be_enabled or info.dtypes != frozenset({"float16"}):
            continue
        seen.add(id(region.node))
        out.append(Fp16Run(load, region.node, "a float16 autocast region that calls it"))
    return out
