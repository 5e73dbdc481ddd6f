"""Branch conditions as facts (amplint/analysis/conditions.py): what a test tells on each
side of an `if`, and which facts cannot hold together on one path."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.conditions import consistent, facts, guarding_tests


def _facts(test: str, truth: bool = True):
    module = cst.parse_module("")
    return facts(cst.parse_expression(test), module.code_for_node, truth)


def test_a_comparison_with_an_empty_tuple_is_a_fact_of_its_own() -> None:
    # accelerate's offload.py: `if shape == ():` (libcst refuses `()` without its parentheses)
    assert _facts("shape == ()") == (("shape == ()", True),)
    assert _facts("(shape == ())", False) == (("shape == ()", False),)


def test_comparisons_with_literals_are_facts_about_the_subject() -> None:
    assert _facts("mode == 'train'") == (("mode", ("==", ("str", "train"))),)
    assert _facts("mode == 'train'", False) == (("mode", ("!=", ("str", "train"))),)
    assert _facts("not args.fp16") == (("args.fp16", False),)
    assert _facts("scaler is not None") == (("scaler", True),)


def test_only_facts_about_the_same_test_contradict() -> None:
    known = frozenset({("args.fp16", True), ("mode", ("==", ("str", "train")))})
    assert consistent(known, (("args.fp16", True), ("other", False)))
    assert consistent(known, (("mode", ("!=", ("str", "eval"))),))
    assert not consistent(known, (("args.fp16", False),))
    assert not consistent(known, (("mode", ("==", ("str", "eval"))),))
    assert consistent(frozenset(), (("args.fp16", False),))


def test_guarding_tests_name_the_branch_a_node_sits_in() -> None:
    module = cst.parse_module(
        "def f(self):\n"
        "    ctx = autocast(d) if self.bf16 else nullcontext()\n"
        "    if a:\n"
        "        pass\n"
        "    elif b:\n"
        "        with autocast(e):\n"
        "            pass\n"
    )
    calls = {module.code_for_node(c): c for c in _calls(module)}
    code = module.code_for_node

    def tests(call: str):
        return [(code(t), truth) for t, truth in guarding_tests(module, calls[call])]

    assert tests("autocast(d)") == [("self.bf16", True)]
    assert tests("nullcontext()") == [("self.bf16", False)]
    assert tests("autocast(e)") == [("a", False), ("b", True)]
    assert guarding_tests(module, cst.parse_expression("x")) is None  # not in the tree


def _calls(module: cst.Module) -> list[cst.Call]:
    found: list[cst.Call] = []

    class Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            found.append(node)

    module.visit(Calls())
    return found
