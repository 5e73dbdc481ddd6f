"""fp16 AMP whose scheduler steps every iteration: iterations 4 and 7 overflow (an inf in the loss),
GradScaler skips those steps, and the scheduler advances anyway (AMP904).  With --guarded the
scheduler steps only when the scale did not drop: nothing to report.  With --calibrating no loss
overflows but the scale starts at 2**24: the first steps are skipped while it comes down, which is
expected and no finding."""
import sys

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
guarded = "--guarded" in sys.argv
calibrating = "--calibrating" in sys.argv
torch.manual_seed(0)
model = torch.nn.Linear(8, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
ema = torch.optim.swa_utils.AveragedModel(model)
scaler = torch.amp.GradScaler(device, init_scale=2.0**24 if calibrating else 8.0)
for step in range(10):
    x = torch.randn(4, 8, device=device)
    with torch.autocast(device, dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    if step in (4, 7) and not calibrating:
        loss = loss * float("inf")
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    before = scaler.get_scale()
    scaler.update()
    if not guarded or scaler.get_scale() >= before:
        scheduler.step()
        ema.update_parameters(model)
    optimizer.zero_grad()
print(scheduler.last_epoch, optimizer.param_groups[0]["lr"])
