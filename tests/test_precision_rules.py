"""AMP202-205, AMP302-304, AMP402/403, AMP501/502: the precision view and the edges fixtures do not pin."""

from __future__ import annotations

import inspect
import re
import textwrap

import libcst as cst
import pytest

from amplint.analysis.model import ModuleModel
from amplint.analysis.precision import number_of, overflows_fp16, precision_of
from amplint.engine import check_source
from amplint.registry import BY_CODE

CODES = ("AMP202", "AMP203", "AMP204", "AMP205", "AMP302", "AMP303", "AMP304", "AMP402", "AMP403", "AMP501", "AMP502")


def lint(code: str, source: str):
    return [(d.span.line, d.code) for d in check_source(textwrap.dedent(source), "t.py", select=[code])]


def model_of(source: str) -> ModuleModel:
    return ModuleModel.build(cst.parse_module(textwrap.dedent(source)))


# --- the precision view ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "overflows"),
    [("-1e9", True), ("1e5", True), ("-1e10", True), ("65505.0", True), ("-1e4", False), ("65504.0", False), ("-10000.0", False)],
)
def test_float_literals_against_fp16_range(text: str, overflows: bool) -> None:
    assert overflows_fp16(number_of(cst.parse_expression(text))) is overflows


def test_integers_and_calls_are_not_float_literals() -> None:
    assert number_of(cst.parse_expression("-1000000")) is None
    assert number_of(cst.parse_expression("float('-inf')")) is None


def test_function_defined_inside_a_region_does_not_run_there() -> None:
    m = model_of(
        """
        import torch
        with torch.autocast("cuda"):
            y = f(x)
            def helper():
                return g(x)
        """
    )
    view = precision_of(m)
    calls = {m.module.code_for_node(c.node.func): c.node for c in m.calls}
    assert view.active(calls["f"]) is not None
    assert view.active(calls["g"]) is None


def test_autocast_decorator_covers_the_function_body() -> None:
    m = model_of(
        """
        import torch
        @torch.autocast("cuda", dtype=torch.float16)
        def forward(x):
            return f(x)
        """
    )
    calls = {m.module.code_for_node(c.node.func): c.node for c in m.calls}
    region = precision_of(m).active(calls["f"])
    assert region is not None and region.info.dtypes == frozenset({"float16"})


@pytest.mark.parametrize(
    ("source", "evidence"),
    [
        ("import torch\nx = torch.zeros(3)\n", False),
        ("import torch\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n    pass\n", False),
        ("import torch\nwith torch.autocast('cuda'):\n    pass\n", True),
        ("import torch\ns = torch.amp.GradScaler('cuda')\n", True),
        ("import torch\ns = torch.amp.GradScaler('cuda', enabled=False)\n", False),
        ("import torch\nm = m.to(torch.half)\n", True),
        ("import torch\nif args.fp16:\n    pass\n", True),
        ("import torch\naccelerator = Accelerator(mixed_precision='fp16')\n", True),
    ],
)
def test_fp16_evidence(source: str, evidence: bool) -> None:
    assert (precision_of(model_of(source)).fp16_evidence is not None) is evidence


# --- rules: edges --------------------------------------------------------------------------


def test_amp202_managed_region_and_plain_function_step() -> None:
    src = """
    import torch
    def train(model, optimizer, accelerator, x):
        with accelerator.autocast():
            loss = model(x)
            accelerator.backward(loss)
            optimizer.step()
    """
    assert lint("AMP202", src) == [(7, "AMP202")]


def test_amp203_accelerate_is_managed() -> None:
    src = """
    import torch
    def train(model, optimizer, accelerator, x):
        with accelerator.autocast():
            loss = model(x)
        accelerator.backward(loss)
        optimizer.step()
    """
    assert lint("AMP203", src) == []


def test_amp203_autocast_decorated_forward_in_a_training_module() -> None:
    src = """
    import torch
    class Net(torch.nn.Module):
        @torch.autocast("cuda")
        def forward(self, x):
            return x
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    """
    assert lint("AMP203", src) == [(4, "AMP203")]


def test_amp203_unknown_dtype_is_not_reported() -> None:
    src = """
    import torch
    def train(model, optimizer, x, dtype, device_type):
        with torch.autocast(device_type, dtype=dtype):
            loss = model(x)
        loss.backward()
        optimizer.step()
    """
    assert lint("AMP203", src) == []


