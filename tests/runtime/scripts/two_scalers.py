"""Two models, each with its own optimizer and GradScaler; both unscale before their clips.
`--forget-first-unscale` drops m1's unscale_: its clip then sees scaled gradients (AMP101)."""
import sys

import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
m1, m2 = torch.nn.Linear(8, 1).to(device), torch.nn.Linear(8, 1).to(device)
o1, o2 = torch.optim.SGD(m1.parameters(), lr=0.01), torch.optim.SGD(m2.parameters(), lr=0.01)
s1, s2 = torch.amp.GradScaler(device), torch.amp.GradScaler(device)
for step in range(8):
    x = torch.randn(4, 8, device=device)
    with torch.autocast(device, dtype=torch.float16):
        l1, l2 = m1(x).float().pow(2).mean(), m2(x).float().pow(2).mean()
    s1.scale(l1).backward()
    s2.scale(l2).backward()
    if "--forget-first-unscale" not in sys.argv:
        s1.unscale_(o1)
    s2.unscale_(o2)
    torch.nn.utils.clip_grad_norm_(m1.parameters(), 1.0)
    torch.nn.utils.clip_grad_norm_(m2.parameters(), 1.0)
    s1.step(o1)
    s2.step(o2)
    s1.update()
    s2.update()
    o1.zero_grad()
    o2.zero_grad()
