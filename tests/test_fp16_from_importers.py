"""A model file that says nothing of float16 runs in it when a module that imports it
enters float16 autocast: AMP501 reads that from the importer, and only from an importer."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from amplint.config import Config
from amplint.project import index as project_index
from amplint.runner import check_paths

MODEL = """
import torch


class Attention(torch.nn.Module):
    def forward(self, q, k, mask):
        scores = q @ k.transpose(-1, -2)
        return scores.masked_fill(mask, -1e9).softmax(-1)
"""

TRAINER = """
import torch
{imports}

def train(model, batches, optimizer, scaler):
    for q, k, mask in batches:
        with torch.autocast("cuda", dtype={dtype}):
            loss = model(q, k, mask).float().mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


@pytest.fixture(autouse=True)
def _fresh_index():
    project_index.reset_shared()
    yield
    project_index.reset_shared()


def _check(root: Path, imports: str, dtype: str):
    (root / "model.py").write_text(textwrap.dedent(MODEL))
    (root / "trainer.py").write_text(textwrap.dedent(TRAINER.format(imports=imports, dtype=dtype)))
    result = check_paths([root / "model.py"], Config(root=root, select=("AMP501",)), jobs=1)
    assert not result.errors and not result.crashes
    return result.diagnostics


@pytest.mark.parametrize("imports", ["from model import Attention", "import model"])
def test_mask_in_a_model_file_trained_under_fp16_autocast(tmp_path: Path, imports: str) -> None:
    (found,) = _check(tmp_path, imports, "torch.float16 if args.fp16 else torch.float32")
    assert found.code == "AMP501" and found.span.line == 8
    assert "float16 autocast of trainer.py, which imports this module" in " ".join(found.notes)


def test_importer_through_another_module(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text("from model import Attention\n")
    assert [d.code for d in _check(tmp_path, "from models import Attention", "torch.float16")] == ["AMP501"]


@pytest.mark.parametrize("imports, dtype", [
    ("from model import Attention", "torch.bfloat16"),  # -1e9 fits bfloat16
    ("", "torch.float16"),  # the fp16 trainer does not import the model file
])
def test_no_float16_importer_no_finding(tmp_path: Path, imports: str, dtype: str) -> None:
    assert _check(tmp_path, imports, dtype) == []
