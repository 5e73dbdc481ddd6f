"""Two model pieces the fixtures do not pin edge by edge: where a float32 tensor holding an
overflowing constant goes (analysis/tensor_flow.py, for AMP501) and which modules another
package's trainer trains (analysis/trainers.py, for AMP301)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint.analysis.model import ModuleModel
from amplint.analysis.tensor_flow import flows_from
from amplint.engine import check_source


def lint(code: str, source: str, *, prefilter: bool = True):
    found = check_source(textwrap.dedent(source), "t.py", select=[code], prefilter=prefilter)
    return [(d.span.line, d.code) for d in found]


def _sinks(source: str):
    model = ModuleModel.build(cst.parse_module(textwrap.dedent(source)))
    site = next(s for s in model.calls if model.qualify(s.node.func) == "torch.where")
    return [(s.kind, model.module.code_for_node(s.node).strip()) for s in flows_from(site.node, site.scope)]


# --- tensor_flow ------------------------------------------------------------------------

MASKED = """
import torch
def f(scores, mask):
    bias = torch.where(mask > 0, 0.0, -1e10)
    {body}
"""


@pytest.mark.parametrize(
    ("body", "sinks"),
    [
        ("scores += bias.transpose(1, 2)", [("inplace", "scores += bias.transpose(1, 2)")]),
        ("b = torch.cat([bias, bias], dim=-1)[..., :4]\n    return scores + b.type(scores.dtype)", [("cast", "b.type(scores.dtype)")]),
        ("scores.add_(bias)", [("inplace", "scores.add_(bias)")]),
        ("b = bias + 1.0\n    b = b.half()", [("cast", "b.half()")]),
        # a product, softmax or comparison makes a new value
        ("return (bias * 0.5).type(scores.dtype) + torch.softmax(bias, -1).half()", []),
        # rebound in the same block before the cast
        ("bias = torch.zeros_like(scores)\n    return bias.type(scores.dtype)", []),
        # rebound in a branch only: the cast after it may still get the mask
        ("if scores is None:\n        bias = None\n    return bias.to(scores.dtype)", [("cast", "bias.to(scores.dtype)")]),
    ],
)
def test_where_the_value_goes(body: str, sinks) -> None:
    assert _sinks(MASKED.format(body=body)) == sinks


def test_the_value_leaves_by_return_and_a_reshaping_helper() -> None:
    src = """
    import torch
    def blocks(x, n):
        x = torch.nn.functional.pad(x, (0, 1))
        return x.reshape(-1, n)
    def bias_of(mask):
        return torch.where(mask > 0, 0.0, -1e10).unsqueeze(0)
    def attend(scores, mask):
        return scores + blocks(bias_of(mask), 2).type(scores.dtype)
    """
    model = ModuleModel.build(cst.parse_module(textwrap.dedent(src)))
    site = next(s for s in model.calls if model.qualify(s.node.func) == "torch.where")
    (sink,) = flows_from(site.node, site.scope)
    assert model.module.code_for_node(sink.node) == "blocks(bias_of(mask), 2).type(scores.dtype)"
    assert sink.scope.name.endswith("attend")


FP16_MODULE = """
import torch
HALF = torch.float16
def f(scores, mask):
    bias = torch.where(mask > 0, 0.0, -1e10)
    {body}
"""


@pytest.mark.parametrize(
    ("body", "found"),
    [
        ("return scores + bias.type(scores.dtype)", [(5, "AMP501")]),
        ("return scores + bias.to(HALF)", [(5, "AMP501")]),
        ("return scores + bias.to(torch.float32)", []),
        ("return scores + bias.to(scores.device)", []),  # a move, not a cast
        ("return scores.float() + bias.type(scores.float().dtype)", []),
    ],
)
def test_amp501_judges_the_sink_dtype(body: str, found) -> None:
    assert lint("AMP501", FP16_MODULE.format(body=body)) == found


def test_amp501_needs_the_modules_fp16_evidence_also_for_a_later_cast() -> None:
    src = """
    import torch
    def f(scores, mask):
        bias = torch.where(mask > 0, 0.0, -1e10)
        return scores + bias.type(scores.dtype)
    """
    assert lint("AMP501", src) == []


# --- trainers ---------------------------------------------------------------------------

HF = """
import torch
from transformers import Trainer
{body}
"""


@pytest.mark.parametrize(
    ("body", "found"),
    [
        # a subclass's own model, the model handed to super().__init__, an unwrapped view of it
        ("class T(Trainer):\n    def setup(self):\n        self.model.half()", [(6, "AMP301")]),
        (
            "class T(Trainer):\n    def __init__(self, model):\n        for p in model.parameters():\n"
            "            if p.requires_grad:\n                p.data = p.data.to(torch.float16)\n"
            "        super().__init__(model=model)",
            [(8, "AMP301")],
        ),
        (
            "class T(Trainer):\n    def gen(self):\n        m = self.accelerator.unwrap_model(self.model)\n        m.to(torch.bfloat16)",
            [(7, "AMP301")],
        ),
        ("def run(model):\n    Trainer(model=model.half()).train()", [(5, "AMP301")]),
        ("def run(model):\n    model = model.half()\n    Trainer(model, None).train()", [(5, "AMP301")]),
        # frozen parameters only; a model the trainer is not given; not a trainer subclass
        (
            "class T(Trainer):\n    def __init__(self, model):\n        for p in model.parameters():\n"
            "            if not p.requires_grad:\n                p.data = p.data.to(torch.float16)\n"
            "        super().__init__(model=model)",
            [],
        ),
        ("class T(Trainer):\n    def setup(self):\n        self.ref_model.half()", []),
        ("class T:\n    def setup(self):\n        self.model.half()", []),
        ("def run(model, other):\n    other = other.half()\n    Trainer(model=model).train()", []),
        # a frozen base under PEFT adapters: only the adapters (fp32) train
        ("def run(model, cfg):\n    model = model.half()\n    model = get_peft_model(model, cfg)\n    Trainer(model=model).train()", []),
    ],
)
def test_a_known_trainer_trains_the_model_it_is_given(body: str, found) -> None:
    # NB: the pre-filter is off: AMP301's tokens ask for an optimizer name (see the report of
    # this change); the model is what is specified here.
    assert lint("AMP301", HF.format(body=body), prefilter=False) == found


# --- optimizer factories chosen by a string (callees.classes_held) ----------------------

FACTORIES = """
import torch
net = torch.nn.Linear(2, 2)
class AdamFactory:
    @staticmethod
    def from_args(target, args):
        return torch.optim.Adam({optimized}, lr=args.lr)
class NoOptimizer:
    @staticmethod
    def from_args(target, args):
        return None
FACTORIES = {{"adam": AdamFactory, "none": NoOptimizer}}
def dynamic_import_optimizer(name):
    return FACTORIES[name]
def train(args, model):
    model = model.half()
    opt_class = dynamic_import_optimizer(args.opt)
    optimizer = opt_class.from_args(model.parameters(), args)
"""


@pytest.mark.parametrize(("optimized", "found"), [("target", [(16, "AMP301")]), ("net.parameters()", [])])
def test_a_factory_class_looked_up_by_name_builds_the_optimizer(optimized: str, found) -> None:
    # `Adam(net.parameters())` optimizes a global, not the parameters it is handed.
    assert lint("AMP301", FACTORIES.format(optimized=optimized), prefilter=False) == found
