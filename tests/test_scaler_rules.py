"""AMP102-AMP108 (GradScaler protocol): documentation examples, look-alikes, fixtures that run."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from amplint.engine import check_source
from amplint.registry import BY_CODE

CODES = ("AMP102", "AMP103", "AMP104", "AMP105", "AMP106", "AMP107", "AMP108")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _codes(source: str, code: str) -> list[tuple[int, str]]:
    return [(d.span.line, d.code) for d in check_source(textwrap.dedent(source), "t.py", select=[code])]


@pytest.mark.parametrize("code", CODES)
def test_docstring_example_fires_and_use_instead_does_not(code: str) -> None:
    doc = BY_CODE[code].__doc__
    example, use_instead = re.findall(r"```python\n(.*?)```", doc, re.S)[:2]
    assert _codes(example, code), f"{code}: the Example block should fire"
    assert not _codes(use_instead, code), f"{code}: the Use instead block should not fire"


LOOP = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
{body}
"""


def _loop(body: str) -> str:
    return LOOP.format(body=textwrap.indent(textwrap.dedent(body), "    "))


def test_amp102_update_after_per_optimizer_loop_is_same_iteration() -> None:
    src = _loop(
        """
        scaler.scale(loss).backward()
        for opt in optimizers:
            scaler.step(opt)
        scaler.update()
        """
    )
    assert _codes(src, "AMP102") == []


def test_amp102_update_only_after_training_loop_fires_without_fix() -> None:
    src = _loop(
        """
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        """
    ) + "scaler.update()\n"
    found = check_source(src, "t.py", select=["AMP102"])
    assert [d.code for d in found] == ["AMP102"]
    assert found[0].fix is None  # a second update would raise; moving it is not a local edit


def test_amp103_negated_condition_is_the_other_branch() -> None:
    src = _loop(
        """
        if not use_amp:
            loss.backward()
        else:
            scaler.scale(loss).backward()
        if use_amp:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        """
    )
    assert _codes(src, "AMP103") == []
    assert _codes(src, "AMP104") == []


def test_amp103_different_condition_texts_still_fire() -> None:
    # Nothing ties `if debug` to the scaler: the plain backward does reach scaler.step.
    src = _loop(
        """
        scaler.scale(loss).backward()
        if debug:
            extra = model(x).sum()
            extra.backward()
        scaler.step(optimizer)
        scaler.update()
        """
    )
    assert [c for _, c in _codes(src, "AMP103")] == ["AMP103"]


def test_amp104_deepspeed_like_engine_step_is_not_an_optimizer() -> None:
    src = _loop(
        """
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        lr_scheduler.step()
        ema.step()
        """
    )
    assert _codes(src, "AMP104") == []


def test_amp105_lazy_construction_and_disabled_scaler_do_not_fire() -> None:
    src = """
import torch
for epoch in range(3):
    s = torch.amp.GradScaler("cuda", enabled=False)
    if scaler is None:
        scaler = torch.amp.GradScaler("cuda")
"""
    assert _codes(src, "AMP105") == []


def test_amp106_opaque_payload_is_not_reported() -> None:
    src = """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), **extra_state}, "c.pt")
torch.save(build_state(), "d.pt")
"""
    assert _codes(src, "AMP106") == []


def test_amp106_scaler_factory_module_is_not_training_code() -> None:
    src = """
import torch
def get_grad_scaler(**kwargs):
    return torch.amp.GradScaler(**kwargs)
def load(optimizer, path):
    optimizer.load_state_dict(torch.load(path))
    torch.save({"optimizer": optimizer.state_dict()}, path)
"""
    assert _codes(src, "AMP106") == []


def test_amp107_step_in_a_caller_is_not_guessed() -> None:
    # The loop updates every batch; the step happens somewhere we cannot see.
    src = _loop(
        """
        scaler.scale(loss).backward()
        optimizer_step_elsewhere()
        scaler.update()
        """
    )
    assert _codes(src, "AMP107") == []


