"""Correct fp16 AMP: autocast forward, scaled backward, unscale_ before clipping, scaler.step/update."""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(64, 16)
y_all = (x_all @ torch.randn(16, 1)).tanh()
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
scaler = torch.amp.GradScaler(device)

for step in range(40):
    idx = torch.randint(0, 64, (16,))
    x, y = x_all[idx].to(device), y_all[idx].to(device)
    with torch.autocast(device, dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
