"""AMP as a flag the run did not set (`--amp` not given): autocast and GradScaler built disabled.

The clip before unscale_ (AMP101) is a real bug once `--amp` is given; in this run nothing about
mixed precision ran, so neither verify nor compare may pass it as tested.
"""
import sys

import torch

amp = "--amp" in sys.argv
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.amp.GradScaler("cpu", enabled=amp)
for step in range(6):
    x = torch.randn(16, 8)
    with torch.autocast("cpu", dtype=torch.float16, enabled=amp):
        loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
