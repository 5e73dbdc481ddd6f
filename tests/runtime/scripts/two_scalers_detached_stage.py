"""Two scalers; m1's scaled gradient reaches it through feat.backward(feat_d.grad) at a detached stage
boundary, and m1 is clipped before its scaler unscales (AMP101)."""
import torch
torch.manual_seed(0)
m1 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
head = torch.nn.Linear(4, 1)
m2 = torch.nn.Linear(4, 1)
o1 = torch.optim.SGD(list(m1.parameters()) + list(head.parameters()), lr=0.01); o2 = torch.optim.SGD(m2.parameters(), lr=0.01)
s1 = torch.amp.GradScaler("cpu"); s2 = torch.amp.GradScaler("cpu")
for i in range(20):
    x = torch.randn(8, 4)
    o1.zero_grad(); o2.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        feat = m1(x)
    # stage boundary (pipeline style): the head's backward stops at a detached input
    feat_d = feat.detach().requires_grad_()
    with torch.autocast("cpu", dtype=torch.float16):
        l1 = head(feat_d).float().pow(2).mean()
        l2 = m2(x).float().pow(2).mean()
    s1.scale(l1).backward(); s2.scale(l2).backward()
    feat.backward(feat_d.grad)           # scaled gradient into m1
    torch.nn.utils.clip_grad_norm_(m1.parameters(), 1.0)   # BUG: s1 not unscaled
    s1.unscale_(o1)
    s2.unscale_(o2); torch.nn.utils.clip_grad_norm_(m2.parameters(), 1.0)
    s1.step(o1); s2.step(o2); s1.update(); s2.update()
