"""`edits.NodeRanges` places the nodes it is asked for exactly where libcst's providers do.

A finding's position and a fix's range come from one print of the module that records
only the nodes asked for; any other node asked for later is placed by a full print.  Both
must agree with libcst's PositionProvider and WhitespaceInclusivePositionProvider on
every node, whatever the line endings and however the node's range is hoisted from its
children (a compound statement ends where its body does).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider, WhitespaceInclusivePositionProvider

from amplint.edits import NodeRanges

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("AMPLINT_CORPUS", "/nonexistent-amplint-corpus"))

CORNERS = [
    "if a:\n    f()\nelif b:\n    g()\nelse:\n    h()\n",
    "try:\n    x = 1\nexcept E as e:\n    pass\nelse:\n    y\nfinally:\n    z\n",
    "@dec\nclass C(B):\n    @property\n    def f(self, /, a, *, b=1):\n        return '''multi\nline'''\n",
    "x = 1; y = 2  # c\nwith a as b, c:\n    for i in range(3):\n        while i:\n            break\n",
    "s = (\n    1 +\n    2\n)\rt = 3\r\nu = f'{a!r:>{w}}'\n",
    "async def g():\n    async with a:\n        async for x in y:\n            await z\n",
    "match p:\n    case [1, *rest] if rest:\n        pass\n    case {'k': v}:\n        pass\n",
    "x = lambda: (yield)\n\f\ndef f():\n    \"\"\"doc\r\n\"\"\"\n",
]


def _reference(module: cst.Module):
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    return wrapper.resolve(PositionProvider), wrapper.resolve(WhitespaceInclusivePositionProvider)


def _all_nodes(module: cst.Module, placed) -> list[cst.CSTNode]:
    """Every node that occurs once in the tree and that libcst places (a default such as
    `SimpleWhitespace("")` is one object shared by many places)."""
    nodes: list[cst.CSTNode] = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nodes.append(node)
            return True

    module.visit(Collect())
    times = Counter(map(id, nodes))
    return [n for n in nodes if n in placed and times[id(n)] == 1]


def _agrees(source: str, seed: int = 0) -> None:
    module = cst.parse_module(source)
    syntactic, inclusive = _reference(module)
    nodes = _all_nodes(module, syntactic)
    wanted = random.Random(seed).sample(nodes, min(len(nodes), 7))
    ranges = NodeRanges(module, inclusive=True, wanted=wanted)
    for node in wanted:
        assert ranges.get(node) == syntactic[node], module.code_for_node(node)
        assert ranges.get_inclusive(node) == inclusive[node], module.code_for_node(node)
    # Every other node too: the first one not asked for prints the whole module.
    for node in nodes:
        assert ranges.get(node) == syntactic[node], module.code_for_node(node)
        assert ranges.get_inclusive(node) == inclusive[node], module.code_for_node(node)


@pytest.mark.parametrize("source", CORNERS)
def test_the_nodes_asked_for_and_all_others_are_where_libcst_puts_them(source: str) -> None:
    for seed in range(5):
        _agrees(source, seed)


@pytest.mark.parametrize("path", sorted((ROOT / "fixtures").rglob("*.py"))[::5], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_same_ranges_as_libcst_on_fixtures(path: Path) -> None:
    _agrees(path.read_text(encoding="utf-8"))


def test_only_the_nodes_asked_for_are_recorded_until_another_is_asked() -> None:
    module = cst.parse_module("def f():\n    a = 1\n    return a\n\nx = f()\n")
    call = module.body[1].body[0].value
    ranges = NodeRanges(module, inclusive=False, wanted=[call])
    assert call in ranges.syntactic
    assert module.body[0] not in ranges.syntactic  # nothing outside `call` was recorded
    assert ranges.get(module.body[0]) is not None  # ... until it was asked for


def test_want_adds_nodes_in_one_more_print() -> None:
    module = cst.parse_module("a = 1\nb = 2\n")
    first, second = module.body
    ranges = NodeRanges(module, inclusive=False, wanted=[first])
    ranges.want([second])
    assert first in ranges.syntactic and second in ranges.syntactic
    assert ranges.get(second).start.line == 2


def test_a_node_of_another_module_has_no_range() -> None:
    module = cst.parse_module("a = 1\n")
    other = cst.parse_module("b = 2\n").body[0]
    assert NodeRanges(module, inclusive=False, wanted=[module.body[0]]).get(other) is None


@pytest.mark.skipif(not CORPUS.is_dir(), reason="set AMPLINT_CORPUS to a real-code corpus to run this")
def test_same_ranges_on_corpus_sample() -> None:
    for i, p in enumerate(sorted(CORPUS.rglob("*.py"))[::211]):
        _agrees(p.read_text(encoding="utf-8", errors="replace"), seed=i)
