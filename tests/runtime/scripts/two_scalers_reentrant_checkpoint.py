"""Two scalers, m1 run through torch.utils.checkpoint (argv[1] == "1": use_reentrant=True); m1's
clip runs before its scaler unscaled (AMP101, line 18)."""
import sys, torch
from torch.utils.checkpoint import checkpoint
REENTRANT = sys.argv[1] == "1"
torch.manual_seed(0)
m1 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
m2 = torch.nn.Linear(4, 1)
o1 = torch.optim.SGD(m1.parameters(), lr=0.01); o2 = torch.optim.SGD(m2.parameters(), lr=0.01)
s1 = torch.amp.GradScaler("cpu"); s2 = torch.amp.GradScaler("cpu")
for i in range(20):
    x = torch.randn(8, 4, requires_grad=REENTRANT)
    with torch.autocast("cpu", dtype=torch.float16):
        l1 = checkpoint(m1, x, use_reentrant=REENTRANT).float().pow(2).mean()
        l2 = m2(x).float().pow(2).mean()
    o1.zero_grad(); o2.zero_grad()
    s1.scale(l1).backward(); s2.scale(l2).backward()
    torch.nn.utils.clip_grad_norm_(m1.parameters(), 1.0)   # BUG: s1 not unscaled
    s2.unscale_(o2); torch.nn.utils.clip_grad_norm_(m2.parameters(), 1.0)
    s1.step(o1); s2.step(o2); s1.update(); s2.update()
