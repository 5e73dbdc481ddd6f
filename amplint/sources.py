"""Reading and writing Python source files without losing anything.

Decoding honours a UTF-8 BOM and PEP 263 coding cookies; writing puts back the same
encoding and BOM, and replaces the file atomically (temporary file in the same
directory, then `os.replace`), keeping its permission bits.
"""

from __future__ import annotations

import codecs
import io
import os
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
        raise UnreadableSource(f"{path}: {exc.msg if hasattr(exc, 'msg') else exc}") from None
    bom = raw.startswith(codecs.BOM_UTF8)
    body = raw[len(codecs.BOM_UTF8):] if bom else raw
    codec = "utf-8" if encoding == "utf-8-sig" else encoding
    try:
        text = body.decode(codec)
    except (UnicodeDecodeError, LookupError) as exc:
        raise UnreadableSource(f"{path}: cannot decode as {encoding}: {exc}") from None
    return text, codec, bom


def read(path: Path) -> SourceFile:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UnreadableSource(f"{path}: cannot read: {exc.strerror or exc}") from None
    text, encoding, bom = decode(raw, str(path))
    return SourceFile(path, text, encoding, bom, raw)


def encode(text: str, encoding: str, bom: bool) -> bytes:
    data = text.encode(encoding)
    return codecs.BOM_UTF8 + data if bom else data


def write_atomic(path: Path, text: str, encoding: str = "utf-8", bom: bool = False) -> None:
    """Replace `path`'s content in one step; a crash leaves the old file or the new one."""
    data = encode(text, encoding, bom)
    target = Path(os.path.realpath(path))
    try:
        mode = target.stat().st_mode & 0o7777
    except OSError:
        mode = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".amplint-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
