"""A class-based trainer written for PyTorch 1.x AMP: four of the classic mistakes at once.

`amplint check examples/` reports: the deprecated `torch.cuda.amp` names (AMP401, with a safe
fix), the backward inside the autocast block (AMP201), clipping through a helper before
`unscale_` (AMP101). Runs on CPU (`python examples/train_legacy_amp_trainer.py`).
"""
import torch
from torch import nn
from torch.cuda.amp import GradScaler, autocast



class Trainer:
    def __init__(self, model: nn.Module, use_amp: bool) -> None:
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        self.scaler = GradScaler(enabled=use_amp)
        self.use_amp = use_amp

    def _clip(self, max_norm: float = 1.0) -> None:
        nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)

    def step(self, x: torch.Tensor) -> float:
        with autocast(enabled=self.use_amp):
            loss = self.model(x).pow(2).mean()
            self.scaler.scale(loss).backward()
        self._clip()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
        return loss.item()


if __name__ == "__main__":
    trainer = Trainer(nn.Linear(8, 1), use_amp=torch.cuda.is_available())
    for _ in range(3):
        print(trainer.step(torch.randn(4, 8)))
