"""AMP401 precision: a deprecated torch.cuda.amp spelling that only runs when the modern one
is missing (an older torch) is a compatibility fallback, not a deprecated use on new torch."""

from __future__ import annotations

import textwrap

import pytest

from amplint.engine import check_source


def _lines(source: str) -> list[int]:
    return [d.span.line for d in check_source(textwrap.dedent(source).lstrip("\n"), "<string>", select=["AMP401"])]


FALLBACKS = [
    "try:\n    from torch.amp import GradScaler\nexcept (ImportError, AttributeError, TypeError):\n    from torch.cuda.amp import GradScaler",
    "try:\n    from torch.amp import GradScaler as S\nexcept ImportError:\n    from torch.cuda.amp import GradScaler as S",
    "try:\n    from torch.amp import autocast\nexcept Exception:\n    from torch.cuda.amp import autocast",
    "try:\n    from torch.amp import autocast\nexcept:\n    from torch.cuda.amp import autocast",
    "try:\n    try:\n        from torch.amp import custom_fwd\n    except ImportError:\n        from torch.cuda.amp import custom_fwd\n"
    "except Exception:\n    custom_fwd = None",
    "try:\n    S = torch.amp.GradScaler\nexcept AttributeError:\n    S = torch.cuda.amp.GradScaler",
]

NOT_FALLBACKS = [
    # the deprecated spelling is tried first: it is what runs on a new torch
    ("try:\n    from torch.cuda.amp import GradScaler\nexcept ImportError:\n    from torch.amp import GradScaler", [3]),
    # an except that an older torch's missing symbol would not raise
    ("try:\n    from torch.amp import GradScaler\nexcept ValueError:\n    from torch.cuda.amp import GradScaler", [5]),
    # the try is about something else
    ("try:\n    import apex\nexcept ImportError:\n    from torch.cuda.amp import GradScaler", [5]),
]


@pytest.mark.parametrize("source", FALLBACKS)
def test_a_fallback_for_an_older_torch_is_not_reported(source) -> None:
    assert _lines("import torch\n" + source + "\n") == []


@pytest.mark.parametrize("source, lines", NOT_FALLBACKS)
def test_a_deprecated_spelling_that_runs_on_new_torch_is_reported(source, lines) -> None:
    assert _lines("import torch\n" + source + "\n") == lines