def test_amp204_needs_every_autocast_to_be_bf16() -> None:
    src = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a = f()
    with torch.autocast("cuda", dtype=torch.float16):
        b = f()
    """
    assert lint("AMP204", src) == []
    assert lint("AMP204", src.replace("torch.float16", "torch.bfloat16")) == [(3, "AMP204")]


def test_amp205_function_without_backward_override_and_custom_fwd_alias() -> None:
    src = """
    import torch
    from torch.cuda.amp import custom_fwd, custom_bwd
    class F(torch.autograd.Function):
        @staticmethod
        @custom_fwd
        def forward(ctx, x):
            return x.softmax(-1)
        @staticmethod
        @custom_bwd
        def backward(ctx, g):
            return g
    with torch.autocast("cuda"):
        y = F.apply(x)
    """
    assert lint("AMP205", src) == []
    assert lint("AMP205", re.sub(r"\n\s*@custom_fwd\n", "\n", src)) == [(4, "AMP205")]
    # Nothing autocast decides the dtype of (a view): the missing decorator changes nothing.
    assert lint("AMP205", re.sub(r"\n\s*@custom_fwd\n", "\n", src).replace("x.softmax(-1)", "x.view_as(x)")) == []


_MATMUL_FUNCTION = """
import torch
class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w
    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.t(), x.t() @ g
"""


def test_amp205_apply_only_with_autocast_disabled_is_handled() -> None:
    disabled = _MATMUL_FUNCTION + """
def run(x, w):
    with torch.autocast("cuda", enabled=False):
        return F.apply(x.float(), w)
with torch.autocast("cuda"):
    y = run(x, w)
"""
    assert lint("AMP205", disabled) == []
    # Re-enabled inside the disabled block: the apply runs under autocast again.
    reenabled = disabled.replace("        return F.apply(x.float(), w)",
                                 "        with torch.autocast('cuda'):\n            return F.apply(x.float(), w)")
    assert lint("AMP205", reenabled) == [(3, "AMP205")]
    # `F.apply` handed over under another name: where it runs is not known.
    aliased = disabled + "project = F.apply\nwith torch.autocast('cuda'):\n    z = project(x, w)\n"
    assert lint("AMP205", aliased) == [(3, "AMP205")]


def test_amp205_forward_reading_the_autocast_state_through_a_helper_is_handled() -> None:
    reads = _MATMUL_FUNCTION.replace(
        "        ctx.save_for_backward(x, w)\n",
        "        ctx.dtype = _dtype(x)\n        ctx.save_for_backward(x, w)\n",
    ) + """
def _dtype(x):
    return _ask(x.device.type)
def _ask(d):
    return torch.get_autocast_dtype(d) if torch.is_autocast_enabled(d) else torch.float32
with torch.autocast("cuda"):
    y = F.apply(x, w)
"""
    assert lint("AMP205", reads) == []
    # A helper that only reads a dtype off the tensor is not the autocast state.
    assert lint("AMP205", reads.replace("torch.get_autocast_dtype(d) if torch.is_autocast_enabled(d) else ", "")) == [
        (3, "AMP205")]


def test_amp205_forward_only_function_is_not_reported_unless_backward_is_inherited() -> None:
    forward_only = """
import torch
class Mixin:
    @staticmethod
    def backward(ctx, g):
        return g @ g.t()
class KernelNamespace(torch.autograd.Function):
    @staticmethod
    def forward(a, b):
        return torch.matmul(a, b)
with torch.autocast("cuda"):
    y = KernelNamespace.forward(a, b)
