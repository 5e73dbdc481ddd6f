"""float16 autocast without a GradScaler, with the loss itself left in float16.

Its gradients are small enough that float16 flushes most of them to zero (underflow), and a
float16 loss multiplied by 65536 (GradScaler's default scale) is inf: every gradient of that pass
is inf or NaN.  A probe that measured underflow only at x65536 saw nothing it could keep there and
reported an underflow of 0 beside a zero share of most of the gradients.
"""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(2):
    x = torch.randn(32, 16)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).pow(2).mean() * 1e-4
    assert loss.dtype == torch.float16
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
