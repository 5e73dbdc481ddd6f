"""A name rebound from itself many times costs the analysis a walk linear in its bindings.

Real code rebinds a name from its own value again and again (`module =
checkpoint_wrapper(module) if self.use_checkpoint else module`, fifteen times in one method
of a video UNet; `dtype = torch.float16 if flag else dtype`).  Every analysis that asks
what a name holds (which autocast a `with` item enters, which dtype a value has, which
class an instance is of) follows every binding, and each binding names the same name
again: asked afresh at every level, the walk grows as bindings ** depth, minutes and
gigabytes for one file.  amplint/analysis/memo.py keeps each answer for one module's
analysis.  Counted here by the primitive every walk uses (`ValueResolver.assigned`), not
timed: the count before was in the hundreds of thousands and climbing.
"""

from __future__ import annotations

import pytest

from amplint.analysis import values
from amplint.config import Config
from amplint.engine import check_source
from amplint.rule_catalog import CATALOG

REBOUND = 40
SHAPES = {
    "autocast-context": "    ctx = torch.autocast('cuda', dtype=dtype) if flag else ctx\n    with ctx:\n        loss = model(x)\n",
    "dtype": "    dtype = torch.float16 if flag else dtype\n    x = x.to(dtype)\n",
    "model": "    model = model.half() if flag else model\n    y = model(x)\n",
    "wrapped-module": "    model = checkpoint_wrapper(model) if flag else model\n    x = model(x)\n",
    "scaler": "    scaler = torch.amp.GradScaler('cuda') if flag else scaler\n    scaler.scale(loss).backward()\n",
    "optimizer": "    opt = wrap(opt) if flag else opt\n    opt.step()\n",
}
STEP = (
    "    with torch.autocast('cuda', dtype=dtype):\n        loss = model(x).float().log() / x.sum()\n"
    "    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n    scaler.step(opt)\n    scaler.update()\n"
    "    return train(model, x, opt, scaler, ctx, dtype, flag, loss, wrap)\n"
)


class _Exploded(Exception):
    pass


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_name_rebound_from_itself_is_walked_once_per_binding(shape: str, monkeypatch) -> None:
    source = (
        "import torch\nfrom fairscale.nn.checkpoint import checkpoint_wrapper\n\n\n"
        "def train(model, x, opt, scaler, ctx, dtype, flag, loss, wrap):\n" + SHAPES[shape] * REBOUND + STEP
    )
    asked = []
    real = values.ValueResolver.assigned

    def counted(self, *args, **kwargs):
        asked.append(1)
        if len(asked) > 50_000:
            raise _Exploded
        return real(self, *args, **kwargs)

    monkeypatch.setattr(values.ValueResolver, "assigned", counted)
    every_rule = Config(select=tuple(e.code for e in CATALOG), preview=True)
    check_source(source, "train.py", every_rule)
    assert len(asked) < 2_000  # 50-320 per shape
