"""The AMP201 fix moves a backward out of its autocast block and nothing else.

Only the backward may leave the block: every other statement stays inside it (a forward
that left would run in fp32), in its order, and the backward runs at the same point of
the program relative to all of them.  Where that cannot be had (the backward is followed
by something, on its line or in the block), no fix is offered; the finding still is.
Comments go where they were, once.  tests/runtime/test_backward_move_runs.py runs the
same shapes on torch and compares what they did.
"""

from __future__ import annotations

import pytest

from amplint.engine import check_source, parse
from amplint.fixes import fix_text

HEAD = 'import torch\n\ndef step(model, x, loss, scaler, opt, c):\n    with torch.autocast("cpu", dtype=torch.bfloat16):\n'
TAIL = "    opt.step()\n"


def fixed(source: str) -> str:
    outcome = fix_text(source, lambda text: check_source(text, "t.py", select=["AMP201"]), unsafe=True)
    assert not outcome.rejected, outcome.rejected
    parse(outcome.source, "t.py")
    return outcome.source


def fixable(source: str) -> list[bool]:
    return [d.fix is not None for d in check_source(source, "t.py", select=["AMP201"])]


# (block body, the fixed block and what follows it); the body is indented by 8.
MOVED = {
    "the backward alone on the last line": (
        "        loss = model(x).sum()\n        loss.backward()\n",
        "        loss = model(x).sum()\n    loss.backward()\n",
    ),
    "a comment above the backward moves with it": (
        "        loss = model(x).sum()\n        # backprop\n        loss.backward()\n",
        "        loss = model(x).sum()\n    # backprop\n    loss.backward()\n",
    ),
    "the block's footer comment stays in the block, once": (
        "        loss = model(x).sum()\n        loss.backward()  # backprop\n        # end of the region\n",
        "        loss = model(x).sum()\n        # end of the region\n    loss.backward()  # backprop\n",
    ),
    "a continued call keeps its shape": (
        "        loss = model(x).sum()\n        torch.autograd.backward(\n            loss,\n        )\n",
        "        loss = model(x).sum()\n    torch.autograd.backward(\n        loss,\n    )\n",
    ),
}


@pytest.mark.parametrize("body, expected", MOVED.values(), ids=MOVED.keys())
def test_only_the_backward_leaves_the_block(body: str, expected: str) -> None:
    assert fixed(HEAD + body + TAIL) == HEAD + expected + TAIL


KEPT = {
    # the example: moving the backward alone would run it after the forward that follows it
    "the backward first on its line": (
        "        loss = model(x).sum()\n        scaler.scale(loss).backward(); aux = model(x).sum()\n"
    ),
    "the backward in the middle of its line": "        a = 1; loss.backward(); aux = model(x).sum()\n",
    "the backward before a trailing comment and another statement": (
        "        aux = 1; loss.backward(); n = 2  # three\n"
    ),
    "a statement after the backward's line": "        aux = model(x).sum(); loss.backward()\n        n = model(x).sum()\n",
    "a one-line if": "        loss = model(x).sum()\n        if c: loss.backward()\n",
    "a one-line if with two statements": "        loss = model(x).sum()\n        if c: aux = 1; loss.backward()\n",
    "the backward alone in the block": "        loss.backward()\n",
    # the statement runs a forward too: it would leave autocast with the backward
    "a forward in the backward's receiver": "        n = 1\n        c(model(x).float(), x).backward()\n",
    "a reduction in the backward's receiver": "        loss = model(x)\n        loss.mean().backward()\n",
    "an assignment expression in the receiver": "        n = 1\n        (loss := model(x).sum()).backward()\n",
    "a call in the backward's argument": "        loss = model(x).sum()\n        loss.backward(model(x))\n",
    # the backward would need a line of its own: every line below would move (hostile pass 18)
    "the backward last on a line of two": "        loss = model(x).sum()\n        aux = model(x).sum(); scaler.scale(loss).backward()\n",
}


@pytest.mark.parametrize("body", KEPT.values(), ids=KEPT.keys())
def test_no_fix_where_moving_the_backward_would_reorder_or_empty_the_block(body: str) -> None:
    source = HEAD + body + TAIL
    assert fixable(source) and not any(fixable(source))
    assert fixed(source) == source


def test_a_one_line_with_is_not_split() -> None:
    source = 'import torch\nwith torch.autocast("cpu"): loss = f(); loss.backward()\n'
    assert fixable(source) == [False]


def test_a_region_inside_another_block_leaves_the_backward_in_that_block() -> None:
    source = (
        "import torch\n\nfor x in data:\n    with torch.no_grad():\n"
        '        with torch.autocast("cpu", dtype=torch.bfloat16):\n'
        "            aux = model(x).sum()  # c\n"
        "            loss.backward()\n"
        "    opt.step()\n"
    )
    assert fixed(source) == (
        "import torch\n\nfor x in data:\n    with torch.no_grad():\n"
        '        with torch.autocast("cpu", dtype=torch.bfloat16):\n'
        "            aux = model(x).sum()  # c\n"
        "        loss.backward()\n"
        "    opt.step()\n"
    )


def test_a_backward_in_a_block_nested_in_the_region_is_not_moved() -> None:
    source = HEAD + "        for y in x:\n            aux = model(y).sum(); loss.backward()\n" + TAIL
    assert fixable(source) == [False]


def test_a_backward_in_nested_regions_leaves_one_region_per_pass() -> None:
    """The first pass leaves the inner region, where the backward ends the outer one: the second leaves that."""
    inner = '        with torch.autocast("cpu", enabled=True):\n'
    source = HEAD + inner + "            aux = model(x).sum()\n            loss.backward()\n" + TAIL
    first = [d.fix for d in check_source(source, "t.py", select=["AMP201"])]
    assert len(first) == 1 and first[0] is not None
    assert fixed(source) == HEAD + inner + "            aux = model(x).sum()\n    loss.backward()\n" + TAIL


def test_crlf_lines_stay_crlf_when_the_backward_moves() -> None:
    source = (HEAD + "        aux = model(x).sum()  # c\n        loss.backward()\n" + TAIL).replace("\n", "\r\n")
    assert fixed(source) == (HEAD + "        aux = model(x).sum()  # c\n    loss.backward()\n" + TAIL).replace("\n", "\r\n")


def test_the_fix_is_stable_under_a_second_run() -> None:
    source = HEAD + "        aux = model(x).sum(); loss.backward()  # c\n        # footer\n" + TAIL
    once = fixed(source)
    assert fixed(once) == once
    assert once.count("# c") == 1 and once.count("# footer") == 1


@pytest.mark.parametrize("last", ["    a = 1; loss.backward()  # c", "    loss.backward()  # c\n    # footer"])
def test_a_file_without_a_final_newline_still_has_none(last: str) -> None:
    source = 'import torch\nwith torch.autocast("cpu"):\n    loss = f()\n' + last
    assert not fixed(source).endswith("\n")
