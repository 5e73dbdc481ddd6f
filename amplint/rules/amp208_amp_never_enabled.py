"""AMP208 amp-never-enabled."""

from __future__ import annotations

import re

import libcst as cst

from amplint.analysis.names import dotted
from amplint.analysis.torch_api import AUTOCAST_CONTEXTS, SCALER_CONSTRUCTORS
from amplint.rules._base import Rule


class AmpNeverEnabled(Rule):
    """
    ## What it does
    Flags the `enabled=` of an autocast region or a GradScaler that is a comparison of an
    option with a string the option can never hold: `enabled=args.precision == "fp16"`
    where `--precision` is declared with `choices=["16", "bf16", "32"]` (also through a
    name assigned such a comparison, and `x in ("fp16", "float16")`). The choices are read
    from the `add_argument` that declares the option, in this module or one that imports
    it, with its `default` and any `set_defaults(...)` (argparse checks neither against the
    choices); an option with no `choices` is never judged, nor one the module may write
    after parsing (`args.precision = ...` on any name, `setattr`, `vars(args)`,
    `__dict__`, `parse_args(namespace=...)`). The diagnostic points at the comparison.

    Hunted in public code: `GradScaler(enabled=args.precision == "fp16")` and
    `autocast(..., enabled=args.precision == "fp16")` are common (ten files by an exact
    search of public repositories); measured on the 17 library wheels and the 28 dev and
    legacy research repositories of the benchmarks it reports nothing (no false positive;
    no labelled case there, so its recall is not measured yet). In the preview tier.

    ## Why is this bad?
    The comparison is always false, so autocast and the scaler are always disabled: the
    run trains in float32 while its configuration says mixed precision. Nothing fails; it
    is only slower and uses more memory (bytedance/Protenix#258 shipped this way).

    ## Example
    ```python
    parser.add_argument("--precision", choices=["16", "bf16", "32"], default="16")
    args = parser.parse_args()
    use_amp = args.precision == "fp16"
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    ```

    Use instead:
    ```python
    use_amp = args.precision == "16"
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    ```
    """

    code = "AMP208"
    name = "amp-never-enabled"
    message = "`{test}` is never true (`{option}` is one of {choices}): this {what} is never enabled"
    requires_any = ("choices",)
    and_requires_any = (("enabled",),)

    def check(self) -> None:
        model = self.model
        reported: set[int] = set()
        for site in model.calls:
            qual = model.qualify(site.node.func)
            if qual in AUTOCAST_CONTEXTS:
                what = "autocast"
            elif qual in SCALER_CONSTRUCTORS:
                what = "GradScaler"
            else:
                continue
            enabled = next((a.value for a in site.node.args if a.keyword is not None and a.keyword.value == "enabled"), None)
            if enabled is None:
                continue
            for test, scope in self._comparisons(enabled, site.scope):
                never = self._never_true(test, scope)
                if never is None or id(test) in reported:
                    continue
                reported.add(id(test))
                option, choices = never
                self.report(test, test=model.module.code_for_node(test), option=option,
                            choices=", ".join(repr(c) for c in sorted(choices)), what=what)

    def _comparisons(self, expr: cst.BaseExpression, scope) -> list[tuple[cst.Comparison, object]]:
        """The comparison `enabled=` is, or every one a name it reads is assigned (all of
        them, or none: one other value may enable it)."""
        if isinstance(expr, cst.Comparison):
            return [(expr, scope)]
        if isinstance(expr, (cst.Name, cst.Attribute)):
            values = self.model.bindings.values.assigned(expr, scope)
            if values and all(isinstance(v, cst.Comparison) for v, _ in values):
                return [(v, s) for v, s in values if s.model is self.model]
        return []

    def _never_true(self, test: cst.Comparison, scope) -> tuple[str, frozenset[str]] | None:
        """(option text, its choices) when `option == "x"` / `option in (...)` can never hold."""
        if len(test.comparisons) != 1:
            return None
        target = test.comparisons[0]
        left, right = test.left, target.comparator
        if isinstance(target.operator, cst.Equal):
            if isinstance(left, cst.SimpleString):
                left, right = right, left
            wanted = _strings(right)
        elif isinstance(target.operator, cst.In):
            wanted = _strings(right)
        else:
            return None
        option = dotted(left)
        if wanted is None or option is None or not isinstance(left, cst.Attribute):
            return None
        choices = self.model.bindings.values.strings(left, scope)
        if not choices or wanted & choices or self._written_after_parsing(left.attr.value):
            return None
        return option, choices

    def _written_after_parsing(self, dest: str) -> bool:
        """The module may give the option another value than the command line's: it assigns
        `<anything>.dest = ...` (an alias of the namespace, a function that edits it), or
        writes through `setattr`, `vars(args)`, `__dict__` or a prepared `namespace=`."""
        text = self.model.text
        return bool(re.search(rf"\.{re.escape(dest)}\s*(?:=[^=]|\+=)|\bsetattr\(|\bvars\(|__dict__|\bnamespace\s*=", text))


def _strings(expr: cst.BaseExpression) -> frozenset[str] | None:
    """The literal strings of `"fp16"` or of a tuple/list/set of them."""
    if isinstance(expr, cst.SimpleString) and isinstance(expr.evaluated_value, str):
        return frozenset({expr.evaluated_value})
    if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        found = [_strings(e.value) for e in expr.elements]
        if found and all(f is not None and len(f) == 1 for f in found):
            return frozenset(next(iter(f)) for f in found)
    return None
