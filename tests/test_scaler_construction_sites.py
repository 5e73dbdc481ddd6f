"""Where a GradScaler is built decides two rules the fixtures pin one shape each of:
AMP204 (a scaler that exists or is enabled only in bfloat16 runs) and AMP105 (a scaler
built by a function that runs once per epoch).  These are the variants."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint.analysis.model import ModuleModel
from amplint.analysis.precision import selects_bf16
from amplint.engine import check_source


def lint(code: str, source: str) -> list[int]:
    return [d.span.line for d in check_source(textwrap.dedent(source), "t.py", select=[code])]


# --- AMP204: conditions that select bfloat16 ----------------------------------------------


@pytest.mark.parametrize(
    ("test", "truth", "selects"),
    [
        ("args.bf16", True, True),
        ("use_bfloat16", True, True),
        ("args.bf16", False, False),
        ("not args.bf16", True, False),
        ("not args.bf16", False, True),
        ("amp_dtype == torch.bfloat16", True, True),
        ("torch.bfloat16 == amp_dtype", True, True),
        ("amp_dtype is torch.bfloat16", True, True),
        ("amp_dtype == torch.bfloat16", False, False),
        ("amp_dtype != torch.bfloat16", False, True),
        ("amp_dtype != torch.bfloat16", True, False),
        ('args.precision == "bf16"', True, True),
        ('cfg.precision in ("bf16", "bf16-mixed")', True, True),
        ('cfg.precision in ("bf16", "fp16")', True, False),
        ("args.amp and args.bf16", True, True),
        ("args.fp16 or args.bf16", True, False),
        ("args.bf16 or use_bfloat16", True, True),
        ("args.fp16", True, False),
        ("amp_dtype == torch.float16", True, False),
        ("torch.cuda.is_bf16_supported()", True, False),
        ("args.amp", True, False),
    ],
)
def test_which_conditions_select_bfloat16(test: str, truth: bool, selects: bool) -> None:
    model = ModuleModel.build(cst.parse_module("import torch\n"))
    assert selects_bf16(cst.parse_expression(test), model, truth) is selects


SCALER_HELPER = """\
import argparse
import torch

def get_scaler(args):
    {body}

def main(args):
    dtype = {dtype}
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = get_scaler(args)
    for _ in range(3):
        with torch.autocast("cuda", dtype=dtype):
            loss = model(torch.randn(4, 8)).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
"""


@pytest.mark.parametrize(
    ("body", "dtype", "found"),
    [
        ("if args.bf16:\n        return torch.amp.GradScaler('cuda')\n    return None", "torch.bfloat16 if args.bf16 else torch.float16", [6]),
        ("return torch.amp.GradScaler('cuda') if args.bf16 else None", "torch.bfloat16 if args.bf16 else torch.float16", [5]),
        ("return torch.amp.GradScaler('cuda', enabled=args.bf16)", "torch.bfloat16 if args.bf16 else torch.float16", [5]),
        ("if not args.bf16:\n        return torch.amp.GradScaler('cuda')\n    return None", "torch.bfloat16 if args.bf16 else torch.float16", []),
        ("return torch.amp.GradScaler('cuda', enabled=args.fp16)", "torch.bfloat16 if args.bf16 else torch.float16", []),
        # the flag says bf16, but no autocast of this module can be bf16
        ("if args.bf16:\n        return torch.amp.GradScaler('cuda')\n    return None", "torch.float16", []),
        # every autocast is bf16: any enabled scaler, as before
        ("return torch.amp.GradScaler('cuda')", "torch.bfloat16", [5]),
    ],
)
def test_a_scaler_only_for_bf16_runs_is_reported_where_bf16_autocast_may_run(body: str, dtype: str, found) -> None:
    assert lint("AMP204", SCALER_HELPER.format(body=body, dtype=dtype)) == found


# --- AMP105: a scaler built by a function called once per epoch -----------------------------

PER_EPOCH = """\
import torch

def train(model, optimizer, batches):
    scaler = torch.amp.GradScaler("cuda")
    for x in batches:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

def main():
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    {loop}

{entry}
"""


@pytest.mark.parametrize(
    ("loop", "entry", "found"),
    [
        # per epoch, main() run from the __main__ guard or at module level: at the construction
        ("for epoch in range(3):\n        train(model, optimizer, [])", 'if __name__ == "__main__":\n    main()', [4]),
        ("for epoch in range(3):\n        train(model, optimizer, [])", "main()", [4]),
        ("epoch = 0\n    while epoch < 3:\n        train(model, optimizer, [])\n        epoch += 1", "main()", [4]),
        # main() itself called in a loop of runs: each run is independent
        ("train(model, optimizer, [])", "for seed in range(3):\n    main()", []),
        # once: one scaler
        ("train(model, optimizer, [])", "main()", []),
    ],
)
def test_a_scaler_built_by_a_function_called_per_epoch(loop: str, entry: str, found) -> None:
    assert lint("AMP105", PER_EPOCH.format(loop=loop, entry=entry)) == found
