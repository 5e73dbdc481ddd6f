"""Fixture harness: `# expect: AMP101` comments say which findings a line must produce.

Public so third-party rule packs can reuse it.  Syntax, on the line where the
diagnostic starts:

    torch.nn.utils.clip_grad_norm_(params, 1.0)  # expect: AMP101
    # expect(+1): AMP101, AMP401      <- for the next line (multi-line statements)

Comments are found with `tokenize`, so a string that looks like one is ignored; a
header line `# amplint: select=AMP101,AMP201` may widen the selection for a file, and
`# amplint: target-torch=2.2` sets the oldest torch it must run on.
"""

from __future__ import annotations

import re
import tokenize
from pathlib import Path

from amplint.positions import lf_lines

_EXPECT = re.compile(r"#\s*expect(?:\((?P<offset>[+-]\d+)\))?:\s*(?P<codes>AMP\d{3}(?:\s*,\s*AMP\d{3})*)\s*$")
_HEADER = re.compile(r"^#\s*amplint:\s*select=(?P<codes>[A-Z0-9, ]+)\s*$", re.MULTILINE)
_TARGET_HEADER = re.compile(r"^#\s*amplint:\s*target-torch=(?P<version>[0-9.]+)\s*$", re.MULTILINE)


def expectations(source: str) -> list[tuple[int, str]]:
    """Sorted (line, code) pairs the fixture promises."""
    out: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(lf_lines(source).__next__):
        if tok.type != tokenize.COMMENT:
            continue
        m = _EXPECT.search(tok.string)
        if m is None:
            continue
        line = tok.start[0] + int(m.group("offset") or 0)
        out.extend((line, code.strip()) for code in m.group("codes").split(","))
    return sorted(out)


def fixture_selection(path: Path, source: str) -> list[str]:
    """The rule codes a fixture is checked with: its directory's code, or its header's."""
    m = _HEADER.search(source)
    if m:
        return [c.strip() for c in m.group("codes").split(",") if c.strip()]
    return [path.parent.name]


def fixture_cases(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("AMP*/*.py") if not p.name.endswith(".fixed.py"))


def fixture_config(path: Path, source: str):
    """The configuration a fixture is checked with: its selection and its `target-torch`."""
    from amplint.config import Config

    m = _TARGET_HEADER.search(source)
    # NB: a fixture names the rules it specifies; a preview rule is specified like any other
    return Config(select=tuple(fixture_selection(path, source)), target_torch=m.group("version") if m else None,
                  preview=True)
