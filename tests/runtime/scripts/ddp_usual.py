"""DDP written for GPUs the common way: NCCL, LOCAL_RANK as a device index, device_ids=[local_rank].

It checks that the machine has a GPU per rank, clips before unscale_ (AMP101), and saves a
rank-0 checkpoint that a resume would load with map_location="cuda:<rank>".  Under
`--device cpu` every rank must train on the CPU and confirm the finding.
"""
import gc
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if torch.cuda.device_count() < world:
        sys.exit(f"Unable to locate sufficient {world} gpus")
    torch.cuda.set_device(local_rank)
    torch.manual_seed(local_rank)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(local_rank)
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda")
    for step in range(4):
        x = torch.randn(4, 8).cuda(local_rank, non_blocking=True)
        y = torch.zeros(4, 1, device=local_rank)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    out = os.environ.get("CKPT_DIR")
    if out and dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict(), "scaler": scaler.state_dict()}, os.path.join(out, "ckpt.pt"))
    dist.barrier()
    if out:
        state = torch.load(os.path.join(out, "ckpt.pt"), map_location=f"cuda:{local_rank}")
        model.module.load_state_dict(state["model"])
    # Free DDP (its reducer holds gloo work) before the process group it uses: otherwise torch 2.13's
    # gloo aborts now and then in a C++ destructor at exit ("terminate called without an active
    # exception"), with or without amplint: about 1 run in 10 here, none in 70 once DDP is freed first.
    del model, optimizer, loss
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
