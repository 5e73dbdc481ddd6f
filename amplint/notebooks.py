"""Jupyter notebooks (.ipynb) as modules: their code cells, in order, checked and fixed as one.

As Ruff does it: the code cells of a Python notebook are joined into one module (cells
share their names, as they do in a kernel), IPython's own syntax is neutralised
(`%magic`, `!shell`, `x = !cmd`, `obj?`, non-Python `%%cell` magics), every finding is
mapped back to its cell (`Diagnostic.cell`, 1-based among all cells, lines counted
within the cell), and fixes are written back into the cells they touch.

Why nbformat: it is Jupyter's own reader and schema.  It reads every nbformat version
(v3 notebooks are checked through its upgrade), and the fixed notebook is validated
against the schema before anything is written.  The JSON itself is written by this
module with the layout the file already had (indentation, key order, ASCII escaping,
final newline), so that a fix changes the cells it fixes and nothing else; when the
file's layout cannot be reproduced the write goes ahead, normalised, with a warning.

Limits: markdown and raw cells are not read; a notebook whose kernel is not Python is
skipped; `amplint verify` runs commands, not notebooks (run it on a script).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, replace

from amplint.diagnostics import Diagnostic, Edit, Fix, Span

SUFFIX = ".ipynb"

# Ruff's list: cell magics whose body is Python (checked); any other `%%magic` cell
# (`%%bash`, `%%writefile`, `%%html`, ...) is not Python and is skipped.
PYTHON_CELL_MAGICS = frozenset({"capture", "debug", "prun", "pypy", "python", "python3", "time", "timeit"})

# A line IPython rewrites before Python sees it: `%magic`, `!cmd`, `?obj`, `obj?`, `x = !cmd`.
_ESCAPED = re.compile(r"^\s*(?:[%!?]|[\w.\[\]\"', ]+=\s*[%!])|^\s*[\w.]+\s*\?\??\s*$")


class NotebookError(Exception):
    """The file is not a notebook amplint can read (or write back); the message says why."""


def is_notebook(path) -> bool:
    return str(path).endswith(SUFFIX)


@dataclass(frozen=True)
class Cell:
    """One code cell as it appears in the joined module."""

    index: int  # 1-based among all cells of the notebook (what Jupyter and Ruff number)
    source: str  # the cell's text as stored
    code: str  # the same with IPython syntax neutralised and a final newline
    first_line: int  # module line of the cell's first line
    magics: tuple[str, ...]  # original text of the neutralised lines, in order

    @property
    def line_count(self) -> int:
        return self.code.count("\n")


@dataclass
class Notebook:
    """A parsed notebook and its code cells joined into `module`."""

    path: str
    text: str
    data: dict
    cells: list[Cell]
    module: str
    marker: str  # the comment that opens each cell in `module`; unique to this notebook
    python: bool  # False: the kernel is not Python, nothing is checked
    writable: bool = True  # False for a notebook read through nbformat's upgrade (v3)

    # --- reading ---------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str, path: str = "<notebook>") -> "Notebook":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise NotebookError(f"not a notebook: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        except RecursionError:
            raise NotebookError("not a notebook: its JSON nests too deeply to read") from None
        if not isinstance(data, dict) or "nbformat" not in data:
            raise NotebookError("not a notebook: no `nbformat` key")
        cells = _code_cells(data, text)
        marker = _unique_marker(text)
        python = _is_python(data)
        joined: list[str] = []
        out: list[Cell] = []
        line = 1
        for index, source in cells if python else ():
            code, magics = neutralise(source, marker)
            if code is None:
                continue  # a non-Python cell magic: the body is not Python
            if not code.endswith("\n"):
                code += "\n"
            joined.append(f"# {marker} {index}\n")
            line += 1
            out.append(Cell(index, source, code, line, magics))
            joined.append(code)
            line += code.count("\n")
        return cls(path, text, data, out, "".join(joined), marker, python)

    # --- positions -------------------------------------------------------------------

    def cell_at(self, line: int) -> Cell | None:
        for cell in self.cells:
            if cell.first_line <= line < cell.first_line + cell.line_count:
                return cell
        return None

    def to_cells(self, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
        """Module coordinates -> cell coordinates; a finding outside every cell is dropped."""
        out = []
        for d in diagnostics:
            cell = self.cell_at(d.span.line)
            if cell is None:
                continue
            shift = cell.first_line - 1
            s = d.span
            span = Span(s.line - shift, s.col0, s.end_line - shift, s.end_col0)
            fix = d.fix
            if fix is not None:
                # NB: each edit counts lines in its own cell, which it names: `--fix` applies a
                # fix that changes several cells (the import in one, the call in another), so
                # the finding is fixable, and says so, whichever cell it is in.
                edits = []
                for e in fix.edits:
                    home = self.cell_at(e.start[0])
                    if home is None:
                        edits = None  # on a cell's marker line: `--fix` would refuse it
                        break
                    at = home.first_line - 1
                    edits.append(Edit((e.start[0] - at, e.start[1]), (e.end[0] - at, e.end[1]), e.content, home.index))
                fix = replace(fix, edits=tuple(edits)) if edits is not None else None
            # NB: a statement never spans two cells, so its noqa row moves with it
            row = None if d.noqa_row is None else d.noqa_row - shift
            out.append(replace(d, span=span, fix=fix, cell=cell.index, noqa_row=row))
        return out

    def cell_sources(self) -> dict[int, str]:
        """Cell number -> its text, for showing the line under a finding."""
        return {c.index: c.source for c in self.cells}

    # --- writing ---------------------------------------------------------------------

    def with_module(self, module: str) -> tuple[str, list[str]]:
        """The notebook's JSON text with the cells of a fixed `module` put back, and warnings.

        Raises NotebookError when the fixed module no longer splits into the same cells,
        or the result is not a valid notebook: nothing is written then.
        """
        parts = re.split(rf"^# {re.escape(self.marker)} (\d+)\n", module, flags=re.M)
        indexes = [int(i) for i in parts[1::2]]
        if parts[0] or indexes != [c.index for c in self.cells]:
            raise NotebookError("a fix moved code across cells")
        data = json.loads(self.text)  # a fresh copy, in the file's own key order
        raw_cells = _raw_cells(data)
        for cell, code in zip(self.cells, parts[2::2]):
            if code == cell.code:
                continue
            restored = _restore(code, cell.magics, self.marker)
            if not cell.source.endswith("\n") and restored.endswith("\n"):
                restored = restored[:-1]
            raw = raw_cells[cell.index - 1]
            key = "source" if "source" in raw else "input"  # v3 code cells say `input`
            raw[key] = restored.splitlines(keepends=True) if isinstance(raw[key], list) else restored
        text, exact = _dump_like(data, self.text)
        _validate(text)
        warnings = [] if exact else [
            "the notebook's JSON layout is not one amplint can reproduce: it was rewritten in a normalised layout "
            "(cells, outputs and metadata unchanged)"
        ]
        return text, warnings


# --- IPython syntax ----------------------------------------------------------------------


def neutralise(source: str, marker: str) -> tuple[str | None, tuple[str, ...]]:
    """(Python text, original magic lines), or (None, ()) for a cell that is not Python.

    Each IPython line becomes `pass  # <marker> magic` at its own indentation, so blocks
    keep their shape and no rule sees it; lines inside a multi-line string are left alone.
    An IPython line ending in a backslash goes on in the next line (`!pip install -q \\`
    then `    transformers`): IPython joins them into one command, so each continuation line
    is neutralised too, at the first line's indentation.
    """
    lines = source.splitlines(keepends=True)
    if lines and lines[0].startswith("%%"):
        name = lines[0][2:].split(None, 1)[0] if lines[0][2:].strip() else ""
        if name not in PYTHON_CELL_MAGICS:
            return None, ()
    in_string = _lines_inside_strings(source)
    magics: list[str] = []
    out: list[str] = []
    continued: str | None = None  # the indentation of the IPython line this one continues
    for number, line in enumerate(lines, start=1):
        body = line.rstrip("\r\n")
        if continued is not None or (number not in in_string and _ESCAPED.match(line)):
            indent = continued if continued is not None else body[: len(body) - len(body.lstrip())]
            magics.append(body)
            out.append(f"{indent}pass  # {marker} magic{line[len(body):]}")
            continued = indent if body.endswith("\\") else None
        else:
            out.append(line)
    return "".join(out), tuple(magics)


def _restore(code: str, magics: tuple[str, ...], marker: str) -> str:
    placeholder = re.compile(rf"^[ \t]*pass  # {re.escape(marker)} magic$", re.M)
    found = placeholder.findall(code)
    if len(found) != len(magics):
        raise NotebookError("a fix removed an IPython magic line")
    originals = iter(magics)
    return placeholder.sub(lambda m: next(originals), code)


def _lines_inside_strings(source: str) -> set[int]:
    """Lines that start inside a multi-line string literal (never IPython syntax there)."""
    from amplint.sources import strings_and_comments

    inside: set[int] = set()
    for m in strings_and_comments(source):
        if m.group("string") and "\n" in m.group():
            first = source.count("\n", 0, m.start()) + 1
            inside.update(range(first + 1, first + m.group().count("\n") + 1))
    return inside


# --- the JSON ------------------------------------------------------------------------------


def _raw_cells(data: dict) -> list:
    """The cells as stored, whatever their shape (`_code_cells` judges each); a `cells` or
    `worksheets` that is not a list of them is "not a notebook"."""
    if "cells" in data:
        cells = data["cells"]
    else:  # nbformat 3: cells live in worksheets
        worksheets = data.get("worksheets", [])
        if not isinstance(worksheets, list) or not all(isinstance(ws, dict) for ws in worksheets):
            raise NotebookError("not a notebook: `worksheets` is not a list of worksheets")
        cells = []
        for ws in worksheets:
            if not isinstance(ws.get("cells", []), list):
                raise NotebookError("not a notebook: a worksheet's `cells` is not a list")
            cells += ws.get("cells", [])
    if not isinstance(cells, list):
        raise NotebookError("not a notebook: `cells` is not a list")
    return cells


def _code_cells(data: dict, text: str) -> list[tuple[int, str]]:
    if "cells" not in data and "worksheets" not in data:
        raise NotebookError("not a notebook: no `cells`")
    cells = _raw_cells(data)
    out = []
    for i, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", cell.get("input", ""))
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise NotebookError(f"cell {i}: `source` is neither text nor a list of lines")
        out.append((i, source))
    return out


def _is_python(data: dict) -> bool:
    """The kernel's language is Python, or not said (metadata of another shape says nothing)."""
    meta = _table(data.get("metadata"))
    for language in (_table(meta.get("language_info")).get("name"), _table(meta.get("kernelspec")).get("language")):
        if isinstance(language, str) and language:
            return language.lower() == "python"
    return True


