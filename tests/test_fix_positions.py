"""Fixes land where the finding is, whatever the line endings (issue 17, item 1).

libcst (and CPython) break lines at "\\r\\n", "\\r" and "\\n".  Every conversion from a
(line, column) to an offset, the noqa map and the source line shown under a finding
must count lines the same way, or a fix for one line is written onto another.
"""

from __future__ import annotations

import pytest

from amplint import output
from amplint.engine import check_source, parse
from amplint.fixes import fix_text
from amplint.positions import LineIndex, split_lines


def fixed(source: str, *, select=("AMP401",), unsafe: bool = True) -> str:
    """The text after the fixes, unsafe ones too (AMP401's GradScaler and module-level import
    fixes are unsafe for reasons outside the file; where a fix lands is the question here)."""
    outcome = fix_text(source, lambda text: check_source(text, "t.py", select=list(select)), unsafe=unsafe)
    assert not outcome.rejected, outcome.rejected
    parse(outcome.source, "t.py")
    return outcome.source


# --- the three examples of the issue ---------------------------------------------------------


def test_a_lone_cr_in_a_comment_does_not_move_the_fix_to_the_next_line() -> None:
    source = "import torch\n# a\rs1 = torch.cuda.amp.GradScaler(1.0)\ns2 = torch.cuda.amp.GradScaler(2.0)\n"
    assert fixed(source) == (
        'import torch\n# a\rs1 = torch.amp.GradScaler("cuda", 1.0)\ns2 = torch.amp.GradScaler("cuda", 2.0)\n'
    )


def test_a_cr_only_file_is_fixed_in_place_not_appended() -> None:
    source = "import torch\rs1 = torch.cuda.amp.GradScaler(1.0)\rs2 = torch.cuda.amp.GradScaler(2.0)\r"
    assert fixed(source) == (
        'import torch\rs1 = torch.amp.GradScaler("cuda", 1.0)\rs2 = torch.amp.GradScaler("cuda", 2.0)\r'
    )


def test_import_and_call_move_together_across_a_lone_cr() -> None:
    """Half of this fix was the import, half the call: a scaler with `device=64.0`."""
    source = "from torch.cuda.amp import GradScaler\rscaler = GradScaler(64.0)\n"
    assert fixed(source) == 'from torch.amp import GradScaler\rscaler = GradScaler("cuda", 64.0)\n'


# --- the other places that turn lines into offsets -----------------------------------------


def test_noqa_after_a_lone_cr_suppresses_its_own_line() -> None:
    source = "import torch\n# a\rs1 = torch.cuda.amp.GradScaler(1.0)  # noqa: AMP401\ns2 = torch.cuda.amp.GradScaler()\n"
    assert [d.span.line for d in check_source(source, "t.py", select=["AMP401"])] == [4]


def test_a_noqa_in_a_cr_only_file_covers_its_own_line_only() -> None:
    """tokenize ends a logical line only at "\\n": fed CR lines, one noqa covered the rest of the file
    (found by the line-ending fuzz, tests/test_fuzz.py)."""
    source = "from torch.cuda.amp import autocast\rwith autocast():  # noqa: AMP401\r    pass\rx = autocast()\r"
    assert [d.span.line for d in check_source(source, "t.py", select=["AMP401"])] == [1, 4]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_an_inserted_statement_takes_the_line_ending_of_its_line(newline: str) -> None:
    source = newline.join([
        "def step(model, optimizer, scaler, loss):",
        "    scaler.scale(loss).backward()",
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "    scaler.step(optimizer)",
        "    scaler.update()",
        "step(*batch)",
        "",
    ])
    out = fixed("import torch" + newline + source, select=("AMP101",), unsafe=True)
    assert out == newline.join([
        "import torch",
        "def step(model, optimizer, scaler, loss):",
        "    scaler.scale(loss).backward()",
        "    scaler.unscale_(optimizer)",
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "    scaler.step(optimizer)",
        "    scaler.update()",
        "step(*batch)",
        "",
    ])


