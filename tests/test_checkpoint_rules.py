"""AMP106 where checkpoints are written by helpers, built from dataclasses or written by
torch.distributed.checkpoint: each unsaved loss scale is reported once, where the payload
is built (DESIGN: the helper's own write, or the call that hands a built payload over)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from amplint.config import Config
from amplint.engine import check_source
from amplint.project import index as project_index
from amplint.runner import check_paths

TRAIN_LOOP = """
import torch
{imports}
device = "cpu"
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler(device{enabled})
for epoch in range(2):
    with torch.autocast(device, dtype=torch.float16):
        loss = model(torch.randn(4, 8)).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    {call}
"""


@pytest.fixture(autouse=True)
def _fresh_index():
    project_index.reset_shared()
    yield
    project_index.reset_shared()


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip("\n"))
    return tmp_path


def _found(project: Path, targets=None) -> list[tuple[str, int]]:
    # AMP106 is in the preview tier: selecting it alone runs nothing without preview
    config = Config(root=project, select=("AMP106",), preview=True)
    result = check_paths([project / t for t in targets] if targets else [project], config)
    return sorted((Path(d.path).name, d.span.line) for d in result.diagnostics)


HELPERS = {
    "function with an optional optimizer": (
        """
        import torch

        def save_checkpoint(model, epoch, path, optimizer=None):
            d = {"model": model.state_dict(), "epoch": epoch}
            if optimizer is not None:
                d["optimizer"] = optimizer.state_dict()
            torch.save(d, path)
        """,
        "from ckpt import save_checkpoint",
        "save_checkpoint(model, epoch, 'a.pt', optimizer=optimizer)",
        7,
    ),
    "object holding the model and optimizer": (
        """
        import torch

        class Checkpointer:
            def __init__(self, model, optimizer):
                self.model = model
                self.optimizer = optimizer

            def save(self, path):
                torch.save({"net": self.model.state_dict(), "optim": self.optimizer.state_dict()}, path)
        """,
        "from ckpt import Checkpointer",
        "ck = Checkpointer(model, optimizer)\n    ck.save('a.pt')",
        9,
    ),
    "dict built in the helper from keyword arguments": (
        """
        import torch

        def dump_state(path, **parts):
            torch.save(dict(model=parts["model"].state_dict(), optimizer=parts["optimizer"].state_dict()), path)
        """,
        "import ckpt",
        "ckpt.dump_state('a.pt', model=model, optimizer=optimizer)",
        4,
    ),
}


@pytest.mark.parametrize("case", sorted(HELPERS), ids=lambda c: c.replace(" ", "-"))
def test_a_helper_that_builds_the_payload_is_reported_once_at_its_own_write(tmp_path, case) -> None:
    helper, imports, call, line = HELPERS[case]
    project = _project(tmp_path, {
        "ckpt.py": helper,
        "train.py": TRAIN_LOOP.format(imports=imports, enabled="", call=call),
        "finetune.py": TRAIN_LOOP.format(imports=imports, enabled="", call=call),
    })
    assert _found(project) == [("ckpt.py", line)]
    # as pre-commit passes them: the helper's module alone, and the callers alone
    project_index.reset_shared()
    assert _found(project, ["ckpt.py"]) == [("ckpt.py", line)]
    project_index.reset_shared()
    assert _found(project, ["train.py", "finetune.py"]) == []


def test_a_helper_whose_callers_use_no_enabled_scaler_is_not_reported(tmp_path) -> None:
    helper, imports, call, _ = HELPERS["function with an optional optimizer"]
    project = _project(tmp_path, {
        "ckpt.py": helper,
        "train.py": TRAIN_LOOP.format(imports=imports, enabled=", enabled=False", call=call),
        "eval.py": "from ckpt import save_checkpoint\n",
    })
    assert _found(project) == []


def test_a_helper_given_the_scaler_state_by_every_caller_is_not_reported(tmp_path) -> None:
    project = _project(tmp_path, {
        "ckpt.py": """
        import torch

        def save_checkpoint(model, optimizer, path, scaler=None):
            d = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            if scaler is not None:
                d["scaler"] = scaler.state_dict()
            torch.save(d, path)
        """,
        "train.py": TRAIN_LOOP.format(imports="from ckpt import save_checkpoint", enabled="",
                                      call="save_checkpoint(model, optimizer, 'a.pt', scaler=scaler)"),
    })
    assert _found(project) == []


def test_a_payload_built_by_the_caller_is_reported_at_the_call_that_hands_it_over(tmp_path) -> None:
    call = "state = {'model': model.state_dict(), 'optimizer': optimizer.state_dict()}\n    write(state, 'a.pt')"
    project = _project(tmp_path, {
        "io_utils.py": """
        import torch

        def write(obj, path):
            torch.save(obj, path)
        """,
        "train.py": TRAIN_LOOP.format(imports="from io_utils import write", enabled="", call=call),
    })
    assert _found(project) == [("train.py", 14)]
    project_index.reset_shared()
    assert _found(project, ["io_utils.py"]) == []


def _lines(source: str) -> list[int]:
    return [d.span.line for d in check_source(textwrap.dedent(source).lstrip("\n"), "<string>", select=["AMP106"])]


@pytest.mark.parametrize(
    "payload, reported",
    [
        ("asdict(Snap(model=model.state_dict(), optimizer=optimizer.state_dict()))", True),
        ("dataclasses.asdict(Snap(model.state_dict(), optimizer.state_dict()))", True),
        ("Snap(model.state_dict(), optimizer.state_dict())", True),
        ("asdict(dataclasses.replace(Snap(model.state_dict(), {}), optimizer=optimizer.state_dict()))", True),
        ("asdict(Snap(model.state_dict(), optimizer.state_dict(), scaler.state_dict()))", False),
        ("asdict(dataclasses.replace(Snap(model.state_dict(), optimizer.state_dict()), scaler=scaler.state_dict()))", False),
        ("asdict(Other(model.state_dict(), optimizer.state_dict()))", False),  # not a dataclass: unknown
    ],
)
def test_a_dataclass_payload_is_read_through_its_fields(payload, reported) -> None:
    src = f"""
    import dataclasses
    from dataclasses import asdict, dataclass
    import torch

    @dataclass
    class Snap:
        model: dict
        optimizer: dict
        scaler: dict = None

    class Other:
        def __init__(self, a, b):
            self.a, self.b = a, b

    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda")
    for x in range(3):
        scaler.scale(model(x).mean()).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.save({payload}, "ckpt.pt")
    """
    assert _lines(src) == ([22] if reported else [])


@pytest.mark.parametrize(
    "write",
    [
        "dcp.save({'model': model.state_dict(), 'optim': FSDP.optim_state_dict(model, optimizer)}, checkpoint_id='c')",
        "dist_cp.save_state_dict(state_dict={'model': model.state_dict(), 'optim': FSDP.optim_state_dict(model, optimizer)}, storage_writer=w)",
        "torch.save(FSDP.full_optim_state_dict(model, optimizer), 'optim.pt')",
    ],
)
def test_sharded_and_consolidated_fsdp_checkpoints_are_checkpoint_writes(write) -> None:
    src = f"""
    import torch
    import torch.distributed.checkpoint as dcp
    import torch.distributed._shard.checkpoint as dist_cp
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    model = FSDP(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = ShardedGradScaler()
    for x in range(3):
        scaler.scale(model(x).mean()).backward()
        scaler.step(optimizer)
        scaler.update()
        {write}
    """
    assert _lines(src) == [14]


ENGINE = """
import torch

def train(model, optimizer, batches):
    scaler = torch.amp.GradScaler("cuda"{enabled})
    for x in batches:
        scaler.scale(model(x).mean()).backward()
        scaler.step(optimizer)
        scaler.update()
"""

MAIN = """
import torch
import misc
from engine import train
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
train(model, optimizer, [])
misc.save_on_master({payload}, "ckpt.pth")
"""


@pytest.mark.parametrize(
    "enabled, payload, reported",  # NB: a scaler disabled inside the engine still counts (scaler_protocol keys)
    [
        ("", "{'model': model.state_dict(), 'optimizer': optimizer.state_dict()}", True),
        ("", "model.state_dict()", False),  # a bare export of weights
    ],
)
def test_a_scaler_stepped_inside_the_engine_counts_and_a_writer_forwarding_args_is_read_through(
    tmp_path, enabled, payload, reported
) -> None:
    project = _project(tmp_path, {
        "engine.py": ENGINE.format(enabled=enabled),
        "misc.py": "import torch\n\ndef save_on_master(*args, **kwargs):\n    torch.save(*args, **kwargs)\n",
        "main.py": MAIN.format(payload=payload),
    })
    assert _found(project) == ([("main.py", 7)] if reported else [])
    project_index.reset_shared()
    assert _found(project, ["main.py"]) == ([("main.py", 7)] if reported else [])


# --- Accelerate's own GradScaler ----------------------------------------------------------------

ACCELERATE_TRAINER = """
import torch
from accelerate import Accelerator


class Trainer:
    def __init__(self, model, optimizer, **accelerate_kwargs):
        self.accelerator = Accelerator(**accelerate_kwargs)  # `--mixed_precision=fp16` at launch
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)

    def train_step(self, batch):
        loss = self.model(batch).mean()
        self.accelerator.backward(loss)
        self.optimizer.step()
        self.optimizer.zero_grad()

    def save_checkpoint(self, path, update):
        checkpoint = dict(model=self.model.state_dict(), optimizer=self.optimizer.state_dict(), update=update)
        self.accelerator.save(checkpoint, path)

    def load_checkpoint(self, path):
        checkpoint = torch.load(path)
        self.optimizer.load_state_dict(checkpoint["optimizer"])
{extra}"""


def test_a_checkpoint_of_an_accelerate_trainer_leaves_out_accelerates_scaler() -> None:
    """Under float16 mixed precision (a launcher flag: read as on) Accelerate's backward scales
    the loss with its own GradScaler; a hand-made checkpoint of model and optimizer loses it."""
    found = check_source(ACCELERATE_TRAINER.format(extra=""), "trainer.py", select=["AMP106"])
    assert [(d.code, d.span.line) for d in found] == [("AMP106", 19), ("AMP106", 23)]
    assert "accelerator.save_state" in found[0].notes[0]


def test_an_accelerate_trainer_that_saves_its_state_keeps_the_scaler() -> None:
    extra = "\n    def save_all(self, folder):\n        self.accelerator.save_state(folder)\n"
    assert check_source(ACCELERATE_TRAINER.format(extra=extra), "trainer.py", select=["AMP106"]) == []