def _table(value) -> dict:
    return value if isinstance(value, dict) else {}


def _unique_marker(text: str) -> str:
    while True:
        marker = f"amplint-cell-{secrets.token_hex(4)}"
        if marker not in text:
            return marker


def _dump_like(data: dict, original: str) -> tuple[str, bool]:
    """`data` as JSON in the layout of `original`; True when that layout reproduces it exactly."""
    lines = original.splitlines()
    indent: int | str | None = None
    if len(lines) > 1:
        second = lines[1]
        lead = second[: len(second) - len(second.lstrip())]
        indent = lead if lead and set(lead) != {" "} else len(lead)
    ensure_ascii = original.isascii() and "\\u" in original
    # NB: the file's own line ending (a notebook saved on Windows has CRLF); JSON text
    # holds no raw line break inside a string, so every "\n" json.dumps writes is one.
    first = re.search(r"\r\n|\r|\n", original)
    eol = first.group() if first else "\n"
    newline = eol if original.endswith(("\n", "\r")) else ""

    def dump(obj) -> str:
        return json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii).replace("\n", eol) + newline

    exact = dump(json.loads(original)) == original
    return dump(data), exact


def _validate(text: str) -> None:
    import nbformat

    try:
        nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 - nbformat raises several kinds; none may be written
        raise NotebookError(f"the fixed notebook would not be valid: {str(exc).splitlines()[0]}") from None


