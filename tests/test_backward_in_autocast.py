"""AMP201 through helpers: a backward reached inside autocast counts when the function that
enters the region trains (steps, updates a scaler, zeroes gradients), not in a measurement.

Not a fixture: `verify` reports every backward run under autocast, a memory probe's included,
so the probe below cannot be a good_ fixture (runtime findings must be empty there)."""

from __future__ import annotations

import textwrap

from amplint.engine import check_source

PROBE = '''
import torch
from copy import deepcopy

def profile(model, batch_sizes):
    for b in batch_sizes:
        model(torch.randn(b, 8)).sum().backward()

def autobatch(model):
    profile(model, (1, 2, 4))
    return 4

def check_train_batch_size(model):
    with torch.autocast("cuda", dtype=torch.float16):
        return autobatch(deepcopy(model).train())

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batch = check_train_batch_size(model)
for _ in range(3):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(torch.randn(batch, 8)).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
'''


def _amp201(source: str) -> list[int]:
    return [d.span.line for d in check_source(textwrap.dedent(source), "t.py", select=["AMP201"])]


def test_a_memory_probe_backward_under_autocast_is_not_training() -> None:
    # ultralytics' AutoBatch: check_train_batch_size -> autobatch -> profile, nothing stepped;
    # the script's own loop (which does step) only calls check_train_batch_size.
    assert _amp201(PROBE) == []


def test_the_probe_reported_when_the_function_entering_autocast_steps() -> None:
    stepping = PROBE.replace(
        "        return autobatch(deepcopy(model).train())",
        "        n = autobatch(model)\n        optimizer.step()\n        return n",
    )
    assert _amp201(stepping) == [15]  # at the call of autobatch


def test_a_helper_backward_inside_the_trainers_own_autocast_is_reported() -> None:
    source = PROBE + '''
def backward(loss):
    loss.backward()

def train_step(x):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
        backward(loss)
    optimizer.step()
'''
    assert _amp201(source) == [33]  # at backward(loss)