def test_amp108_update_between_resets() -> None:
    src = """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
scaler.step(optimizer)
scaler.update()
scaler.scale(loss2).backward()
scaler.unscale_(optimizer)
scaler.step(optimizer)
scaler.update()
"""
    assert _codes(src, "AMP108") == []


def test_amp108_a_second_pass_over_the_optimizers_unscales_again() -> None:
    # Leaving the loop that unscaled every optimizer is not a new iteration of anything.
    src = """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
for opt in optimizers:
    scaler.unscale_(opt)
log_grad_norm(model)
for opt in optimizers:
    scaler.unscale_(opt)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
for opt in optimizers:
    scaler.step(opt)
scaler.update()
"""
    assert _codes(src, "AMP108") == [(9, "AMP108")]


def test_amp108_the_next_pass_of_a_loop_over_optimizers_is_another_optimizer() -> None:
    src = """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
for i, opt in enumerate(optimizers):
    if i == 0:
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(encoder.parameters(), 1.0)
    else:
        scaler.unscale_(opt)
    scaler.step(opt)
scaler.update()
"""
    assert _codes(src, "AMP108") == []


TRAINER_SAVES_ITS_SCALER = """
import torch
class Trainer:
    def __init__(self, model, optimizer):
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda"{enabled})
    def save_scaler(self, folder):
        torch.save(self.scaler.state_dict(), folder + "/scaler.pt")
    def save_trial(self, folder):
        torch.save(self.optimizer.state_dict(), folder + "/optimizer.pt")
"""


def test_amp106_a_module_that_checkpoints_its_scaler_uses_one() -> None:
    # The scaler steps somewhere else (a library); saving its state says it is training state.
    assert _codes(TRAINER_SAVES_ITS_SCALER.format(enabled=""), "AMP106") == [(10, "AMP106")]


def test_amp106_saving_a_literally_disabled_scalers_state_is_no_use() -> None:
    assert _codes(TRAINER_SAVES_ITS_SCALER.format(enabled=", enabled=False"), "AMP106") == []


def test_scaler_fixtures_run_on_cpu() -> None:
    """Fixtures are runnable training scripts (bad, good and fixed), not just text."""
    pytest.importorskip("torch")
    paths = sorted(str(p) for code in CODES for p in (FIXTURES / code).glob("*.py"))
    script = (
        "import runpy, sys, io, contextlib\n"
        "for p in sys.argv[1:]:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        runpy.run_path(p, run_name='__main__')\n"
    )
    done = subprocess.run([sys.executable, "-c", script, *paths], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def test_update_once_per_epoch_is_amp102_not_amp107() -> None:
    src = """
import torch
scaler = torch.amp.GradScaler("cuda")
for epoch in range(3):
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
    scaler.update()
"""
    assert [c for _, c in _codes(src, "AMP102")] == ["AMP102"]
    assert _codes(src, "AMP107") == []


_ACCELERATE_CLIPS = """\
from accelerate import Accelerator
accelerator = Accelerator({config})
model, optimizer = accelerator.prepare(model, optimizer)
for x in loader:
    accelerator.backward(model(x).sum())
    accelerator.clip_grad_norm_(part_a.parameters(), 1.0)
{between}    accelerator.clip_grad_norm_(part_b.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
"""


@pytest.mark.parametrize(
    ("config", "between", "lines"),
    [
        ("", "", [7]),  # the precision comes from the launcher: read as float16
        ('mixed_precision="fp16"', "", [7]),
        ('mixed_precision="bf16"', "", []),  # no GradScaler: nothing is unscaled
        ("", "    optimizer.step()\n", []),  # the prepared optimizer's step updates the scaler
    ],
    ids=["launcher", "fp16", "bf16", "step-between"],
)
def test_two_accelerate_clips_before_a_step_unscale_twice(config: str, between: str, lines: list[int]) -> None:
    """`accelerator.clip_grad_norm_` unscales every prepared optimizer: a second call before
    the step raises (huggingface/transformers#24050; audiolm-pytorch's discriminators)."""
    source = _ACCELERATE_CLIPS.format(config=config, between=between)
    assert [d.span.line for d in check_source(source, "t.py", select=["AMP108"])] == lines