def upgrade_for_reading(text: str) -> str:
    """A v3 (or older) notebook's text as v4, through nbformat, for checking only."""
    import nbformat

    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat's reader raises several kinds
        raise NotebookError(f"not a notebook nbformat can read: {str(exc).splitlines()[0]}") from None
    return nbformat.writes(nb)


def load(text: str, path: str = "<notebook>") -> Notebook:
    """Parse a notebook of any nbformat version; one older than 4 is read through nbformat's upgrade."""
    nb = Notebook.parse(text, path)
    try:
        version = int(nb.data.get("nbformat", 4))
    except (TypeError, ValueError):
        raise NotebookError(f"not a notebook: `nbformat` is {json.dumps(nb.data['nbformat'])[:40]}, "
                            f"not a version number") from None
    if version < 4:
        return replace(Notebook.parse(upgrade_for_reading(text), path), writable=False)
    return nb


# --- checking and fixing -----------------------------------------------------------------


@dataclass
class NotebookResult:
    diagnostics: list[Diagnostic]
    text: str  # the notebook's JSON after fixes (the input when nothing changed)
    fixed: int = 0
    diff: str = ""
    warnings: list[str] | None = None


def check(nb: Notebook, lint) -> list[Diagnostic]:
    """`lint(module_text) -> diagnostics` over the joined cells, mapped to cells."""
    if not nb.cells:
        return []
    return nb.to_cells(_without_fixes_magics_see(nb, lint)(nb.module))


