"""Small transformer, fp16 autocast + GradScaler; writes the median step time (s) to argv[1].

    python _overhead_train.py OUT.json STEPS [DEVICE] [D_MODEL]

On CUDA each step ends in a synchronize, so the time is the step's and not its launch's; the
default width (128) is launch-bound there, the worst case for verify's per-call Python wrappers.
"""
import json
import sys
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
steps, warmup = int(sys.argv[2]), 5
device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
width = int(sys.argv[4]) if len(sys.argv) > 4 else 128
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
layer = torch.nn.TransformerEncoderLayer(d_model=width, nhead=4, dim_feedforward=2 * width, batch_first=True)
model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=2), torch.nn.Linear(width, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler(device)
times = []
for step in range(warmup + steps):
    x = torch.randn(16, 32, width, device=device)
    sync()
    t0 = time.perf_counter()
    with torch.autocast(device, dtype=torch.float16):
        loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    sync()
    times.append(time.perf_counter() - t0)
times = sorted(times[warmup:])
json.dump({"median": times[len(times) // 2], "min": times[0]}, open(sys.argv[1], "w"))
