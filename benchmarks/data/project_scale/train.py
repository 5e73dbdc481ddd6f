"""Train TinyGPT on the synthetic Markov corpus with automatic mixed precision.

    python train.py --precision fp16 --epochs 10
    torchrun --nproc-per-node 2 train.py --config run.json

The lower blocks are frozen for `warmup_epochs` while the head warms up (engine.warmup_head),
then the whole model trains with gradient accumulation, gradient clipping, a cosine
schedule, evaluation every `eval_every` epochs and a checkpoint after each epoch.
"""

from __future__ import annotations

import os
import sys

import torch
from torch.nn.parallel import DistributedDataParallel

from checkpoint import checkpoint_path, export_weights, latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from config import TrainConfig, amp_dtype, device_type, parse_args, save_config
from data import build_dataloaders, move_to_device, set_epoch, tokens_in
from engine import evaluate, log_epoch, sample_text, should_stop, warmup_head
from model import build_model, freeze_lower_blocks, unfreeze_all
from optim import build_optimizer, build_scheduler, current_lr, head_optimizer
from utils import MetricLogger, clip_gradients, count_parameters, init_distributed, is_main_process, logger, set_seed, setup_logging


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    return model


def resume_path(cfg: TrainConfig) -> str | None:
    if cfg.resume == "latest":
        return latest_checkpoint(cfg.checkpoint_dir)
    return cfg.resume


def warm_up(model, train_loader, cfg: TrainConfig, device) -> None:
    """Train the head and upper blocks alone for `cfg.warmup_epochs` epochs."""
    if cfg.warmup_epochs <= 0:
        return
    trainable = freeze_lower_blocks(model, cfg.model.n_layers // 2)
    optimizer = head_optimizer(trainable, cfg.optim)
    for epoch in range(cfg.warmup_epochs):
        set_epoch(train_loader, epoch)
        stats = warmup_head(model, train_loader, optimizer, cfg, device, max_steps=500)
        log_epoch(-cfg.warmup_epochs + epoch, stats, None, current_lr(optimizer))
    unfreeze_all(model)


def train(cfg: TrainConfig) -> float:
    device = init_distributed()
    setup_logging(cfg.output_dir)
    set_seed(cfg.seed)
    if is_main_process():
        save_config(cfg, os.path.join(cfg.output_dir, "config.json"))

    train_loader, val_loader = build_dataloaders(cfg)
    model = build_model(cfg.model, device)
    logger.info("model: %.1fM trainable parameters", count_parameters(model) / 1e6)

    warm_up(model, train_loader, cfg, device)
    if cfg.compile:
        model = torch.compile(model)
    model = wrap(model, device)

    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg, len(train_loader))
    scaler = torch.amp.GradScaler(device_type(cfg), enabled=cfg.precision == "fp16")

    start_epoch, global_step = 0, 0
    path = resume_path(cfg)
    if path:
        start_epoch, global_step = load_checkpoint(path, model, optimizer, scheduler)

    history: list[float] = []
    accum = cfg.grad_accum_steps
    for epoch in range(start_epoch, cfg.epochs):
        model.train()
        set_epoch(train_loader, epoch)
        metrics = MetricLogger(cfg.log_every)
        for i, batch in enumerate(train_loader):
            batch = move_to_device(batch, device)
            with torch.autocast(device_type(cfg), dtype=amp_dtype(cfg), enabled=cfg.use_amp):
                out = model(batch["input_ids"], batch["labels"], batch["attention_mask"])
                loss = out["loss"] / accum
            scaler.scale(loss).backward()
            if (i + 1) % accum != 0:
                continue
            norm = clip_gradients(model, cfg.optim.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            global_step += 1
            metrics.update(n=tokens_in(batch), loss=float(loss) * accum, grad_norm=norm, scale=scaler.get_scale())
            metrics.maybe_log(global_step)

        val = None
        if (epoch + 1) % cfg.eval_every == 0:
            val = evaluate(model, val_loader, cfg, device, max_batches=200)
            history.append(val["val_loss"])
            if is_main_process():
                logger.info("sample: %s", sample_text(model, cfg, device))
        log_epoch(epoch, metrics.summary(), val, current_lr(optimizer))

        save_checkpoint(model, optimizer, scheduler, epoch, global_step, checkpoint_path(cfg.checkpoint_dir, epoch))
        prune_checkpoints(cfg.checkpoint_dir, cfg.keep_checkpoints)
        if should_stop(history):
            logger.info("validation loss stopped improving; stopping after epoch %d", epoch)
            break

    if is_main_process():
        export_weights(model, os.path.join(cfg.output_dir, "weights-fp16.pt"))
    return history[-1] if history else float("nan")


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    final = train(cfg)
    logger.info("final validation loss %.4f", final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
