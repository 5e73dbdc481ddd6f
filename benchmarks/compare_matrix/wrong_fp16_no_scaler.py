"""Wrong: fp16 autocast without a GradScaler.  The loss is small (a loss in small physical units, or
a down-weighted auxiliary term), so its fp16 gradients underflow to zero and the run stops learning."""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(256, 16)
y_all = (x_all @ torch.randn(16, 1)).tanh() * 1e-3  # targets in small units
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

for step in range(100):
    idx = torch.randint(0, 256, (32,))
    x, y = x_all[idx].to(device), y_all[idx].to(device)
    with torch.autocast(device, dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float() * 1e-3, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
