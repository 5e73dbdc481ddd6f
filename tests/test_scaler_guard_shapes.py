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


# --- AMP103: branches that exclude each other ---------------------------------------------

FN = """
import torch
def train(model, optimizer, loader, {params}):
    scaler = torch.amp.GradScaler("cuda", enabled={enabled})
    for x in loader:
        optimizer.zero_grad()
        loss = model(x).mean()
        if {plain_guard}:
            loss.backward()
        scaler.step(optimizer)
        scaler.update()
"""


@pytest.mark.parametrize(
    "params, enabled, plain_guard",
    [
        ("use_amp", "use_amp", "not use_amp"),
        ("args", "args.amp", "not args.amp"),
        ("args", "args.fp16", "args.fp16 is False"),
        ("cfg", "cfg.train.use_amp", "not cfg.train.use_amp"),
        ("amp_dtype", "amp_dtype == torch.float16", "amp_dtype == torch.bfloat16"),
        ("amp_dtype", "amp_dtype == torch.float16", "amp_dtype == torch.float32"),
        ("amp_dtype", "amp_dtype == torch.float16", "amp_dtype != torch.float16"),
        ("precision", "precision == 'fp16'", "precision == 'bf16'"),
        ("use_amp, other", "use_amp and other", "not use_amp"),
    ],
)
def test_amp103_plain_backward_where_the_scalers_enabled_flag_is_false(params: str, enabled: str, plain_guard: str) -> None:
    src = FN.format(params=params, enabled=enabled, plain_guard=plain_guard)
    assert _codes(src, "AMP103") == []


@pytest.mark.parametrize(
    "params, enabled, plain_guard",
    [
        ("use_amp, other", "other", "not use_amp"),
        ("use_amp", "True", "not use_amp"),
        ("use_amp", "use_amp", "use_amp"),
        ("amp_dtype", "amp_dtype == torch.float16", "amp_dtype != torch.bfloat16"),
        ("use_amp, other", "use_amp or other", "not use_amp"),
    ],
)
def test_amp103_plain_backward_where_the_scaler_may_be_on_still_fires(params: str, enabled: str, plain_guard: str) -> None:
    src = FN.format(params=params, enabled=enabled, plain_guard=plain_guard)
    assert _codes(src, "AMP103") == [(9, "AMP103")]


def test_amp103_a_loop_invariant_flag_cannot_take_both_branches_across_a_continue() -> None:
    src = """
import torch
def train(model, optimizer, loader, use_amp):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        loss = model(x).mean()
        if not use_amp:
            loss.backward()
            optimizer.step()
            continue
        if use_amp:
            scaler.scale(loss).backward()
            x = 1
        if use_amp:
            scaler.step(optimizer)
        scaler.update()
"""
    assert _codes(src, "AMP103") == []


TRAINER = """
import torch
class Trainer:
    def __init__(self, use_amp):
        self.scaler = torch.amp.GradScaler("cuda") if use_amp else None

    def backward(self, loss):
{backward}

    def step(self):
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def train_step(self, x):
        loss = self.model(x).mean()
        self.backward(loss)
        self.step()
"""


def test_amp103_a_trainers_own_backward_method_is_read_not_taken_for_torchs() -> None:
    body = "        if self.scaler is not None:\n            self.scaler.scale(loss).backward()\n        else:\n            loss.backward()"
    assert _codes(TRAINER.format(backward=body), "AMP103") == []


def test_amp103_a_trainers_own_backward_method_that_never_scales_fires_at_its_call() -> None:
    assert _codes(TRAINER.format(backward="        loss.backward()"), "AMP103") == [(19, "AMP103")]


# --- AMP103: backward passes that are not the training step ---------------------------------

ESTIMATE = """
import torch
from elsewhere import forward_backward
def {name}(model, batch):
    loss = model(batch).sum()
    loss.backward()
    return [p.grad.abs() for p in model.parameters()]

def main(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    {call}
    for x in loader:
        forward_backward(model, x, scaler)
        {step}
        scaler.update()
        optimizer.zero_grad()
"""


@pytest.mark.parametrize("name", ["saliency", "fisher_estimate", "grad_init", "probe"])
@pytest.mark.parametrize("step", ["scaler.step(optimizer)", "for opt in [optimizer]:\n            scaler.step(opt)"])
def test_amp103_backward_before_the_training_loop_is_an_estimate(name: str, step: str) -> None:
    src = ESTIMATE.format(name=name, call=f"{name}(model, next(iter(loader)))", step=step)
    assert _codes(src, "AMP103") == []


def test_amp103_backward_before_a_step_outside_any_loop_still_fires() -> None:
    src = ESTIMATE.format(name="warmup_step", call="warmup_step(model, next(iter(loader)))\n    scaler.step(optimizer)",
                          step="scaler.step(optimizer)")
    assert _codes(src, "AMP103") == [(11, "AMP103")]


def test_amp103_plain_backward_in_the_loop_that_steps_still_fires() -> None:
    src = ESTIMATE.format(name="probe", call="pass", step="model(x).sum().backward()\n        scaler.step(optimizer)")
    assert _codes(src, "AMP103") == [(14, "AMP103")]


