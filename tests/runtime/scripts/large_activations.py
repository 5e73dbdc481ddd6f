"""A model whose middle layer's activations come within 10x of float16's largest value (AMP905).

With --small the same model is initialised 1000x smaller: plenty of headroom, no finding.
With --bf16 it runs under bfloat16 autocast: float32's range, no finding.
"""
import sys

import torch

torch.manual_seed(0)
scale = 1e-3 if "--small" in sys.argv else 1.0
dtype = torch.bfloat16 if "--bf16" in sys.argv else torch.float16
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
with torch.no_grad():
    model[0].weight.mul_(8000.0 * scale)  # activations in the tens of thousands
optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
scaler = torch.amp.GradScaler("cpu", init_scale=1.0, enabled=dtype == torch.float16)
for step in range(5):
    x = torch.randn(8, 16)
    with torch.autocast("cpu", dtype=dtype):
        out = model(x)
    loss = out.float().pow(2).mean() * 1e-6
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
print("done")
