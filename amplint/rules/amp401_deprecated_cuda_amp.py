"""AMP401 deprecated-cuda-amp."""

from __future__ import annotations

from amplint.diagnostics import Applicability
from amplint.prefilter import Word
from amplint.rules._base import FixAvailability, Rule


class DeprecatedCudaAmp(Rule):
    """
    ## What it does
    Flags every reference to `torch.cuda.amp.autocast`, `torch.cuda.amp.GradScaler`,
    `torch.cuda.amp.custom_fwd`, `torch.cuda.amp.custom_bwd`, `torch.cpu.amp.autocast`
    and `torch.cpu.amp.GradScaler`: imports, calls, decorators, assignments and
    arguments, one finding per reference, whatever alias reaches them.

    ## Why is this bad?
    These spellings have emitted a `FutureWarning` on every call since PyTorch 2.4 and
    will be removed. The device-generic replacements (`torch.autocast(device_type)`,
    `torch.amp.GradScaler(device)`, `torch.amp.custom_fwd(device_type=...)`) behave the
    same and work on every backend.

    ## Example
    ```python
    import torch

    scaler = torch.cuda.amp.GradScaler()
    with torch.cuda.amp.autocast():
        loss = model(x)
    ```

    Use instead:
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = model(x)
    ```

    ## Fix safety
    Safe: every argument is kept (legacy positional `autocast(enabled, dtype)`
    arguments become keywords), the device the old API implied is passed explicitly,
    and `from torch.cuda.amp import autocast` becomes `from torch.amp import autocast`
    together with all of its uses, so no name is left unbound or unused. References
    that have no drop-in modern spelling (a bare `torch.cuda.amp.autocast` stored in
    a variable) are reported without a fix.

    ## Runtime confirmation
    `amplint verify` records the FutureWarning PyTorch raises at that line.

    ## References
    - PyTorch AMP docs, "torch.cuda.amp.autocast(args...) is deprecated"
    """

    code = "AMP401"
    name = "deprecated-cuda-amp"
    message = "`{old}` is deprecated since PyTorch 2.4"
    fix_title = "Use `{new}`"
    fix_availability = FixAvailability.SOMETIMES
    safety = Applicability.SAFE
    # Pre-filter: every DEPRECATIONS name ends in one of these words and has `amp` and
    # `cuda`/`cpu` components (in the text, or in the package of a relative import).
    # NB: never `cuda.amp`: `torch.cuda .amp` and `import torch.cuda as c; c.amp` are legal.
    requires_any = ("autocast", "GradScaler", "custom_fwd", "custom_bwd")
    # (whole words: a qualified name's parts, not `example`, `clamp` or `timestamp`)
    and_requires_any = ((Word("amp"),), (Word("cuda"), Word("cpu")))

    def check(self) -> None:
        for ref in self.model.deprecations.references:
            dep = ref.deprecation
            new = f'{dep.new}("{dep.device}")' if dep.device_argument == "positional" else f'{dep.new}(device_type="{dep.device}")'
            self.report(ref.node, changes=ref.changes, old=dep.old, new=new)
