"""Checkpoints: atomic writes, the newest found on resume, old ones pruned."""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile

import torch

from utils import barrier, is_main_process, logger, unwrap_model

_NAME = re.compile(r"epoch-(\d+)\.pt$")


def checkpoint_path(directory: str, epoch: int) -> str:
    return os.path.join(directory, f"epoch-{epoch:04d}.pt")


def _atomic_save(payload: dict, path: str) -> None:
    """Write to a temporary file in the same folder, then rename: a crash never leaves
    half a checkpoint under the real name."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ckpt-", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_checkpoint(model, optimizer, scheduler, epoch: int, step: int, path: str, extra: dict | None = None) -> None:
    """Model, optimizer and schedule state, with the position in training."""
    if not is_main_process():
        barrier()
        return
    payload = {
        "model": unwrap_model(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "epoch": epoch,
        "step": step,
    }
    if extra:
        payload["extra"] = extra
    _atomic_save(payload, path)
    logger.info("saved checkpoint %s", path)
    barrier()


def load_checkpoint(path: str, model, optimizer=None, scheduler=None, map_location="cpu") -> tuple[int, int]:
    """Restore what `save_checkpoint` wrote; returns (next epoch, global step)."""
    state = torch.load(path, map_location=map_location, weights_only=False)
    unwrap_model(model).load_state_dict(state["model"])
    if optimizer is not None and "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    logger.info("resumed from %s (epoch %d)", path, state["epoch"])
    return state["epoch"] + 1, state.get("step", 0)


def latest_checkpoint(directory: str) -> str | None:
    found = []
    for path in glob.glob(os.path.join(directory, "epoch-*.pt")):
        match = _NAME.search(path)
        if match:
            found.append((int(match.group(1)), path))
    return max(found)[1] if found else None


def prune_checkpoints(directory: str, keep: int) -> list[str]:
    """Delete all but the `keep` newest checkpoints; returns the deleted paths."""
    if keep <= 0 or not is_main_process():
        return []
    paths = sorted(glob.glob(os.path.join(directory, "epoch-*.pt")))
    doomed = paths[:-keep]
    for path in doomed:
        os.unlink(path)
    return doomed


def export_weights(model, path: str, dtype: torch.dtype = torch.float16) -> None:
    """Weights only, cast to `dtype`, for inference (training state is not kept)."""
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in unwrap_model(model).state_dict().items()}
    _atomic_save({"model": state, "dtype": str(dtype)}, path)


def copy_best(path: str, directory: str) -> str:
    best = os.path.join(directory, "best.pt")
    shutil.copyfile(path, best)
    return best
