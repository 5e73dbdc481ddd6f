"""Two gloo ranks train with DDP; after one step rank 1 raises ("rank 1 dies") and rank 0, waiting
in the next all-reduce, fails in gloo (or is ended by torchrun) as a consequence."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    if step == 1 and rank == 1:
        raise RuntimeError("rank 1 dies")
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
