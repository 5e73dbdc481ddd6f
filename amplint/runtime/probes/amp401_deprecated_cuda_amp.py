"""AMP401 probe: torch's own FutureWarning for a deprecated AMP API, at the user's line."""

from __future__ import annotations

import os

from amplint.runtime.attribution import is_user_file
from amplint.runtime.probes._base import Probe


class DeprecatedCudaAmpProbe(Probe):
    """torch emits the FutureWarning with the user's file and line (typing_extensions.deprecated
    with the right stacklevel); every shown warning that names `torch.cuda.amp`/`torch.cpu.amp`
    is recorded there.  The script's own warning filters still apply (an ignored warning is
    not seen)."""

    code = "AMP401"

    def install(self):
        yield self.on("warning", self._warning)

    def _warning(self, message, category, filename, lineno):
        if not issubclass(category, FutureWarning):
            return
        text = str(message)
        if "torch.cuda.amp" not in text and "torch.cpu.amp" not in text:
            return
        if not is_user_file(filename):
            return
        self.sink.record(self.code, os.path.realpath(filename), lineno, {"category": category.__name__, "warning": text[:200]})


PROBE = DeprecatedCudaAmpProbe
