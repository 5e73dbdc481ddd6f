"""GradScaler step-graph rules on shapes of real code: skipped steps, exclusive branches,
stand-in scalers, backward passes that are not the training step (issue 27)."""

from __future__ import annotations

import textwrap

import pytest

from amplint.engine import check_source

HEAD = """
import math
import torch
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cuda")
for i, x in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
"""


def _loop(body: str) -> str:
    return HEAD + textwrap.indent(textwrap.dedent(body), "    ")


def _codes(source: str, code: str) -> list[tuple[int, str]]:
    return [(d.span.line, d.code) for d in check_source(textwrap.dedent(source), "t.py", select=[code])]


# --- AMP107: a step skipped on purpose is not accumulation --------------------------------

SKIP_CONDITIONS = [
    "math.isfinite(loss.item())",
    "torch.isfinite(loss)",
    "not torch.isnan(loss)",
    "i >= warmup_iters",
    "not skip_this_step",
    "found_inf == 0",
]


@pytest.mark.parametrize("condition", SKIP_CONDITIONS)
@pytest.mark.parametrize("clear_at", ["top", "end"])
def test_amp107_skipped_step_with_zero_grad_every_iteration_is_not_accumulation(condition: str, clear_at: str) -> None:
    top = "optimizer.zero_grad()\n" if clear_at == "top" else ""
    end = "optimizer.zero_grad(set_to_none=True)\n" if clear_at == "end" else ""
    src = _loop(
        f"""
{top}scaler.scale(loss).backward()
scaler.unscale_(optimizer)
if {condition}:
    scaler.step(optimizer)
scaler.update()
{end}"""
    )
    assert _codes(src, "AMP107") == []


@pytest.mark.parametrize("condition", SKIP_CONDITIONS)
def test_amp107_skipped_step_that_keeps_its_gradients_accumulates(condition: str) -> None:
    # zero_grad only where the step runs: a skipped iteration's gradients reach the next one.
    src = _loop(
        f"""
scaler.scale(loss).backward()
if {condition}:
    scaler.step(optimizer)
    optimizer.zero_grad()
scaler.update()
"""
    )
    assert [c for _, c in _codes(src, "AMP107")] == ["AMP107"]


@pytest.mark.parametrize(
    "condition",
    ["(i + 1) % accum == 0", "i % args.gradient_accumulation_steps == 0", "step_count == accum_steps",
     "(i + 1) % k == 0 or i == last"],
)
def test_amp107_periodic_step_is_accumulation_even_with_zero_grad_every_iteration(condition: str) -> None:
    src = _loop(
        f"""
optimizer.zero_grad()
scaler.scale(loss).backward()
if {condition}:
    scaler.step(optimizer)
scaler.update()
"""
    )
    assert [c for _, c in _codes(src, "AMP107")] == ["AMP107"]


def test_amp107_zero_grad_of_the_model_clears_too() -> None:
    src = _loop(
        """
model.zero_grad()
scaler.scale(loss).backward()
if torch.isfinite(loss):
    scaler.step(optimizer)
scaler.update()
"""
    )
    assert _codes(src, "AMP107") == []
