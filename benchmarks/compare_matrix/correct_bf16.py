"""Correct bf16 AMP: autocast in bfloat16, no GradScaler (bf16 has fp32's exponent range)."""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(256, 16)
y_all = (x_all @ torch.randn(16, 1)).tanh()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

for step in range(100):
    idx = torch.randint(0, 256, (32,))
    x, y = x_all[idx].to(device), y_all[idx].to(device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
