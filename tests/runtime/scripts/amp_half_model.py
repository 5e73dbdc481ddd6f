"""Broken: the model itself is cast to fp16 (no fp32 master weights), so small updates are lost.

The output bias starts at the old target mean (60, a common initialisation); the new data has mean 58.
Near 60 fp16 values are 1/32 apart, so every SGD step of the bias (lr * grad, about 0.012) rounds
back to the same value in fp16 and the loss stays where it was, while fp32 weights move.
"""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(64, 16)
y_all = (x_all @ torch.randn(16, 1)).tanh() + 58.0
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
with torch.no_grad():
    model[2].bias.fill_(60.0)
model = model.to(device).half()
optimizer = torch.optim.SGD(model.parameters(), lr=3e-3)

for step in range(40):
    idx = torch.randint(0, 64, (16,))
    x, y = x_all[idx].to(device).half(), y_all[idx].to(device)
    loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
