"""Standard output that cannot take a report: a full disk, a closed pipe.

`amplint rules > /dev/full` or `trace_summary prof | head` must end with one error line (or
quietly, for a reader that left), not a traceback, and the failed buffer must not be flushed
again when the interpreter exits. The CLI and `trace_summary` share these two pieces.
"""

from __future__ import annotations

import errno
import os
import sys

# The errors a write to a full or broken destination raises (other OSErrors are bugs).
_WRITE_FAILURES = frozenset({errno.ENOSPC, errno.EIO, errno.EBADF, errno.EDQUOT, errno.EFBIG})


def is_write_failure(exc: OSError) -> bool:
    return exc.errno in _WRITE_FAILURES


def quiet_stdout() -> None:
    """Point stdout at the null device: the failed buffer must not be flushed again at exit."""
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until the interpreter exits
    except OSError:
        pass
