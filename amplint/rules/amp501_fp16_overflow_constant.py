"""AMP501 fp16-overflow-constant."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.bindings import call_arg
from amplint.analysis.float_tensors import floating_dtype, known_float_tensor
from amplint.analysis.names import dotted
from amplint.analysis.precision import fp16_from_importers, may_run_fp16, number_of, overflows_fp16, precision_of
from amplint.analysis.tensor_flow import Sink, flows_from
from amplint.analysis.torch_api import FLOAT16_NOT_BFLOAT16
from amplint.analysis.walk import walk
from amplint.diagnostics import Applicability
from amplint.prefilter import STRING_ESCAPE, CodePattern, Word, closing_bracket, identifier_span
from amplint.rules._base import FixAvailability, Replace, Rule

# Tensor methods that write a scalar into their receiver (or a copy of it):
# method -> (position, keyword) of the scalar.
_WRITING_METHODS = {
    "masked_fill": (1, "value"),
    "masked_fill_": (1, "value"),
    "fill_": (0, "value"),
    "new_full": (1, "fill_value"),
    "add_": (0, "other"),
    "sub_": (0, "other"),
    "mul_": (0, "other"),
    "where": (1, "other"),
}
# Receivers that are no longer float16 whatever the module does.
_FULL_PRECISION_METHODS = ("float", "double")
_INTEGER_METHODS = ("long", "int", "short", "bool", "byte", "char")
# In-place arithmetic with the literal: a computation, not a fill.
_ARITHMETIC_METHODS = frozenset({"add_", "sub_", "mul_"})
_FULL_DTYPES = frozenset({"float32", "float64"})
# Tensor factories: float32 unless given a dtype (`*_like` inherits its input's).
_FACTORIES = frozenset(
    f"torch.{name}"
    for name in ("zeros", "ones", "empty", "full", "rand", "randn", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like")
)



# --- pre-filter tokens (run on the lowercased code text; see amplint/prefilter.py) ---------
_FULL_DTYPE_NAMES = ("float32", "float64", "float", "double")  # FULL_DTYPES' last parts
_DOTTED_NAME = re.compile(r"[a-z_][a-z0-9_]*(?:\s*\.\s*[a-z_][a-z0-9_]*)*")
# A number literal as Python's tokenizer reads it (lowercased text), from its first character.
_FLOAT_LITERAL = re.compile(r"(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:e[+-]?[0-9][0-9_]*)?(?P<imaginary>j)?")


# Compilers that cannot read `torch.finfo`: a fix writing it breaks a scripted or traced model.
_SCRIPT_OR_FX_WORDS = ("torch.jit", "jit.script", "symbolic_trace", "torch.fx", "create_feature_extractor")
_SCRIPT_OR_FX = re.compile(r"\btorch\.jit\b|\bjit\.script|\bimport jit\b|\bsymbolic_trace\b|\btorch\.fx\b"
                           r"|\bcreate_feature_extractor\b|\bfx\.Tracer\b")


@dataclass(frozen=True)
class _OverflowingFloat:
    """A float literal beyond 65504, judged as the rule judges one (`number_of`, which
    reads float literals only, then `overflows_fp16`): `-1e9` and `100_000.0` pass,
    `1e4`, `1e-5` and the integer `100000` do not.

    A fast pattern finds candidates (a non-negative exponent, five integer digits, or
    underscores); each is then read whole, from a start that begins a number (not
    `0x9e37` or `layer1e5`), and evaluated.  Strings are not looked at
    (`"issue-3606633695."`): the token gets the code with string contents emptied.
    """

    outside_strings = True

    # NB: one digit first, then lookbehinds: a pattern that starts with alternatives of
    # character classes costs several times more on real code.
    pattern: re.Pattern = re.compile(
        r"[0-9](?:\.?e\+?[0-9]|_[0-9][0-9_]*[.e]|[0-9]{5}[0-9_]*[.e]"
        r"|(?<=[7-9])[0-9]{4}[.e]|(?<=6)(?:[6-9][0-9]{3}|5[5-9][0-9]{2})[.e])"
    )

    def search(self, text: str) -> bool:
        for m in self.pattern.finditer(text):
            start = m.start()
            while start > 0 and (text[start - 1].isdigit() or text[start - 1] in "_."):
                start -= 1
            if start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
                continue  # inside a name or a hex literal
            literal = _FLOAT_LITERAL.match(text, start)
            if literal is None:
                return True  # not a shape this reader knows: keep the file
            spelled = literal.group()
            if ("." not in spelled and "e" not in spelled) or literal.group("imaginary"):
                continue  # an int or an imaginary number: `number_of` reads floats only
            try:
                value = float(spelled.replace("_", ""))
            except ValueError:
                return True
            if overflows_fp16(value) and _may_be_read_whole(text, start, literal.end()):
                return True
        return False


# `scores += mask * -1e9` / `scores -= 1e9 * mask`: an in-place add or subtract of a product
# with a float literal beyond float16 (an exponent of 5 or more, or six digits before the
# point), written directly (`_masked_in_place` reads only a literal there).
_OVERFLOWING_LITERAL = r"(?:[0-9][0-9_]*\.?[0-9_]*e\+?0*(?:[5-9]|[1-9][0-9])|[0-9][0-9_]{5,}\.[0-9_]*|[7-9][0-9]{4}\.[0-9]*|6[6-9][0-9]{3}\.[0-9]*|65[5-9][0-9]{2}\.[0-9]*)"
_MASK_PRODUCT_IN_PLACE = re.compile(
    r"[-+]=(?!=)[^\n=]*?(?:\*\s*[-+(\s]*" + _OVERFLOWING_LITERAL + r"|" + _OVERFLOWING_LITERAL + r"\s*\)*\s*\*)"
)

# Calls whose first argument the rule reads as the value written (`x.fill_(-1e9)`).
_FIRST_ARGUMENT_SINKS = tuple(m for m, (position, _) in _WRITING_METHODS.items() if position == 0)
_BLANK = " \t\f\r\n\\"


def _may_be_read_whole(text: str, start: int, end: int) -> bool:
    """Could the literal at text[start:end] be a value the rule reads whole?

    The rule reads a literal (under unary signs and parentheses, `number_of`) only as an
    argument or as the right side of `=`, `:=` or an augmented assignment (a name bound to
    it, values.py).  So the literal must end its expression (`)`, `,`, `;`, `:` or a line
    break follow) and, past its signs, follow `,`, an assignment's `=` or a `(` that is
    no call but a sink's (`fill_(`): `1e30 * mask`, `x - 1e30`, `x == 1e9`, `int(1e9)`,
    `[1e9]` and `{"a": 1e9}` cannot be read.  A line break counts as an end even inside
    brackets, where it is not one: the check may only ever accept more.  A product
    `mask * -1e9` is read too, for an in-place `+=`/`-=` of it (`_masked_in_place`).
    tests/test_prefilter.py checks every literal the rule can read in the fixtures (and
    the corpus) against it.
    """
    n = len(text)
    while end < n and text[end] in " \t\f\\":
        end += 1
    if end < n and text[end] not in "),;:\r\n#":
        return False
    at = start - 1
    while True:
        while at >= 0 and text[at] in _BLANK:
            at -= 1
        if at >= 0 and text[at] in "-+":
            at -= 1
            continue
        break
    if at < 0:
        return True
    c = text[at]
    if c == ",":
        return True
    if c == "*" and (at == 0 or text[at - 1] != "*"):
        return True  # `scores += mask * -1e9`: the masking product (`_masked_in_place`)
    if c == "=":
        return at == 0 or text[at - 1] not in "=!<>"
    if c != "(":
        return False
    at -= 1
    while at >= 0 and text[at] in _BLANK:
        at -= 1
    if at < 0 or not (text[at].isalnum() or text[at] == "_"):
        return True  # grouping parentheses: `= (-1e9)`, `-(1e9)`
    begin, _ = identifier_span(text, at, at + 1)
    return text[begin : at + 1] in _FIRST_ARGUMENT_SINKS


@dataclass(frozen=True)
class _FinfoOfFullDtype:
    """`torch.finfo(<arg>)` whose argument may resolve to float32/float64 (`_finfo_full`).

    Only a dotted name can be ruled out (anything else passes): it resolves to a full
    dtype when its last part is one (`torch.float32`), when it is an alias imported as one
    (`from torch import float32 as f32`), or when a value is assigned to it (values.py):
    the same dotted text (`x.dtype = ...`), any `<self>.dtype = ...` when its first part
    is some function's first parameter (a class attribute), `dtype = ...` / `dtype :=`
    for a name.  `finfo(hidden_states.dtype)` does not pass where `hidden_states.dtype`
    is never assigned.
    """

    def search(self, text: str) -> bool:
        judged: set[str | None] = set()  # a model file writes `finfo(dtype)` dozens of times
        facts: _NameFacts | None = None
        at = text.find("finfo")
        while at != -1:
            arg = _call_argument(text, at + len("finfo"))
            if arg not in judged:
                facts = facts or _NameFacts(text)
                if facts.may_be_full(arg):
                    return True
                judged.add(arg)
            at = text.find("finfo", at + 1)
        return False


_WORD_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")  # `[a-z0-9_]`
# `float32 as f32`: the name a full dtype is imported as; `def f(self`: a first parameter.
_FULL_DTYPE_ALIAS = re.compile(r"(?:float32|float64|float|double)\s+as\s+([a-z0-9_]+)")
_FIRST_PARAMETER = re.compile(r"def\s+[a-z0-9_]+\s*\(\s*([a-z0-9_]+)")
# What follows an assigned name: an annotation, then `=` that is no `==`.
_ASSIGNED = r"\s*(?::[^=\n]*)?=(?!=)"


class _NameFacts:
    """What one text says of the names a `finfo` argument may be: each question is
    answered by one scan of the text (a model file asks for a dozen arguments).

    Every pattern starts with the name it is about, so the regex engine can skip to
    that literal; what must come before the name (no identifier character, a dot, a
    line start) is checked at each match.  Matches may overlap: a search goes on from
    the character after a match that is turned down.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self._aliases: frozenset[str] | None = None
        self._first_parameters: frozenset[str] | None = None

    def may_be_full(self, arg: str | None) -> bool:
        if arg is None:
            return True  # `finfo` not called here (an alias, an import): no argument to judge
        arg = arg.strip()
        if arg.startswith("type") and "=" in arg:
            arg = arg.split("=", 1)[1].strip()  # finfo(type=...)
        if not _DOTTED_NAME.fullmatch(arg):
            return True
        parts = [p.strip() for p in arg.split(".")]
        last = parts[-1]
        if last in _FULL_DTYPE_NAMES or parts[0] in self.aliases:
            return True
        if len(parts) > 1:
            dotted_text = r"\s*\.\s*".join(map(re.escape, parts))
            if self._any_match(dotted_text + _ASSIGNED, self._not_after_name_or_dot):
                return True
            # `self.dtype = ...` in any method assigns `<instance>.dtype` (maybe `self`)
            return parts[0] in self.first_parameters and self._any_match(re.escape(last) + _ASSIGNED, self._after_dot)
        return self._any_match(re.escape(last) + _ASSIGNED, self._statement_start) or self._any_match(
            re.escape(last) + r"\s*:=", self._not_after_name
        )

    @property
    def aliases(self) -> frozenset[str]:
        if self._aliases is None:
            self._aliases = self._captured(_FULL_DTYPE_ALIAS)
        return self._aliases

    @property
    def first_parameters(self) -> frozenset[str]:
        if self._first_parameters is None:
            self._first_parameters = self._captured(_FIRST_PARAMETER)
        return self._first_parameters

    def _captured(self, pattern: re.Pattern) -> frozenset[str]:
        """The whole word each (possibly overlapping) match captures."""
        found, at = set(), 0
        while (m := pattern.search(self.text, at)) is not None:
            found.add(m.group(1))
            at = m.start() + 1
        return frozenset(found)

    def _any_match(self, pattern: str, fits) -> bool:
        compiled, at = re.compile(pattern), 0
        while (m := compiled.search(self.text, at)) is not None:
            if fits(m.start()):
                return True
            at = m.start() + 1
        return False

    def _not_after_name_or_dot(self, start: int) -> bool:
        return start == 0 or (self.text[start - 1] not in _WORD_CHARACTERS and self.text[start - 1] != ".")

    def _not_after_name(self, start: int) -> bool:
        return start == 0 or self.text[start - 1] not in _WORD_CHARACTERS

    def _after_dot(self, start: int) -> bool:
        at = start - 1
        while at >= 0 and self.text[at].isspace():  # NB: what `\s` matches in a str pattern
            at -= 1
        return at >= 0 and self.text[at] == "."

    def _statement_start(self, start: int) -> bool:
        """A line start, `=` or `;` before the name, blanks between (`^|[=;]` of MULTILINE)."""
        at = start - 1
        while at >= 0 and self.text[at] in " \t":
            at -= 1
        return at < 0 or self.text[at] in "\n=;"


