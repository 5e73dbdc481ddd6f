"""Two scalers; only the second unscales, then one clip covers both models (AMP101: m1's gradients are scaled)."""
import itertools, torch
torch.manual_seed(0)
m1 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
m2 = torch.nn.Linear(4, 1)
o1 = torch.optim.SGD(m1.parameters(), lr=0.01); o2 = torch.optim.SGD(m2.parameters(), lr=0.01)
s1 = torch.amp.GradScaler("cpu"); s2 = torch.amp.GradScaler("cpu")
for i in range(20):
    x = torch.randn(8, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        l1 = m1(x).float().pow(2).mean()
        l2 = m2(x).float().pow(2).mean()
    o1.zero_grad(); o2.zero_grad()
    s1.scale(l1).backward(); s2.scale(l2).backward()
    s2.unscale_(o2)                      # BUG: s1.unscale_(o1) forgotten
    torch.nn.utils.clip_grad_norm_(itertools.chain(m1.parameters(), m2.parameters()), 1.0)
    s1.step(o1); s2.step(o2); s1.update(); s2.update()
