"""Broken: fp16 autocast without a GradScaler; a small loss gives gradients that underflow in fp16."""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(64, 16)
y_all = (x_all @ torch.randn(16, 1)).tanh()
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
loss_weight = 1e-6  # e.g. an auxiliary loss term, or a loss in small physical units

for step in range(40):
    idx = torch.randint(0, 64, (16,))
    x, y = x_all[idx].to(device), y_all[idx].to(device)
    with torch.autocast(device, dtype=torch.float16):
        loss = loss_weight * torch.nn.functional.mse_loss(model(x).float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
