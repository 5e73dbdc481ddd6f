"""Data: a synthetic next-token dataset, padding collation and loaders.

The dataset draws token sequences from a fixed random Markov chain, so a model can learn
something real (the transition table) and the loss goes down, without a download.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from config import DataConfig, TrainConfig
from utils import get_rank, get_world_size, is_distributed


class MarkovTextDataset(Dataset):
    """Sequences of token ids sampled from a sparse random transition table."""

    def __init__(self, size: int, vocab_size: int, max_len: int, seed: int, branching: int = 8) -> None:
        self.size = size
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.seed = seed
        generator = torch.Generator().manual_seed(seed)
        # Every token may be followed by `branching` others, with random weights.
        self.successors = torch.randint(1, vocab_size, (vocab_size, branching), generator=generator)
        weights = torch.rand(vocab_size, branching, generator=generator) + 0.05
        self.weights = weights / weights.sum(dim=1, keepdim=True)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        rng = random.Random(self.seed * 1_000_003 + index)
        length = rng.randint(self.max_len // 4, self.max_len)
        tokens = [rng.randrange(1, self.vocab_size)]
        for _ in range(length - 1):
            row = tokens[-1]
            choice = rng.choices(range(self.successors.shape[1]), weights=self.weights[row].tolist())[0]
            tokens.append(int(self.successors[row, choice]))
        ids = torch.tensor(tokens, dtype=torch.long)
        return {"input_ids": ids[:-1], "labels": ids[1:]}


def pad_sequences(sequences: Sequence[torch.Tensor], pad_id: int, length: int | None = None) -> torch.Tensor:
    length = length or max(len(s) for s in sequences)
    out = torch.full((len(sequences), length), pad_id, dtype=sequences[0].dtype)
    for i, seq in enumerate(sequences):
        out[i, : len(seq)] = seq[:length]
    return out


class Collator:
    """Pads a list of samples to the longest one; labels are padded with -100 (ignored)."""

    def __init__(self, pad_id: int, multiple_of: int = 8) -> None:
        self.pad_id = pad_id
        self.multiple_of = multiple_of

    def __call__(self, samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        longest = max(len(s["input_ids"]) for s in samples)
        length = int(math.ceil(longest / self.multiple_of) * self.multiple_of)
        input_ids = pad_sequences([s["input_ids"] for s in samples], self.pad_id, length)
        labels = pad_sequences([s["labels"] for s in samples], -100, length)
        attention_mask = (input_ids != self.pad_id).long()
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


def _loader(dataset: Dataset, cfg: DataConfig, shuffle: bool, drop_last: bool) -> DataLoader:
    sampler = None
    if is_distributed():
        sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), shuffle=shuffle)
        shuffle = False
    return DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        shuffle=shuffle,
        sampler=sampler,
        num_workers=cfg.num_workers,
        collate_fn=Collator(cfg.pad_id),
        pin_memory=torch.cuda.is_available(),
        drop_last=drop_last,
        persistent_workers=cfg.num_workers > 0,
    )


def build_dataloaders(cfg: TrainConfig) -> tuple[DataLoader, DataLoader]:
    """Training and validation loaders; validation sequences come from another seed."""
    train = MarkovTextDataset(cfg.data.train_samples, cfg.model.vocab_size, cfg.model.max_seq_len + 1, cfg.data.seed)
    val = MarkovTextDataset(cfg.data.val_samples, cfg.model.vocab_size, cfg.model.max_seq_len + 1, cfg.data.seed + 1)
    val.successors, val.weights = train.successors, train.weights  # same language, other samples
    return _loader(train, cfg.data, shuffle=True, drop_last=True), _loader(val, cfg.data, shuffle=False, drop_last=False)


def set_epoch(loader: DataLoader, epoch: int) -> None:
    """Reshuffle a distributed sampler (a plain loader reshuffles by itself)."""
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, DistributedSampler):
        sampler.set_epoch(epoch)


def move_to_device(batch: Any, device: torch.device | str, non_blocking: bool = True) -> Any:
    """Tensors of a nested batch moved to `device`; everything else as it is."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {k: move_to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(v, device, non_blocking) for v in batch)
    return batch


def infinite(loader: DataLoader) -> Iterator[dict[str, torch.Tensor]]:
    epoch = 0
    while True:
        set_epoch(loader, epoch)
        yield from loader
        epoch += 1


def tokens_in(batch: Mapping[str, torch.Tensor]) -> int:
    return int((batch["labels"] != -100).sum())
