"""Correct fp16 AMP fed by a shuffled DataLoader (the batch order comes from torch's global RNG, which
compare seeds the same way in every run)."""
import torch
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(512, 16)
y_all = (x_all[:, :4].sum(1) > 0).long()
loader = DataLoader(TensorDataset(x_all, y_all), batch_size=32, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler(device)

for epoch in range(10):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device, dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
