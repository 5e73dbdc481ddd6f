"""AMP113 (one scaler updated between its optimizers' steps) and AMP114 (gradients of a scaled
loss from torch.autograd.grad used without unscaling): documentation examples, the shapes
found in public code, and the look-alikes that must stay silent."""

from __future__ import annotations

import re
import textwrap

import pytest

from amplint.engine import check_source
from amplint.registry import BY_CODE


def _lines(source: str, code: str) -> list[int]:
    return [d.span.line for d in check_source(textwrap.dedent(source), "t.py", select=[code])]


@pytest.mark.parametrize("code", ("AMP113", "AMP114"))
def test_docstring_example_fires_and_use_instead_does_not(code: str) -> None:
    doc = BY_CODE[code].__doc__
    example, use_instead = re.findall(r"```python\n(.*?)```", doc, re.S)[:2]
    head = "import torch\nscaler = torch.amp.GradScaler('cuda')\n"
    assert _lines(head + textwrap.dedent(example), code), f"{code}: the Example block should fire"
    assert not _lines(head + textwrap.dedent(use_instead), code), f"{code}: the Use instead block should not fire"


@pytest.mark.parametrize("code", ("AMP113", "AMP114"))
def test_new_rules_start_in_the_preview_tier(code: str) -> None:
    from amplint.rule_catalog import CATALOG

    assert next(e for e in CATALOG if e.code == code).tier == "preview"


# --- AMP113 -----------------------------------------------------------------------------------

HEAD = """
import torch
scaler = torch.amp.GradScaler("cuda")
"""


def _amp113(body: str) -> list[int]:
    return _lines(HEAD + textwrap.dedent(body), "AMP113")


def test_update_after_the_first_of_two_steps_is_reported_there_only() -> None:
    src = """
    for x in loader:
        scaler.scale(disc_loss(x)).backward()
        scaler.step(opt_d)
        scaler.update()
        scaler.scale(gen_loss(x)).backward()
        scaler.step(opt_g)
        scaler.update()
    """
    assert _amp113(src) == [8]


def test_update_inside_the_loop_over_the_scalers_optimizers_is_reported() -> None:
    src = """
    for x in loader:
        scaler.scale(model(x).mean()).backward()
        for opt in optimizers:
            scaler.step(opt)
            scaler.update()
    """
    assert _amp113(src) == [9]


def test_update_in_a_step_helper_called_once_per_optimizer_is_reported_at_the_first_call() -> None:
    src = """
    def optimizer_step(scaler, opt):
        scaler.step(opt)
        scaler.update()

    def train_step(x):
        scaler.scale(model(x).mean()).backward()
        optimizer_step(scaler, opt_a)
        optimizer_step(scaler, opt_b)
    """
    assert _amp113(src) == [11]


def test_steps_in_one_method_without_a_loop_are_one_iteration() -> None:
    src = """
    class Trainer:
        def training_step(self, x):
            self.scaler.scale(self.model(x).mean()).backward()
            self.scaler.step(self.opt_d)
            self.scaler.update()
            self.scaler.step(self.opt_g)
            self.scaler.update()
    """
    assert _amp113(src) == [9]


@pytest.mark.parametrize(
    "body",
    [
        # one update after every step
        """
        for x in loader:
            scaler.scale(model(x).mean()).backward()
            scaler.step(opt_d)
            scaler.step(opt_g)
            scaler.update()
        """,
        # the steps in a loop, the update after it
        """
        for x in loader:
            scaler.scale(model(x).mean()).backward()
            for opt in optimizers:
                scaler.step(opt)
            scaler.update()
        """,
        # a scaler per optimizer
        """
        scaler_g = torch.amp.GradScaler("cuda")
        for x in loader:
            scaler.scale(model(x).mean()).backward()
            scaler.step(opt_d)
            scaler.update()
            scaler_g.scale(model(x).mean()).backward()
            scaler_g.step(opt_g)
            scaler_g.update()
        """,
        # the optimizers take turns, one per iteration
        """
        for i, x in enumerate(loader):
            scaler.scale(model(x).mean()).backward()
            if i % 2 == 0:
                scaler.step(opt_d)
                scaler.update()
            else:
                scaler.step(opt_g)
                scaler.update()
        """,
        # the step of the next batch, an epoch loop around the batch loop
        """
        for epoch in range(10):
            for x in loader:
                scaler.scale(model(x).mean()).backward()
                scaler.step(opt)
                scaler.update()
            for x in val_loader:
                evaluate(x)
        """,
        # the backward is in a helper the graph does not read: the loop may be the batch loop
        """
        for x in loader:
            compute_and_backward(x)
            scaler.step(opt)
            scaler.update()
        """,
        # the skip branch steps and updates; the other branch steps once
        """
        for x in loader:
            scaler.scale(model(x).mean()).backward()
            if not finite:
                scaler.step(opt)
                scaler.update()
                continue
            scaler.step(opt)
            scaler.update()
        """,
        # a loop over the optimizers that steps only the one the model chose for this pass
        """
        for x in loader:
            scaler.scale(model(x)["loss"]).backward()
            for iopt, opt in enumerate(optimizers):
                if optim_idx is not None and iopt != optim_idx:
                    continue
                scaler.step(opt)
                scaler.update()
        """,
    ],
    ids=["once-after-all", "steps-in-a-loop", "scaler-per-optimizer", "alternate-iterations",
         "epoch-loop", "backward-unseen", "exclusive-branches", "one-chosen-optimizer"],
)
def test_one_update_per_iteration_is_not_reported(body: str) -> None:
    assert _amp113(body) == []


