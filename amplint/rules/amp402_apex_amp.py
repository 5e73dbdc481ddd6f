"""AMP402 apex-amp."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.names import dotted, module_name_of
from amplint.prefilter import Word
from amplint.rules._base import Rule


def _is_apex_amp(qualname: str | None) -> bool:
    return qualname is not None and (qualname == "apex.amp" or qualname.startswith("apex.amp."))


class ApexAmp(Rule):
    """
    ## What it does
    Flags every reference to NVIDIA apex's `amp` module: `from apex import amp`,
    `import apex.amp`, `from apex.amp import ...`, and each use such as
    `amp.initialize(...)`, `amp.scale_loss(...)`, `amp.master_params(...)` and
    `amp.state_dict()`, one finding per reference, whatever alias reaches them.
    Other apex packages (fused optimizers, `apex.normalization`) are not reported.

    ## Why is this bad?
    apex.amp is deprecated and unmaintained: NVIDIA points users to native
    `torch.amp` since PyTorch 1.6. Its O2/O3 modes keep fp16 models with hidden fp32
    master copies that native checkpoints, FSDP and `torch.compile` do not know
    about, and it no longer builds against current CUDA and PyTorch releases.

    ## Example
    ```python
    from apex import amp

    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
    ```

    Use instead:
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Runtime confirmation
    `amplint verify` reports whether `apex.amp` was imported during the run.
    """

    code = "AMP402"
    one_per_reference = True  # each reference (each operation) is its own finding
    name = "apex-amp"
    message = "`{ref}` uses NVIDIA apex amp, which is deprecated; use `torch.amp`"
    # Pre-filter: `apex` and `amp` as words (an import, a dotted name, or the package of a
    # relative import, which the pre-filter appends); `is_apex_available` is neither.
    requires_any = (Word("apex"),)
    and_requires_any = ((Word("amp"),),)

    def check(self) -> None:
        model = self.model
        for node, _scope in model.import_froms:
            module = module_name_of(node, model.imports.package)
            if module is None:
                continue
            if isinstance(node.names, cst.ImportStar):
                if _is_apex_amp(module):
                    self.report(node, ref=f"{module}.*")
                continue
            for alias in node.names:
                name = dotted(alias.name) or ""
                full = f"{module}.{name}"
                if _is_apex_amp(module) or _is_apex_amp(full):
                    self.report(alias, ref=full)
        called = {id(site.node.func) for site in model.calls}
        for ref in model.references:
            if ref.context == "import":
                if _is_apex_amp(ref.text):
                    self.report(ref.node, ref=ref.text)
                continue
            qual = model.imports.qualify_text(ref.text) or ""
            # A use is a member of apex.amp (`amp.initialize`, a called `scale_loss`); the
            # bare module name in `if amp is not None:` or `amp = None` is not one.
            # `amp.__dict__` / `amp.__version__` probe the module; they are not uses of apex amp.
            member = qual[len("apex.amp."):] if qual.startswith("apex.amp.") else ""
            if member and not member.startswith("__") and ("." in ref.text or id(ref.node) in called):
                self.report(ref.node, ref=ref.text)
