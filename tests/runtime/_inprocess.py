"""Run a training script inside the test process under compare/profile installers (fast: no torch import
per run). The CLI tests run the same installers through the real launcher."""

from __future__ import annotations

import runpy
from pathlib import Path

from amplint.runtime import fp32_mode
from amplint.runtime.loss_capture import LossCapture, StepBoundaries

SCRIPTS = Path(__file__).resolve().parent / "scripts"


class _Enough(Exception):
    pass


def run_script(name: str, *, mode: str = "as_written", steps: int | None = None, extra=(), replay=()) -> LossCapture:
    """Run tests/runtime/scripts/<name>.py; mode fp32 | bf16 | as_written; stop after `steps` iterations;
    `replay`: iterations whose GradScaler step applies no update (compare's noise run)."""
    handles = fp32_mode.Handles()
    if mode == "fp32":
        handles.extend(fp32_mode.install())
    elif mode == "bf16":
        handles.extend(fp32_mode.install_bf16())
    for h in extra:
        handles.append(h)
    capture = LossCapture(replay_skips=set(replay)).install()
    seen = [0]

    def budget(skipped: bool) -> None:
        seen[0] += 1
        if steps is not None and seen[0] >= steps:
            raise _Enough

    # installed last, so it runs after the capture's own boundary bookkeeping
    stopper = StepBoundaries(budget).install()
    try:
        runpy.run_path(str(SCRIPTS / f"{name}.py"), run_name="__main__")
    except _Enough:
        pass
    finally:
        stopper.remove()
        capture.remove()
        handles.remove()
    return capture
