"""A single-GPU trainer that leans on the CUDA API the way real trainers do.

Asks torch.accelerator which device to use, turns TF32 on, reads device properties and memory,
overlaps a side stream with events, pins DataLoader memory, compiles the model, resumes from a
checkpoint with map_location="cuda", and clips before unscale_ (AMP101).  Under `--device cpu`
every one of these must run on the CPU and the finding must be confirmed.
"""
import os
import sys
import tempfile

import torch

assert torch.accelerator.is_available() and torch.accelerator.device_count() >= 1
device = torch.accelerator.current_accelerator()
assert device.type == "cuda", device
torch.cuda.set_device(0)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = True
props = torch.cuda.get_device_properties(0)
print(f"{torch.cuda.get_device_name()} sm_{props.major}{props.minor} {props.total_memory >> 20} MiB", flush=True)
free, total = torch.cuda.mem_get_info()
assert 0 <= free <= total

torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
generator = torch.Generator(device="cuda").manual_seed(0)
loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True, pin_memory=True, generator=torch.Generator().manual_seed(0))
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(device.type)

checkpoint = os.path.join(tempfile.mkdtemp(), "last.pt")
torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, checkpoint)
for location in ("cuda", "cuda:0", {"cuda:1": "cuda:0"}, lambda storage, loc: storage.cuda(0)):
    state = torch.load(checkpoint, map_location=location)
model.load_state_dict(state["model"])
scaler.load_state_dict(state["scaler"])

side = torch.cuda.Stream()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.reset_peak_memory_stats()
for epoch in range(2):
    for x, y in loader:
        start.record()
        with torch.cuda.stream(side):
            x = x.to(device, non_blocking=True)
            y = y.cuda(non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)
        x.record_stream(torch.cuda.current_stream())
        noise = torch.randn(x.shape, device=device, generator=generator)
        with torch.autocast(device_type=device.type, dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x + 0.01 * noise).float(), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end)
    print(f"epoch {epoch} loss {loss.item():.4f} {ms:.1f} ms/step peak {torch.cuda.max_memory_allocated() >> 20} MiB", flush=True)
sys.exit(0 if torch.cuda.memory_allocated() >= 0 else 1)
