"""The AMP201 fix, run: the original and the fixed script do the same things in the same
order, and everything but the backward still runs under autocast.

Each script notes, statement by statement, what ran and whether CPU autocast was on; the
forward's output dtype (bfloat16 under autocast) and the gradients are compared too.
tests/test_fix_backward_move.py states the same shapes as text.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from amplint.engine import check_source  # noqa: E402
from amplint.fixes import fix_text  # noqa: E402

PRELUDE = '''
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
x = torch.randn(2, 4)
seen = []


def note(tag, value=None):
    seen.append((tag, torch.is_autocast_enabled("cpu")))
    return value


# A plain GradScaler: the fix lets only a GradScaler's `scale` leave the region with the
# backward (another object's `scale` might run a forward). The backward is noted by a hook on
# the loss's gradient, with autocast on or not at that moment.
noting = torch.amp.GradScaler("cpu")


for _ in range(2):
'''
REGION = ('    with torch.autocast("cpu", dtype=torch.bfloat16):\n        loss = model(x).float().sum()\n'
          "        loss.register_hook(lambda g: note('backward', g))\n")

# The loop's body: an autocast region whose last lines vary, and whether a fix is offered.
SHAPES = {
    "the issue's line: backward, then a forward": (
        REGION + "        noting.scale(loss).backward(); aux = model(x).sum(); note('aux')\n", False,
    ),
    "a forward, then the backward": (REGION + "        aux = model(x).sum(); note('aux')\n        noting.scale(loss).backward()\n", True),
    # the backward would need a line of its own: every later line would move (hostile pass 18)
    "a forward, then the backward, on one line": (
        REGION + "        aux = model(x).sum(); note('aux'); noting.scale(loss).backward()\n", False,
    ),
    "the backward in the middle": (
        REGION + "        note('a'); noting.scale(loss).backward(); aux = model(x).sum(); note('aux')\n", False,
    ),
    "several, a comment, a footer": (
        REGION + "        aux = model(x).sum(); note('aux'); n = note('n', 1)  # c\n        noting.scale(loss).backward() ;\n"
        "        # footer\n",
        True,
    ),
    "a forward on the next line": (
        REGION + "        note('a'); noting.scale(loss).backward()\n        aux = model(x).sum(); note('aux')\n", False,
    ),
    "a one-line if": (
        REGION + "        aux = model(x).sum(); note('aux')\n        if aux is not None: noting.scale(loss).backward()\n", False,
    ),
    "in a block nested in the region": (
        REGION + "        with torch.enable_grad():\n            aux = model(x).sum(); note('aux'); noting.scale(loss).backward()\n",
        False,
    ),
    "the region nested in another block": (
        "    with torch.enable_grad():\n"
        + REGION.replace("\n    ", "\n        ").replace("    with", "        with", 1)
        + "            aux = model(x).sum(); note('aux')\n            noting.scale(loss).backward()  # c\n",
        True,
    ),
}
EPILOGUE = "    note('after')\n"


def run(source: str) -> dict:
    namespace: dict = {"__name__": "__main__"}
    exec(compile(source, "<script>", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("block, fixable", SHAPES.values(), ids=SHAPES.keys())
def test_the_fixed_script_runs_every_statement_where_and_when_it_did(block: str, fixable: bool) -> None:
    original = PRELUDE + block + EPILOGUE
    found = check_source(original, "script.py", select=["AMP201"])
    assert found and [d.fix is not None for d in found] == [fixable]
    fixed = fix_text(original, lambda text: check_source(text, "script.py", select=["AMP201"]), unsafe=True).source
    assert (fixed != original) == fixable

    before, after = run(original), run(fixed)
    assert [tag for tag, _ in after["seen"]] == [tag for tag, _ in before["seen"]]  # the same order
    for (tag, was_on), (_, is_on) in zip(before["seen"], after["seen"]):
        if tag == "backward":
            assert was_on and is_on != fixable  # the backward alone leaves autocast, where fixed
        else:
            assert is_on == was_on, tag
    assert before["aux"].dtype == after["aux"].dtype == torch.bfloat16  # the forward stays in autocast
    for p, q in zip(before["model"].parameters(), after["model"].parameters()):
        torch.testing.assert_close(p.grad, q.grad)
