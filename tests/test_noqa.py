"""noqa comments: what they suppress (as flake8 reads them), where a new one goes, which are stale."""

from __future__ import annotations

import pytest

from amplint.diagnostics import Fix
from amplint.engine import check_source
from amplint.fixes import apply_fixes, fix_text
from amplint.suppression import add_noqa_edits, directives, logical_line_ends, noqa_map

DEPRECATED_AND_CLIP = """\
import torch

def step(model, optimizer, scaler, loss):
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), torch.cuda.amp.GradScaler().get_scale())  # noqa: AMP401
    scaler.step(optimizer)
    scaler.update()
"""


def test_a_code_list_suppresses_only_its_codes() -> None:
    """Regression: a one-letter code pattern read `# noqa: AMP401` as a bare noqa that hid AMP101 too."""
    found = {d.code for d in check_source(DEPRECATED_AND_CLIP, "t.py", select=["AMP101", "AMP401"])}
    assert found == {"AMP101"}
    assert noqa_map("x = 1  # noqa: AMP401, E501\n") == {1: frozenset({"AMP401", "E501"})}
    assert noqa_map("x = 1  # noqa\n") == {1: frozenset({"*"})}


def test_a_prefix_suppresses_the_codes_it_starts_as_in_flake8() -> None:
    source = DEPRECATED_AND_CLIP.replace("# noqa: AMP401", "# noqa: AMP4")
    assert {d.code for d in check_source(source, "t.py", select=["AMP101", "AMP401"])} == {"AMP101"}


def test_only_the_codes_list_counts_not_codes_in_the_explanation() -> None:
    source = "import torch\ns = torch.cuda.amp.GradScaler()  # noqa: E501 see AMP401 docs\n"
    assert [d.code for d in check_source(source, "t.py", select=["AMP401"])] == ["AMP401"]


def test_logical_line_end_is_where_a_comment_can_go() -> None:
    source = 'x = f(\n    """a\nb""",\n)\ny = 1\n'
    assert logical_line_ends(source) == {1: 4, 2: 4, 3: 4}


def _add_noqa(source: str, found: list[tuple[int, str]]) -> str:
    edits = add_noqa_edits(source, found)
    return apply_fixes(source, [Fix("noqa", (e,)) for e in edits])[0]


def test_add_noqa_places_extends_and_keeps_other_comments() -> None:
    source = "a = 1\nb = 2  # noqa: E501\nc = 3  # type: ignore\nd = 4  # noqa\ne = (\n  5)\n"
    found = [(1, "AMP401"), (1, "AMP101"), (2, "AMP401"), (3, "AMP401"), (4, "AMP401"), (5, "AMP401")]
    assert _add_noqa(source, found) == (
        "a = 1  # noqa: AMP101, AMP401\nb = 2  # noqa: AMP401, E501\nc = 3  # type: ignore  # noqa: AMP401\n"
        "d = 4  # noqa\ne = (\n  5)  # noqa: AMP401\n"
    )
    # and each added comment suppresses exactly what it names
    lines = noqa_map(_add_noqa(source, found))
    assert lines[1] == {"AMP101", "AMP401"} and lines[5] == lines[6] == {"AMP401"}


def test_directives_know_their_codes_and_lines() -> None:
    (d,) = directives("x = (1,\n  2)  # noqa: AMP101, E501 why\n")
    assert d.codes == ("AMP101", "E501") and d.covers == (1, 2) and d.line == 2


def test_unused_noqa_is_opt_in_and_fixes_converge() -> None:
    source = 'import torch\ns = torch.amp.GradScaler("cuda")  # noqa: AMP401\n'
    assert check_source(source, "t.py") == []  # opt-in: off by default
    (d,) = check_source(source, "t.py", select=["AMP001", "AMP401"])
    assert (d.code, d.message) == ("AMP001", "Unused `noqa` directive (unused: `AMP401`)")
    outcome = fix_text(source, lambda t: check_source(t, "t.py", select=["AMP001", "AMP401"]))
    assert outcome.source == 'import torch\ns = torch.amp.GradScaler("cuda")\n'


@pytest.mark.parametrize("head", [
    "#!/usr/bin/env python\n# noqa: AMP401\n# -*- coding: latin-1 -*-\n",
    "# noqa: AMP401\n#!/usr/bin/env python\n# -*- coding: latin-1 -*-\n",
    "# noqa: AMP401\n# -*- coding: latin-1 -*-\n",
])
def test_removing_a_whole_line_directive_never_moves_a_line_into_the_header(head: str) -> None:
    """Python reads a coding declaration from lines 1-2 only (and the OS a shebang from line
    1): deleting a directive's line there would pull line 3 up and change how the file
    decodes (or runs). The line is emptied instead; every other line stays where it was."""
    source = head + "import torch\n"
    select = ["AMP001", "AMP401"]
    outcome = fix_text(source, lambda t: check_source(t, "t.py", select=select))
    before, after = source.splitlines(), outcome.source.splitlines()
    assert len(after) == len(before)
    assert [line for line in after if "noqa" in line] == []
    assert [i for i, (a, b) in enumerate(zip(before, after)) if a != b] == [before.index("# noqa: AMP401")]


