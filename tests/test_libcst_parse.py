"""amplint's parse builds libcst's tree without re-validating each node (amplint/libcst_parse.py).

What must hold: the tree is the one libcst builds with validation, node for node; every
node built outside a parse (a fix's replacement) is still validated, also while another
thread parses; and a libcst whose `__post_init__` is not the one-line method replaced
keeps its own.
"""

from __future__ import annotations

import threading
from pathlib import Path

import libcst as cst
import pytest

from amplint import libcst_parse
from amplint.engine import parse

ROOT = Path(__file__).resolve().parent.parent
CORNERS = [
    "x = 1\n",
    "async def f():\n    async with a as b, c:\n        await g()\n    return [i async for i in h()]\n",
    "match p:\n    case {'a': [1, *rest]} if rest:\n        pass\n    case Point(x=0) | None:\n        pass\n",
    "@d\n@e(1)\nclass C(B, metaclass=M):\n    x: int = 1\n    def f(self, /, a, *, b=2, **k) -> 'C':\n        return (yield)\n",
    "lambda *a, **k: (a, k)\nx = f'{a!r:>{w}} {b=}'\ny = b'\\x00' rb'\\d'\n",
    "if a:\r\n    b = 1\r\nelse:\r\n    c = [\r\n        1,\r\n    ]\r\n",
    "x = 1 \\\n    + 2\nglobal g\ndel x, y\nassert x, 'm'\nraise E from e\n",
    "try:\n    pass\nexcept* ValueError as e:\n    pass\nfinally:\n    pass\n",
    "\ufeffwith (open(a) as f, open(b) as g):\n    print(f, g, sep='')\n",
]


def _fixture_texts() -> list[tuple[str, str]]:
    out = []
    for path in sorted((ROOT / "fixtures").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        try:
            compile(text, str(path), "exec")
        except SyntaxError:
            continue  # NB: the bad-input fixtures; parse() refuses them before libcst sees them
        out.append((str(path.relative_to(ROOT)), text))
    return out


def test_the_replacement_is_active_on_the_libcst_amplint_depends_on() -> None:
    assert libcst_parse.INSTALLED


@pytest.mark.parametrize("source", CORNERS)
def test_unvalidated_parse_builds_the_tree_libcst_builds(source: str) -> None:
    ours, theirs = libcst_parse.parse_module(source), cst.parse_module(source)
    assert ours.deep_equals(theirs)
    assert ours.code == theirs.code


def test_unvalidated_parse_builds_every_fixtures_tree_as_libcst_does() -> None:
    texts = _fixture_texts()
    assert len(texts) > 100
    differ = [name for name, text in texts if not libcst_parse.parse_module(text).deep_equals(cst.parse_module(text))]
    assert differ == []


def test_engine_parse_is_unvalidated_and_leaves_validation_on_after() -> None:
    parse("x = 1\n", "<test>")
    assert not libcst_parse._STATE.parsing
    with pytest.raises(cst.CSTValidationError):
        cst.Return(value=cst.Name("x"), whitespace_after_return=cst.SimpleWhitespace(""))


def test_a_failed_parse_leaves_validation_on() -> None:
    with pytest.raises(cst.ParserSyntaxError):
        libcst_parse.parse_module("def (:\n")
    assert not libcst_parse._STATE.parsing
    with pytest.raises(cst.CSTValidationError):
        cst.Return(value=cst.Name("x"), whitespace_after_return=cst.SimpleWhitespace(""))


def test_nodes_built_in_another_thread_during_a_parse_are_validated() -> None:
    """The switch is per thread: a fix built while a worker thread parses is still checked."""
    inside, done = threading.Event(), threading.Event()

    def parser() -> None:
        libcst_parse._STATE.parsing = True  # NB: as parse_module holds it for the whole parse
        inside.set()
        done.wait(10)
        libcst_parse._STATE.parsing = False

    t = threading.Thread(target=parser)
    t.start()
    try:
        assert inside.wait(10)
        with pytest.raises(cst.CSTValidationError):
            cst.Return(value=cst.Name("x"), whitespace_after_return=cst.SimpleWhitespace(""))
    finally:
        done.set()
        t.join()


def test_a_libcst_with_another_post_init_keeps_its_own(monkeypatch) -> None:
    from libcst._nodes.base import CSTNode

    def other(self) -> None:
        if self is not None:  # NB: not the one-line method amplint knows
            self._validate()

    monkeypatch.setattr(CSTNode, "__post_init__", other)
    assert libcst_parse._install() is False
    assert CSTNode.__dict__["__post_init__"] is other
