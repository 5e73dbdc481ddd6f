"""Small helpers shared by the training script, the engine and the checkpoint code."""

from __future__ import annotations

import logging
import os
import random
import sys
import time
from collections import defaultdict
from collections.abc import Iterable

import torch
import torch.distributed as dist

logger = logging.getLogger("tiny_gpt")


def setup_logging(output_dir: str | None = None, level: int = logging.INFO) -> logging.Logger:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if output_dir and is_main_process():
        os.makedirs(output_dir, exist_ok=True)
        handlers.append(logging.FileHandler(os.path.join(output_dir, "train.log")))
    logging.basicConfig(level=level if is_main_process() else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(message)s", handlers=handlers, force=True)
    return logger


def set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


# --- distributed -----------------------------------------------------------------------

def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main_process() -> bool:
    return get_rank() == 0


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """The mean of `value` over all ranks (the value itself when not distributed)."""
    if not is_distributed():
        return value
    value = value.clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / get_world_size()


def init_distributed() -> torch.device:
    """Join the process group torchrun describes in the environment, if any."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and not is_distributed():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# --- models ----------------------------------------------------------------------------

def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DistributedDataParallel and torch.compile wrappers."""
    while True:
        if hasattr(model, "module"):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def count_parameters(model: torch.nn.Module, trainable_only: bool = True) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def trainable_parameters(model: torch.nn.Module) -> Iterable[torch.nn.Parameter]:
    return (p for p in model.parameters() if p.requires_grad)


def grad_norm(parameters: Iterable[torch.nn.Parameter], norm_type: float = 2.0) -> float:
    """The total gradient norm, for logging (does not change the gradients)."""
    norms = [p.grad.detach().norm(norm_type) for p in parameters if p.grad is not None]
    if not norms:
        return 0.0
    return float(torch.norm(torch.stack(norms), norm_type))


def clip_gradients(model: torch.nn.Module, max_norm: float) -> float:
    """Clip the gradients of the trainable parameters to `max_norm` (0: no clipping);
    returns the norm before clipping."""
    params = list(trainable_parameters(unwrap_model(model)))
    if max_norm <= 0:
        return grad_norm(params)
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm))


def freeze(module: torch.nn.Module) -> None:
    for p in module.parameters():
        p.requires_grad_(False)


def unfreeze(module: torch.nn.Module) -> None:
    for p in module.parameters():
        p.requires_grad_(True)


# --- metrics ---------------------------------------------------------------------------

class AverageMeter:
    """Running mean of a scalar, weighted by the number of items each update covers."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total = 0.0
        self.count = 0

    def update(self, value: float, n: int = 1) -> None:
        self.total += float(value) * n
        self.count += n

    @property
    def mean(self) -> float:
        return self.total / max(self.count, 1)


class MetricLogger:
    """A group of AverageMeters, printed every `every` steps."""

    def __init__(self, every: int = 50) -> None:
        self.every = every
        self.meters: dict[str, AverageMeter] = defaultdict(AverageMeter)
        self.start = time.perf_counter()

    def update(self, n: int = 1, **values: float) -> None:
        for name, value in values.items():
            self.meters[name].update(value, n)

    def summary(self) -> dict[str, float]:
        return {name: meter.mean for name, meter in self.meters.items()}

    def maybe_log(self, step: int, prefix: str = "train") -> None:
        if step % self.every == 0 and is_main_process():
            elapsed = time.perf_counter() - self.start
            logger.info("%s step %d %s (%.1f s)", prefix, step, format_metrics(self.summary()), elapsed)


def format_metrics(metrics: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()))


class Timer:
    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.start
