"""Optimizer and learning-rate schedule.

Weight decay applies to matrices only: biases, norm weights and embeddings are left out,
as in GPT-2 and most of what followed it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LambdaLR

from config import OptimConfig, TrainConfig

NO_DECAY_MODULES = (nn.LayerNorm, nn.Embedding)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: parameters that decay (2-D weights) and those that do not."""
    decay, no_decay = [], []
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            full = f"{module_name}.{name}" if module_name else name
            if p.ndim < 2 or isinstance(module, NO_DECAY_MODULES) or "norm" in full:
                no_decay.append(p)
            else:
                decay.append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    groups = param_groups(model, cfg.weight_decay)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=True)
    fused = torch.cuda.is_available()
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused)


def warmup_cosine(step: int, warmup: int, total: int, floor: float) -> float:
    """Linear warm-up to 1, then cosine decay to `floor` (a fraction of the peak)."""
    if step < warmup:
        return (step + 1) / max(warmup, 1)
    progress = min(1.0, (step - warmup) / max(total - warmup, 1))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int) -> LambdaLR:
    total = max(1, cfg.epochs * steps_per_epoch // cfg.grad_accum_steps)
    floor = cfg.optim.min_lr / cfg.optim.lr
    warmup = min(cfg.optim.warmup_steps, total // 10)
    return LambdaLR(optimizer, lambda step: warmup_cosine(step, warmup, total, floor))


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    return float(optimizer.param_groups[0]["lr"])


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def head_optimizer(parameters: Iterable[nn.Parameter], cfg: OptimConfig) -> torch.optim.Optimizer:
    """A plain AdamW for a short warm-up of the parameters left trainable."""
    return torch.optim.AdamW(list(parameters), lr=cfg.lr * 3, weight_decay=0.0, eps=cfg.eps)


def zero_grad(optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad(set_to_none=True)
