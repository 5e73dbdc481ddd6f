"""Gradient accumulation that updates the scale on every micro-batch but steps every `accum`."""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler(device)
accum = 2  # the second micro-batch updates without a step: torch raises, the probe confirms first

for i in range(4):
    x = torch.randn(4, 8, device=device)
    with torch.autocast(device, dtype=torch.float16):
        loss = model(x).pow(2).mean() / accum
    scaler.scale(loss).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        optimizer.zero_grad()
    scaler.update()
