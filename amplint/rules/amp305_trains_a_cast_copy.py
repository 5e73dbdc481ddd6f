"""AMP305 trains-a-cast-copy."""

from __future__ import annotations

import re

from amplint.analysis.param_copies import cast_copies
from amplint.prefilter import Attr, CodeWord, Near, identifier_span
from amplint.rules._base import Rule


# --- pre-filter tokens, on lowercased code text -----------------------------------------------

# `self.enc.w = torch.nn.Parameter(self.enc.w.half())`
_REPLACED_BY_A_CAST = Near(
    "parameter", re.compile(r"([a-z_][\w.]*)\s*=\s*[\w.]*parameter\s*\(\s*\1\s*\."), after="(", before="="
)
# `name = name.<...>`: a name rebound to something made of itself
_REBOUND_TO_ITSELF = re.compile(r"\b([a-z_]\w*)\s*=\s*\1\s*\.")
_CAST_ATTR = re.compile(r"\.\s*(?:to|float|half|bfloat16|double|type)\b")
# `.requires_grad = <not False>` / `.requires_grad_(<not False>)`, right after the attribute
_UNFROZEN = re.compile(r"(?:\s*=(?!=)(?!\s*false\b)|_\s*\((?!\s*false\b))")


def _statement_end(text: str, at: int, limit: int = 2000) -> int:
    """The end of the logical line that goes on at `at`: its first line break outside
    brackets and not after a backslash (or `limit` characters on: more text only passes more)."""
    depth = 0
    stop = min(len(text), at + limit)
    for i in range(at, stop):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "\n" and depth <= 0 and text[i - 1] != "\\":
            return i
    return stop


def _rebinds_to_a_cast(text: str, rebinding: re.Match) -> bool:
    """The statement of `name = name.` spells a cast attribute (`.to`, `.float()`; `.transpose()` is none)."""
    return bool(_CAST_ATTR.search(text, rebinding.end() - 1, _statement_end(text, rebinding.end())))


class _ReboundToACast:
    """`name = name.<...cast...>` of some name."""

    outside_strings = True

    def search(self, text: str) -> bool:
        return any(_rebinds_to_a_cast(text, m) for m in _REBOUND_TO_ITSELF.finditer(text))


class _RebindThenUnfrozen:
    """The rebind shape's own evidence: `name.requires_grad` set to anything but False (or
    `requires_grad_()`), after `name = name.<...cast...>` of the same name.

    Each is common alone in model code (`hidden_states = hidden_states.to(dtype)`, an
    `unfreeze_backbone()` loop), and apart they had every such file of transformers parsed
    for this rule."""

    outside_strings = True

    def search(self, text: str) -> bool:
        first_rebind: dict[str, int] = {}
        at = text.find(".requires_grad")
        while at != -1:
            end = at + len(".requires_grad")
            start, _ = identifier_span(text, at, at)  # the name before the dot
            name = text[start:at]
            # NB: the rebound target is a plain name: `self.p.requires_grad` is not its copy
            if name and text[start - 1 : start] != "." and _UNFROZEN.match(text, end):
                if name not in first_rebind:
                    first_rebind[name] = self._first_rebind(text, name)
                if 0 <= first_rebind[name] < at:
                    return True
            at = text.find(".requires_grad", end)
        return False

    @staticmethod
    def _first_rebind(text: str, name: str) -> int:
        for m in re.finditer(rf"(?<![\w.]){re.escape(name)}\s*=\s*{re.escape(name)}\s*\.", text):
            if _rebinds_to_a_cast(text, m):
                return m.start()
        return -1


# NB: one object each, so that a file's answer is memoized once
_REBOUND_TO_A_CAST = _ReboundToACast()


