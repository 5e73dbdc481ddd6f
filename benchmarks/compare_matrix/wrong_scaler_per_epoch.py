"""Wrong: a GradScaler rebuilt at the start of every epoch.  Each new scaler starts again at 2**16,
too high for this loss, and skips steps until it has calibrated, every epoch: a large share of the
updates is lost (AMP1xx: the scaler belongs outside the epoch loop)."""
import torch
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(256, 16)
y_all = x_all @ torch.randn(16, 1) * 10  # targets not normalised: large gradients
loader = DataLoader(TensorDataset(x_all, y_all), batch_size=32, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

for epoch in range(20):
    scaler = torch.amp.GradScaler(device)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device, dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
