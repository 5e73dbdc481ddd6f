"""AMP calls that raise, as on a GPU running out of memory: verify must conclude nothing from them.

    oom-in-step   the optimizer step inside scaler.step raises at the second iteration (no
                  scaler.update follows: that is not "step without update")
    clip-raises   the first clip runs on scaled, overflowing gradients with error_if_nonfinite=True
                  and raises: the clip-before-unscale finding on that line is not confirmed by it
"""
import sys

import torch

how = sys.argv[1]
torch.manual_seed(0)


class RunsOutOfMemory(torch.optim.SGD):
    calls = 0

    def step(self, closure=None):
        RunsOutOfMemory.calls += 1
        if RunsOutOfMemory.calls == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return super().step(closure)


model = torch.nn.Linear(8, 1)
optimizer = RunsOutOfMemory(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24 if how == "clip-raises" else 2.0**16)
for step in range(4):
    x = torch.randn(4, 8) * (1e3 if how == "clip-raises" else 1.0)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    if how == "clip-raises":
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