def _call_argument(text: str, at: int) -> str | None:
    """The text between the parentheses that open at `text[at:]` (after blanks), else None."""
    n = len(text)
    while at < n and text[at] in " \t\r\n\\":
        at += 1
    if at >= n or text[at] != "(":
        return None
    end = closing_bracket(text, at)
    return text[at + 1 : end] if end >= 0 else text[at + 1 :]

class Fp16OverflowConstant(Rule):
    """
    ## What it does
    Flags a float literal outside float16's range (|x| > 65504: `-1e9`, `-1e10`,
    `1e5`, also `torch.finfo(torch.float32).min`, directly or through a name bound
    only to such literals) written into a tensor with `masked_fill(_)`, `fill_`,
    `new_full`, `add_`/`sub_`/`mul_` (arithmetic: only inside float16 autocast or on a
    tensor made float16 with `.half()` / `.to(torch.float16)`, and never fixed),
    `torch.where` / `Tensor.where`, `full_like`,
    `torch.full(..., dtype=<maybe float16>)`, or an index/slice assignment
    (`x[mask] = -1e9`, `x[i] += 1e5`; not into a NumPy array, list or dict), or added in place as a mask product
    (`scores += mask * -1e9`, where `scores` is computed by a call: the in-place add
    keeps float16), in code that runs in float16. A float32
    tensor that holds such a value (`torch.where(m > 0, 0.0, -1e10)`) is reported
    (at the literal, with a note on the place) when it later reaches float16: cast
    with `.to`/`.type`/`.type_as`/`.half()` to a
    dtype that may be float16, or written in place into a float16 tensor
    (`scores += bias`), after sums, reshapes, project helpers that only rearrange
    it, and returns to a caller in the same module.
    `float("-inf")`, `-1e4` and other values that fit are fine.

    How the rule knows the code runs in float16 (no configuration needed): the
    statement is inside an autocast region that may be float16 (cuda's default
    included), or the module itself shows it runs in float16: it enters float16
    autocast anywhere, builds an enabled GradScaler (only float16 needs one),
    mentions `torch.float16` / `torch.half` or calls `.half()`, uses apex amp, or has
    an fp16 option (`args.fp16`, `use_fp16 = ...`, `mixed_precision="fp16"`); code
    under an option counts as if the option were on. A model file that never says
    so is reported when the program that uses it trains in float16: a module that
    imports it (directly or not) enters float16 autocast or builds an enabled
    GradScaler, or such an importer also imports a module that does (`main.py`
    imports the model and the fp16 trainer). Otherwise it is not reported (a plain
    `-1e9` is fine in float32 and in bfloat16), nor is a
    write into a tensor just made float32 (`x.float().masked_fill(...)`, a name
    assigned only from `.float()`, a product with a tensor made float32 on purpose,
    which promotes), a statement inside `autocast(enabled=False)` or a
    bfloat16-only region, `torch.full` without a dtype (float32), or a value chosen
    by a dtype test (`-1e9 if x.dtype == torch.float32 else -1e4`).

    ## Why is this bad?
    float16's largest finite value is 65504. `masked_fill` with `-1e9` on a float16
    tensor raises "value cannot be converted to type at::Half without overflow";
    `torch.where`, `fill_` and index assignment silently store `-inf`, and a row of
    attention scores that is all `-inf` turns softmax into NaN. Under autocast the
    attention scores are float16 because the matmul that produced them is, so code
    that works in float32 breaks the day AMP is switched on.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(mask == 0, -1e9)
    ```

    Use instead:
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    ```

    ## Fix safety
    Unsafe: replaces the literal with `torch.finfo(<tensor>.dtype).min` (or `.max`)
    only where the filled tensor goes straight into a softmax (the fill is its input, or
    the name it fills is read afterwards only as a softmax's input): there both values
    give a zero weight, while a later cast to a narrower dtype, a division by a
    temperature or a product with a zero target turns `finfo.min` into -inf or NaN where
    -1e9 survived. "Only" counts every reader: no fix where a nested function, a lambda or
    (for a name declared `global`, or a fill at module level in a module with functions or
    that the project imports) other code may read the tensor when it runs, where the softmax
    rebinding runs on one path only, where an in-place fill writes a tensor also kept
    elsewhere (a view, an `out=` buffer, the name returned beside the softmax), or where a
    notebook's IPython line names it. It also needs the tensor to be a plain name or attribute and a module-level `import torch`
    (or `import torch as th`) that always runs reaches the fill and nothing else in the
    module binds that name, in any scope and by any binding form; not through an import
    under `if TYPE_CHECKING:` or in another function, nor where the name is also a
    parameter, an assignment or `for`/`with`/`except ... as` target, another import
    (`import numpy as torch` in the function), a match capture or is deleted, where the
    written `torch.finfo` would raise or read another module's `finfo`. The code must
    show that the tensor is floating (`finfo` of an int64 or bool tensor, or of a NumPy
    array, raises): a cast to a floating dtype, a float factory, a softmax or matmul of
    such a tensor, the output of an `nn.Linear`-like module bound to a name, and local or
    module-level names assigned only those (amplint/analysis/float_tensors.py); a
    parameter, a helper's result, an attribute (`self.bias` may be set from anywhere), a
    `.view(dtype)` (also `getattr(torch, ...)`), a name whose `.data` is reassigned or
    whose tensor is swapped (`torch.utils.swap_tensors`), one bound by a `for`, `with` or
    walrus target, a module global that an importer may set, a layer's output where the
    module or an importer registers forward hooks or replaces a `forward`, and an
    `nn.Embedding`'s output (its table may be integer), a module that writes namespaces
    without naming what it binds (`globals()`, `exec`, `sys.modules`, `__dict__`,
    `__setstate__`), a `nonlocal` or match-capture rebinding, an attribute its class
    computes (a property), and `.view(name)` where the name may hold a dtype are
    reported without a fix, and
    so is a call with `**kwargs`. An index
    assignment is fixed only where every value of the indexed name is computed by a
    call that is not NumPy's (`x[m] = -1e9` on a parameter `x`, which may be a list or an
    array, is reported without a fix). In float32 the value becomes
    -3.4e38 instead of -1e9, and code that adds two such masks can reach -inf.
    TorchScript and torch.fx cannot compile `torch.finfo`: no fix in a module that
    names them (`torch.jit`, `symbolic_trace`, `create_feature_extractor`) or is imported,
    or loaded by name, by a project module that does; a model scripted by code outside the
    project is the remaining risk of this unsafe fix.

    ## Runtime confirmation
    `amplint verify --nan-guard` reports the overflow error or the first module whose
    output holds inf/NaN.
    """

    code = "AMP501"
    name = "fp16-overflow-constant"
    message = "`{literal}` is outside float16's range (max 65504) and is written into a tensor that can be float16"
    fix_title = "Use `{replacement}`"
    fix_availability = FixAvailability.SOMETIMES
    safety = Applicability.UNSAFE
    # Pre-filter, three groups, each necessary:
    # 1. an overflowing value: a float literal where the rule can read it, or
    #    `torch.finfo` of a full dtype (above);
    # 2. every spelling of fp16 evidence (`fp16_evidence`): an autocast, a GradScaler,
    #    `float16` (not `bfloat16`) or the word `half` (`torch.half`, `.half()`), an fp16
    #    option or string (`fp16`, `half_precision`, a string escape may spell them), apex;
    # 3. a sink: the writing methods and factories above, or an index (augmented)
    #    assignment `x[m] = v` / `(x[m]) += v` (comments are gone from the code text).
    requires_any = (_OverflowingFloat(), _FinfoOfFullDtype())
    # The evidence may come from the project: a decorator of amp_utils.py on the forward
    # (the only evidence read from other modules: their mere mention of float16 is none).
    imported_tokens = (1,)
    # NB: an autocast that is not literally switched off (`autocast(..., enabled=False)` of
    # a rotary-embedding helper is no evidence), in lowercased text
    # and in code, not in a message that quotes it.
    elsewhere_tokens = {1: (CodePattern(re.compile(r"autocast\s*\((?![^()]*enabled\s*=\s*false)"), literal="autocast"),)}
    and_requires_any = (
        # ... or the in-place mask product, whose float16 evidence may come from the program
        # that uses the module (`fp16_from_importers`, read only for such a file).
        ("autocast", "GradScaler", FLOAT16_NOT_BFLOAT16, Word("half"), "half_precision", "fp16", Word("apex"), STRING_ESCAPE,
         _MASK_PRODUCT_IN_PLACE),
        (*_WRITING_METHODS, "where", "full", re.compile(r"\][\s\\)]*[-+*]?=(?!=)"),
         _MASK_PRODUCT_IN_PLACE),
    )

    def check(self) -> None:
        self.precision = precision_of(self.model)
        for site in self.model.calls:
            self._call(site.node, site.scope)
        for node in self.precision.assigns:
            for target in node.targets:
                if isinstance(target.target, cst.Subscript):
                    self._item_sink(node, target.target.value, node.value, self.precision.scope_of(node))
        for node in self.precision.augassigns:
            if isinstance(node.target, cst.Subscript) and isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign)):
                self._item_sink(node, node.target.value, node.value, self.precision.scope_of(node))
            elif isinstance(node.target, (cst.Name, cst.Attribute)) and isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)):
                self._masked_in_place(node, self.precision.scope_of(node))

    # --- sinks ---------------------------------------------------------------------------
    def _call(self, call: cst.Call, scope) -> None:
        qual = self.model.qualify(call.func)
        if qual == "torch.where":
            cond_x, other = call_arg(call, 1, "input"), call_arg(call, 2, "other")
            for value, tensor in ((cond_x, other), (other, cond_x)):
                if value is None or tensor is None:
                    continue
                if not self._is_scalar(tensor):
                    self._sink(call, tensor, value, scope)
                else:
                    # NB: with two Python scalars the result has the default dtype
                    # (float32): the value overflows only where it later meets float16.
                    self._float32_holder(call, value, scope)
            return
        if qual == "torch.masked_fill":
            self._sink(call, call_arg(call, 0, "input"), call_arg(call, 2, "value"), scope)
            return
        if qual == "torch.full_like":
            if not self._full_dtype(call_arg(call, None, "dtype"), scope, unknown_is_full=False):
                self._sink(call, call_arg(call, 0, "input"), call_arg(call, 1, "fill_value"), scope)
            return
        if qual == "torch.full":
            dtype = call_arg(call, None, "dtype")
            # NB: without a dtype torch.full makes a float32 tensor, autocast or not.
            if dtype is not None and not self._full_dtype(dtype, scope, unknown_is_full=False):
                self._sink(call, None, call_arg(call, 1, "fill_value"), scope, dtype_expr=dtype)
            return
        if qual is not None or not isinstance(call.func, cst.Attribute):
            return
        method = call.func.attr.value
        receiver = call.func.value
        if method in ("to", "type", "type_as", "half") and isinstance(receiver, cst.Call):
            # `torch.where(m > 0, 0.0, -1e10).to(x.dtype)`: float32 first, then cast.
            if self.model.qualify(receiver.func) == "torch.where":
                self._cast_where(call, method, receiver, scope)
            return
        if method not in _WRITING_METHODS:
            return
        position, keyword = _WRITING_METHODS[method]
        value = call_arg(call, position, keyword)
        if method == "new_full" and call_arg(call, None, "dtype") is not None:
            # `h.new_full(shape, -1e9, dtype=torch.float32)`: the dtype given, not `h`'s
            dtype = call_arg(call, None, "dtype")
            if self._full_dtype(dtype, scope, unknown_is_full=False):
                self._float32_holder(call, value, scope)
            else:
                self._sink(call, None, value, scope, dtype_expr=dtype if dotted(dtype) is not None else None)
            return
        # `s.mul_(1e5)`, `t.add_(1e5)`: arithmetic, not a fill; reported only inside float16
        # autocast (a module's float16 elsewhere says nothing of this tensor), never fixed
        # (`mul_(finfo.max)` is another computation).
        arithmetic = method in _ARITHMETIC_METHODS
        region_only = arithmetic and not self._made_float16(call.func.value, scope)
        self._sink(call, call.func.value, value, scope, fixable=not arithmetic, region_only=region_only)

    def _made_float16(self, tensor: cst.BaseExpression, scope) -> bool:
        """Some value of `tensor` is cast to float16 where it is made (`x.half()`,
        `x.to(torch.float16)`), through methods that keep the dtype."""
        for value, vscope in self.model.bindings.values.assigned(tensor, scope):
            while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                   and value.func.attr.value in _DTYPE_KEEPING):
                value = value.func.value
            if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
                continue
            method = value.func.attr.value
            if method == "half" and not value.args:
                return True
            if method in ("to", "type") and value.args:
                dtype = call_arg(value, None, "dtype") or value.args[0].value
                if self.model.bindings.values.dtypes(dtype, vscope) == frozenset({"float16"}):
                    return True
        return False

    def _cast_where(self, cast: cst.Call, method: str, where: cst.Call, scope) -> None:
        if method == "half":
            for value in (call_arg(where, 1, "input"), call_arg(where, 2, "other")):
                if value is not None:
                    self._sink(where, None, value, scope)
            return
        if method == "type_as":
            other = call_arg(cast, 0, "other")
            dtype = cst.Attribute(other, cst.Name("dtype")) if dotted(other) is not None else None
        else:
            dtype = call_arg(cast, None, "dtype") or (cast.args[0].value if cast.args and cast.args[0].keyword is None else None)
        if dtype is None or self._full_dtype(dtype, scope, unknown_is_full=False):
            return
        for value in (call_arg(where, 1, "input"), call_arg(where, 2, "other")):
            if value is not None:
                self._sink(where, None, value, scope, dtype_expr=dtype if dotted(dtype) is not None else None)

    def _float32_holder(self, made: cst.Call, value, scope) -> None:
        """`made` is a float32 tensor holding `value`: report where it reaches float16 later
        (`bias.type(scores.dtype)`, `scores += bias`, also through a helper's return)."""
        if self._overflowing(value, scope) is None:
            return
        for sink in flows_from(made, scope):
            if self._may_be_fp16_sink(sink):
                line = self.model.module.code_for_node(sink.node).strip().splitlines()[0]
                self._sink(made, None, value, scope, related=((sink.scope.model, sink.node, f"it reaches float16 here: `{line[:60]}`"),))
                return

    def _masked_in_place(self, node: cst.AugAssign, scope) -> None:
        """`scores += mask * -1e9` (or `-= mask * 1e9`): the product is added in place,
        so it lands in `scores`' own dtype: float16 scores get -inf (NaN in a row that is
        all masked).  Only for a tensor computed by a call (`Q.matmul(K)`, `/ scale`) and
        a product of the literal with something else, the masking idiom."""
        value = node.value
        if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)):
            return
        for literal, other in ((value.left, value.right), (value.right, value.left)):
            number = number_of(literal)
            if number is not None and overflows_fp16(number) and number_of(other) is None:
                break
        else:
            return
        if not self._computed_tensor(node.target, scope):
            return
        # No fix: `mask * finfo.min` overflows to -inf wherever the mask holds more than 1.
        self._sink(node, node.target, literal, scope, fixable=False, program_evidence=True)

    def _item_sink(self, node, container: cst.BaseExpression, value, scope) -> None:
        """`bias[mask] = -1e9`: a sink when `bias` may be a tensor.  A NumPy array, a list or
        a dict holds the number as it is (no finding); the fix, which reads
        `torch.finfo(bias.dtype)`, only where every value of `bias` is computed by a call
        that is not NumPy's (a parameter may be a list)."""
        assigned = self.model.bindings.values.assigned(container, scope)
        if any(self._not_a_tensor(v, s) for v, s in assigned):
            return
        fixable = bool(assigned) and self._computed_tensor(container, scope)
        self._sink(node, container, value, scope, fixable=fixable)

    @staticmethod
    def _not_a_tensor(value: cst.BaseExpression, scope) -> bool:
        """A value that is certainly no torch tensor: a NumPy call, a list, tuple, dict or
        set display or comprehension, `list(...)`/`dict(...)`, `[x] * n`."""
        if isinstance(value, (cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp)):
            return True
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
            return isinstance(value.left, (cst.List, cst.Tuple)) or isinstance(value.right, (cst.List, cst.Tuple))
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("numpy", "tolist", "item"):
            return True  # `scores.numpy()`, `t.tolist()`: out of torch
        if isinstance(value, cst.Call):
            qual = scope.model.qualify(value.func)
            if qual is None and isinstance(value.func, cst.Name):
                return value.func.value in _BUILTIN_CONTAINERS and not scope.model.module_scope.binds(value.func.value)
            return (qual or "").split(".")[0] == "numpy" or qual in _BUILTIN_CONTAINERS
        return False

    def _computed_tensor(self, target: cst.BaseExpression, scope) -> bool:
        """Every value assigned to `target` in its scope is computed by a call (or
        arithmetic on one): a tensor, not a Python number."""
        values = self.model.bindings.values

        def computed(expr, where, depth: int) -> bool:
            if isinstance(expr, cst.Call):
                return True
            if isinstance(expr, cst.BinaryOperation):
                return computed(expr.left, where, depth) or computed(expr.right, where, depth)
            if isinstance(expr, cst.Name) and depth < 3:  # `(scores_k + scores_e) / scale`
                assigned = values.assigned(expr, where)
                return bool(assigned) and all(computed(v, s, depth + 1) for v, s in assigned)
            return False

        assigned = values.assigned(target, scope)
        return bool(assigned) and all(computed(v, s, 0) for v, s in assigned)

    def _may_be_fp16_sink(self, sink: Sink) -> bool:
        if sink.kind == "inplace":
            return sink.tensor is not None and not self._full_precision_tensor(sink.tensor, sink.scope)
        if sink.dtype is None:
            return True  # `.half()`
        dtypes = self.model.bindings.values.dtypes(sink.dtype, sink.scope)
        if dtypes is not None:
            return "float16" in dtypes
        # An unknown dtype: another tensor's (`scores.dtype`) or a name for one; not a device.
        if isinstance(sink.dtype, cst.Attribute) and sink.dtype.attr.value == "dtype":
            return not self._full_precision_tensor(sink.dtype.value, sink.scope)
        return "dtype" in (dotted(sink.dtype) or "").split(".")[-1].lower()

    def _sink(self, node, tensor, value, scope, dtype_expr=None, related=(), fixable: bool = True,
              program_evidence: bool = False, region_only: bool = False) -> None:
        if value is None:
            return
        literal = self._overflowing(value, scope)
        if literal is None:
            return
        if tensor is not None and self._full_precision_tensor(tensor, scope):
            if isinstance(node, cst.Call):
                self._float32_holder(node, value, scope)
            return
        regions = self.precision.regions_of(node)
        region = self.precision.active(node)
        if region is not None:
            if not may_run_fp16(region.info) and region.info.dtypes is not None and not region.info.managed:
                return  # a bfloat16-only region: -1e9 fits
            why = "inside float16 autocast" if may_run_fp16(region.info) else self.precision.fp16_evidence
        elif regions or region_only:
            return  # autocast(enabled=False): the author made this part full precision
        else:
            why = self.precision.fp16_evidence
            if why is None and program_evidence:
                # NB: only for the in-place mask product; other sinks in a module that never
                # says float16 are not read against the program (its cost on large libraries).
                why = fp16_from_importers(self.model)
        if why is None:
            return
        text = self.model.module.code_for_node(value)
        bound = "min" if literal < 0 else "max"
        replacement = None
        subject = dotted(tensor) if tensor is not None else None
        # the written `finfo` reads the tensor (or dtype) named where the fill runs
        named = tensor if subject is not None else dtype_expr if dtype_expr is not None and dotted(dtype_expr) else None
        if isinstance(node, cst.Call) and any(a.star for a in node.args):
            fixable = False  # `h.new_full(shape, -1e9, **kwargs)`: a dtype may be given there
        evidence = (known_float_tensor(tensor, scope) if subject is not None
                    else named is not None and floating_dtype(named, scope))
        if fixable and evidence and not _feeds_only_softmax(node, scope):
            # `finfo(float32).min` then cast to bfloat16 is -inf, divided by a temperature it
            # overflows, and a row of it times a zero target is NaN; -1e9 survived those.
            # The value must go straight into a softmax, where both give a zero weight.
            fixable = False
        if fixable and evidence and self._compiled_by_script_or_fx():
            fixable = False  # TorchScript and torch.fx cannot compile `torch.finfo` (hostile pass 17)
        torch_name = self._torch_name_at(named) if fixable and evidence and self._is_direct(value) else None
        if torch_name:
            if subject is not None:
                replacement = f"{torch_name}.finfo({subject}.dtype).{bound}"
            else:
                replacement = f"{torch_name}.finfo({dotted(dtype_expr)}).{bound}"
        statement = self.precision.statement(node) or node
        self.report(
            statement,
            changes=[Replace(value, replacement)] if replacement else None,
            notes=(why,),
            related=related,
            literal=text,
            replacement=replacement or f"torch.finfo(<tensor>.dtype).{bound}",
        )

    def _compiled_by_script_or_fx(self) -> bool:
        """The module, a project module that imports it, or one that loads it by name (an
        export tool's `importlib.import_module("model")`; hostile pass 20) names TorchScript
        or torch.fx (`torch.jit.script(model)`, `from torch.jit import script`,
        `symbolic_trace`, `create_feature_extractor`): `torch.finfo` raises there ("Unknown
        builtin op: aten::finfo"), where the literal compiled."""
        memo = self.model.__dict__.get("_amplint_script_or_fx")
        if memo is None:
            text = self.model.text
            memo = bool(_SCRIPT_OR_FX.search(text))
            project = self.model.project
            if not memo and project is not None and str(self.model.path)[:1] != "<":
                path = str(self.model.path)
                memo = (any(project.named_by_importers(path, word) for word in _SCRIPT_OR_FX_WORDS)
                        or project.loaded_by_name_where(path, _SCRIPT_OR_FX))
            self.model.__dict__["_amplint_script_or_fx"] = memo
        return memo

    # --- values --------------------------------------------------------------------------
    def _overflowing(self, value: cst.BaseExpression, scope, depth: int = 0) -> float | None:
        """The out-of-range number `value` certainly is, else None."""
        if isinstance(value, cst.IfExp) or depth > 2:
            return None  # chosen at run time, usually by a dtype test
        number = number_of(value)
        if number is None:
            number = self._finfo_full(value)
        if number is not None:
            return number if overflows_fp16(number) else None
        if isinstance(value, (cst.Name, cst.Attribute)):
            assigned = self.model.bindings.values.assigned(value, scope)
            got = [self._overflowing(v, s, depth + 1) for v, s in assigned]
            if got and all(g is not None for g in got):
                return got[0]
        return None

    def _finfo_full(self, value: cst.BaseExpression) -> float | None:
        """`torch.finfo(torch.float32).min` and friends."""
        if not (isinstance(value, cst.Attribute) and value.attr.value in ("min", "max") and isinstance(value.value, cst.Call)):
            return None
        call = value.value
        if self.model.qualify(call.func) != "torch.finfo" or not call.args:
            return None
        dtypes = self.model.bindings.values.dtypes(call.args[0].value, self.model.module_scope)
        if dtypes and dtypes <= _FULL_DTYPES:
            return -3.4e38 if value.attr.value == "min" else 3.4e38
        return None

    def _is_direct(self, value: cst.BaseExpression) -> bool:
        return number_of(value) is not None or self._finfo_full(value) is not None

    def _full_dtype(self, expr, scope, *, unknown_is_full: bool) -> bool:
        if expr is None:
            return False
        dtypes = self.model.bindings.values.dtypes(expr, scope)
        if dtypes is None:
            return unknown_is_full
        return bool(dtypes) and dtypes <= _FULL_DTYPES

    def _is_scalar(self, expr: cst.BaseExpression) -> bool:
        return number_of(expr) is not None or isinstance(expr, (cst.Integer, cst.Float)) or self._finfo_full(expr) is not None

    def _full_precision_tensor(self, tensor: cst.BaseExpression, scope, depth: int = 0) -> bool:
        """Not a float16 tensor: `x.float()`, `x.to(torch.float32)`, `torch.zeros(..., dtype=torch.float)`,
        a factory without a dtype (float32 by default), a list or dict of things, or a
        name assigned only from such."""
        if depth > 4:
            return False
        if isinstance(tensor, (cst.List, cst.ListComp, cst.Tuple, cst.Dict, cst.DictComp, cst.GeneratorExp)):
            return True  # `state[4] -= 1e30` indexes a Python container, whose items we do not know
        qual = self.model.qualify(tensor.func) if isinstance(tensor, cst.Call) else None
        if qual in _FACTORIES:
            dtype = call_arg(tensor, None, "dtype")
            if dtype is None:
                return not qual.endswith("_like")  # float32 by default; `_like` inherits
            return self._full_dtype(dtype, scope, unknown_is_full=False)
        if qual in ("torch.arange", "torch.linspace"):
            # NB: `torch.arange(n)` is int64: no float16 to overflow (a product with float16
            # stays float16, which the `_names_a_dtype` test of products keeps apart).
            dtype = call_arg(tensor, None, "dtype")
            if dtype is None and qual == "torch.arange":
                return not any(isinstance(a.value, cst.Float) or a.star for a in tensor.args)
            return self._full_dtype(dtype, scope, unknown_is_full=False)
        if qual in ("torch.randint", "torch.randperm", "torch.randint_like"):
            return call_arg(tensor, None, "dtype") is None  # int64
        if isinstance(tensor, cst.Call) and isinstance(tensor.func, cst.Attribute):
            method = tensor.func.attr.value
            if (method in _FULL_PRECISION_METHODS or method in _INTEGER_METHODS) and not tensor.args:
                return True
            if method in ("to", "type"):
                dtype = call_arg(tensor, None, "dtype") or (tensor.args[0].value if tensor.args else None)
                return self._full_dtype(dtype, scope, unknown_is_full=False)
            if method in _DTYPE_KEEPING:
                return self._full_precision_tensor(tensor.func.value, scope, depth + 1)
            return False
        if isinstance(tensor, cst.BinaryOperation) and isinstance(
            tensor.operator, (cst.Multiply, cst.Add, cst.Subtract, cst.Divide)
        ):
            # `masks * x.unsqueeze(0)` with `x = torch.arange(..., dtype=torch.float)`: tensors
            # of one kind promote to the wider dtype, so the product is float32 whatever `masks` is.
            return any(
                self._full_precision_tensor(side, scope, depth + 1) and _names_a_dtype(_unwrapped(side, self.model, scope))
                for side in (tensor.left, tensor.right)
            )
        if isinstance(tensor, (cst.Name, cst.Attribute)):
            # NB: assignments are not ordered (flow-insensitive); a name that some
            # assignment makes float32 explicitly is taken as float32 where it is written
            # (`state = torch.zeros(..., dtype=torch.float32)` then `state[...] -= 1e38`).
            # A float32 only by default (`torch.zeros(n)`) must hold for every assignment.
            # `ids = ids.masked_fill(m, x)` keeps what `ids` was: its other values decide
            text = dotted(tensor)
            assigned = [(v, s) for v, s in self.model.bindings.values.assigned(tensor, scope)
                        if _kept_from(v) != text] or self.model.bindings.values.assigned(tensor, scope)
            full = [self._full_precision_tensor(v, s, depth + 1) for v, s in assigned]
            explicit = any(f and _names_a_dtype(v) for f, (v, _) in zip(full, assigned))
            return bool(full) and (explicit or all(full))
        return False

    def _torch_name_at(self, node) -> str | None:
        """The name that reads torch where `node` runs: bound by a module-level import that
        always runs before it, and no local there (an import under TYPE_CHECKING or in another
        function, or a parameter `torch`, made the written `torch.finfo` raise)."""
        return self.model.deprecations.torch_name_at(node)


