"""Two clean steps, then ends the way argv[1] says: raise, exit, os_exit, sigint, nostep, cuda."""
import os
import signal
import sys

import torch

how = sys.argv[1]
device = "cuda" if how == "cuda" else "cpu"  # "cuda" is hard-coded: needs --device cpu here
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda" if how == "cuda" else "cpu")
for step in range(2 if how != "nostep" else 0):
    x = torch.randn(2, 4, device=device)
    with torch.autocast(device, dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
if how == "raise":
    raise ValueError("boom")
if how == "exit":
    sys.exit(3)
if how == "os_exit":
    sys.stdout.flush()
    os._exit(4)
if how == "sigint":
    os.kill(os.getpid(), signal.SIGINT)
    import time

    time.sleep(5)
if how == "cuda":
    assert model.weight.device.type == "cpu" and scaler.is_enabled()
    with torch.autocast("cuda"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16
    torch.cuda.synchronize()
