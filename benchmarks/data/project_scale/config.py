"""Configuration of the training run: dataclasses, command line and JSON files.

Every module of the project takes a `TrainConfig` (or the part of it it needs) instead of
reading `argparse.Namespace` attributes by hand, so a typo in an option name fails here,
once, with a message that names the option.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch

PRECISIONS = ("fp32", "fp16", "bf16")
OPTIMIZERS = ("adamw", "sgd")


@dataclass
class ModelConfig:
    vocab_size: int = 8192
    max_seq_len: int = 256
    d_model: int = 384
    n_heads: int = 6
    n_layers: int = 6
    mlp_ratio: float = 4.0
    dropout: float = 0.1
    drop_path: float = 0.05
    rotary_base: float = 10000.0
    tie_embeddings: bool = True

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass
class OptimConfig:
    name: str = "adamw"
    lr: float = 3e-4
    min_lr: float = 3e-5
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    momentum: float = 0.9
    warmup_steps: int = 200
    max_grad_norm: float = 1.0


@dataclass
class DataConfig:
    train_samples: int = 20000
    val_samples: int = 1000
    batch_size: int = 32
    num_workers: int = 2
    seed: int = 1234
    pad_id: int = 0


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    epochs: int = 10
    warmup_epochs: int = 1
    grad_accum_steps: int = 4
    precision: str = "fp16"
    device: str = "cuda"
    output_dir: str = "runs/tiny-gpt"
    resume: str | None = None
    log_every: int = 50
    eval_every: int = 1
    keep_checkpoints: int = 3
    seed: int = 42
    compile: bool = False

    @property
    def use_amp(self) -> bool:
        return self.precision in ("fp16", "bf16")

    @property
    def checkpoint_dir(self) -> str:
        return os.path.join(self.output_dir, "checkpoints")


def amp_dtype(cfg: TrainConfig) -> torch.dtype:
    """The autocast dtype for `cfg.precision` (float32 when AMP is off)."""
    if cfg.precision == "fp16":
        return torch.float16
    if cfg.precision == "bf16":
        return torch.bfloat16
    return torch.float32


def device_type(cfg: TrainConfig) -> str:
    """`"cuda"` or `"cpu"`: what `torch.autocast` and `GradScaler` want as device_type."""
    if cfg.device.startswith("cuda") and torch.cuda.is_available():
        return "cuda"
    return "cpu"


def check_config(cfg: TrainConfig) -> TrainConfig:
    """Reject settings that would fail later, deep inside a training step."""
    if cfg.precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {cfg.precision!r}")
    if cfg.optim.name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, not {cfg.optim.name!r}")
    if cfg.model.d_model % cfg.model.n_heads:
        raise ValueError(f"d_model ({cfg.model.d_model}) must be divisible by n_heads ({cfg.model.n_heads})")
    if cfg.grad_accum_steps < 1:
        raise ValueError("grad_accum_steps must be at least 1")
    if cfg.precision == "bf16" and cfg.device.startswith("cuda") and torch.cuda.is_available():
        if not torch.cuda.is_bf16_supported():
            raise ValueError("this GPU has no bfloat16 support; use --precision fp16")
    return cfg


def _merge(target: Any, values: dict[str, Any], where: str) -> None:
    names = {f.name: f for f in dataclasses.fields(target)}
    for key, value in values.items():
        if key not in names:
            raise KeyError(f"unknown option {where}{key}")
        current = getattr(target, key)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            _merge(current, value, f"{where}{key}.")
        elif isinstance(current, tuple) and isinstance(value, list):
            setattr(target, key, tuple(value))
        else:
            setattr(target, key, value)


def load_config(path: str | None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """A `TrainConfig` from a JSON file (or the defaults), with `overrides` applied last."""
    cfg = TrainConfig()
    if path:
        with open(path, encoding="utf-8") as f:
            _merge(cfg, json.load(f), "")
    if overrides:
        _merge(cfg, overrides, "")
    return check_config(cfg)


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def save_config(cfg: TrainConfig, path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config_to_dict(cfg), f, indent=2, sort_keys=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Train a small GPT with mixed precision.")
    parser.add_argument("--config", help="JSON file with TrainConfig fields")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--warmup-epochs", type=int)
    parser.add_argument("--precision", choices=PRECISIONS)
    parser.add_argument("--device")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--grad-accum-steps", type=int)
    parser.add_argument("--output-dir")
    parser.add_argument("--resume", help="checkpoint to resume from ('latest' for the newest)")
    parser.add_argument("--compile", action="store_true")
    return parser


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    args = build_parser().parse_args(argv)
    overrides: dict[str, Any] = {}
    for name in ("epochs", "warmup_epochs", "precision", "device", "grad_accum_steps", "output_dir", "resume"):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    if args.lr is not None:
        overrides["optim"] = {"lr": args.lr}
    if args.batch_size is not None:
        overrides["data"] = {"batch_size": args.batch_size}
    if args.compile:
        overrides["compile"] = True
    return load_config(args.config, overrides)