# Methods whose result has their receiver's dtype.
_DTYPE_KEEPING = frozenset({"masked_fill", "masked_fill_", "clone", "contiguous", "view", "reshape", "unsqueeze",
                            "squeeze", "flatten", "expand", "expand_as", "permute", "transpose", "t", "fill_"})


def _kept_from(value: cst.BaseExpression) -> str | None:
    """The dotted name whose dtype `value` keeps (`ids.view(2, 3).masked_fill(m, 0)` -> `ids`)."""
    while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
           and value.func.attr.value in _DTYPE_KEEPING):
        value = value.func.value
    return dotted(value)


_BUILTIN_CONTAINERS = frozenset({"list", "dict", "tuple", "set", "bytearray", "sorted"})


def _unwrapped(expr: cst.BaseExpression, model, scope) -> cst.BaseExpression:
    """`x.unsqueeze(0)` -> the value `x` was assigned (when one), to ask whether it was
    made float32 on purpose."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and not expr.args[1:] and expr.func.attr.value in (
        "unsqueeze", "squeeze", "flatten", "expand", "expand_as", "permute", "transpose", "t", "view", "reshape", "contiguous", "clone"
    ):
        expr = expr.func.value
    if isinstance(expr, cst.Name):
        assigned = model.bindings.values.assigned(expr, scope)
        if len(assigned) == 1:
            return assigned[0][0]
    return expr


def _names_a_dtype(value: cst.BaseExpression) -> bool:
    """`torch.zeros(..., dtype=torch.float32)`, `x.float()`, `x.to(torch.float32)`: float32 on purpose."""
    if not isinstance(value, cst.Call):
        return False
    if isinstance(value.func, cst.Attribute) and value.func.attr.value in (*_FULL_PRECISION_METHODS, "to", "type"):
        return True
    return call_arg(value, None, "dtype") is not None


_SOFTMAX = ("softmax", "log_softmax")
# Code that reads names it does not spell (hostile pass 26).
_DYNAMIC_READS = re.compile(r"\b(?:eval|exec)\s*\(|\blocals\s*\(|\bvars\s*\(\s*\)|_getframe|f_locals")


def _feeds_only_softmax(node: cst.CSTNode, scope) -> bool:
    """Positive evidence that the filled tensor goes only into a softmax: the fill is the
    input of `.softmax(...)` / `F.softmax(...)` itself, or it is assigned to a name (or
    fills a name in place) whose every later read in the function is such an input."""
    body = scope.node
    if _DYNAMIC_READS.search(scope.model.module.code):
        return False  # `eval("scores.min()")`, `locals()`, a caller's frame: reads no walk sees
    if "finfo" in scope.model.module.code_for_node(body):
        # The function already writes a dtype's minimum (an additive mask): where both meet,
        # which of the two wins the fill decides (hostile pass 13).
        return False
    if not isinstance(body, cst.FunctionDef) and _global_read_elsewhere(node, scope):
        return False
    finder = _SoftmaxInputs(node, scope.model)
    walk(body.body if isinstance(body, cst.FunctionDef) else body, finder)
    if id(node) in finder.fed and not finder.in_place:
        return True  # `softmax(x.masked_fill(m, -1e9))`: the new tensor goes nowhere else
    name = finder.filled_name
    if name is not None and name in scope.globals_:
        return False  # `global scores`: the module reads it after the call (hostile pass 24)
    if name is None or finder.loop_carried(name):
        return False  # in a loop, a read above the fill runs after it in the next iteration
    if finder.in_place and not _fresh_and_unshared(name, finder, scope):
        # An in-place fill also writes every view and every other reference of the tensor
        # (`scores = logits.view(...)`, a dict that kept it for a z-loss), which no read of the
        # name after the fill shows.
        return False
    if isinstance(body, cst.FunctionDef) and _read_elsewhere(name, body):
        return False
    reads = finder.reads_after.get(name, [])
    return bool(reads) and all(id(r) in finder.fed for r in reads)


def _global_read_elsewhere(node: cst.CSTNode, scope) -> bool:
    """A fill at module level writes a global: any function or class of the module, and any
    module that imports this one (`masks.scores * 2`), may read it whenever it runs (hostile
    passes 22 and 24).  Only a script nothing imports, with no function, is read in order."""
    model = scope.model
    if _all(model.module, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
        return True
    project = getattr(model, "project", None)
    if project is None or project.may_be_imported(model.path):
        return True
    # run by name: `runpy.run_path("masks.py")`, `import_module("masks")`, `exec(open(...))`
    stem = os.path.splitext(os.path.basename(model.path))[0].lower()
    return project.named_elsewhere(model.path, stem)


def _read_elsewhere(name: str, body: cst.FunctionDef) -> bool:
    """Code that runs at another time reads `name`: a nested `def` or a `lambda` of the function
    (a debug closure, a callback built before the fill and called after it).  Document order
    says nothing about when those reads run (hostile pass 22)."""
    return any(_names(node, name) for node in _all(body.body, (cst.FunctionDef, cst.Lambda, cst.ClassDef)))


def _all(root: cst.CSTNode, kinds: tuple[type, ...]) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class _Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, kinds):
                found.append(node)
                return False
            return True

    root.visit(_Collect())
    return found


def _names(root: cst.CSTNode, name: str) -> bool:
    hit = False

    class _Find(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            nonlocal hit
            hit = hit or node.value == name

    root.visit(_Find())
    return hit


def _fresh_and_unshared(name: str, finder: "_SoftmaxInputs", scope) -> bool:
    """`scores = torch.matmul(q, k).half()` and nothing reads `scores` before the in-place
    fill: the tensor is a new result of a computation (not a view or the same object of
    another name: `logits.view(...)`, `x.half()` of a tensor already half) that no other
    reference holds."""
    if finder.reads_before.get(name):
        return False
    assigned = scope.model.bindings.values.assigned(cst.Name(name), scope)
    if len(assigned) != 1:
        return False
    value = assigned[0][0]
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _SAME_OR_NEW:
        value = value.func.value  # `.half()`, `.float()`, `.to(dtype)` of what comes before
    if isinstance(value, cst.BinaryOperation):
        return True  # `q @ k.transpose(-1, -2) * scale`
    if isinstance(value, cst.Call):
        if any(a.keyword is not None and a.keyword.value == "out" for a in value.args):
            return False  # `torch.matmul(q, k, out=self.buf)`: the result is that buffer
        qual = scope.model.qualify(value.func)
        return qual is not None and qual.startswith("torch.") and qual.rsplit(".", 1)[-1] in _COMPUTING
    return False


# Methods that return the tensor itself or a new one of another dtype: what they are applied
# to decides whether the result is fresh.
_SAME_OR_NEW = frozenset({"half", "float", "bfloat16", "double", "to", "type", "type_as", "contiguous"})
# torch functions whose result is a new tensor, never a view of an argument.
_COMPUTING = frozenset({"matmul", "bmm", "baddbmm", "einsum", "mm", "addmm", "cdist", "full", "zeros", "ones",
                        "randn", "rand", "empty", "cat", "stack", "where"})


class _SoftmaxInputs(cst.CSTVisitor):
    """In document order: the direct inputs of softmax calls, the name the fill is assigned to
    (or fills in place), and the reads of names after the fill."""

    def __init__(self, fill: cst.CSTNode, model) -> None:
        self.fill = fill
        self.model = model
        self.in_place = False  # `scores.masked_fill_(mask, -1e9)`
        self._loops: list[int] = []  # ids of the `for` / `while` statements around the visit
        self._fill_loop: int | None = None  # the innermost loop around the fill
        self._occurrences: list[tuple[str, bool, tuple[int, ...]]] = []  # (name, bound here, loops)
        self.fed: set[int] = set()
        self.filled_name: str | None = None
        self.reads_after: dict[str, list[cst.Name]] = {}
        self.reads_before: dict[str, list[cst.Name]] = {}
        self._after = False
        self._targets: set[int] = set()
        # The blocks (suites) around the visit, and around the fill: a rebinding ends the fill's
        # reads only on every path after it, i.e. in the fill's block or one around it; in an
        # `if` branch (`if normalize: scores = scores.softmax(-1)`) the other path still returns
        # the filled logits (hostile pass 22).
        self._blocks: list[int] = []
        self._fill_blocks: tuple[int, ...] = ()

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._blocks.append(id(node))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        self._blocks.pop()

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
        self._blocks.append(id(node))

    def leave_SimpleStatementSuite(self, original_node: cst.SimpleStatementSuite) -> None:
        self._blocks.pop()

    def _on_every_path_after_the_fill(self) -> bool:
        here = tuple(self._blocks)
        return self._fill_blocks[:len(here)] == here

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_For(self, node: cst.For) -> None:
        self._loops.append(id(node))

    def leave_For(self, original_node: cst.For) -> None:
        self._loops.pop()

    def visit_While(self, node: cst.While) -> None:
        self._loops.append(id(node))

    def leave_While(self, original_node: cst.While) -> None:
        self._loops.pop()

    def loop_carried(self, name: str) -> bool:
        """The fill runs in a loop whose body reads `name` before binding it: the next
        iteration reads the filled value (a greedy selection that masks what it picked)."""
        if self._fill_loop is None:
            return False
        inside = [bound for n, bound, loops in self._occurrences if n == name and self._fill_loop in loops]
        return not inside or not inside[0]

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._targets.add(id(t.target))
        if node.value is self.fill and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self.filled_name = node.targets[0].target.value
        elif self._after and self.filled_name is not None and any(
                isinstance(t.target, cst.Name) and t.target.value == self.filled_name for t in node.targets) \
                and self._on_every_path_after_the_fill():
            self._rebinding = node  # `attn = attn.softmax(-1)`: reads up to here are the fill's

    def leave_Assign(self, original_node: cst.Assign) -> None:
        if getattr(self, "_rebinding", None) is original_node:
            self._closed = True

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if node is self.fill:
            self._fill_loop = self._loops[-1] if self._loops else None
            self._fill_blocks = tuple(self._blocks)
            if (isinstance(func, cst.Attribute) and func.attr.value.endswith("_") and isinstance(func.value, cst.Name)
                    and self.filled_name is None):
                self.filled_name = func.value.value  # `scores.masked_fill_(mask, -1e9)`
                self.in_place = True
                self._targets.add(id(func.value))
            return
        name = func.attr.value if isinstance(func, cst.Attribute) else (dotted(func) or "").split(".")[-1]
        if name not in _SOFTMAX:
            return
        if name != "softmax" or any(a.keyword is not None and a.keyword.value == "dtype" for a in node.args):
            # `log_softmax` gives finfo.min itself back (minus a logsumexp): two such
            # log-probabilities added are -inf where -1e9 stayed finite; `softmax(x, dtype=
            # torch.bfloat16)` casts the fill first, and float32's minimum is -inf in bfloat16.
            return
        qual = self.model.qualify(func)
        if qual is not None:
            # `torch.softmax(x, -1)`, `F.softmax(x, dim=-1)`: torch's own, not a project
            # helper named softmax (one that divides by a temperature first)
            if qual.startswith("torch.") and node.args and node.args[0].keyword is None and len(node.args) <= 2:
                self.fed.add(id(node.args[0].value))
        elif isinstance(func, cst.Attribute) and (dotted(func.value) or "").split(".")[0] not in ("torch", "F", "nn", "functional"):
            if len(node.args) <= 1:
                self.fed.add(id(func.value))  # `x.softmax(-1)`, a tensor's method

    def leave_Call(self, original_node: cst.Call) -> None:
        if original_node is self.fill:
            self._after = True

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if isinstance(node.value, cst.Name) and node.attr.value in ("dtype", "shape", "device", "size", "ndim", "dim"):
            self._targets.add(id(node.value))  # `scores.dtype`: metadata, not the values

    def visit_Name(self, node: cst.Name) -> None:
        self._occurrences.append((node.value, id(node) in self._targets, tuple(self._loops)))
        if id(node) in self._targets:
            return
        if self._after and not getattr(self, "_closed", False):
            self.reads_after.setdefault(node.value, []).append(node)
        elif not self._after:
            self.reads_before.setdefault(node.value, []).append(node)
