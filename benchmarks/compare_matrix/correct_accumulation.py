"""Correct fp16 AMP with gradient accumulation: 4 scaled micro-batch backwards per scaler.step."""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(256, 16)
y_all = (x_all @ torch.randn(16, 1)).tanh()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
scaler = torch.amp.GradScaler(device)
accumulate = 4

for step in range(400):
    idx = torch.randint(0, 256, (8,))
    x, y = x_all[idx].to(device), y_all[idx].to(device)
    with torch.autocast(device, dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y) / accumulate
    scaler.scale(loss).backward()
    if (step + 1) % accumulate == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
