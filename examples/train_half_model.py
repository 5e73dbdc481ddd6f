"""`.half()` on the model that is trained, next to a frozen fp16 encoder that is fine.

`amplint check examples/` reports the trained one only (AMP301). Runs on CPU.
"""
import torch
from torch import nn

encoder = nn.Linear(8, 8).half().eval()  # frozen feature extractor: fine in fp16
head = nn.Linear(8, 1)
head.half()  # trained below: the optimizer holds fp16 weights
optimizer = torch.optim.SGD(head.parameters(), lr=0.01)

for _ in range(3):
    with torch.no_grad():
        feats = encoder(torch.randn(4, 8, dtype=torch.float16))
    loss = head(feats).float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
