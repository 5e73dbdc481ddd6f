"""Reading and writing Python source files without losing anything.

Decoding honours a UTF-8 BOM and PEP 263 coding cookies; writing puts back the same
encoding and BOM, and replaces the file atomically (temporary file in the same
directory, then `os.replace`), keeping its permission bits.
"""

from __future__ import annotations

import codecs
import io
import os
import re
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


class UnreadableSource(Exception):
    """The file cannot be read or decoded; the message says why."""


@dataclass(frozen=True)
class SourceFile:
    path: Path
    text: str
    encoding: str
    bom: bool
    raw: bytes


def decode(raw: bytes, path: str = "<bytes>") -> tuple[str, str, bool]:
    """(text, encoding, had_bom); newlines are kept as they are (CRLF stays CRLF)."""
    if b"\x00" in raw:
        raise UnreadableSource(f"{path}: binary file (contains NUL bytes)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        msg = exc.msg if hasattr(exc, "msg") else str(exc)
        if "invalid or missing encoding declaration" in msg:
            # No cookie, so UTF-8, and the bytes are not UTF-8: say where, as for a cookie.
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as err:
                msg = f"cannot decode as utf-8 (no coding cookie): {err}"
        raise UnreadableSource(f"{path}: {msg}") from None
    bom = raw.startswith(codecs.BOM_UTF8)
    body = raw[len(codecs.BOM_UTF8):] if bom else raw
    codec = "utf-8" if encoding == "utf-8-sig" else encoding
    try:
        ascii_compatible = "# coding: x\n".encode(codec) == b"# coding: x\n"
    except (LookupError, UnicodeError):
        ascii_compatible = False
    if not ascii_compatible:
        # A cookie is ASCII text, so it cannot name utf-16 & co; CPython refuses these too.
        raise UnreadableSource(f"{path}: encoding problem: {encoding} (a coding cookie needs an ASCII-compatible encoding)")
    try:
        text = body.decode(codec)
    except (UnicodeDecodeError, LookupError) as exc:
        raise UnreadableSource(f"{path}: cannot decode as {encoding}: {exc}") from None
    return text, codec, bom


def read(path: Path) -> SourceFile:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UnreadableSource(f"{path}: cannot read: the file no longer exists (deleted during the run?)") from None
    except IsADirectoryError:
        raise UnreadableSource(f"{path}: cannot read: it is a directory") from None
    except OSError as exc:
        raise UnreadableSource(f"{path}: cannot read: {exc.strerror or exc}") from None
    text, encoding, bom = decode(raw, str(path))
    return SourceFile(path, text, encoding, bom, raw)


def encode(text: str, encoding: str, bom: bool) -> bytes:
    data = text.encode(encoding)
    return codecs.BOM_UTF8 + data if bom else data


def write_atomic(path: Path, text: str, encoding: str = "utf-8", bom: bool = False) -> None:
    """Replace `path`'s content in one step; a crash leaves the old file or the new one."""
    replace_if_unchanged(path, None, text, encoding, bom)


def replace_if_unchanged(path: Path, expected: bytes | None, text: str, encoding: str = "utf-8",
                         bom: bool = False) -> bool:
    """Atomically replace `path` with `text`, unless its bytes are no longer `expected`.

    The new content goes to a temporary file in the same directory (same file system,
    so `os.replace` is atomic), gets the old file's mode (and owner, where allowed), is
    flushed to disk, and only then replaces the file.  The comparison with `expected`
    happens after the temporary file is complete, which leaves the smallest window for a
    concurrent writer.  A symlink is kept: its target is replaced.  Returns False (and
    writes nothing) when the file changed or vanished.
    """
    data = encode(text, encoding, bom)
    target = Path(os.path.realpath(path))
    try:
        st = target.stat()
    except OSError:
        st = None
    if expected is not None and st is None:
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".amplint-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except OSError:
                pass  # not ours to give away; the mode is what matters
        if expected is not None:
            try:
                if target.read_bytes() != expected:
                    os.unlink(tmp)
                    return False
            except OSError:
                os.unlink(tmp)
                return False
        os.replace(tmp, target)
        return True
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --- nesting guard: what libcst's native parser must never be given ----------------------
#
# libcst parses in native code.  Nesting it cannot take kills the process (a C stack
# overflow: 5,000 nested parentheses segfault it) or takes minutes (its parse time grows
# with the square of the depth: a 1,500-deep `a+a+...` chain takes 5 s, 4,000 deep 35 s).
# CPython refuses both long before: more than 200 nested brackets is "too many nested
# parentheses", and an expression about 3,000 levels deep is a RecursionError in its
# compiler.  So amplint refuses what CPython refuses, and checks it cheaply first.

MAX_BRACKET_DEPTH = 200  # CPython's tokenizer limit (MAXLEVEL)
# A logical line shorter than this cannot nest deeper than this (one level needs at least
# one character), so only longer ones are looked at closely.
LONG_LOGICAL_LINE = 2000
MAX_EXPRESSION_DEPTH = 1000

# Comments and string literals, one scan: strings are matched whole (unterminated ones to the
# end of their line, or of the file for triple quotes) so that a `#` in one is not taken for
# a comment; Python 3.11's f-strings cannot nest their own quote, so quote matching finds
# exactly the strings the tokenizer would.  Shared by the nesting guard and the pre-filter.
STRINGS_AND_COMMENTS = re.compile(
    r"""
    (?P<comment>\#[^\r\n]*)
  | (?P<string>
        \"\"\"[^"\\]*(?:(?:\\(?:\r\n|.)|"(?!""))[^"\\]*)*(?:\"\"\"|\Z)
      | '''[^'\\]*(?:(?:\\(?:\r\n|.)|'(?!''))[^'\\]*)*(?:'''|\Z)
      | "[^"\\\r\n]*(?:\\(?:\r\n|.)[^"\\\r\n]*)*(?:"|(?=[\r\n])|\Z)
      | '[^'\\\r\n]*(?:\\(?:\r\n|.)[^'\\\r\n]*)*(?:'|(?=[\r\n])|\Z)
    )
    """,
    re.VERBOSE | re.DOTALL,
)
_STRUCTURE = re.compile(r"[(\[{]|[)\]}]|\\\r?\n|\n")


def nesting_problem(text: str) -> tuple[int, str] | None:
    """(line, reason) when the text is nested too deeply to parse safely, else None.

    Cost: one regex substitution and a loop over brackets and newlines only (about 4%
    of libcst's parse time); CPython's own parser runs only on files with a logical line
    longer than LONG_LOGICAL_LINE characters, which real code rarely has.
    """
    stripped = STRINGS_AND_COMMENTS.sub("0", text)
    depth = deepest = 0
    deepest_at = start = longest = 0
    for m in _STRUCTURE.finditer(stripped):
        c = m.group()
        if c in "([{":
            depth += 1
            if depth > deepest:
                deepest, deepest_at = depth, m.start()
        elif c in ")]}":
            depth = max(depth - 1, 0)
        elif c[0] == "\\":
            continue  # a backslash continuation does not end the logical line
        elif depth == 0:
            longest = max(longest, m.start() - start)
            start = m.end()
    longest = max(longest, len(stripped) - start)
    if deepest > MAX_BRACKET_DEPTH:
        line = stripped.count("\n", 0, deepest_at) + 1
        return line, f"SyntaxError: too many nested parentheses ({deepest} levels; Python allows {MAX_BRACKET_DEPTH})"
    if longest > LONG_LOGICAL_LINE:
        return _expression_depth_problem(text)
    return None


def _expression_depth_problem(text: str) -> tuple[int, str] | None:
    """Ask CPython's parser (native, but guarded against deep input) how deep the text nests."""
    import ast
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            tree = ast.parse(text)
    except (RecursionError, MemoryError):
        return 1, "too deeply nested to analyse (CPython cannot compile it either)"
    except (SyntaxError, ValueError):
        return None  # libcst reports the syntax error with its own position
    # Iterative walk (the point is not to recurse): the deepest expression below a statement.
    stack = [(node, 1) for node in ast.iter_child_nodes(tree)]
    while stack:
        node, d = stack.pop()
        if d > MAX_EXPRESSION_DEPTH:
            line = getattr(node, "lineno", 1)
            return line, f"too deeply nested to analyse (more than {MAX_EXPRESSION_DEPTH} levels)"
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return None
