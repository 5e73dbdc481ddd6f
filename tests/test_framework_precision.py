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


@pytest.mark.parametrize("code", ("AMP115", "AMP207", "AMP209"))
def test_docstring_example_fires_and_use_instead_does_not(code: str) -> None:
    doc = BY_CODE[code].__doc__
    example, use_instead = re.findall(r"```python\n(.*?)```", doc, re.S)[:2]
    head = "import torch\n"
    assert _lines(head + textwrap.dedent(example), code), f"{code}: the Example block should fire"
    assert not _lines(head + textwrap.dedent(use_instead), code), f"{code}: the Use instead block should not fire"


@pytest.mark.parametrize("code", ("AMP115", "AMP207", "AMP209"))
def test_new_rules_start_in_the_preview_tier(code: str) -> None:
    from amplint.rule_catalog import CATALOG

    assert next(e for e in CATALOG if e.code == code).tier == "preview"


@pytest.mark.parametrize("code", ("AMP115", "AMP207", "AMP209"))
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


# --- AMP207 -----------------------------------------------------------------------------------


def _amp207(body: str) -> list[int]:
    return _lines(body, "AMP207")


ARGS = """
from transformers import TrainingArguments
args = TrainingArguments(output_dir="out", {kwargs})
"""


@pytest.mark.parametrize("kwargs", ["fp16=True, bf16=True", "bf16=True, fp16=True, tf32=True", "fp16=1, bf16=True"])
def test_training_arguments_with_both_literally_on_are_reported(kwargs: str) -> None:
    assert _amp207(ARGS.format(kwargs=kwargs)) == [3]


@pytest.mark.parametrize(
    "kwargs",
    [
        "fp16=True",
        "bf16=True",
        "fp16=True, bf16=False",
        'fp16=True, bf16="auto"',
        "fp16=args.fp16, bf16=args.bf16",
        "fp16=not is_bfloat16_supported(), bf16=is_bfloat16_supported()",
        "fp16=True, bf16_full_eval=True",
    ],
)
def test_training_arguments_without_two_literal_trues_are_not_reported(kwargs: str) -> None:
    assert _amp207(ARGS.format(kwargs=kwargs)) == []


def test_both_through_names_and_a_spread_dict_are_reported() -> None:
    src = """
    from transformers import Seq2SeqTrainingArguments
    USE_FP16 = True
    base = {"output_dir": "out", "fp16": USE_FP16, "bf16": True}
    args = Seq2SeqTrainingArguments(**base)
    """
    assert _amp207(src) == [5]


def test_a_message_names_both_settings() -> None:
    (d,) = _findings(ARGS.format(kwargs="fp16=True, bf16=True"), "AMP207")
    assert "`fp16=True`" in d.message and "`bf16=True`" in d.message


INIT = """
import deepspeed
{config}
engine, opt, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), {keyword}=ds_config)
"""


@pytest.mark.parametrize(
    "config",
    [
        'ds_config = {"fp16": {"enabled": True}, "bf16": {"enabled": True}}',
        'ds_config = {"fp16": {"enabled": True, "loss_scale": 0}, "bfloat16": {"enabled": True}}',
        "ds_config = dict(fp16=dict(enabled=True), bf16=dict(enabled=True), train_batch_size=8)",
    ],
    ids=["dict", "old-bfloat16-key", "dict-call"],
)
@pytest.mark.parametrize("keyword", ["config", "config_params"])
def test_a_deepspeed_dict_enabling_both_is_reported_at_initialize(config: str, keyword: str) -> None:
    assert _amp207(INIT.format(config=config, keyword=keyword)) == [4]


def test_the_dict_built_elsewhere_is_a_related_location() -> None:
    (d,) = _findings(INIT.format(config='ds_config = {"fp16": {"enabled": True}, "bf16": {"enabled": True}}', keyword="config"), "AMP207")
    assert [r.span.line for r in d.related] == [3]


