"""AMP115 (a hand-made GradScaler beside a framework that already scales in float16) and AMP207
(float16 and bfloat16 both enabled in one precision configuration): what the framework settings
prove, the shapes found in public code, and the look-alikes that must stay silent."""

from __future__ import annotations

import re
import textwrap

import pytest

from amplint.engine import check_source
from amplint.registry import BY_CODE


def _findings(source: str, code: str, path: str = "t.py", project=None):
    return check_source(textwrap.dedent(source), path, select=[code], project=project)


def _lines(source: str, code: str) -> list[int]:
    return [d.span.line for d in _findings(source, code)]


@pytest.mark.parametrize("code", ("AMP115",))
def test_docstring_example_fires_and_use_instead_does_not(code: str) -> None:
    doc = BY_CODE[code].__doc__
    example, use_instead = re.findall(r"```python\n(.*?)```", doc, re.S)[:2]
    head = "import torch\n"
    assert _lines(head + textwrap.dedent(example), code), f"{code}: the Example block should fire"
    assert not _lines(head + textwrap.dedent(use_instead), code), f"{code}: the Use instead block should not fire"


@pytest.mark.parametrize("code", ("AMP115",))
def test_new_rules_start_in_the_preview_tier(code: str) -> None:
    from amplint.rule_catalog import CATALOG

    assert next(e for e in CATALOG if e.code == code).tier == "preview"


@pytest.mark.parametrize("code", ("AMP115",))
def test_explain_prints_the_rule_page(code: str, capsys) -> None:
    from amplint.cli import main

    assert main(["explain", code]) == 0
    assert code in capsys.readouterr().out


# --- AMP115 -----------------------------------------------------------------------------------

ACCELERATE = """
import torch
from accelerate import Accelerator

accelerator = Accelerator({config})
model, optimizer = accelerator.prepare(model, optimizer)
scaler = torch.amp.GradScaler("cuda")
for x in loader:
{loop}
"""
BACKWARD_OF_SCALED = """\
    accelerator.backward(scaler.scale(model(x).mean()))
    scaler.step(optimizer)
    scaler.update()"""
STEPS_PREPARED = """\
    scaler.scale(model(x).mean()).backward()
    scaler.step(optimizer)
    scaler.update()"""


def _accelerate(config: str, loop: str) -> list[int]:
    return _lines(ACCELERATE.format(config=config, loop=loop), "AMP115")


@pytest.mark.parametrize("loop", [BACKWARD_OF_SCALED, STEPS_PREPARED], ids=["backward-of-scaled-loss", "steps-prepared-optimizer"])
@pytest.mark.parametrize("config", ['mixed_precision="fp16"', "fp16=True", 'mixed_precision="fp16", gradient_accumulation_steps=4'])
def test_a_scaler_used_with_an_fp16_accelerator_is_reported_at_its_construction(config: str, loop: str) -> None:
    assert _accelerate(config, loop) == [7]


@pytest.mark.parametrize("config", ['mixed_precision="bf16"', 'mixed_precision="no"', "", 'mixed_precision="fp8"', "fp16=False"])
def test_an_accelerator_that_does_not_scale_in_fp16_leaves_the_scaler_alone(config: str) -> None:
    assert _accelerate(config, BACKWARD_OF_SCALED) == []


def test_the_finding_names_the_framework_and_points_at_its_setting() -> None:
    (d,) = _findings(ACCELERATE.format(config='mixed_precision="fp16"', loop=BACKWARD_OF_SCALED), "AMP115")
    assert "Accelerate" in d.message and '`mixed_precision="fp16"`' in d.message
    assert [r.span.line for r in d.related] == [5]


def test_a_mixed_precision_chosen_by_an_option_is_not_provably_fp16() -> None:
    src = """
    import argparse
    import torch
    from accelerate import Accelerator

    parser = argparse.ArgumentParser()
    parser.add_argument("--mixed_precision", choices=["no", "fp16", "bf16"], default="no")
    args = parser.parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    model, optimizer = accelerator.prepare(model, optimizer)
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        accelerator.backward(scaler.scale(model(x).mean()))
    """
    assert _lines(src, "AMP115") == []


