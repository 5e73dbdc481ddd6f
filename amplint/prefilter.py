"""The text pre-filter: which rules can fire on a file, decided without parsing it.

libcst's parse is the largest cost of a run (about 1.3 s of CPU per MB), and in a large
tree only a few files use AMP at all.  Each rule declares tokens without which it cannot
fire (`Rule.requires_any` / `and_requires_any`); a file is parsed only for the rules
whose every token group matches, and not at all when no rule's does.

Two stages, each cheap, the second only for files that pass the first:

1. the file's lowercased text;
2. its *code text*: the same text without comments and docstrings (string statements).
   No rule reads either, and on real code they are where most tokens sit (`float16`,
   `GradScaler` and `-1e9` in usage examples and explanations): on transformers this
   halves the files parsed.

Stage 2 only ever removes text, so it can only reject more; `tests/test_prefilter.py`
checks on every fixture (and on a real-code corpus when present) that findings are the
same with and without the pre-filter.

A token is a substring, a `Word` (a whole identifier), a `CodeWord` (the same outside
string literals; a `Use` not where a `def` or `class` names it), an `Attr` (a whole
identifier after a dot, outside string literals), a compiled pattern (run on the
lowercased text; a `CodePattern` outside string literals), a pattern `Near` a literal
(run only on the lines that hold it), a rule's own object with `search(text)`
(`outside_strings = True` to get the code with string contents emptied) or a tuple of
tokens that must all be present.  Tokens shared by rules (the GradScaler ones) are
evaluated once per file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from amplint.sources import strings_and_comments


@dataclass(frozen=True)
class Word:
    """A whole word: `scale` in `scaler.scale(loss)`, not in `upscale` or `scale_factor`.

    Found by `str.find` and a look at its neighbours: a regex `\\bscale\\b` cannot use the
    regex engine's literal-prefix scan and costs about 40 times as much on real code.
    """

    word: str

    def __post_init__(self) -> None:
        if self.word != self.word.lower():
            raise ValueError(f"Word tokens match lowercased text: {self.word!r}")

    def search(self, text: str) -> bool:
        word, n = self.word, len(self.word)
        at = text.find(word)
        while at != -1:
            before = text[at - 1] if at else " "
            after = text[at + n] if at + n < len(text) else " "
            if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_") and self._fits(text, at):
                return True
            at = text.find(word, at + 1)
        return False

    def _fits(self, text: str, at: int) -> bool:
        return True


class CodeWord(Word):
    """A whole word in code, outside string literals: for names only code can spell.

    `autocast` in `torch.autocast(...)` or an import, not in a message that says "use
    torch.autocast".  f-strings keep their text (they hold code).  The package that the
    pre-filter appends for a relative import is searched too.
    """

    outside_strings = True


_BLANKS = " \t\f\r\n\\"


class Use(CodeWord):
    """A whole word in code that is not the name a `def` or `class` gives: a use of it.

    `backward` of `loss.backward()` or `backward(loss)`, not of the `def backward(ctx, ...)`
    that every autograd Function of a model library has (AMP303 parsed every such model
    file of transformers that imports a helper naming set_default_dtype).
    """

    def _fits(self, text: str, at: int) -> bool:
        at -= 1
        while at >= 0 and text[at] in _BLANKS:
            at -= 1
        begin = at
        while begin >= 0 and (text[begin].isalnum() or text[begin] == "_"):
            begin -= 1
        return text[begin + 1 : at + 1] not in ("def", "class")


class Attr(CodeWord):
    """A whole word used as an attribute or method: `x.scale`, `x . scale`, `x.\\ scale`.

    The code text has no comments, so what may separate the dot from the name is blanks,
    line breaks and backslash continuations.  An attribute is code, so strings are not
    searched ("call optimizer.step()" in a message is no step).
    """

    def _fits(self, text: str, at: int) -> bool:
        at -= 1
        while at >= 0 and text[at] in _BLANKS:
            at -= 1
        return at >= 0 and text[at] == "."


@dataclass(frozen=True)
class Near:
    """A pattern looked for only on the lines that hold `literal`.

    For a pattern with no literal to scan for (a back-reference such as
    `x.w = ...Parameter(x.w.`), whose every match contains `literal` with at most
    `reach` characters after it: sre tries such a pattern at every position of the text,
    and AMP305's cost 3 s of the pre-filter's 9 on transformers, while `str.find` of the
    literal skips all but a few lines.  It searches from the start of the line of each
    occurrence to `reach` characters past it, so it finds whatever the pattern finds in
    the whole text (the necessary condition stays a necessary condition).
    """

    literal: str
    pattern: re.Pattern
    reach: int = 400
    # What every match has around the literal, checked before the pattern runs: `after`,
    # the first character past it and any blanks; `before`, a character between the start
    # of its line and it (AMP305's literal, `parameter`, is in most lines of a model file,
    # and only `x.w = nn.Parameter(` lines can match).
    after: str = ""
    before: str = ""

    def search(self, text: str) -> bool:
        n = len(self.literal)
        at = text.find(self.literal)
        while at != -1:
            line = text.rfind("\n", 0, at) + 1
            if self._around(text, line, at, n) and self.pattern.search(text, line, at + n + self.reach):
                return True
            at = text.find(self.literal, at + 1)
        return False

    def _around(self, text: str, line: int, at: int, n: int) -> bool:
        if self.before and self.before not in text[line:at]:
            return False
        if self.after:
            end = at + n
            while end < len(text) and (text[end].isspace() or text[end] == "\\"):  # `\s`, and a continuation
                end += 1
            return text.startswith(self.after, end)
        return True


@dataclass(frozen=True)
class CodePattern:
    """A compiled pattern searched in code only: string contents emptied, f-string fields kept.

    For a call that only code makes (`autocast(` entering a region), where a message that
    quotes it ("use `with torch.autocast(...)`", in an f-string of transformers'
    `PreTrainedModel`) must not count: that one made every model file that derives from
    it look as if it ran under autocast.
    """

    pattern: re.Pattern
    # A word every match contains: a text without it is rejected before the strings are
    # emptied (which costs a lexer pass; emptying never makes a word, the quotes stay).
    literal: str = ""
    outside_strings = True

    def search(self, text: str):
        return (not self.literal or self.literal in text) and self.pattern.search(text)


# `autocast` in code, also inside a name (`maybe_autocast`, `torch_autocast`, `autocast_ctx`):
# a project's own wrapper enters autocast as torch's does (amplint/analysis/autocast_entries.py).
AUTOCAST_IN_CODE = CodePattern(re.compile("autocast"), literal="autocast")


# A backslash escape that can spell a letter or digit inside a string (`"\x31\x36"` is
# "16"), in lowercased text: `\x`, `\u` / `\U`, `\N{...}`, octal.  Rules whose values
# resolver evaluates strings add it next to the words it could hide.
STRING_ESCAPE = re.compile(r"\\(?:x|u|n\{|[0-7])")


def token_groups(rule) -> tuple[tuple, ...]:
    return (tuple(rule.requires_any), *(tuple(g) for g in rule.and_requires_any))


@lru_cache(maxsize=None)
def _cheapest_first(rule) -> tuple[tuple, ...]:
    """The rule's groups, plain substrings (lowercased here, once) before words, patterns
    and a rule's own token objects: a substring search is a memchr, a pattern without a
    literal prefix scans every character, and a token object runs Python per candidate
    (AMP501's literal reader was called on every file while it came first)."""

    ordered = (_lowered_group(group) for group in token_groups(rule))
    return tuple(sorted(ordered, key=lambda group: max(map(_cost, group))))


def _cost(token) -> int:
    if isinstance(token, tuple):
        return max(map(_cost, token))
    if isinstance(token, str):
        return 0
    return 1 if isinstance(token, Word) else 2 if isinstance(token, re.Pattern) else 3  # Attr is a Word


def _lowered(token):
    if isinstance(token, tuple):
        return tuple(map(_lowered, token))
    return token.lower() if isinstance(token, str) else token


def _lowered_group(group) -> tuple:
    """A group's tokens, lowercased, cheapest first."""
    return tuple(sorted(map(_lowered, group), key=_cost))


def prefilter_tokens(rules) -> tuple[str, ...]:
    """Every plain token or word the rules look for (for documentation and tests)."""
    found = set()
    for rule in rules:
        for group in token_groups(rule):
            for token in _flat(group):
                if isinstance(token, str):
                    found.add(token)
                elif isinstance(token, Word):
                    found.add(token.word)
    return tuple(sorted(found))


def _flat(tokens):
    for t in tokens:
        yield from (_flat(t) if isinstance(t, tuple) else (t,))


def _has(text: str, token, memo: dict, bare) -> bool:
    known = memo.get(token)
    if known is None:
        if isinstance(token, str):
            known = token in text  # lowercased by _cheapest_first
        elif isinstance(token, tuple):
            known = all(_has(text, t, memo, bare) for t in token)
        elif getattr(token, "outside_strings", False) and bare is not None:
            # NB: a word that is not even in the text is not in its code (no lexer pass for that)
            literal = getattr(token, "literal", None) or getattr(token, "word", None)
            known = (not literal or literal in text) and bool(token.search(bare()))
        else:
            known = bool(token.search(text))  # a Match or a bool
        memo[token] = known
    return known


def _rule_may_fire(rule, text: str, memo: dict, bare) -> bool:
    return all(any(_has(text, t, memo, bare) for t in group) for group in _cheapest_first(rule))


def _passing(rules, text: str, bare=None, memo: dict | None = None) -> tuple:
    """The rules whose groups all match `text`; `bare()` gives the text without string
    contents, for tokens marked `outside_strings` (a float literal is never in a string).
    `memo` keeps what each token found in this text, for a later look at the same text."""
    memo = {} if memo is None else memo
    return tuple(r for r in rules if _rule_may_fire(r, text, memo, bare))


# `from .x import y` / `from ..pkg import z` (whitespace and line continuations allowed):
# such names are qualified with the file's package, which comes from its path, not its text.
# (No `\b`: it would cost 20 times the scan, and a false match only adds the package.)
_RELATIVE_IMPORT = re.compile(r"from[\s\\]*\.")


def rules_that_may_fire(source: str, rules, path: str | None = None, *, project=None, reads=None) -> tuple:
    """The rules that can fire on this text (the others are not run).

    A rule can fire only if the text contains one token of each of its groups
    (`requires_any`, then each of `and_requires_any`), first in the whole lowercased
    text, then in its code text.  Qualified names built from a relative import also carry
    the package's dotted name, which is not in the text, so for such files the package
    (from `path`) is searched as well.

    With a `project` index, a token may also come from the project files the text
    imports (the clip of a `clip_gradients` helper in `utils.py`, the GradScaler built by
    `train_one_epoch` in `engine.py`): the rules that the file alone cannot fire are
    tried again on its code text followed by theirs.  `reads` records those files, since
    the decision depends on them.
    """
    text = source.lower()
    package = ""
    if path is not None and _RELATIVE_IMPORT.search(text):
        package = (package_of(path) or "").lower()
    whole_memo: dict = {}
    passing = _passing(rules, f"{text}\n{package}" if package else text, memo=whole_memo)
    raw_code = code_text(source) if passing else ""
    code = raw_code.lower()
    bare: list[str] = []

    def without_strings() -> str:
        if not bare:
            # NB: with the package too, as for the other tokens (more text only passes more)
            stripped = code_text(source, strings=False).lower()
            bare.append(f"{stripped}\n{package}" if package else stripped)
        return bare[0]

    own_text = (f"{code}\n{package}" if package else code) if passing else (f"{text}\n{package}" if package else text)
    own = _passing(passing, own_text, without_strings) if passing else ()
    if project is None or path is None or len(own) == len(rules):
        return own
    # Rules whose other groups the file meets, and whose `imported_tokens` groups may be
    # met by the project code it calls: only then is that code read.
    # NB: a skipped file's own text is the whole text again: what stage 1 found there holds
    memo: dict = {} if passing else whole_memo
    bare_or_none = without_strings if passing else None  # no second lexer pass for a skipped file
    if not passing:
        if not any(
            (r.importer_tokens or r.imported_tokens) and _local_groups_match(r, own_text, memo, None, r.imported_tokens or r.importer_tokens)
            for r in rules
        ):
            return ()  # NB: the code text has less, so no rule's local groups can match there either
        # The whole text (docstrings and comments too) meets a rule's local groups: judge
        # them on the code, as for a file that passed, before any other module is read
        # ("call loss.backward()" in a docstring is no training code).
        passing, raw_code = tuple(rules), code_text(source)
        code = raw_code.lower()
        own_text = f"{code}\n{package}" if package else code
        memo, bare_or_none = {}, without_strings
    upward = {
        r for r in rules
        if r not in own and r.importer_tokens and _local_groups_match(r, own_text, memo, bare_or_none, r.importer_tokens)
    }
    if upward:
        universe = _universe(tuple(sorted(upward, key=lambda r: r.code)), "importer_tokens")
        present = project.importer_tokens(path, universe, reads)
        upward = {r for r in upward if _groups_match(r, own_text, memo, bare_or_none, present, r.importer_tokens)}
    candidates = [
        r for r in rules
        if r not in own and r.imported_tokens and _local_groups_match(r, own_text, memo, bare_or_none)
    ]
    if not candidates:
        return tuple(r for r in rules if r in own or r in upward)
    # NB: the tokens of every rule that reads imported code, not only of these candidates:
    # the project index remembers what it found per definition and token set.
    universe = _universe(tuple(r for r in rules if r.imported_tokens), "imported_tokens")
    # NB: a file that failed the first stage has no code text: its imports are read from
    # the whole text (one in a docstring can only add a module to read).
    present = project.imported_tokens(path, raw_code if passing else source, package_of(path), universe, reads,
                                      uses=without_strings)
    more = {r for r in candidates if present and _groups_match(r, own_text, memo, bare_or_none, present, r.imported_tokens)}
    return tuple(r for r in rules if r in own or r in more or r in upward)


@lru_cache(maxsize=256)
def _universe(rules: tuple, attribute: str) -> frozenset:
    """Every single token of the rules' `imported_tokens` (or `importer_tokens`) groups
    (a tuple's parts on their own)."""
    out = set()
    for rule in rules:
        groups = token_groups(rule)
        for i in getattr(rule, attribute):
            out.update(t.lower() if isinstance(t, str) else t for t in _flat(_elsewhere_group(rule, groups, i)))
    return frozenset(out)


def _elsewhere_group(rule, groups, i: int) -> tuple:
    """The tokens of group `i` that count when met in another module (`elsewhere_tokens`)."""
    return tuple(rule.elsewhere_tokens.get(i, groups[i]))


_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


def tokens_in(text: str, tokens: frozenset, bare=None) -> frozenset:
    """The tokens (single ones, not tuples) found in a lowercased text.

    For the project's imported code, where a necessary condition is enough: words are
    looked up in the set of the text's identifiers (an `Attr` or `CodeWord` then also
    counts in a string, which can only find more), a single scan for many tokens.
    `bare()`, where given, is the text with string contents emptied, for the patterns
    marked `outside_strings` (a `CodePattern`).
    """
    words: set[str] | None = None
    code: str | None = None
    found = []
    for t in tokens:
        if bare is not None and isinstance(t, CodePattern):
            if t.literal and t.literal not in text:
                continue
            if code is None:
                code = bare()
            if t.search(code):
                found.append(t)
        elif isinstance(t, Use):  # NB: whether it is a `def` of the name, only its neighbours say
            if t.search(text):
                found.append(t)
        elif isinstance(t, Word):
            if t.word not in text:
                continue
            if words is None:
                words = set(_IDENTIFIER.findall(text))
            if t.word in words:
                found.append(t)
        elif isinstance(t, str):
            if t in text:
                found.append(t)
        elif t.search(text):
            found.append(t)
    return frozenset(found)


def _groups_match(rule, text: str, memo: dict, bare, present: frozenset, indexes) -> bool:
    """Each group of `indexes` has a token in the file or among `present` (found in the
    code it calls, or in the files that import it).

    A tuple token (all of its parts) may have its parts in different places: that can
    only let more files through, never fewer.
    """
    groups = token_groups(rule)

    def here(t) -> bool:
        if isinstance(t, tuple):
            return all(here(p) for p in t)
        return _has(text, t.lower() if isinstance(t, str) else t, memo, bare)

    def anywhere(t) -> bool:
        if isinstance(t, tuple):
            return all(anywhere(p) for p in t)
        t = t.lower() if isinstance(t, str) else t
        return t in present or _has(text, t, memo, bare)

    def group(i: int) -> bool:
        # NB: a group's tokens in the file itself, or those of them (`elsewhere_tokens`) that
        # count in another module, there or here
        return any(here(t) for t in groups[i]) or any(anywhere(t) for t in _elsewhere_group(rule, groups, i))

    return all(group(i) for i in indexes)


def _local_groups_match(rule, text: str, memo: dict, bare, elsewhere=None) -> bool:
    """The groups a rule needs in the file itself (all but `elsewhere`, by default its
    `imported_tokens`) are there."""
    skip = tuple(rule.imported_tokens if elsewhere is None else elsewhere)
    return all(any(_has(text, t, memo, bare) for t in group) for group in _local_groups(rule, skip))


@lru_cache(maxsize=None)
def _local_groups(rule, skip: tuple) -> tuple[tuple, ...]:
    """The rule's groups but those of `skip`, lowercased and cheapest first, as
    `_cheapest_first` orders all of them."""
    groups = token_groups(rule)
    kept = sorted((i for i in range(len(groups)) if i not in skip), key=lambda i: max(map(_cost, groups[i])))
    return tuple(_lowered_group(groups[i]) for i in kept)


def may_fire(source: str, rules, path: str | None = None) -> bool:
    """False only when no enabled rule can fire on this text."""
    return bool(rules_that_may_fire(source, rules, path))


# --- code text -----------------------------------------------------------------------------
# One scan over comments and string literals (sources.strings_and_comments).  A string is
# removed only when it is a whole statement (a docstring), bracket depth 0, not continued
# by `\`.
# What may precede a string statement on its line: indentation and a non-f prefix.
_STATEMENT_START = re.compile(r"[ \t\f]*(?P<prefix>[rRuUbB]|[bB][rR]|[rR][bB]|)\Z")
# What may follow it: blanks, then the end of the line (a comment is removed as well).
_STATEMENT_END = re.compile(r"[ \t\f]*(?:\#[^\r\n]*)?(?:\r\n|\r|\n|\Z)")


def code_text(source: str, *, strings: bool = True) -> str:
    """`source` without its comments and docstrings (string statements).

    What stays is everything a rule can read; what goes is replaced by nothing (a
    comment) or a blank (a string statement), so no two code tokens join.  With
    `strings=False` every other string is emptied to `""` as well, and an f-string
    keeps only its fields (code).  A file whose f-strings this lexer cannot read (a
    Python 3.12 f-string that nests its own quote, `f"{d["k"]}"`, ends it early and
    the rest of the line is misread) gets its strings back: keeping more text can only
    pass more files.
    """
    out: list[str] = []
    depth = 0
    kept = 0  # source[kept:] is not yet in `out`
    scanned = 0  # brackets are counted in source[:scanned] (code only)
    for start, end, group in _strings_and_comments(source):
        segment = source[scanned:start]
        depth += (
            segment.count("(") + segment.count("[") + segment.count("{")
            - segment.count(")") - segment.count("]") - segment.count("}")
        )
        scanned = end
        if group == "comment":
            out.append(source[kept:start])
            kept = end
        elif depth <= 0 and (statement := _string_statement_start(source, start, end)) >= 0:
            out.append(source[kept:statement])
            out.append(" ")
            kept = end
        elif not strings:
            if "f" not in source[max(start - 2, 0) : start].lower():
                out.append(source[kept:start])
                out.append('""')
                kept = end
            elif (fields := _fstring_fields(source[start:end])) is _MISREAD:
                return code_text(source)
            elif fields is not None:
                out.append(source[kept:start])
                out.append(fields)
                kept = end
    out.append(source[kept:])
    return "".join(out)


# The last text scanned and its (start, end, group) spans: the pre-filter asks for a file's
# code text and then, for a token outside strings, for the same text with strings emptied
# (the scan is four fifths of either).  One tuple, replaced whole: safe across threads.
_LAST_SCAN: tuple[str, list] | None = None


def _strings_and_comments(source: str) -> list[tuple[int, int, str]]:
    global _LAST_SCAN
    last = _LAST_SCAN
    if last is not None and last[0] is source:
        return last[1]
    found = [(m.start(), m.end(), m.lastgroup) for m in strings_and_comments(source)]
    _LAST_SCAN = (source, found)
    return found


def closing_bracket(text: str, at: int) -> int:
    """Where the bracket opened at text[at] closes (any kind balances any kind), or -1."""
    depth = 0
    for end in range(at, len(text)):
        c = text[end]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return end
    return -1


def identifier_span(text: str, begin: int, end: int) -> tuple[int, int]:
    """text[begin:end] widened to the whole identifier(s) it touches."""
    while begin > 0 and (text[begin - 1].isalnum() or text[begin - 1] == "_"):
        begin -= 1
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    return begin, end


_MISREAD = object()  # an f-string the lexer split wrongly (see code_text)


def _fstring_fields(literal: str) -> str | object | None:
    """An f-string literal with only its replacement fields kept (`f"{a} {b:>{w}}"` of
    `f"loss {a} at {b:>{w}}"`): the fields are code, the rest is text like any string's.

    None (keep the literal whole) for a field that holds a quote or a backslash (legal
    in 3.11 inside the other quotes: `f"{d['k']}"`); _MISREAD for an unterminated
    literal or a field that does not close, which is what the lexer makes of a 3.12
    f-string nesting its own quote.
    """
    q = 3 if literal[:3] in ('"""', "'''") else 1
    if len(literal) < 2 * q or literal[-q:] != literal[:q]:
        return _MISREAD
    body, fields, at = literal[q:-q], [], 0
    while (at := body.find("{", at)) != -1:
        if body.startswith("{{", at):
            at += 2
            continue
        end = closing_bracket(body, at)
        if end < 0 or body[end] != "}":
            return _MISREAD
        field = body[at : end + 1]
        if any(c in field for c in "\"'\\"):
            return None
        fields.append(field)
        at = end + 1
    return f'{literal[:q]}{" ".join(fields)}{literal[:q]}'


def _string_statement_start(source: str, start: int, end: int) -> int:
    """Where the string statement around the literal source[start:end] starts (its
    prefix included), or -1 if the literal is part of a larger statement."""
    line_start = max(source.rfind("\n", 0, start), source.rfind("\r", 0, start)) + 1
    lead = _STATEMENT_START.match(source, line_start, start)
    if lead is None or _STATEMENT_END.match(source, end) is None:
        return -1
    # NB: a line after `x = \` continues that statement: the string is its value.
    at = line_start - 1
    if at >= 0 and source[at] == "\n":
        at -= 1
    if at >= 0 and source[at] == "\r":
        at -= 1
    if at >= 0 and source[at] == "\\":
        return -1
    return lead.start("prefix")


def package_of(path: str) -> str | None:
    """Dotted package of a file on disk, from its `__init__.py` chain (for relative imports)."""
    p = Path(path)
    if not p.suffix == ".py":
        return None
    return _package_of_dir(p.parent)


@lru_cache(maxsize=1024)
def _package_of_dir(d: Path) -> str:
    """Cached per directory: a run asks once per file, and files share directories."""
    parts: list[str] = []
    while (d / "__init__.py").is_file():
        parts.append(d.name)
        if d.parent == d:
            break
        d = d.parent
    return ".".join(reversed(parts))
