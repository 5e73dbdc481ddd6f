"""Decides AMP from where the model's parameters are, as many trainers do, and clips before unscale_.

On a GPU the parameters are on CUDA, AMP is on and the clip (AMP101) sees scaled gradients.
Under `--device cpu` the parameters are really on the CPU, so this script turns AMP off itself:
verify must say that, not just "not confirmed".
"""
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
amp = next(model.parameters()).device.type != "cpu"
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for step in range(3):
    x = torch.randn(4, 8, device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(f"amp={amp}")
