"""Reproducers of the tenth hostile pass: realistic shapes where a fix still changed a program.

AMP501: a mask filled with `finfo(float32).min` and then cast to bfloat16 (-inf, a NaN row
after softmax), or divided by a contrastive temperature (-inf, NaN against a zero soft
target): -1e9 survived both. AMP103: a probe head updated by hand from `p.grad` in a helper
of another module. Each must now get no fix, or one that changes nothing.
"""

CASES: dict[str, dict[str, str]] = {
    "AMP501-mask_cast_to_bf16": {
        "train.py": '''\
# A decoder trained with --precision fp16|bf16; the attention mask is built in float32
# (HF-style) and cast to the compute dtype. Batch is left-padded for generation-style training.
import argparse
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--precision", default="bf16", choices=["fp16", "bf16"])
args = p.parse_args([])
compute_dtype = torch.float16 if args.precision == "fp16" else torch.bfloat16


def attention(q, k, v, pad):
    L = q.shape[-2]
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    scores.masked_fill_(torch.ones(L, L, dtype=torch.bool).triu(1) | pad[:, None, :], -1e9)
    probs = scores.to(compute_dtype).softmax(-1)
    return probs @ v.to(compute_dtype)


torch.manual_seed(0)
q, k, v = torch.randn(3, 2, 4, 8).unbind(0)
pad = torch.tensor([[True, False, False, False], [False, False, False, False]])  # left padding
out = attention(q, k, v, pad)
print("nan rows:", torch.isnan(out).any(-1).tolist())
print(out.float().sum())
''',
    },
    "AMP501-contrastive_temperature": {
        "train.py": '''\
# SupCon / CLIP-distillation style loss: self-similarity masked out, divided by a temperature,
# soft targets (zero on the diagonal). The script supports --fp16 (a GradScaler), run in fp32 here.
import argparse
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--fp16", action="store_true")
args = p.parse_args([])

torch.manual_seed(0)
proj = nn.Linear(8, 8)
opt = torch.optim.SGD(proj.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", enabled=args.fp16)


def contrastive_loss(x, labels, tau=0.07):
    h = proj(x)
    sim = h.masked_fill(torch.eye(8, dtype=torch.bool), -1e9)
    logits = sim / tau
    pos = (labels[:, None] == labels[None, :]).float().fill_diagonal_(0)
    targets = pos / pos.sum(1, keepdim=True).clamp(min=1)
    return -(targets * F.log_softmax(logits, -1)).sum(-1).mean()


x = torch.randn(8, 8)
labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
with torch.autocast("cpu", dtype=torch.float16, enabled=args.fp16):
    loss = contrastive_loss(x, labels)
scaler.scale(loss).backward()
scaler.step(opt)
scaler.update()
print("loss", loss.item())
print("weight", proj.weight.sum().item())
''',
    },
    "AMP103-manual_update_other_module": {
        "probes.py": '''\
import torch


@torch.no_grad()
def sgd_update(module, lr):
    for p in module.parameters():
        p.add_(p.grad, alpha=-lr)
        p.grad = None
''',
        "train.py": '''\
# Linear probe trained beside the model; its update lives in probes.py.
import torch
import torch.nn as nn
from probes import sgd_update

torch.manual_seed(0)
model = nn.Linear(4, 4)
probe = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for step in range(2):
    x = torch.randn(8, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        feats = model(x)
        loss = feats.float().pow(2).mean()
    scaler.scale(loss).backward()
    ploss = probe(feats.detach().float()).pow(2).mean()
    ploss.backward()
    sgd_update(probe, 0.1)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
print("probe", probe.weight.sum().item())
''',
    },
}