def test_mixed_endings_keep_each_lines_own_ending() -> None:
    source = "import torch\r\nx = 1\rs = torch.cuda.amp.GradScaler(\n    2.0,\r\n)\n"
    assert fixed(source) == 'import torch\r\nx = 1\rs = torch.amp.GradScaler(\n    "cuda", 2.0,\r\n)\n'


def test_a_multi_line_call_in_a_block_keeps_its_indentation() -> None:
    source = (
        "import torch\n"
        "def make():\n"
        "    return torch.cuda.amp.GradScaler(\n"
        "        init_scale=2.0,\n"
        "        growth_interval=10,\n"
        "    )\n"
    )
    assert fixed(source) == (
        "import torch\n"
        "def make():\n"
        "    return torch.amp.GradScaler(\n"
        '        "cuda", init_scale=2.0,\n'
        "        growth_interval=10,\n"
        "    )\n"
    )


def test_a_form_feed_libcst_drops_gets_no_fix_rather_than_a_misplaced_one() -> None:
    """libcst's own text of `\\x0cs = ...` lacks the form feed, so its columns are one short
    on that line: the fix there is not offered; the next line's fix still is."""
    source = "import torch\n\x0cs = torch.cuda.amp.GradScaler(1.0)\nt = torch.cuda.amp.GradScaler(2.0)\n"
    found = check_source(source, "t.py", select=["AMP401"])
    assert [(d.span.line, d.fix is not None) for d in found] == [(2, False), (3, True)]
    assert fixed(source) == 'import torch\n\x0cs = torch.cuda.amp.GradScaler(1.0)\nt = torch.amp.GradScaler("cuda", 2.0)\n'


def test_the_text_report_shows_the_line_the_parser_means() -> None:
    """`str.splitlines` also breaks at U+2028 and form feeds; the parser does not."""
    source = 'import torch\nx = "\u2028"; s = torch.cuda.amp.GradScaler(1.0)\n'
    (d,) = check_source(source, "t.py", select=["AMP401"])
    text = output.format_text([d], {"t.py": source})
    assert '   2 | x = "\u2028"; s = torch.cuda.amp.GradScaler(1.0)' in text


# --- the one line counter itself ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text, lines",
    [
        ("", []),
        ("a", ["a"]),
        ("a\nb", ["a\n", "b"]),
        ("a\r\nb\rc\n", ["a\r\n", "b\r", "c\n"]),
        ("a\r\r\nb", ["a\r", "\r\n", "b"]),
        ("a\x0cb\x1c\u2028c\n", ["a\x0cb\x1c\u2028c\n"]),
    ],
)
def test_split_lines_breaks_where_libcst_does(text: str, lines: list[str]) -> None:
    assert split_lines(text) == lines


def test_line_index_offsets() -> None:
    index = LineIndex("ab\r\ncd\ref\n")
    assert [index.offset(line, 0) for line in (1, 2, 3, 4)] == [0, 4, 7, 10]
    assert index.offset(2, 1) == 5
    assert index.line_text(2) == "cd" and index.ending(2) == "\r" and index.ending(4) == ""


def test_a_legacy_name_split_over_lines_gets_no_fix_that_would_move_later_lines() -> None:
    """Written on one line, the new spelling moved every later line up by one: a logged
    `%(lineno)d` or a traceback then names another line (hostile pass 15)."""
    source = ("import torch\nm, x = torch.nn.Linear(4, 4), torch.randn(2, 4)\n"
              "with torch.cpu.amp \\\n        .autocast(dtype=torch.bfloat16):\n    y = m(x)\nprint(y.dtype)\n")
    assert fixed(source) == source


@pytest.mark.parametrize("call", (
    "with torch.cpu.amp.autocast \\\n        (dtype=torch.bfloat16):\n",
    "with torch.cpu.amp.autocast(\n        dtype=torch.bfloat16):\n",
))
def test_a_legacy_call_with_its_arguments_over_lines_is_fixed_line_for_line(call: str) -> None:
    source = "import torch\n" + call + "    pass\nprint(1)\n"
    after = fixed(source)
    assert after != source and after.count("\n") == source.count("\n")
    assert "torch.autocast" in after and "torch.cpu.amp" not in after
