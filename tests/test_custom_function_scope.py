"""AMP205 reports what can run under autocast: a Function something applies, whose
decorators (however spelled) are missing, with the reason when its backward recomputes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from amplint.config import Config
from amplint.engine import check_source
from amplint.project import index as project_index
from amplint.runner import check_paths

LINEAR = """
import torch


class LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w, grad.t() @ x


def run(model, x, w):
    with torch.autocast("cuda", dtype=torch.float16):
        {use}
"""


def findings(source: str):
    return check_source(textwrap.dedent(source), "t.py", select=["AMP205"])


@pytest.mark.parametrize(
    "use",
    [
        "return LinearFn.apply(x, w)",
        "linear = LinearFn.apply\n        return linear(x, w)",
        "return getattr(globals()['LinearFn'], 'apply')(x, w)",
        'return FUNCTIONS["LinearFn"](x, w)',
        "return SubLinear.apply(x, w)\n\n\nclass SubLinear(LinearFn):\n    pass",
    ],
)
def test_function_the_module_names_may_be_applied(use: str) -> None:
    assert [d.code for d in findings(LINEAR.format(use=use))] == ["AMP205"]


def _check_project(root: Path, files: dict[str, str]):
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    project_index.reset_shared()
    try:
        result = check_paths([root / "layers.py"], Config(root=root, select=("AMP205",), preview=True), jobs=1)
    finally:
        project_index.reset_shared()
    assert not result.errors and not result.crashes
    return [d.code for d in result.diagnostics]


def test_function_nothing_applies_never_runs_under_autocast(tmp_path: Path) -> None:
    files = {"layers.py": LINEAR.format(use="return model(x)"), "train.py": "import layers\n"}
    assert _check_project(tmp_path, files) == []


@pytest.mark.parametrize("other", [
    "from layers import LinearFn\ny = LinearFn.apply(x, w)\n",
    'OPS = "layers.LinearFn"  # loaded by name\n',
])
def test_function_another_file_names_may_be_applied(tmp_path: Path, other: str) -> None:
    files = {"layers.py": LINEAR.format(use="return model(x)"), "train.py": other}
    assert _check_project(tmp_path, files) == ["AMP205"]


@pytest.mark.parametrize(
    "imports, forward, backward",
    [
        ("from torch.amp import custom_fwd as f, custom_bwd as b", '@f(device_type="cuda")', '@b(device_type="cuda")'),
        ("import torch.amp as amp", '@amp.custom_fwd(device_type="cuda")', '@amp.custom_bwd(device_type="cuda")'),
        (
            "import functools\nfwd = functools.partial(torch.amp.custom_fwd, device_type='cuda', cast_inputs=torch.float32)\n"
            "bwd = torch.amp.custom_bwd(device_type='cuda')",
            "@fwd",
            "@bwd",
        ),
    ],
)
def test_decorators_through_aliases_count(imports: str, forward: str, backward: str) -> None:
    source = LINEAR.format(use="return LinearFn.apply(x, w)").replace(
        "import torch\n", f"import torch\n{imports}\n", 1
    ).replace(
        "    def forward", f"    {forward}\n    def forward"
    ).replace("    def backward", f"    {backward}\n    def backward")
    assert findings(source) == []


CHECKPOINT = """
import torch


class Checkpointed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run_function, *args):
        {store}
        ctx.save_for_backward(*args)
        with torch.no_grad():
            return {run}(*args)

    @staticmethod
    def backward(ctx, *grads):
        inputs = [x.detach().requires_grad_() for x in ctx.saved_tensors]
        with torch.enable_grad():
            out = ctx.{attr}(*inputs)
        torch.autograd.backward(out, grads)
        return (None, *(x.grad for x in inputs))


def run(block, x):
    with torch.autocast("cuda", dtype=torch.float16):
        return Checkpointed.apply(block, x)
"""


@pytest.mark.parametrize(
    "store, run, attr",
    [
        ("ctx.run_function = run_function", "run_function", "run_function"),
        ("ctx.fn = run_function", "ctx.fn", "fn"),
        ("ctx.fn = run_function", "run_function", "fn"),
    ],
)
def test_checkpoint_function_is_reported_with_its_recompute(store: str, run: str, attr: str) -> None:
    found = findings(CHECKPOINT.format(store=store, run=run, attr=attr))
    assert [d.code for d in found] == ["AMP205"]
    assert f"runs the forward again (`ctx.{attr}`)" in found[0].message
    assert "autocast state" in found[0].message


def test_plain_function_message_has_no_recompute_reason() -> None:
    (found,) = findings(LINEAR.format(use="return LinearFn.apply(x, w)"))
    assert found.message == "autograd.Function `LinearFn` runs under autocast without `custom_fwd` / `custom_bwd`"


def test_a_function_handed_over_for_the_backward_only_is_no_recompute() -> None:
    """`ctx.backward_op = backward_op`, called only in backward: a kernel of the backward
    (ring attention's), not the forward run again; nothing else in it is autocast's concern."""
    source = """
    import torch


    class Ring(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, forward_op, backward_op):
            ctx.backward_op = backward_op
            ctx.save_for_backward(q, k)
            return forward_op(q, k)

        @staticmethod
        def backward(ctx, grad):
            q, k = ctx.saved_tensors
            return (*ctx.backward_op(grad, q, k), None, None)


    def run(q, k, f, b):
        with torch.autocast("cuda", dtype=torch.float16):
            return Ring.apply(q, k, f, b)
    """
    assert findings(source) == []
