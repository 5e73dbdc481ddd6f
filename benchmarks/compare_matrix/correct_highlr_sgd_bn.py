"""Correct fp16 AMP in the torchvision reference's shape: a small conv net with BatchNorm, SGD with
momentum at a high learning rate, unscale_ then clip_grad_norm_.  The first updates move the loss a
lot, so a rounding-sized difference in the forward is already visible after one or two updates.
"""
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
images = torch.randn(256, 3, 8, 8)
labels = (images[:, 0].mean((1, 2)) > 0).long() + 2 * (images[:, 1].mean((1, 2)) > 0).long()
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
    nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=2.0, momentum=0.9, weight_decay=1e-4)
scaler = torch.amp.GradScaler(device)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

for step in range(100):
    idx = torch.randint(0, 256, (8,))
    x, y = images[idx].to(device), labels[idx].to(device)
    with torch.autocast(device, dtype=torch.float16):
        loss = criterion(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
