"""`dominating_value`: the one assignment that reaches a use, only where the nesting makes it certain."""

from __future__ import annotations

import libcst as cst
import pytest

from amplint.analysis.reaching import dominating_value


def _value_at_use(source: str) -> str | None:
    """The value reaching the `use(w)` call's `w`, as code (None: not certain)."""
    module = cst.parse_module(source)
    found: list[cst.Name] = []

    class Use(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Name) and node.func.value == "use":
                found.append(node.args[0].value)

    module.visit(Use())
    (use,) = found
    value = dominating_value(module.body[0], use, "w")
    return None if value is None else module.code_for_node(value)


@pytest.mark.parametrize("body, expected", [
    ("w = 0\nw = 1 / n\nuse(w)\n", "1 / n"),
    ("w = 0\nif c:\n    w = 1 / n\n    use(w)\n", "1 / n"),  # in the use's own block
    ("w = 1 / n\nif c:\n    use(w)\n", "1 / n"),  # in a block around the use
    ("w = 0\nif c:\n    w = 1 / n\nuse(w)\n", None),  # a branch may not run
    ("w = 0\nfor x in xs:\n    use(w)\n    w = x\n", None),  # the loop brings `w = x` round
    ("for x in xs:\n    w = 1 / n\n    use(w)\n    w = x\n", "1 / n"),  # ... unless it assigns first
    ("w = 1 / n\nw, v = f()\nuse(w)\n", None),  # unpacked: no one value
    ("w = 1 / n\nw += 1\nuse(w)\n", None),
    ("use(w)\nw = 1\n", None),  # nothing before
    ("w = 1 / n\ndef g():\n    w = 0\nuse(w)\n", "1 / n"),  # another scope's `w`
])
def test_dominating_value(body: str, expected: str | None) -> None:
    source = "def f(c, n, xs):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    assert _value_at_use(source) == expected


def test_a_use_in_its_own_reassignment_reads_the_value_before() -> None:
    source = "def f(n):\n    w = 1 / n\n    w = use(w)\n"
    assert _value_at_use(source) == "1 / n"
