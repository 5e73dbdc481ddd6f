"""AMP301 reads casts per object and per path: which module a cast changes, whether that
object (not only that name) reaches an optimizer, under which conditions, and where the
module and its dtype come from (another function or module).  The fixtures pin one shape
each; these are the variants."""

from __future__ import annotations

import textwrap

import pytest

from amplint.engine import check_source

HEADER = """\
import argparse
import itertools
import torch
from torch import nn
"""


def lint(source: str) -> list[int]:
    found = check_source(HEADER + textwrap.dedent(source), "t.py", select=["AMP301"])
    return [d.span.line - HEADER.count("\n") for d in found]


def _train(model: str, indent: str = "    ") -> str:
    body = f"""\
optimizer = torch.optim.AdamW({model}, lr=1e-4)
for _ in range(3):
    loss = net(torch.randn(4, 8)).mean()
    loss.backward()
    optimizer.step()
"""
    return textwrap.indent(body, indent)


# --- which module a cast changes -------------------------------------------------------


@pytest.mark.parametrize(
    "cast",
    ["net.cuda().bfloat16()", "net.to('cuda').half()", "net.cuda().to(torch.float16)", "net.train().half()"],
)
def test_a_chain_of_module_returning_methods_casts_its_receiver(cast: str) -> None:
    source = f"net = nn.Linear(8, 1)\n{cast}\n" + _train("net.parameters()", "")
    assert lint(source) == [2]


@pytest.mark.parametrize("container", ["(enc_a, enc_b)", "[enc_a, enc_b]"])
def test_a_loop_over_a_literal_tuple_casts_each_module_once_reported(container: str) -> None:
    source = f"""\
enc_a, enc_b, net = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 1)
for m in {container}:
    m.to(torch.float16)
""" + _train("itertools.chain(net.parameters(), enc_b.parameters())", "")
    assert lint(source) == [3]


def test_a_loop_over_modules_none_trained_is_silent() -> None:
    source = """\
enc_a, enc_b, net = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 1)
for m in (enc_a, enc_b):
    m.half()
""" + _train("net.parameters()", "")
    assert lint(source) == []


# --- conditions that exclude each other -------------------------------------------------

EXCLUSIVE = """\
def main(args):
    net, text_encoder = nn.Linear(8, 1), nn.Linear(8, 8)
    if {cast_test}:
        text_encoder.to(torch.float16)
{params}
"""


@pytest.mark.parametrize(
    ("cast_test", "params", "found"),
    [
        # cast only when frozen, trained only when trained: never both
        ("not args.train_text_encoder", "    params = itertools.chain(net.parameters(), text_encoder.parameters()) if args.train_text_encoder else net.parameters()", []),
        ("not args.train_text_encoder", "    params = list(net.parameters())\n    if args.train_text_encoder:\n        params = params + list(text_encoder.parameters())", []),
        ("not args.train_text_encoder", "    if args.train_text_encoder:\n        params = itertools.chain(net.parameters(), text_encoder.parameters())\n    else:\n        params = net.parameters()", []),
        ('args.mode == "frozen"', '    params = [*net.parameters(), *text_encoder.parameters()] if args.mode == "train" else net.parameters()', []),
        # the same flag: cast and trained together
        ("args.train_text_encoder", "    params = itertools.chain(net.parameters(), text_encoder.parameters()) if args.train_text_encoder else net.parameters()", [4]),
        # another flag says nothing about this one
        ("not args.low_memory", "    params = itertools.chain(net.parameters(), text_encoder.parameters()) if args.train_text_encoder else net.parameters()", [4]),
        # trained on every path
        ("not args.train_text_encoder", "    params = itertools.chain(net.parameters(), text_encoder.parameters())", [4]),
    ],
)
def test_a_cast_under_a_condition_its_training_excludes_is_not_trained(cast_test: str, params: str, found) -> None:
    source = EXCLUSIVE.format(cast_test=cast_test, params=params) + _train("params")
    assert lint(source) == found


# --- the trained object, not the name ---------------------------------------------------

AFTER_LOOP = """\
def main(args, save_dtype):
    net = nn.Linear(8, 1)
""" + _train("net.parameters()") + """\
{after}
"""


@pytest.mark.parametrize(
    ("after", "found"),
    [
        ("    if args.save_half:\n        net = net.to(torch.float16)\n        torch.save(net.state_dict(), 'x.pt')", []),
        ("    with torch.no_grad():\n        net.half()\n        net(torch.randn(1, 8).half())", []),
        ("    net = nn.Linear(8, 1).to(torch.bfloat16)", []),
    ],
)
def test_a_cast_once_the_training_statements_are_over_is_not_trained(after: str, found) -> None:
    assert lint(AFTER_LOOP.format(after=after)) == found