"""
    # No backward: nothing runs in another precision than the forward's ops.
    assert lint("AMP205", forward_only) == []
    # A backward inherited from another base still runs outside autocast.
    inherited = forward_only.replace("(torch.autograd.Function)", "(torch.autograd.Function, Mixin)")
    assert lint("AMP205", inherited) == [(7, "AMP205")]


def test_amp303_needs_training_in_the_module() -> None:
    src = """
    import torch
    torch.set_default_dtype(torch.float16)
    model = Net()
    """
    assert lint("AMP303", src) == []
    assert lint("AMP303", src + "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n") == [(3, "AMP303")]


def test_amp304_unknown_eps_and_unrelated_optimizer() -> None:
    src = """
    import torch
    teacher = Net().half()
    student = Net()
    opt = torch.optim.Adam(student.parameters())
    opt2 = torch.optim.Adam(teacher.parameters(), eps=cfg.eps)
    """
    assert lint("AMP304", src) == []


def test_amp402_star_import_and_plain_apex() -> None:
    src = """
    import apex
    from apex.amp import *
    from apex import optimizers
    model, opt = apex.amp.initialize(model, opt)
    """
    assert lint("AMP402", src) == [(3, "AMP402"), (5, "AMP402")]


def test_amp403_needs_fsdp() -> None:
    src = """
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel
    scaler = torch.amp.GradScaler("cuda")
    """
    assert lint("AMP403", src) == []
    assert lint("AMP403", src + "model = FullyShardedDataParallel(model)\n") == [(4, "AMP403")]


AMP403_PATHS = """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
{wrap}
{scalers}
"""


@pytest.mark.parametrize(
    "wrap, scalers, reported",
    [
        # the sharded scaler goes with another path than the wrap: the plain one runs with FSDP
        ("if args.strategy == 'fsdp':\n    model = FSDP(model)",
         "scaler = ShardedGradScaler() if args.strategy == 'zero' else torch.amp.GradScaler()", True),
        ("if use_fsdp:\n    model = FSDP(model)\n    scaler = torch.amp.GradScaler()",
         "if not use_fsdp:\n    scaler = ShardedGradScaler()", True),
        ("model = FSDP(model)", "if offload:\n    s = ShardedGradScaler()\nscaler = torch.amp.GradScaler()", False),
        # each path its own scaler
        ("if use_fsdp:\n    model = FSDP(model)", "scaler = ShardedGradScaler() if use_fsdp else torch.amp.GradScaler()", False),
        ("if use_fsdp:\n    model = FSDP(model)", "if use_fsdp:\n    scaler = ShardedGradScaler()\nelif fp16:\n    scaler = torch.amp.GradScaler()", False),
        ("if args.strategy == 'fsdp':\n    model = FSDP(model)",
         "scaler = ShardedGradScaler() if args.strategy == 'fsdp' else torch.amp.GradScaler()", False),
        # no sharded scaler at all: a plain one on a path exclusive of the wrap is not with FSDP
        ("if use_fsdp:\n    model = FSDP(model)", "if not use_fsdp:\n    scaler = torch.amp.GradScaler()", False),
        ("if use_fsdp:\n    model = FSDP(model)", "if fp16:\n    scaler = torch.amp.GradScaler()", True),
    ],
)
def test_amp403_a_plain_scaler_is_judged_by_the_path_it_runs_on(wrap, scalers, reported) -> None:
    found = lint("AMP403", AMP403_PATHS.format(wrap=wrap, scalers=scalers))
    assert bool(found) is reported, found


def test_amp501_fix_uses_the_tensor_and_the_torch_alias() -> None:
    from amplint.fixes import fix_text

    src = textwrap.dedent(
        """
        import torch as th
        scaler = th.amp.GradScaler("cuda")
        def attend(q, k, mask):
            scores = th.matmul(q, k).half()
            scores.masked_fill_(mask, -1e9)
            big = th.full((3,), 1e6, dtype=scores.dtype)
            return scores.softmax(-1), big
        """
    )
    out = fix_text(src, lambda t: check_source(t, "t.py", select=["AMP501"]), unsafe=True)
    assert "scores.masked_fill_(mask, th.finfo(scores.dtype).min)" in out.source
    # `big` goes anywhere: `finfo.max` there may overflow in later arithmetic (x2, a cast)
    # where 1e6 did not, so it is reported without a fix
    assert "th.full((3,), 1e6, dtype=scores.dtype)" in out.source
    assert [d.span.line for d in check_source(out.source, "t.py", select=["AMP501"])] == [7]  # `big`


def test_amp501_fix_needs_evidence_of_a_floating_tensor() -> None:
    """`torch.finfo` raises on an integer or bool tensor and on a NumPy array: a parameter, a
    helper's result or an integer-typed value is reported without a fix."""
    from amplint.fixes import fix_text

    src = textwrap.dedent(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        def attend(scores, ids, mask, helper):
            scores.masked_fill_(mask, -1e9)
            ids = ids.to(torch.int64)
            ids.masked_fill_(mask, -1e9)
            bias = helper()
            bias[mask] = -1e9
            return scores, ids, bias
        """
    )
    found = check_source(src, "t.py", select=["AMP501"])
    assert len(found) == 3 and all(d.fix is None for d in found)
    assert fix_text(src, lambda t: check_source(t, "t.py", select=["AMP501"]), unsafe=True).source == src


def test_amp501_names_bound_to_a_literal_in_a_class() -> None:
    src = """
    import torch
    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mask_value = -1e9
        def forward(self, s, m):
            return s.masked_fill(m, self.mask_value)
    model = Attn().half()
    """
    assert lint("AMP501", src) == [(8, "AMP501")]


def test_amp502_is_opt_in_and_amp302_too() -> None:
    assert not BY_CODE["AMP502"].default_enabled
    assert not BY_CODE["AMP302"].default_enabled
    assert all(BY_CODE[c].default_enabled for c in CODES if c not in ("AMP302", "AMP502"))


# --- documentation is a test: each Example fires, each "Use instead" does not -------------

_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("code", CODES)
def test_docstring_example_fires_and_use_instead_does_not(code: str) -> None:
    rule = BY_CODE[code]
    doc = inspect.cleandoc(rule.__doc__)
    example, _, rest = doc.partition("Use instead:")
    bad = _BLOCK.findall(example)[-1]
    good = _BLOCK.findall(rest)[0]
    prefix = "import torch\n" if "import torch" not in bad else ""
    assert any(d.code == code for d in check_source(prefix + bad, "doc.py", select=[code]))
    prefix = "import torch\n" if "import torch" not in good else ""
    assert not [d for d in check_source(prefix + good, "doc.py", select=[code]) if d.code == code]


def test_amp501_float32_factories_containers_and_scalar_where() -> None:
    src = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    scores = torch.zeros((2, 3), dtype=torch.float)
    scores[:, 1:] = -1e9
    state = [torch.zeros(3) for _ in range(5)]
    state[4] -= 1e30
    mask = torch.where(m > 0, 0.0, -1e10)
    def f(x):
        x[:, 0] = -1e9
    """
    assert lint("AMP501", src) == [(10, "AMP501")]


def test_device_type_of_a_torch_device_gives_autocast_its_default_dtype() -> None:
    src = """
    import torch
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(2, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in data:
        with torch.autocast(device_type=device.type):
            loss = model(x).sum()
        loss.backward()
        optimizer.step()
    """
    assert lint("AMP203", src) == [(7, "AMP203")]


def test_amp501_scalar_where_cast_to_a_half_dtype() -> None:
    src = """
    import torch
    if weight.dtype == torch.float16:
        pass
    bias = torch.where(mask > 0, 0, -1e10).to(hidden.dtype)
    kept = torch.where(mask > 0, 0, -1e10).to(torch.float32)
    """
    assert lint("AMP501", src) == [(5, "AMP501")]
    from amplint.fixes import fix_text

    out = fix_text(textwrap.dedent(src), lambda t: check_source(t, "t.py", select=["AMP501"]), unsafe=True)
    # `hidden` is not known to be a floating tensor (finfo of an integer dtype raises): no fix
    assert out.source == textwrap.dedent(src)
    known = textwrap.dedent(src).replace("import torch\n", "import torch\nhidden = torch.randn(2, 3).half()\n")
    out = fix_text(known, lambda t: check_source(t, "t.py", select=["AMP501"]), unsafe=True)
    # a floating `hidden`, but the bias goes on to other arithmetic (added to scores), where
    # `finfo.min` may overflow to -inf: no fix unless it goes straight into a softmax
    assert out.source == known


def test_amp501_flow_insensitive_names() -> None:
    src = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    def f(state, q, k, m):
        if state is None:
            state = torch.zeros(3, dtype=torch.float32)
            state[:, 2] -= 1e38
        else:
            state = torch.cat(state)
        scores = torch.zeros(3)
        scores = q @ k
        return scores.masked_fill(m, -1e9)
    """
    assert lint("AMP501", src) == [(12, "AMP501")]


def test_amp203_project_scaler_wrappers_count_as_a_scaler() -> None:
    src = """
    import torch
    from timm.utils import NativeScaler
    from sklearn.preprocessing import StandardScaler
    features = StandardScaler()
    def train(model, optimizer, loader, amp_autocast, loss_scaler=None):
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x)
            if loss_scaler is not None:
                loss_scaler(loss, optimizer)
            else:
                loss.backward()
                optimizer.step()
    """
    assert lint("AMP203", src) == []
    assert lint("AMP203", src.replace("loss_scaler", "hook")) == [(8, "AMP203")]
