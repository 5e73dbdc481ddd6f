"""Small transformer, CPU fp16 autocast + GradScaler; writes the median step time (s) to argv[1]."""
import json
import sys
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
steps, warmup = int(sys.argv[2]), 5
layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=2), torch.nn.Linear(128, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cpu")
times = []
for step in range(warmup + steps):
    x = torch.randn(16, 32, 128)
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - t0)
times = sorted(times[warmup:])
json.dump({"median": times[len(times) // 2], "min": times[0]}, open(sys.argv[1], "w"))
