"""Wrong: pure `.half()` training, no fp32 master weights.  Targets are not normalised (about 58), so
the output bias sits where fp16 values are 1/32 apart and SGD's small updates round away."""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x_all = torch.randn(256, 16)
y_all = (x_all @ torch.randn(16, 1)).tanh() + 58.0
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
with torch.no_grad():
    model[2].bias.fill_(60.0)  # initialised at the mean of an older data set
model = model.to(device).half()
optimizer = torch.optim.SGD(model.parameters(), lr=3e-3)

for step in range(100):
    idx = torch.randint(0, 256, (32,))
    x, y = x_all[idx].to(device).half(), y_all[idx].to(device)
    loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
