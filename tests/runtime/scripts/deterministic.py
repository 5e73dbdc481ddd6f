"""Deterministic CPU AMP training; writes each loss as float.hex to argv[1]."""
import sys

import torch

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
device = "cpu"
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(device)
losses = []
for step in range(8):
    x = torch.randn(8, 16)
    with torch.autocast(device, dtype=torch.float16):
        loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    losses.append(float(loss).hex())
with open(sys.argv[1], "w") as fh:
    fh.write("\n".join(losses))