def test_an_fp16_option_whose_every_choice_is_fp16_is_provable() -> None:
    src = """
    import torch
    from accelerate import Accelerator

    PRECISION = "fp16"
    accelerator = Accelerator(mixed_precision=PRECISION)
    model, optimizer = accelerator.prepare(model, optimizer)
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        accelerator.backward(scaler.scale(model(x).mean()))
    """
    assert _lines(src, "AMP115") == [8]


@pytest.mark.parametrize(
    "loop",
    [
        # the scaler is built and never scales
        "    accelerator.backward(model(x).mean())\n    optimizer.step()",
        # the scaler scales a loss of another, unprepared optimizer: the accelerator never sees it
        "    accelerator.backward(model(x).mean())\n    optimizer.step()\n"
        "    scaler.scale(probe(x).mean()).backward()\n    scaler.step(probe_optimizer)\n    scaler.update()",
    ],
    ids=["never-used", "other-optimizer"],
)
def test_a_scaler_the_accelerator_never_meets_is_not_reported(loop: str) -> None:
    assert _accelerate('mixed_precision="fp16"', loop) == []


def test_a_literally_disabled_scaler_scales_nothing() -> None:
    src = ACCELERATE.format(config='mixed_precision="fp16"', loop=BACKWARD_OF_SCALED).replace(
        'GradScaler("cuda")', 'GradScaler("cuda", enabled=False)')
    assert _lines(src, "AMP115") == []


LIGHTNING = """
import torch
import lightning.pytorch as pl

class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.scaler = torch.cuda.amp.GradScaler()

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        self.manual_backward(self.scaler.scale(self.loss(batch)))
        self.scaler.step(opt)
        self.scaler.update()

trainer = pl.Trainer(precision={precision})
trainer.fit(Model())
"""


@pytest.mark.parametrize("precision", ['"16-mixed"', "16", '"16"'])
def test_a_lightning_module_scaling_by_hand_under_16_mixed_is_reported(precision: str) -> None:
    assert _lines(LIGHTNING.format(precision=precision), "AMP115") == [9]


@pytest.mark.parametrize("precision", ['"bf16-mixed"', '"32-true"', "32", '"16-true"', '"64-true"'])
def test_lightning_precisions_without_a_scaler_leave_the_module_alone(precision: str) -> None:
    assert _lines(LIGHTNING.format(precision=precision), "AMP115") == []


def test_a_plain_module_beside_a_16_mixed_trainer_is_not_a_lightning_module() -> None:
    src = LIGHTNING.format(precision='"16-mixed"').replace("class Model(pl.LightningModule)", "class Model(torch.nn.Module)")
    assert _lines(src, "AMP115") == []


HF = """
import torch
from transformers import Trainer, TrainingArguments

class MyTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.{scaler} = torch.amp.GradScaler("cuda")

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = self.compute_loss(model, inputs)
        self.{used}.scale(loss).backward()
        return loss.detach()

args = TrainingArguments(output_dir="out", {config})
MyTrainer(model=model, args=args).train()
"""


def test_a_trainer_subclass_scaling_by_hand_under_fp16_arguments_is_reported() -> None:
    assert _lines(HF.format(scaler="own_scaler", used="own_scaler", config="fp16=True"), "AMP115") == [8]


@pytest.mark.parametrize("config", ["bf16=True", "fp16=False", "fp16=args.fp16", 'fp16="auto"'])
def test_trainer_arguments_that_are_not_literally_fp16_leave_the_subclass_alone(config: str) -> None:
    assert _lines(HF.format(scaler="own_scaler", used="own_scaler", config=config), "AMP115") == []


def test_the_trainers_own_scaler_is_not_a_hand_made_one() -> None:
    # Older transformers built `self.scaler` for fp16=True; a subclass that uses it scales once.
    src = HF.format(scaler="unused_scaler", used="scaler", config="fp16=True")
    assert _lines(src, "AMP115") == []


def test_a_project_class_named_trainer_is_not_transformers_trainer() -> None:
    src = HF.format(scaler="own_scaler", used="own_scaler", config="fp16=True").replace(
        "from transformers import Trainer, TrainingArguments", "from transformers import TrainingArguments\nclass Trainer:\n    pass")
    assert _lines(src, "AMP115") == []