def test_a_literally_disabled_scaler_is_not_reported() -> None:
    src = """
    import torch
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    for x in loader:
        scaler.scale(model(x).mean()).backward()
        scaler.step(opt_d)
        scaler.update()
        scaler.step(opt_g)
        scaler.update()
    """
    assert _lines(src, "AMP113") == []


# --- AMP114 -----------------------------------------------------------------------------------


def _amp114(body: str) -> list[int]:
    return _lines(HEAD + textwrap.dedent(body), "AMP114")


@pytest.mark.parametrize(
    "body, line",
    [
        ("g = torch.autograd.grad(scaler.scale(loss), x, create_graph=True)[0]\npenalty = g.pow(2).sum()\n", 4),
        ("scaled = scaler.scale(out.sum())\n(g,) = torch.autograd.grad(scaled, [x], create_graph=True)\npenalty = (g ** 2).sum()\n", 5),
        ("from torch.autograd import grad\ngs = grad(outputs=scaler.scale(loss), inputs=params, create_graph=True)\n"
         "norm = sum(p.pow(2).sum() for p in gs)\n", 5),
        # a penalty the function returns is built from the scaled gradients
        ("def r1(scaler, out, x):\n    g = torch.autograd.grad(scaler.scale(out.sum()), x, create_graph=True)[0]\n"
         "    return g.pow(2).sum()\n", 5),
        # divided by something that is not the scale
        ("g = torch.autograd.grad(scaler.scale(loss), x, create_graph=True)[0]\ng = g / batch_size\n", 4),
        # a meta-gradient step taken with scaled gradients
        ("eps_grads = torch.autograd.grad(scaler.scale(meta_loss), eps)[0].detach()\nw = w - lr * eps_grads\n", 4),
    ],
    ids=["inline", "through-a-name-unpacked", "imported-grad", "returned-penalty", "other-divisor", "meta-step"],
)
def test_gradients_of_a_scaled_loss_used_as_they_are_are_reported(body: str, line: int) -> None:
    assert _amp114(body) == [line]


@pytest.mark.parametrize(
    "body",
    [
        # PyTorch's recipe
        "sg = torch.autograd.grad(outputs=scaler.scale(loss), inputs=params, create_graph=True)\n"
        "inv_scale = 1. / scaler.get_scale()\ngrads = [p * inv_scale for p in sg]\n",
        # the name rebound to its unscaled value
        "g = torch.autograd.grad(outputs=scaler.scale(out.sum()), inputs=x, create_graph=True)\n"
        "inv_scale = 1. / scaler.get_scale()\ng = [p * inv_scale for p in g][0]\n",
        # an epsilon in the inverse
        "gs = torch.autograd.grad(scaler.scale(out), (img, sent), create_graph=True)\n"
        "inv_scale = 1. / (scaler.get_scale() + float('1e-8'))\ngs = [g * inv_scale for g in gs]\n",
        # .div and a division of a value computed from the gradients
        "g = torch.autograd.grad(scaler.scale(loss), x, create_graph=True)[0]\ng = g.div(scaler.get_scale())\n",
        "g = torch.autograd.grad(scaler.scale(loss), x, create_graph=True)[0]\nn = g.norm(2)\nn = n / scaler.get_scale()\n",
        # returned as they are: the caller's business
        "def scaled_grads(scaler, loss, x):\n    return torch.autograd.grad(scaler.scale(loss), x, create_graph=True)\n",
        "def scaled_grads(scaler, loss, x):\n    g = torch.autograd.grad(scaler.scale(loss), x, create_graph=True)[0]\n    return g\n",
        # the loss is not scaled
        "g = torch.autograd.grad(loss, x, create_graph=True)[0]\npenalty = g.pow(2).sum()\n",
        # scaled only when a scaler is given, divided under the same condition
        "def calc_grad(outputs, inputs, scaler=None):\n    if scaler is not None:\n        outputs = scaler.scale(outputs)\n"
        "    g = torch.autograd.grad(outputs, inputs, create_graph=True)[0]\n    if scaler is not None:\n"
        "        g = g / scaler.get_scale()\n    return g.pow(2).sum()\n",
        # stored into .grad: scaler.step unscales them with the rest
        "param.grad = torch.autograd.grad(scaler.scale(loss), param, retain_graph=True)[0]\n",
        "gs = torch.autograd.grad(scaler.scale(loss / accum), params)\nfor p, g in zip(params, gs):\n"
        "    p.grad = g if p.grad is None else p.grad + g\n",
        # not used at all
        "torch.autograd.grad(scaler.scale(loss), embeddings, retain_graph=True, allow_unused=True)\n",
    ],
    ids=["recipe", "rebound", "epsilon", "div", "derived-divided", "returned", "returned-name", "unscaled-loss",
         "optional-scaler", "into-grad", "into-grad-in-a-loop", "discarded"],
)
def test_gradients_divided_by_the_scale_or_left_to_the_caller_are_not_reported(body: str) -> None:
    assert _amp114(body) == []


def test_a_literally_disabled_scaler_scales_nothing() -> None:
    src = """
    import torch
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    g = torch.autograd.grad(scaler.scale(loss), x, create_graph=True)[0]
    """
    assert _lines(src, "AMP114") == []


def test_explain_prints_the_rule_page(capsys) -> None:
    from amplint.cli import main

    for code in ("AMP113", "AMP114"):
        assert main(["explain", code]) == 0
        out = capsys.readouterr().out
        assert "Why is this bad?" in out and "Runtime confirmation" in out
