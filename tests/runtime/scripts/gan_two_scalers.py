"""A GAN with a scaler per network: G's loss also writes scaled gradients into D, which D's
zero_grad drops before D's own scaled backward, unscale_ and clip (correct code)."""
import torch
torch.manual_seed(0)
G = torch.nn.Linear(4, 4); D = torch.nn.Linear(4, 1)
oG = torch.optim.SGD(G.parameters(), lr=0.01); oD = torch.optim.SGD(D.parameters(), lr=0.01)
sG = torch.amp.GradScaler("cpu"); sD = torch.amp.GradScaler("cpu")
for i in range(20):
    z = torch.randn(8, 4); real = torch.randn(8, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        fake = G(z)
        lG = -D(fake).float().mean()
    oG.zero_grad()
    sG.scale(lG).backward()                 # also writes (scaled) grads into D
    with torch.autocast("cpu", dtype=torch.float16):
        lD = (D(fake.detach()).float().mean() - D(real).float().mean())
    oD.zero_grad()                          # D's grads from lG dropped
    sD.scale(lD).backward()
    sD.unscale_(oD); torch.nn.utils.clip_grad_norm_(D.parameters(), 1.0)
    sG.unscale_(oG); torch.nn.utils.clip_grad_norm_(G.parameters(), 1.0)
    sD.step(oD); sG.step(oG); sD.update(); sG.update()
