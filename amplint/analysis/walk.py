"""A read-only CST traversal that is several times cheaper than `node.visit(visitor)`.

libcst's `visit` is built for transformers: every node's `_visit_and_replace_children`
rebuilds the node (a dataclass construction with validation) even when the visitor
only reads, and every node pays a `getattr` dispatch for `visit_X`, `leave_X` and
the attribute hooks.  On the AMP-dense files of the corpus that made the one-pass
model cost more than the parse itself (benchmarks/profile_semantics.py).

`walk(node, visitor)` calls the same `visit_X(node)` / `leave_X(original_node)`
methods, in the same order as libcst (children in source order; `visit_X` returning
False skips the children), but reads child fields directly and never rebuilds
anything.  Attribute hooks (`visit_If_body(node)` / `leave_If_body(node)`) are called
around their field as libcst does.  It does not descend into trivia: whitespace,
comments, parentheses, commas, dots, colons and `=` tokens, so a visitor must not rely on
`visit_Comment`, `visit_Comma` and the like (none of amplint's do).  Visitors that
override `on_visit`/`on_leave`/`on_visit_attribute` or hook a trivia field fall back to
libcst.
tests/test_walk.py checks the order against libcst's own visit on the fixtures and,
when present, on the real-code corpus.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

# Fields that only hold trivia (and, for `asynchronous`/`star`, a marker read as an attribute).
_TRIVIA_FIELDS = frozenset(
    {
        "lpar", "rpar", "lbracket", "rbracket", "lbrace", "rbrace", "comma", "dot", "semicolon", "colon",
        "equal", "leading_lines", "lines_after_decorators", "header", "footer", "newline",
        "trailing_whitespace", "asynchronous", "star", "default_comma", "default_comma_whitespace",
        "posonly_ind", "whitespace", "first_line", "empty_lines", "indent", "open_bracket", "close_bracket",
    }
)
# Where libcst visits fields in another order than the dataclass declares them.
_ORDER = {
    cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.Arg: ("keyword", "value"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.MatchCase: ("pattern", "guard", "body"),
    cst.Parameters: ("posonly_params", "params", "star_arg", "kwonly_params", "star_kwarg"),
}

_FIELDS: dict[type, tuple[str, ...]] = {}


def child_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        declared = [
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in _TRIVIA_FIELDS and not f.name.startswith("whitespace")
        ]
        first = [n for n in _ORDER.get(cls, ()) if n in declared]
        names = (*first, *(n for n in declared if n not in first))
        _FIELDS[cls] = names
    return names


def _base_method(name: str):
    return getattr(cst.CSTVisitor, name, None)


def _uses_libcst_only_features(visitor: cst.CSTVisitor) -> bool:
    cls = type(visitor)
    for hook in ("on_visit", "on_leave", "on_visit_attribute", "on_leave_attribute"):
        if getattr(cls, hook) is not getattr(cst.CSTVisitor, hook):
            return True
    for name in dir(cls):
        if name.startswith(("visit_", "leave_")) and name.count("_") >= 2 and getattr(cls, name) is not _base_method(name):
            field = name.split("_", 2)[2]  # visit_If_body -> body
            if field in _TRIVIA_FIELDS or field.startswith("whitespace"):
                return True
    return False


def _hook(vcls, name: str):
    method = getattr(vcls, name, None)
    if method is None or method is _base_method(name):
        return None
    return method  # unbound: the dispatch table is shared by every instance of the class


# What a field's value is, by its class: `isinstance(value, cst.CSTNode)` goes through
# ABCMeta.__instancecheck__, which cost a fifth of a walk.
_NODE, _SEQUENCE, _OTHER = "node", "sequence", "other"
_KINDS: dict[type, str] = {}


def _kind_of(cls: type) -> str:
    if issubclass(cls, cst.CSTNode):
        return _NODE
    if issubclass(cls, (tuple, list)):
        return _SEQUENCE
    return _OTHER


# visitor class -> (falls back to libcst?, node class -> (visit, leave, ((field, before, after), ...)))
_PLANS: dict[type, tuple[bool, dict]] = {}


def walk(root: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """Visit `root` and its descendants with `visitor`'s visit_X/leave_X methods."""
    vcls = type(visitor)
    plan = _PLANS.get(vcls)
    if plan is None:
        plan = _PLANS[vcls] = (_uses_libcst_only_features(visitor), {})
    fallback, dispatch = plan
    if fallback:
        root.visit(visitor)
        return
    kinds = _KINDS

    def go(node: cst.CSTNode) -> None:
        cls = node.__class__
        entry = dispatch.get(cls)
        if entry is None:
            n = cls.__name__
            fields = tuple((f, _hook(vcls, f"visit_{n}_{f}"), _hook(vcls, f"leave_{n}_{f}")) for f in child_fields(cls))
            entry = dispatch[cls] = (_hook(vcls, f"visit_{n}"), _hook(vcls, f"leave_{n}"), fields)
        visit, leave, fields = entry
        if visit is None or visit(visitor, node) is not False:
            for f, before, after in fields:
                if before is not None:
                    before(visitor, node)
                value = getattr(node, f)
                kind = kinds.get(value.__class__)
                if kind is None:
                    kind = kinds[value.__class__] = _kind_of(value.__class__)
                if kind is _NODE:
                    go(value)
                elif kind is _SEQUENCE:
                    for child in value:
                        child_kind = kinds.get(child.__class__)
                        if child_kind is None:
                            child_kind = kinds[child.__class__] = _kind_of(child.__class__)
                        if child_kind is _NODE:
                            go(child)
                if after is not None:
                    after(visitor, node)
        if leave is not None:
            leave(visitor, node)

    go(root)
