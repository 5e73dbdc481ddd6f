"""AMP001 unused-noqa."""

from __future__ import annotations

from amplint.diagnostics import Applicability
from amplint.rules._base import FixAvailability, Rule


class UnusedNoqa(Rule):
    """
    ## What it does
    Flags a `# noqa: AMPnnn` comment whose amplint codes suppress nothing on its line:
    the rule did not fire there (unused), is not enabled for the file (non-enabled), or
    does not exist (unknown). Codes of other tools (`E501`, `F401`) and a bare `# noqa`
    are left alone: amplint cannot tell whether they are still needed.

    ## Why is this bad?
    A stale suppression hides the next real finding on that line: after a refactor the
    `# noqa: AMP101` that once silenced a deliberate clip now silences whatever clipping
    bug is written there later. Ruff's RUF100 and mypy's `warn_unused_ignores` exist for
    the same reason.

    ## Example
    ```python
    scaler = torch.amp.GradScaler("cuda")  # noqa: AMP401
    ```

    Use instead:
    ```python
    scaler = torch.amp.GradScaler("cuda")
    ```

    ## Fix safety
    Safe: only codes that suppress nothing are removed (the whole comment when none is
    left; a comment that had a line of its own leaves the line empty, so that no line
    number moves: they show in log records and tracebacks; a comment after it, such as
    `# type: ignore`, stays as it was); what is reported does not change.

    ## How it is checked
    AMP001 is a meta rule, in the AMP0xx group of rules about amplint's own comments.
    It needs every other rule's findings, so the engine computes it after suppression
    (`amplint/unused_noqa.py`) instead of a query over the model. Opt-in, like RUF100:
    select it (`--extend-select AMP001`) where every noqa comment is amplint's to judge.
    A `# noqa: AMP001` on the same comment keeps it.
    """

    code = "AMP001"
    name = "unused-noqa"
    message = "Unused `noqa` directive ({detail})"
    fix_title = "Remove unused `noqa` directive"
    fix_availability = FixAvailability.ALWAYS
    safety = Applicability.SAFE
    default_enabled = False
    requires_any = ("noqa",)

    def check(self) -> None:
        """Nothing to query: `amplint.unused_noqa.findings` does the work after suppression."""