def test_a_cast_inside_the_training_loop_is_trained() -> None:
    source = """\
    net = nn.Linear(8, 1)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    for epoch in range(3):
        if epoch == 1:
            net.half()
        loss = net(torch.randn(4, 8)).mean()
        loss.backward()
        optimizer.step()
    """
    assert lint(source) == [5]


@pytest.mark.parametrize(
    ("rebind", "found"),
    [
        # a fresh object under the trained name, built after the optimizer: frozen
        ("net = nn.Linear(8, 1)\n            net.half()", []),
        ("net = nn.Linear(8, 1).half()", []),
        # the same object as the optimizer holds
        ("net.half()", [8]),
    ],
)
def test_an_object_built_after_the_optimizer_is_not_what_it_trains(rebind: str, found) -> None:
    source = f"""\
    def main():
        net = nn.Linear(8, 1)
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
        for epoch in range(3):
            loss = net(torch.randn(4, 8)).mean()
            loss.backward()
            optimizer.step()
            {rebind}
    """
    got = lint(source)
    assert got == ([9] if found and "\n" in rebind else found)


# --- modules and dtypes from other functions --------------------------------------------


@pytest.mark.parametrize(
    ("helper", "use", "found"),
    [
        # returned, then trained by the caller or by a function it hands it to
        ("net = nn.Linear(8, 1)\n    net.half()\n    return net", "net = make()\n" + _train("net.parameters()", ""), [3]),
        ("net = nn.Linear(8, 1)\n    net.half()\n    return net", "model = make()\nfit(model)", [3]),
        # handed in, cast under a flag, trained by the caller
        ("if fp16:\n        net.half()", "net = nn.Linear(8, 1)\nmake(net, True)\n" + _train("net.parameters()", ""), [3]),
        # returned but only evaluated
        ("net = nn.Linear(8, 1)\n    net.half()\n    return net", "net = make()\nwith torch.no_grad():\n    net(torch.randn(1, 8).half())", []),
    ],
)
def test_a_module_cast_in_a_helper_is_judged_where_the_caller_trains_it(helper: str, use: str, found) -> None:
    params = "net, fp16" if "fp16" in helper else ""
    source = f"""\
def make({params}):
    {helper}


def fit(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(4, 8)).mean().backward()
        optimizer.step()


{use}
"""
    assert lint(source) == found


@pytest.mark.parametrize(
    ("dtype_arg", "found"),
    [
        ("DTYPES[args.precision]", [3]),
        ("torch.bfloat16 if args.bf16 else torch.float32", [3]),
        ("getattr(torch, args.dtype)", [3]),
        ("torch.float32", []),
    ],
)
def test_a_dtype_handed_to_a_function_is_what_its_callers_pass(dtype_arg: str, found) -> None:
    source = f"""\
DTYPES = {{"fp32": torch.float32, "fp16": torch.float16}}
def train(model, device, model_dtype):
    model.to(device, dtype=model_dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(4, 8)).mean().backward()
        optimizer.step()


parser = argparse.ArgumentParser()
parser.add_argument("--dtype", choices=["float16", "float32"])
args = parser.parse_args()
train(nn.Linear(8, 1), "cpu", {dtype_arg})
"""
    assert lint(source) == found


@pytest.mark.parametrize(("position", "found"), [("weight_dtype, save_dtype", [9]), ("save_dtype, weight_dtype", [])])
def test_a_dtype_unpacked_from_a_returned_tuple_is_the_one_at_its_position(position: str, found) -> None:
    source = f"""\
def prepare_dtype(args):
    weight_dtype = torch.float16 if args.mixed_precision == "fp16" else torch.float32
    return weight_dtype, torch.float32


def train(args):
    {position} = prepare_dtype(args)
    net = nn.Linear(8, 1)
    net.to(weight_dtype)
""" + _train("net.parameters()")
    assert lint(source) == found


@pytest.mark.parametrize(
    ("guard", "lines"),
    [
        ("assert dtype == torch.float32\n", []),  # only float32 gets past it
        ("assert dtype in (torch.float32, torch.float64)\n", []),
        ("assert dtype is torch.float32\n", []),
        ("if check:\n    assert dtype == torch.float32\n", [5]),  # not on every path to the cast
        ("assert dtype != torch.float32\n", [4]),  # says nothing about which half dtype
        ("assert dtype in (torch.float16, torch.float32)\n", [4]),
    ],
    ids=["equal", "in-tuple", "is", "only-under-an-if", "not-equal", "allows-half"],
)
def test_an_assert_before_the_cast_narrows_its_dtype(guard: str, lines: list[int]) -> None:
    """DALLE2-pytorch asserts float32 before casting CLIP to the accelerator's precision type."""
    source = ("dtype = {'fp16': torch.half, 'no': torch.float}[mode]\n" + guard
              + "model = nn.Linear(2, 2)\nmodel.to(dtype)\n" + _train("model.parameters()", indent=""))
    assert lint(source) == lines  # the cast is on line 4, or 5 after a two-line guard
