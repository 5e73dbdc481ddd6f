"""Epoch-level routines: the head warm-up, evaluation, and sampling for the logs."""

from __future__ import annotations

import math
import time

import torch

from config import TrainConfig, amp_dtype, device_type
from data import move_to_device, tokens_in
from utils import MetricLogger, all_reduce_mean, clip_gradients, is_main_process, logger


def autocast_for(cfg: TrainConfig):
    return torch.autocast(device_type(cfg), dtype=amp_dtype(cfg), enabled=cfg.use_amp)


def warmup_head(model, loader, optimizer, cfg: TrainConfig, device, max_steps: int | None = None) -> dict[str, float]:
    """One pass over `loader` training only what is left trainable (the upper blocks and
    the head), with a higher learning rate, before the whole model is unfrozen."""
    model.train()
    scaler = torch.amp.GradScaler(device_type(cfg), enabled=cfg.precision == "fp16")
    metrics = MetricLogger(cfg.log_every)
    for step, batch in enumerate(loader):
        if max_steps is not None and step >= max_steps:
            break
        batch = move_to_device(batch, device)
        with autocast_for(cfg):
            loss = model(batch["input_ids"], batch["labels"], batch["attention_mask"])["loss"]
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norm = clip_gradients(model, cfg.optim.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        metrics.update(n=tokens_in(batch), loss=float(loss), grad_norm=norm)
        metrics.maybe_log(step, prefix="warmup")
    return metrics.summary()


@torch.no_grad()
def evaluate(model, loader, cfg: TrainConfig, device, max_batches: int | None = None) -> dict[str, float]:
    """Mean token loss and perplexity on `loader` (all ranks agree on the result)."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), device=device)
    count = torch.zeros((), device=device)
    start = time.perf_counter()
    for i, batch in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        batch = move_to_device(batch, device)
        with autocast_for(cfg):
            loss = model(batch["input_ids"], batch["labels"], batch["attention_mask"])["loss"]
        n = tokens_in(batch)
        total += loss.float() * n
        count += n
    model.train(was_training)
    mean = float(all_reduce_mean(total) / all_reduce_mean(count).clamp(min=1))
    return {"val_loss": mean, "val_ppl": math.exp(min(mean, 20.0)), "val_seconds": time.perf_counter() - start}


@torch.no_grad()
def sample_text(model, cfg: TrainConfig, device, prompt_len: int = 8, new_tokens: int = 24) -> list[int]:
    """A short greedy-ish sample from a random prompt, logged to see the model learn."""
    prompt = torch.randint(1, cfg.model.vocab_size, (1, prompt_len), device=device)
    with autocast_for(cfg):
        ids = model.generate(prompt, new_tokens, temperature=0.8, top_k=20)
    return ids[0].tolist()


def log_epoch(epoch: int, train: dict[str, float], val: dict[str, float] | None, lr: float) -> None:
    if not is_main_process():
        return
    parts = [f"epoch {epoch}", f"lr {lr:.3g}"] + [f"{k} {v:.4g}" for k, v in sorted(train.items())]
    if val:
        parts += [f"{k} {v:.4g}" for k, v in sorted(val.items())]
    logger.info(" | ".join(parts))


def should_stop(history: list[float], patience: int = 3, min_delta: float = 1e-3) -> bool:
    """Early stopping: the validation loss has not improved by `min_delta` for `patience` evaluations."""
    if len(history) <= patience:
        return False
    best_before = min(history[:-patience])
    return min(history[-patience:]) > best_before - min_delta
