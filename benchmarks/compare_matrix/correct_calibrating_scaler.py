"""Correct fp16 AMP whose GradScaler skips its first steps while it calibrates, on a fast-falling loss.

init_scale=2**24 overflows until the scale has come down, so the fp16 run applies its first update
several iterations after fp32 did and from then on sees different batches than fp32 at the same
update count.  Neither is a precision problem.
"""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(256, 16)
y_all = x_all @ torch.randn(16, 1) * 3
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
scaler = torch.amp.GradScaler(device, init_scale=2.0**24)

for step in range(100):
    idx = torch.randint(0, 256, (16,))
    x, y = x_all[idx].to(device), y_all[idx].to(device)
    with torch.autocast(device, dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
