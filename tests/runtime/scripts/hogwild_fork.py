"""Hogwild training (pytorch/examples' mnist_hogwild shape): two trainers forked by
torch.multiprocessing share one model; each runs fp16 autocast with its own GradScaler.
`--clip-first` clips before `unscale_` (AMP101), which only the forked trainers do.
"""

import sys

import torch
import torch.multiprocessing as mp


def train(model, rank, clip_first):
    torch.manual_seed(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(8):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.randn(8, 4)).pow(2).mean()
        scaler.scale(loss).backward()
        if clip_first:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()


if __name__ == "__main__":
    mp.set_start_method("fork")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    model.share_memory()
    workers = [mp.Process(target=train, args=(model, rank, "--clip-first" in sys.argv)) for rank in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    sys.exit(max(w.exitcode for w in workers))
