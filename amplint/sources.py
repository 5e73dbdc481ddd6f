"""Reading and writing Python source files without losing anything.

Decoding honours a UTF-8 BOM and PEP 263 coding cookies; writing puts back the same
encoding and BOM, and replaces the file atomically (temporary file in the same
directory, then `os.replace`), keeping its permission bits; a file with several hard
links is rewritten in place, so that every name sees the new text.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import re
import stat
import tempfile
import tokenize
from collections.abc import Callable, Iterator
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
        raise UnreadableSource(f"{path}: {_why_nul_bytes(raw)}")
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
        elif raw.startswith(codecs.BOM_UTF8) and msg.startswith("encoding problem"):
            cookie = _COOKIE.search(b"\n".join(raw[len(codecs.BOM_UTF8):].splitlines()[:2]))
            if cookie is not None:
                msg = (f"the file starts with a UTF-8 byte-order mark but its coding cookie says "
                       f"{cookie.group(1).decode('ascii', 'replace')} (Python refuses the mismatch too)")
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


def undecodable_as_read(path: str | os.PathLike, text: str) -> str | None:
    """Why `amplint check` cannot read the file at `path` (its error's reason), when `text` is
    that file's content as a lenient reader decoded it: flake8 falls back to Latin-1 and drops
    a BOM, an editor may guess an encoding or replace what it cannot decode.  Then the file is
    one amplint refuses, whatever front end was handed it.  None when the file decodes, cannot
    be read, or `text` is not its content (an edited buffer: its bytes are not known yet).
    """
    head = text[:400].split("\n", 2)[:2]
    if text.isascii() and not any("coding" in line for line in head):
        return None  # ASCII without a cookie: decodes as UTF-8 whatever the reader
    try:
        raw = read_bytes(Path(path))
    except OSError:
        return None
    try:
        decode(raw, str(path))
        return None
    except UnreadableSource as exc:
        reason = str(exc).split(": ", 1)[-1]

    def normal(t: str) -> str:
        return t.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff").removeprefix("\xef\xbb\xbf")

    seen = normal(text)
    body = raw.removeprefix(codecs.BOM_UTF8)
    for candidate in (body, raw):
        for codec in ("latin-1", "cp1252", "utf-8"):
            if normal(candidate.decode(codec, "replace")) == seen:
                return reason
    return None


# PEP 263's cookie, as tokenize looks for it on the first two lines.
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)

_BOMS = (  # UTF-32's little-endian BOM starts like UTF-16's: test it first
    (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"),
)


def _why_nul_bytes(raw: bytes) -> str:
    """Why bytes with NULs are not Python source: text in a wide encoding, or not text at all."""
    for bom, name in _BOMS:
        if raw.startswith(bom):
            return (f"{name} text (it starts with a {name} byte-order mark); Python source must be UTF-8 or "
                    f"an ASCII-compatible encoding named in a coding cookie: convert it to UTF-8")
    sample = raw[:4096]
    for parity, order in ((1, "LE"), (0, "BE")):
        # ASCII text in UTF-16 without a BOM: every other byte is NUL, and only those.
        if len(sample) >= 4 and set(sample[parity::2]) == {0} and 0 not in sample[1 - parity::2]:
            return (f"looks like UTF-16-{order} text without a byte-order mark; Python source must be UTF-8 or "
                    f"an ASCII-compatible encoding named in a coding cookie: convert it to UTF-8")
    return "binary file (contains NUL bytes)"


_NOT_REGULAR = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
)


def file_kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None for a regular file): such a file is never read."""
    for test, words in _NOT_REGULAR:
        if test(mode):
            return words
    return None if stat.S_ISREG(mode) else "not a regular file"


def read_bytes(path: Path) -> bytes:
    """The bytes of a regular file; OSError for anything else, before a read could block.

    The file is opened without blocking and checked on the open descriptor, so a FIFO
    (`mkfifo x.py`: reading it waits for a writer forever) or a device is refused even
    if it replaced a regular file after the directory walk.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        kind = file_kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise _NotRegular(kind)
        return fh.read()


class _NotRegular(OSError):
    pass


def _link_target(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:  # not a link (or gone too)
        return None


def read(path: Path) -> SourceFile:
    try:
        raw = read_bytes(path)
    except FileNotFoundError:
        target = _link_target(path)
        if target is not None:
            raise UnreadableSource(f"{path}: cannot read: broken symbolic link (its target {target} does not exist)") from None
        raise UnreadableSource(f"{path}: cannot read: the file no longer exists (deleted during the run?)") from None
    except IsADirectoryError:
        raise UnreadableSource(f"{path}: cannot read: it is a directory") from None
    except _NotRegular as exc:
        raise UnreadableSource(f"{path}: not checked: it is {exc}, not a regular file") from None
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
    concurrent writer.  A symlink is kept: its target is replaced.  A file with several
    names (hard links) is rewritten in place instead (`_rewrite_in_place`).  Returns False
    (and writes nothing) when the file changed or vanished.
    """
    data = encode(text, encoding, bom)
    target = Path(os.path.realpath(path))
    try:
        st = target.stat()
    except OSError:
        st = None
    if expected is not None and st is None:
        return False
    if st is not None and st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
        return _rewrite_in_place(target, expected, data)
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


def _rewrite_in_place(target: Path, expected: bytes | None, data: bytes) -> bool:
    """Write `data` over a file that has several names (hard links), keeping its inode.

    A rename gives the new text to one name and leaves every other name holding the old
    file, so this file is rewritten where it is, as Ruff and Black write every file.  To
    stay as safe as an in-place write can be: the bytes are compared with `expected` on
    the open file, the space for a longer text is reserved before a byte changes (a full
    disk fails then, not halfway), and a write that fails partway puts the old bytes back.
    """
    fd = os.open(target, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        old = _read_all(fd)
        if expected is not None and old != expected:
            return False
        try:
            if len(data) > len(old) and hasattr(os, "posix_fallocate"):
                try:
                    os.posix_fallocate(fd, 0, len(data))
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                        raise  # ENOSPC, EFBIG: nothing of the old text is overwritten yet
            _write_at_start(fd, data)
        except BaseException:
            try:
                _write_at_start(fd, old)
            except OSError:
                pass  # NB: the first error is the one to report
            raise
        return True
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _write_at_start(fd: int, data: bytes) -> None:
    """`data` as the whole content of the open file, flushed to disk."""
    os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.ftruncate(fd, len(data))
    os.fsync(fd)


# Comments and string literals, one scan: strings are matched whole (unterminated ones to the
# end of their line, or of the file for triple quotes) so that a `#` in one is not taken for
# a comment; Python 3.11's f-strings cannot nest their own quote, so quote matching finds
# exactly the strings the tokenizer would.  Shared by the parse guard (amplint/parse_limits.py)
# and the pre-filter.
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

# Where a comment or a string literal may start.
_STRING_OR_COMMENT_START = re.compile(r"[#'\"]")


def strings_and_comments(text: str, pos: int = 0, endpos: int | None = None) -> Iterator[re.Match]:
    """The matches of `STRINGS_AND_COMMENTS` in `text[pos:endpos]`, as its `finditer` gives them.

    Every match starts at `#`, `'` or `"`, and one always matches there (each branch
    accepts an unterminated literal).  `finditer` tries the whole alternation at every
    character; searching for those three first, then matching, finds the same literals in
    two fifths of the time on real code (the pre-filter's code text, the parse guard).
    """
    end = len(text) if endpos is None else endpos
    search, match = _STRING_OR_COMMENT_START.search, STRINGS_AND_COMMENTS.match
    while (start := search(text, pos, end)) is not None:
        found = match(text, start.start(), end)
        if found is None:  # NB: no branch fails at its first character; as `finditer` would, go on
            pos = start.start() + 1
            continue
        yield found
        pos = found.end()


def replace_strings_and_comments(text: str, replacement: Callable[[re.Match], str]) -> str:
    """`STRINGS_AND_COMMENTS.sub(replacement, text)`, by `strings_and_comments`."""
    parts, kept = [], 0
    for m in strings_and_comments(text):
        parts.append(text[kept : m.start()])
        parts.append(replacement(m))
        kept = m.end()
    parts.append(text[kept:])
    return "".join(parts)
