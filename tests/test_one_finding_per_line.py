"""One diagnostic per (path, line, code), with every reason in it (issue 27: duplicates)."""

from __future__ import annotations

import textwrap

from amplint.diagnostics import Diagnostic, Span
from amplint.engine import check_source, merge_same_line

TWO_CLIPS_ON_ONE_LINE = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(a.parameters(), 1.0); torch.nn.utils.clip_grad_value_(b.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""


def test_two_findings_of_one_rule_on_one_line_are_one_diagnostic_with_both_reasons() -> None:
    found = check_source(textwrap.dedent(TWO_CLIPS_ON_ONE_LINE), "t.py", select=["AMP101"])
    assert [(d.span.line, d.code) for d in found] == [(8, "AMP101")]
    assert "clip_grad_norm_" in found[0].message and "clip_grad_value_" in found[0].message
    assert found[0].span.col0 == 4  # the leftmost one is where it points


def test_merging_keeps_notes_related_and_a_fix_and_leaves_other_lines_and_codes_apart() -> None:
    def d(code, line, col, message, notes=()):
        return Diagnostic(code, message, "t.py", Span(line, col, line, col + 1), None, notes)

    merged = merge_same_line([
        d("AMP103", 3, 4, "first reason", ("n1",)),
        d("AMP103", 3, 8, "second reason", ("n1", "n2")),
        d("AMP103", 3, 9, "first reason"),
        d("AMP104", 3, 4, "other code"),
        d("AMP103", 4, 4, "other line"),
    ])
    assert [(m.code, m.span.line, m.message) for m in merged] == [
        ("AMP103", 3, "first reason; also: second reason"),
        ("AMP104", 3, "other code"),
        ("AMP103", 4, "other line"),
    ]
    assert merged[0].notes == ("n1", "n2")


def test_a_rule_that_reports_each_reference_keeps_one_diagnostic_per_position() -> None:
    src = "from torch.cuda.amp import GradScaler, autocast\n"
    found = check_source(src, "t.py", select=["AMP401"])
    assert [(d.span.line, d.span.col0) for d in found] == [(1, 27), (1, 39)]
