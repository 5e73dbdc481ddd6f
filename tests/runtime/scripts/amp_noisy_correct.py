"""Correct AMP on a noisy problem: tiny batches, label noise and a high learning rate.

Nothing is wrong with the precision setup, but the training amplifies every small difference, so
a bf16 run wanders away from the fp32 curve by more than the default tolerance.  compare must
measure how much fp32 itself wanders under rounding-sized noise and not call that divergence.
"""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(512, 32)
labels = (x_all[:, :4].sum(1) > 0).long()
flip = torch.rand(512) < 0.3
labels[flip] = 1 - labels[flip]
model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                            torch.nn.ReLU(), torch.nn.Linear(128, 2)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
scaler = torch.amp.GradScaler(device)

for step in range(80):
    idx = torch.randint(0, 512, (4,))
    x, y = x_all[idx].to(device), labels[idx].to(device)
    with torch.autocast(device, dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