def fix(nb: Notebook, lint, *, unsafe: bool = False):
    """(FixOutcome over the module, new notebook text or None, warnings)."""
    from amplint.fixes import fix_text

    outcome = fix_text(nb.module, _without_fixes_magics_see(nb, lint), unsafe=unsafe)
    outcome.remaining = nb.to_cells(outcome.remaining)
    if outcome.source == nb.module:
        return outcome, None, []
    if not nb.writable:
        outcome.applied, outcome.remaining = [], check(nb, lint)  # nothing was fixed: every finding stays
        return outcome, None, ["fix not written: nbformat < 4 notebooks are checked, not rewritten (upgrade it in Jupyter)"]
    try:
        text, warnings = nb.with_module(outcome.source)
    except NotebookError as exc:
        outcome.applied, outcome.remaining = [], check(nb, lint)  # nothing was fixed: every finding stays
        return outcome, None, [f"fix not written: {exc}"]
    return outcome, text, warnings


def _without_fixes_magics_see(nb: Notebook, lint):
    """`lint`, with no fix for a name that an IPython line uses.

    `%time with autocast(): ...` and `%timeit GradScaler()` are code amplint neither
    analyses nor rewrites: a fix that moves `from torch.cuda.amp import autocast` to
    `torch.amp` and gives every call it sees its device would leave that line calling
    `torch.amp.autocast()` with no device.  So a fix is dropped when a magic line names
    what it rewrites: a name an import it changes binds, or the function or class a call
    or decorator it changes names (`GradScaler` for `torch.cuda.amp.GradScaler()`)."""
    words = {w for line in (m for cell in nb.cells for m in cell.magics) for w in _IDENTIFIER.findall(line)}

    def guarded(text: str) -> list[Diagnostic]:
        from amplint.positions import LineIndex

        index = LineIndex(text)
        lines = text.splitlines()
        # (module names a line reads, `torch` of `torch.nn.utils...`, are no values it changes)
        imported = {w for line in lines if _IMPORT_LINE.match(line) for w in _IDENTIFIER.findall(line)}
        out = []
        for d in lint(text):
            if d.fix is not None:
                rewritten = set()
                for e in d.fix.edits:
                    rewritten |= _names_rewritten(text[index.offset(*e.start):index.offset(*e.end)])
                if d.code in _VALUE_CHANGING_FIXES:
                    # The fix changes the values the statement writes (`-1e9` becomes
                    # `finfo.min`): a magic line reading them (`%time print(scores.min())`)
                    # sees the change unanalysed (hostile pass 24).
                    for row in range(d.span.line, max(d.span.end_line, d.span.line) + 1):
                        if row <= len(lines):
                            rewritten |= set(_IDENTIFIER.findall(lines[row - 1])) - imported
                if (rewritten & words) or _crosses_cells(nb, d, lines):
                    d = replace(d, fix=None)
            out.append(d)
        return out

    return guarded


