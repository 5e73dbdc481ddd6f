"""`analysis.walk.walk` visits the same nodes in the same order as libcst's own visit."""

from __future__ import annotations

import os
from pathlib import Path

import libcst as cst
import pytest

from amplint.analysis.walk import walk

ROOT = Path(__file__).resolve().parent.parent
# Opt-in: the corpus run takes many minutes, so it runs only when AMPLINT_CORPUS names it.
CORPUS = Path(os.environ.get("AMPLINT_CORPUS", "/nonexistent-amplint-corpus"))

TRIVIA = (
    cst.BaseParenthesizableWhitespace, cst.Comment, cst.EmptyLine, cst.Newline, cst.TrailingWhitespace,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace,
    cst.RightCurlyBrace, cst.Comma, cst.Dot, cst.Semicolon, cst.Colon, cst.AssignEqual, cst.Asynchronous,
    cst.ParamSlash,
)
NODE_TYPES = [t for t in vars(cst).values() if isinstance(t, type) and issubclass(t, cst.CSTNode) and not t.__name__.startswith("Base")]


class _LibcstOrder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.seen: list[tuple[str, cst.CSTNode]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.seen.append(("visit", node))
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.seen.append(("leave", original_node))


def _walk_recorder():
    seen: list[tuple[str, cst.CSTNode]] = []

    def v(self, node):
        seen.append(("visit", node))

    def lv(self, node):
        seen.append(("leave", node))

    methods = {}
    for t in NODE_TYPES:
        methods[f"visit_{t.__name__}"] = v
        methods[f"leave_{t.__name__}"] = lv
    return type("Recorder", (cst.CSTVisitor,), methods)(), seen


def _same_order(source: str) -> None:
    module = cst.parse_module(source)
    ref = _LibcstOrder()
    module.visit(ref)
    rec, seen = _walk_recorder()
    walk(module, rec)
    expected = [(k, id(n)) for k, n in ref.seen if not isinstance(n, TRIVIA)]
    got = [(k, id(n)) for k, n in seen if not isinstance(n, TRIVIA)]
    assert got == expected


def _files() -> list[Path]:
    return sorted(p for p in (ROOT / "fixtures").rglob("*.py"))


@pytest.mark.parametrize("path", _files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_same_order_as_libcst_on_fixtures(path: Path) -> None:
    _same_order(path.read_text(encoding="utf-8"))


def test_same_order_on_syntax_corners() -> None:
    _same_order(
        "@dec(a)\n"
        "class C(B, metaclass=M):\n"
        "    def f(self, a, /, b=1, *args, c, d=2, **kw) -> int:\n"
        "        x = y if z else w\n"
        "        f(k=v, *s, **d)\n"
        "        try:\n"
        "            pass\n"
        "        except E as e:\n"
        "            raise X from e\n"
        "        match p:\n"
        "            case [a, *r] if a > 0:\n"
        "                return lambda q, *, r=1: q[1:2, ::3]\n"
        "        return {k: v for k, v in d.items() if v}, f'{a!r:>{w}}'\n"
    )


def test_skipping_children_and_leave_order() -> None:
    module = cst.parse_module("def f():\n    g(h(1))\nk()\n")
    calls: list[str] = []

    class V(cst.CSTVisitor):
        def visit_FunctionDef(self, node):
            return False

        def visit_Call(self, node):
            calls.append(module.code_for_node(node.func))

    walk(module, V())
    assert calls == ["k"]


@pytest.mark.skipif(not CORPUS.is_dir(), reason="set AMPLINT_CORPUS to a real-code corpus (benchmarks/fetch_corpus.sh) to run this")
def test_same_order_on_corpus_sample() -> None:
    files = sorted(CORPUS.rglob("*.py"))[::97]  # a spread-out sample; the whole corpus takes minutes
    for p in files:
        _same_order(p.read_text(encoding="utf-8"))


def test_attribute_hooks_wrap_their_field() -> None:
    module = cst.parse_module("if a:\n    f()\nelse:\n    g()\n")
    events: list[str] = []

    class V(cst.CSTVisitor):
        def visit_If_body(self, node):
            events.append("body{")

        def leave_If_body(self, node):
            events.append("}body")

        def visit_If_orelse(self, node):
            events.append("orelse{")

        def leave_If_orelse(self, node):
            events.append("}orelse")

        def visit_Call(self, node):
            events.append(module.code_for_node(node.func))

    ref = V()
    module.visit(ref)
    expected, events[:] = list(events), []
    walk(module, V())
    assert events == expected == ["body{", "f", "}body", "orelse{", "g", "}orelse"]