@pytest.mark.parametrize(
    "config",
    [
        # fp16 with dynamic loss scaling from the default power: a valid fp16 config
        'ds_config = {"fp16": {"enabled": True, "loss_scale": 0}}',
        'ds_config = {"fp16": {"enabled": True, "loss_scale": 0}, "bf16": {"enabled": False}}',
        # "auto" is filled in from the arguments; a missing "enabled" is DeepSpeed's default, off
        'ds_config = {"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}',
        'ds_config = {"fp16": {"enabled": True}, "bf16": {}}',
        'ds_config = {"fp16": {"enabled": args.fp16}, "bf16": {"enabled": True}}',
        # a spread may override either section
        'ds_config = {"fp16": {"enabled": True}, "bf16": {"enabled": True}, **overrides}',
        # changed in place before DeepSpeed reads it
        'ds_config = {"fp16": {"enabled": True}, "bf16": {"enabled": True}}\nds_config["bf16"]["enabled"] = args.bf16',
        'ds_config = {"fp16": {"enabled": True}, "bf16": {"enabled": True}}\nds_config.update(precision_sections(args))',
        'ds_config = {"fp16": {"enabled": True}, "bf16": {"enabled": True}}\nset_precision(ds_config, args)',
        'ds_config = {"fp16": {"enabled": True}, "bf16": {"enabled": True}}\ndel ds_config["bf16"]',
    ],
)
def test_deepspeed_configs_that_do_not_prove_both_are_not_reported(config: str) -> None:
    assert _amp207(INIT.format(config=config, keyword="config")) == []


def test_training_arguments_fp16_with_a_bf16_deepspeed_dict_are_reported() -> None:
    src = """
    from transformers import TrainingArguments
    args = TrainingArguments(output_dir="out", fp16=True, deepspeed={"bf16": {"enabled": True}, "zero_optimization": {"stage": 3}})
    """
    assert _amp207(src) == [3]


def test_lightning_16_mixed_with_a_deepspeed_strategy_is_one_precision() -> None:
    src = """
    import lightning.pytorch as pl
    trainer = pl.Trainer(precision="16-mixed", strategy="deepspeed_stage_2")
    """
    assert _amp207(src) == []


# --- AMP207: JSON configs named by a literal path ---------------------------------------------

BOTH_JSON = '{"fp16": {"enabled": true, "loss_scale": 0}, "bf16": {"enabled": true}}'


def _project(tmp_path, script: str, files: dict[str, str], where: str = "train.py"):
    from amplint.project.index import ProjectIndex, Reads

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(script))
    reads = Reads()
    found = check_source(path.read_text(), str(path), select=["AMP207"], project=ProjectIndex(), reads=reads)
    return [d.span.line for d in found], reads


@pytest.mark.parametrize(
    "call",
    [
        'deepspeed.initialize(model=net, config="ds_config.json")',
        'deepspeed.initialize(model=net, config=json.load(open("ds_config.json")))',
        'TrainingArguments(output_dir="out", deepspeed="ds_config.json")',
    ],
)
def test_a_json_config_next_to_the_script_is_read(tmp_path, call: str) -> None:
    script = f"import json\nimport deepspeed\nfrom transformers import TrainingArguments\nx = {call}\n"
    lines, reads = _project(tmp_path, script, {"ds_config.json": BOTH_JSON})
    assert lines == [4]
    # A dependency of the result: the cache recomputes it when the JSON file changes.
    assert str(tmp_path / "ds_config.json") in reads.used


def test_a_json_config_at_the_project_root_is_read_for_a_script_in_a_subfolder(tmp_path) -> None:
    script = 'import deepspeed\ncfg = "configs/ds.json"\nengine = deepspeed.initialize(model=net, config=cfg)\n'
    lines, _ = _project(tmp_path, script, {"configs/ds.json": BOTH_JSON}, where="scripts/train.py")
    assert lines == [3]


def test_a_missing_json_config_proves_nothing_and_is_watched_for(tmp_path) -> None:
    script = 'import deepspeed\nengine = deepspeed.initialize(model=net, config="ds_config.json")\n'
    lines, reads = _project(tmp_path, script, {})
    assert lines == []
    assert str(tmp_path / "ds_config.json") in reads.missing


@pytest.mark.parametrize(
    "text",
    [
        '{"fp16": {"enabled": true, "loss_scale": 0}}',
        '{"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}',
        "not json {",
        "[1, 2]",
    ],
)
def test_json_configs_that_do_not_enable_both_are_not_reported(tmp_path, text: str) -> None:
    script = 'import deepspeed\nengine = deepspeed.initialize(model=net, config="ds_config.json")\n'
    lines, _ = _project(tmp_path, script, {"ds_config.json": text})
    assert lines == []


def test_text_without_a_place_on_disk_reads_no_json() -> None:
    src = 'import deepspeed\nengine = deepspeed.initialize(model=net, config="ds_config.json")\n'
    assert check_source(src, "<string>", select=["AMP207"]) == []