def _crosses_cells(nb: Notebook, d: Diagnostic, lines: list[str]) -> bool:
    """An `unscale_` inserted before a clip whose cell does not also step: the window from the
    clip to the step spans cells, and a cell is run again on its own (re-running the clip cell
    then raises "unscale_() has already been called"; hostile pass 24)."""
    if d.code != "AMP101":
        return False
    from amplint.prefilter import code_text

    cell = nb.cell_at(d.span.line)
    # (in code: a comment naming `scaler.step(opt)` steps nothing; hostile pass 26)
    return cell is None or ".step(" not in code_text(cell.code, strings=False)


_IDENTIFIER = re.compile(r"[^\W\d]\w*")
# Rules whose fix changes the values its statement writes (not only when they are written).
_VALUE_CHANGING_FIXES = frozenset({"AMP501"})
_IMPORT_LINE = re.compile(r"^\s*(?:import|from)\s")


def _names_rewritten(old: str) -> set[str]:
    """The names whose meaning a rewrite of the code `old` touches: what an import in it
    binds, the last part of what a call or decorator in it names; every identifier of it
    when it is no complete statement or expression."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(old))
    except SyntaxError:
        try:
            tree = ast.parse(old.strip(), mode="eval")
        except SyntaxError:
            return set(_IDENTIFIER.findall(old))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    body = tree.body if isinstance(tree, ast.Expression) else None
    if isinstance(body, (ast.Name, ast.Attribute)):  # a decorator's expression
        names.add(body.attr if isinstance(body, ast.Attribute) else body.id)
    return names - {""}


def cell_diff(nb: Notebook, new_text: str) -> str:
    """A unified diff per changed cell, named `path:cell N` (Ruff's notebook diff)."""
    import difflib

    new = Notebook.parse(new_text, nb.path)
    old_cells = {c.index: c.source for c in nb.cells}
    out = []
    for cell in new.cells:
        before = old_cells.get(cell.index, "")
        if before == cell.source:
            continue
        out.append("".join(difflib.unified_diff(
            _lines(before), _lines(cell.source),
            fromfile=f"a/{nb.path}:cell {cell.index}", tofile=f"b/{nb.path}:cell {cell.index}",
        )))
    return "".join(out)


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines


def add_noqa(nb: Notebook, diagnostics_in_module: list[Diagnostic]) -> tuple[str | None, int]:
    """Notebook text with `# noqa: CODE` on each finding's line (module coordinates), and the count."""
    from amplint.fixes import apply_fixes
    from amplint.suppression import add_noqa_edits

    edits = add_noqa_edits(nb.module, [(d.span.line, d.code) for d in diagnostics_in_module])
    if not edits:
        return None, 0
    module, _ = apply_fixes(nb.module, [Fix("noqa", (e,)) for e in edits])
    text, _ = nb.with_module(module)
    return text, len(edits)
