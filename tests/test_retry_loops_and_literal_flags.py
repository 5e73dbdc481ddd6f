"""How the step graph reads retry loops, flags set to literals and code switched off by hand.

`while True: try: ... scaler.step(opt) ... except OOM: found = True ... if found: continue;
break` retries one batch: its iteration is not a training iteration, so the update belongs to
the caller's loop. The literal `found = False` before the step decides `if found: continue`
after it; a flag computed again (`found = other()`) decides nothing, and then the retry loop
may run the step twice without an update between."""

from __future__ import annotations

import textwrap

from amplint.engine import check_source

TRAINER = """\
import torch


class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(4, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.scaler = torch.amp.GradScaler("cuda")

    def fit(self, loader):
        for x in loader:
            self.train_batch(x)
            self.scaler.update()

    def train_batch(self, x):
        while True:
            found = False
            try:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = self.model(x).sum()
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
            except torch.cuda.OutOfMemoryError:
                found = True
{recompute}            if found:
                x = x[: len(x) // 2]
                continue
            break
"""


def _codes(source: str, code: str) -> list[int]:
    found = check_source(textwrap.dedent(source), "t.py", select=[code])
    return [d.span.line for d in found if d.code == code]


def test_a_retry_loop_decided_by_a_literal_flag_is_not_the_training_loop() -> None:
    assert _codes(TRAINER.format(recompute=""), "AMP102") == []


def test_a_flag_computed_again_after_the_step_decides_nothing() -> None:
    # `found = thrashing()` may be true after a step that succeeded: the retry then steps
    # again before `fit` updates the scaler.
    source = TRAINER.format(recompute="            found = self.thrashing()\n")
    assert _codes(source, "AMP102") == [22]  # the step


def test_code_under_if_false_never_runs() -> None:
    source = """\
    import torch
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        if False and debug:
            scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    """
    assert _codes(source, "AMP113") == [] and _codes(source, "AMP102") == []


def test_an_update_given_the_new_scale_is_not_a_micro_batch_update() -> None:
    source = """\
    import torch
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for i, x in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum() / 4
        scaler.scale(loss).backward()
        if (i + 1) % 4 == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        if i % 100 == 0 and scaler.get_scale() < 1.0:
            scaler.update(scaler.get_scale() * 2.0)
    """
    assert _codes(source, "AMP107") == []