def test_a_whole_line_directive_leaves_its_line_empty_so_no_line_number_moves() -> None:
    """Deleting the line moved every line below it up: `%(lineno)d` in log records and
    tracebacks changed (hostile pass 13)."""
    source = "import torch\n\n# noqa: AMP401\nx = 1\n"
    outcome = fix_text(source, lambda t: check_source(t, "t.py", select=["AMP001", "AMP401"]))
    assert outcome.source == "import torch\n\n\nx = 1\n"


def test_unused_noqa_runs_when_the_prefilter_skips_every_other_rule() -> None:
    """No rule's tokens are in the file, so nothing can fire: its AMP noqa codes are all stale."""
    (d,) = check_source("x = 1  # noqa: AMP101\n", "t.py", select=["AMP001", "AMP101"])
    assert d.code == "AMP001" and "unused: `AMP101`" in d.message


def test_add_noqa_never_suppresses_a_stale_noqa_finding(tmp_path) -> None:
    from amplint.config import Config
    from amplint.noqa_writer import add_noqa

    path = tmp_path / "t.py"
    path.write_text('import torch\ns = torch.amp.GradScaler("cuda")  # noqa: AMP401\nt = torch.cuda.amp.GradScaler()\n')
    result = add_noqa([path], Config(select=("AMP001", "AMP401"), root=tmp_path))
    assert (result.added, result.errors) == (1, [])
    assert path.read_text().splitlines()[1:] == [
        's = torch.amp.GradScaler("cuda")  # noqa: AMP401', "t = torch.cuda.amp.GradScaler()  # noqa: AMP401"]


def test_logical_line_ends_read_only_as_far_as_asked_agree_with_the_whole_text() -> None:
    from amplint.suppression import logical_line_ends

    source = 'x = (1,\n     2)\ny = 3  # c\ns = """a\nb"""\nz = [\n    4,\n]\nw = \\\n    5\n'
    whole = logical_line_ends(source)
    assert whole == {1: 2, 4: 5, 6: 8, 7: 8, 9: 10}
    for until in range(1, 12):
        part = logical_line_ends(source, until)
        assert {k: v for k, v in whole.items() if k <= until} == {k: v for k, v in part.items() if k <= until}, until


def _without_stale_noqa(source: str) -> str:
    return fix_text(source, lambda t: check_source(t, "t.py", select=["AMP001"])).source


@pytest.mark.parametrize(
    "line, left",
    [
        # another tool's comment after the directive keeps its own `#`, once
        ("x = 1  # noqa: AMP999 # type: ignore\n", "x = 1  # type: ignore\n"),
        ("x = 1  #noqa: AMP999  # pylint: disable=foo\n", "x = 1  # pylint: disable=foo\n"),
        # no trailing spaces, before or after the comment that goes
        ("x = 1  # noqa:AMP999   \n", "x = 1\n"),
        ("x = 1  # noqa: AMP999 \r\n", "x = 1\r\n"),
        ("x = 1  # type: ignore  # noqa: AMP999  \n", "x = 1  # type: ignore\n"),
        ("x = 1  # see: # noqa: AMP999\n", "x = 1  # see:\n"),
        # nothing but `#` left: no dangling comment
        ("x = 1  # noqa: AMP999 #\n", "x = 1\n"),
        ("x = 1  # # noqa: AMP999\n", "x = 1\n"),
        # a comment that was the whole line goes with its line
        ("y = 0\n    # noqa: AMP999\nx = 1\n", "y = 0\n\nx = 1\n"),
        ("y = 0\n# noqa: AMP999", "y = 0\n"),
        # what stays as it was
        ("x = 1  # noqa: AMP999 - why\n", "x = 1  # - why\n"),
        ("x = 1  # noqa: AMP999, E501  # type: ignore\n", "x = 1  # noqa: E501  # type: ignore\n"),
    ],
)
def test_a_stale_noqa_leaves_the_comment_a_person_would_write(line: str, left: str) -> None:
    assert _without_stale_noqa(line) == left


def test_a_stale_noqa_line_inside_a_comment_block_leaves_a_bare_hash() -> None:
    """An empty line would end the block: `inspect.getcomments` then read its last part only
    (hostile pass 18)."""
    from amplint.engine import check_source
    from amplint.fixes import fix_text

    source = "import torch\n\n# Recipe: bf16 on CPU.\n# noqa: AMP401\n# Shown in --list-recipes.\ndef recipe():\n    return 1\n"
    outcome = fix_text(source, lambda text: check_source(text, "t.py", select=["AMP001"]), unsafe=False)
    assert outcome.source == source.replace("# noqa: AMP401\n", "#\n")
