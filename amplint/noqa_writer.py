"""`amplint check --add-noqa`: a `# noqa: AMPnnn` on every current finding's line.

For adopting amplint on a large code base (Ruff's `--add-noqa`): the existing findings are
silenced where they are, and every new one fails.  Each file is rewritten atomically, only
when the result still parses and still has the file's encoding, and only over the bytes
that were read; notebooks get the comments inside their cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from amplint import notebooks, sources, unused_noqa
from amplint.config import Config
from amplint.diagnostics import Fix
from amplint.engine import SourceError, check_source, parse
from amplint.fixes import apply_fixes
from amplint.suppression import add_noqa_edits


@dataclass
class NoqaResult:
    added: int = 0
    errors: list[str] = field(default_factory=list)  # `path: why`, for files left unchanged


def add_noqa(files: list[Path], config: Config) -> NoqaResult:
    result = NoqaResult()
    for path in files:
        try:
            result.added += _add_to_file(path, config)
        except (sources.UnreadableSource, notebooks.NotebookError, OSError) as exc:
            result.errors.append(f"{path}: {exc}")
        except SourceError as exc:
            result.errors.append(f"{exc.path}:{exc.line}:{exc.col0 + 1}: {exc.reason}")
    return result


def _findings(text: str, rel: str, config: Config):
    """What to suppress: every finding but AMP001's (a noqa for a stale noqa only hides it)."""
    return [d for d in check_source(text, rel, config) if d.code != unused_noqa.CODE]


def _add_to_file(path: Path, config: Config) -> int:
    src = sources.read(path)
    rel = str(path)
    if notebooks.is_notebook(path):
        nb = notebooks.load(src.text, rel)
        if not nb.cells:
            return 0
        text, count = notebooks.add_noqa(nb, _findings(nb.module, rel, config))
        if text is None:
            return 0
        if not nb.writable:
            raise notebooks.NotebookError("nbformat < 4 notebooks are checked, not rewritten")
    else:
        edits = add_noqa_edits(src.text, [(d.span.line, d.code) for d in _findings(src.text, rel, config)])
        if not edits:
            return 0
        text, _ = apply_fixes(src.text, [Fix("noqa", (e,)) for e in edits])
        parse(text, rel)  # NB: a comment cannot break a parse, but a file is the last place to find out
        count = len(edits)
    if not sources.replace_if_unchanged(path, src.raw, text, src.encoding if not notebooks.is_notebook(path) else "utf-8",
                                        src.bom):
        raise OSError("the file changed while noqa comments were being added; nothing written")
    return count