class TrainsACastCopy(Rule):
    """
    ## What it does
    Flags a dtype cast of a module parameter whose result takes the parameter's place in
    training while the module (or the optimizer) keeps the old one.

    The casts: `.to(torch.float32)`, `.to(dtype=...)`, `.float()`, `.half()`,
    `.bfloat16()`, `.double()`. The shapes:

    - a name holding a parameter (`for param in model.parameters()`, `w = emb.weight`) is
      rebound to its cast (`param = param.to(torch.float32)`) and the copy is then made
      trainable (`param.requires_grad = True`) or handed to an optimizer;
    - a module attribute is replaced by `nn.Parameter(<cast of it>)` in `forward` (or a
      helper `forward` calls), or after the optimizer was built.

    The diagnostic points at the cast. `param.data = param.data.to(...)` is the correct
    spelling and is not reported.

    ## Why is this bad?
    A cast to another dtype returns a new tensor. The model goes on using the parameter
    it holds, the optimizer updates a copy nobody reads (or holds the old parameter while
    the model uses a new one it never steps): the embedding, the mask vector or the
    adapter that was meant to learn stays where it started, with no error and a loss that
    still moves thanks to the other parameters. The real shapes: textual-inversion
    scripts that upcast the token embedding after casting the text encoder to fp16, and
    a forward that recasts a parameter for AMP on every call.

    ## Example
    ```python
    text_encoder.to(dtype=torch.float16)
    for param in text_encoder.get_input_embeddings().parameters():
        param = param.to(torch.float32)
        param.requires_grad = True
    ```

    Use instead:
    ```python
    text_encoder.to(dtype=torch.float16)
    for param in text_encoder.get_input_embeddings().parameters():
        param.data = param.data.to(torch.float32)
        param.requires_grad = True
    ```

    ## Fix safety
    No fix: rewriting the rebinding as `param.data = ...` changes which tensor the
    optimizer holds, and code after it may rely on the copy.

    ## Runtime confirmation
    `amplint verify` records casts of parameters and the parameters of every module a
    forward pass ran; an optimizer parameter that is such a cast (or the parameter a cast
    replaced) and belongs to no module seen in the forward pass confirms the finding.
    """

    code = "AMP305"
    name = "trains-a-cast-copy"
    message = "`{target}` is rebound to a cast copy of the parameter: {why}, but the model never uses the copy"
    replace_message = "`{target}` is replaced by a new `nn.Parameter` of its cast {why}: the optimizer still holds the old one"
    # Pre-filter: every cast spelling is an attribute (`.to`, `.float`, `.half`, `.bfloat16`,
    # `.double`, `.type`); a parameter is reached through `.parameters()`, `.weight`/`.bias`
    # or `Parameter(...)`; and what trains the copy is in the same module: an assignment to
    # `.requires_grad` or a `.requires_grad_()` that is not False, or an optimizer class of the packages amplint
    # knows (`torch.optim`, `bitsandbytes.optim`, `apex.optimizers`, `transformers.optimization`),
    # which model files rarely name (without this group nearly every model file of a library
    # was parsed for this rule alone).
    requires_any = tuple(Attr(w) for w in ("to", "float", "half", "bfloat16", "double", "type"))
    and_requires_any = (
        ("parameter", Attr("weight"), Attr("bias")),
        # the shapes with what trains the copy: `name = name.<cast>` then the same name
        # unfrozen (`= False` / `requires_grad_(False)`, freezing, trains nothing) or an
        # optimizer in the module; `x.w = ...Parameter(x.w.<cast>)` (judged by `forward`
        # calling it, or an optimizer built before: espnet's cast_mask_emb).
        (_RebindThenUnfrozen(), _REPLACED_BY_A_CAST,
         *((CodeWord(word), _REBOUND_TO_A_CAST) for word in ("optim", "optimizers", "optimization"))),
    )

    def check(self) -> None:
        for copy in cast_copies(self.model):
            if copy.shape == "rebind":
                self.report(copy.cast, target=copy.target, why=copy.why)
            else:
                self.report(copy.cast, message=self.replace_message, target=copy.target, why=copy.why)
