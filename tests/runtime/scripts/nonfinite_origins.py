"""Where a step's first NaN/Inf comes from, one mode per argument (verify --nan-guard, AMP901).

forward-overflow  float16 autocast, a Linear whose output passes 65,504: inf from finite inputs.
backward-pole     a float32 model whose forward takes sqrt of a ReLU output that is exactly 0 in
                  places (in its own forward, between two submodules): the forward is finite, the
                  gradient of sqrt at 0 is inf.
forward-nan       a normalisation by a row sum that is 0 in Net's own forward: 0/0 from finite inputs.
clean             the same model without any of these: nothing to report.
"""
import sys

import torch

mode = sys.argv[1]
torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        hidden = self.body(x)
        if mode == "backward-pole":
            hidden = hidden.sqrt()
        if mode == "forward-nan":
            silent = hidden * 0.0
            hidden = silent / silent.sum(-1, keepdim=True)
        return self.head(hidden)


model = Net()
if mode == "forward-overflow":
    with torch.no_grad():
        model.head.weight.fill_(3000.0)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(3):
    x = torch.randn(4, 8)
    if mode == "forward-overflow":
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
        loss = out.float().mean()
    else:
        loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
