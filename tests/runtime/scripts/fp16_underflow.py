"""float16 autocast without a GradScaler (AMP203), on gradients small enough to underflow.

A residual branch ends in a BatchNorm whose weight starts at zero, as residual blocks often
initialise it: the gradients of the branch's Linear are then exactly zero in float32 too
(structural, not underflow).  The loss is tiny, so the float16 backward flushes the other
gradients to zero as well: that part is underflow, and a GradScaler would have kept it.
"""
import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 64)
        self.branch = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.BatchNorm1d(64))
        torch.nn.init.zeros_(self.branch[1].weight)
        self.head = torch.nn.Linear(64, 8)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return self.head(h + self.branch(h))


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    x = torch.randn(32, 16)
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x)
    loss = out.float().pow(2).mean() * 1e-6
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
