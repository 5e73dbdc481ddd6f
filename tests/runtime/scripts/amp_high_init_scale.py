"""Correct fp16 AMP whose GradScaler starts at 2**24, on a loss that falls fast.

The scaler overflows and skips its first steps while the scale comes down to a usable value, so
the run lags fp32 by those steps.  That lag is calibration, not a precision problem: compare must
align the runs by the updates they applied and report the lost updates on their own.
"""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(256, 16)
y_all = x_all @ torch.randn(16, 1) * 10
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
scaler = torch.amp.GradScaler(device, init_scale=2.0**24)

for step in range(60):
    idx = torch.randint(0, 256, (64,))
    x, y = x_all[idx].to(device), y_all[idx].to(device)
    with torch.autocast(device, dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