LIBRARY = """
import torch
import deepspeed
from apex import amp
def main(args, model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    {setup}
    for x in loader:
        loss = model(x).mean()
        {backward}
        scaler.step(optimizer)
        scaler.update()
"""


@pytest.mark.parametrize(
    "setup, backward",
    [
        ("model, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer)", "model.backward(loss)"),
        ("net = deepspeed.initialize(model=model)[0]", "net.backward(loss)"),
        ("pass", "with amp.scale_loss(loss, optimizer) as scaled_loss:\n            scaled_loss.backward()"),
        ("pass", "model_engine.backward(loss)"),
        ("pass", "accelerator.backward(loss)"),
        ("pass", "self.manual_backward(loss)"),
    ],
)
def test_amp103_backward_owned_by_a_library_is_scaled_by_the_library(setup: str, backward: str) -> None:
    assert _codes(LIBRARY.format(setup=setup, backward=backward), "AMP103") == []


def test_amp103_backward_of_a_name_not_bound_by_the_library_still_fires() -> None:
    src = LIBRARY.format(setup="engine2 = build(model)", backward="model.backward(loss)")
    assert _codes(src, "AMP103") == [(10, "AMP103")]


# --- AMP101 / AMP104: a stand-in scaler is its own object -----------------------------------

STAND_IN = """
import torch
class DummyGradScaler:
    def scale(self, loss):
        return loss
    def unscale_(self, optimizer):
        pass
    def step(self, optimizer):
        optimizer.step()
    def update(self):
        pass

def train(model, optimizer, loader, use_amp):
    {choice}
    for x in loader:
        loss = model(x).mean()
        grad_scaler.scale(loss).backward()
        {middle}
        grad_scaler.update()
        optimizer.zero_grad()
"""

CHOICES = [
    "grad_scaler = torch.amp.GradScaler('cuda') if use_amp else DummyGradScaler()",
    "grad_scaler = DummyGradScaler() if not use_amp else torch.cuda.amp.GradScaler()",
    "if use_amp:\n        grad_scaler = torch.amp.GradScaler('cuda')\n    else:\n        grad_scaler = DummyGradScaler()",
]
CLIP = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"


def _stand_in(choice: str, middle: str) -> str:
    return STAND_IN.format(choice=choice, middle=textwrap.indent(textwrap.dedent(middle), "        ").strip())


@pytest.mark.parametrize("choice", CHOICES)
def test_amp101_amp104_a_stand_in_scalers_step_is_no_bypass_and_the_clip_is_in_order(choice: str) -> None:
    src = _stand_in(choice, f"grad_scaler.unscale_(optimizer)\n{CLIP}\ngrad_scaler.step(optimizer)")
    assert _codes(src, "AMP101") == []
    assert _codes(src, "AMP104") == []


@pytest.mark.parametrize("choice", CHOICES)
def test_amp101_beside_a_stand_in_the_gradscaler_path_still_counts(choice: str) -> None:
    src = _stand_in(choice, f"{CLIP}\ngrad_scaler.unscale_(optimizer)\ngrad_scaler.step(optimizer)")
    assert [c for _, c in _codes(src, "AMP101")] == ["AMP101"]


@pytest.mark.parametrize("choice", CHOICES)
def test_amp104_beside_a_stand_in_a_plain_step_still_bypasses(choice: str) -> None:
    src = _stand_in(choice, "grad_scaler.unscale_(optimizer)\noptimizer.step()")
    assert [c for _, c in _codes(src, "AMP104")] == ["AMP104"]


def test_a_project_scaler_class_alone_is_still_read_as_the_project_wrote_it() -> None:
    # No torch GradScaler is ever assigned: the class's own methods are what runs.
    src = _stand_in("grad_scaler = DummyGradScaler()", f"grad_scaler.unscale_(optimizer)\n{CLIP}\ngrad_scaler.step(optimizer)")
    assert _codes(src, "AMP104") == []


FLAGGED = """
import torch
def train(model, optimizer, loader, use_grad_scaling):
    scaler = torch.amp.GradScaler("cuda", enabled={enabled})
    for x in loader:
        loss = model(x).mean()
        scaler.scale(loss).backward()
        if use_grad_scaling:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        optimizer.zero_grad()
"""


def test_amp101_clip_where_the_scalers_enabled_flag_is_false() -> None:
    assert _codes(FLAGGED.format(enabled="use_grad_scaling"), "AMP101") == []


def test_amp101_clip_where_the_scaler_may_be_on_still_fires() -> None:
    assert _codes(FLAGGED.format(enabled="True"), "AMP101") == [(14, "AMP101")]
    assert _codes(FLAGGED.format(enabled="other_flag"), "AMP101") == [(14, "AMP101")]


def test_amp104_plain_step_where_the_scalers_enabled_flag_is_false() -> None:
    src = FLAGGED.format(enabled="use_amp").replace("if use_grad_scaling:", "if use_amp:")
    src = src.replace("def train(model, optimizer, loader, use_grad_scaling)", "def train(model, optimizer, loader, use_amp)")
    src = src.replace("            scaler.step(optimizer)\n", "")
    assert _codes(src, "AMP104") == []
    assert [c for _, c in _codes(src.replace("enabled=use_amp", "enabled=True"), "AMP104")] == ["AMP104"]
