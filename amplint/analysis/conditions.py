"""`if` conditions as facts, so that paths that cannot both happen are not walked as one.

Real training code splits on its precision option again and again:

    if args.fp16: scaler.scale(loss).backward()      else: loss.backward()
    if args.fp16: scaler.step(optimizer)             else: optimizer.step()

A fact is `(subject, value)`: the normalised text of what is tested, and what the test
says of it where control is: True or False for a flag (`x`, `not x`, `x is not None`,
`x is None`), `("==", literal)` or `("!=", literal)` for a comparison with a literal
(`precision == "fp16"`).  Two facts contradict when they say different things of one
subject: `x` and `not x`, `precision == "fp16"` and `precision == "bf16"`.  Anything
else is one opaque fact, its text true or false.
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

Fact = tuple[str, object]


def facts(test: cst.BaseExpression, code: Callable[[cst.CSTNode], str], truth: bool) -> tuple[Fact, ...]:
    """What `test` evaluating to `truth` tells about its parts.

    `a and b` true says both, `a or b` false says neither is true; their other outcomes
    say nothing about the parts alone.
    """
    test = _unparen(test)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return facts(test.expression, code, not truth)
    if isinstance(test, cst.BooleanOperation):
        both = isinstance(test.operator, cst.And) == truth
        if both:
            return facts(test.left, code, truth) + facts(test.right, code, truth)
        return ()
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        found = _comparison(test, code, truth)
        if found is not None:
            return (found,)
    return ((_text(test, code), truth),)


def _comparison(test: cst.Comparison, code, truth: bool) -> Fact | None:
    target = test.comparisons[0]
    op, left, right = target.operator, _unparen(test.left), _unparen(target.comparator)
    if isinstance(op, (cst.Is, cst.IsNot)) and _is_none(right):
        # `x is not None` true: x holds something; `x is None` true: x holds nothing.
        return (_text(left, code), truth == isinstance(op, cst.IsNot))
    if isinstance(op, (cst.Is, cst.IsNot)) and isinstance(right, cst.Name) and right.value in ("True", "False"):
        # `x is False` true: x is falsy, as `not x` says (a flag, the only use of `is False`).
        return (_text(left, code), (right.value == "True") == (truth == isinstance(op, cst.Is)))
    if isinstance(op, (cst.Equal, cst.NotEqual)):
        subject, literal = (left, literal_value(right)) if literal_value(right) is not None else (right, literal_value(left))
        if literal is None or literal_value(subject) is not None:
            return None
        equal = isinstance(op, cst.Equal) == truth
        return (_text(subject, code), ("==" if equal else "!=", literal))
    return None


def constant_truth(test: cst.BaseExpression) -> bool | None:
    """The value of a test that does not depend on the program: `False`, `0`, `not True`,
    `False and x`, `True or x`; None for anything else."""
    test = _unparen(test)
    if isinstance(test, cst.Name) and test.value in ("True", "False"):
        return test.value == "True"
    if isinstance(test, cst.Integer):
        return test.evaluated_value != 0
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = constant_truth(test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        left, right = constant_truth(test.left), constant_truth(test.right)
        decided = isinstance(test.operator, cst.Or)  # `or` is decided by a True, `and` by a False
        if left is decided or right is decided:
            return decided
        if left is not None and right is not None:
            return not decided
    return None


def negate(value: object) -> object:
    """The value of a fact where its test is false."""
    if isinstance(value, bool):
        return not value
    op, literal = value  # type: ignore[misc]
    return ("!=" if op == "==" else "==", literal)


def contradicts(a: Fact, b: Fact) -> bool:
    """The two facts cannot hold at once."""
    if a[0] != b[0]:
        return False
    va, vb = a[1], b[1]
    if isinstance(va, bool) or isinstance(vb, bool):
        return isinstance(va, bool) and isinstance(vb, bool) and va != vb
    (oa, la), (ob, lb) = va, vb  # type: ignore[misc]
    if oa == "==" and ob == "==":
        return la != lb
    if {oa, ob} == {"==", "!="}:
        return la == lb
    return False


def consistent(known, new) -> bool:
    """No fact of `new` contradicts one of `known`."""
    if not known:
        return True
    for n in new:
        subject = n[0]
        for k in known:
            # NB: the subject first, inline: facts about other tests never contradict, and
            # a path-sensitive walk asks this at every point it enters
            if k[0] == subject and contradicts(k, n):
                return False
    return True


def guarding_tests(root: cst.CSTNode, target: cst.CSTNode) -> tuple[tuple[cst.BaseExpression, bool], ...] | None:
    """(test, truth) of each `if` statement and conditional expression whose branch holds
    `target`, outermost first (truth False: the `else` side); None when `target` is not
    inside `root`.  For a question about one node (which flag selects this autocast?),
    where the step graph's guards, kept per event, are not at hand."""
    if root is target:
        return ()
    if isinstance(root, (cst.If, cst.IfExp)):
        found = guarding_tests(root.body, target)
        if found is not None:
            return ((root.test, True), *found)
        if root.orelse is not None:
            found = guarding_tests(root.orelse, target)
            if found is not None:
                return ((root.test, False), *found)
        return guarding_tests(root.test, target)
    for child in root.children:
        found = guarding_tests(child, target)
        if found is not None:
            return found
    return None


# --- helpers -------------------------------------------------------------------------------


def _unparen(e: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(e, cst.Tuple) and not e.elements:
        return e  # `()` is its parentheses (libcst refuses an empty tuple without them)
    return e.with_changes(lpar=(), rpar=()) if getattr(e, "lpar", None) else e


def _text(e: cst.BaseExpression, code) -> str:
    return code(_unparen(e)).strip()


def _is_none(e: cst.BaseExpression) -> bool:
    return isinstance(e, cst.Name) and e.value == "None"


def literal_value(e: cst.BaseExpression) -> object | None:
    """A string or number literal (or True/False), as its value; None for anything else."""
    if isinstance(e, cst.SimpleString):
        value = e.evaluated_value
        return ("str", value) if isinstance(value, str) else None
    if isinstance(e, cst.Integer):
        return ("num", e.evaluated_value)
    if isinstance(e, cst.Float):
        try:
            return ("num", float(e.value.replace("_", "")))
        except ValueError:
            return None
    if isinstance(e, cst.Name) and e.value in ("True", "False"):
        return ("bool", e.value == "True")
    if isinstance(e, cst.Attribute) and isinstance(e.value, cst.Name) and e.value.value == "torch":
        # `dtype == torch.float16` / `dtype == torch.bfloat16`: one dtype excludes the other.
        dtype = _DTYPES.get(e.attr.value)
        if dtype is not None:
            return ("dtype", dtype)
    return None


_DTYPES = {"float16": "float16", "half": "float16", "bfloat16": "bfloat16", "float32": "float32", "float": "float32",
           "float64": "float64", "double": "float64"}
