"""`amplint verify --profile DIR`: torch.profiler over a window of training steps, no code change.

The bootstrap calls `install(sink)` in every instrumented process (extension
`amplint.runtime.profiling:install`, enabled through `verify_env(DIR)`). It starts a
`torch.profiler.profile` with a wait/warmup/active schedule that is advanced once per iteration from
the optimizer step hook (a GradScaler step that was skipped still ends an iteration, see
`loss_capture.StepBoundaries`), `record_shapes=True` (the op input dtypes are the evidence of
reduced precision) and `profile_memory=True`, and writes each window with
`tensorboard_trace_handler(DIR)`: `<worker>.<ns>.pt.trace.json`, which opens in Perfetto,
chrome://tracing, HTA and (legacy) torch-tb-profiler. `trace_summary` reads it back.

Schedule: `AMPLINT_PROFILE_SCHEDULE=wait,warmup,active` (default 1,1,3; one window). When verify's
step budget (`AMPLINT_STEPS`) is shorter than the window, wait and then warmup shrink so that at
least one step is recorded. If the run ends inside the active window, the partial window is written
when the profiler is stopped at exit.

NB: a forked child (DataLoader worker) inherits the profiler object but never drives or stops it:
only the process that installed it does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from amplint.runtime.loss_capture import StepBoundaries

DIR_ENV = "AMPLINT_PROFILE_DIR"
SCHEDULE_ENV = "AMPLINT_PROFILE_SCHEDULE"
DEFAULT_SCHEDULE = (1, 1, 3)
EXTENSION = "amplint.runtime.profiling:install"


def verify_env(directory: str | os.PathLike) -> dict[str, str]:
    """Environment that turns profiling on in every process of a verify run (see cli.py)."""
    existing = [s for s in os.environ.get("AMPLINT_EXTENSIONS", "").split(",") if s.strip()]
    return {
        "AMPLINT_EXTENSIONS": ",".join([*(s for s in existing if s != EXTENSION), EXTENSION]),
        DIR_ENV: str(Path(directory).resolve()),
    }


def window(steps: int | None, spec: str | None = None) -> tuple[int, int, int]:
    """(wait, warmup, active) for a run of `steps` steps (None: unknown)."""
    wait, warmup, active = DEFAULT_SCHEDULE
    if spec:
        wait, warmup, active = (max(0, int(v)) for v in spec.split(","))
        active = max(1, active)
    if steps is not None and steps < wait + warmup + active:
        # keep the active window as long as possible; drop wait first, then warmup
        wait = max(0, min(wait, steps - warmup - active))
        warmup = max(0, min(warmup, steps - active))
        active = max(1, min(active, steps - warmup))
    return wait, warmup, active


def _worker_name() -> str:
    for var in ("RANK", "LOCAL_RANK"):
        if os.environ.get(var, "").isdigit():
            return f"rank{os.environ[var]}_{os.getpid()}"
    return f"main_{os.getpid()}"


class StepProfiler:
    """A torch.profiler session stepped at iteration boundaries; `remove()` stops it and writes."""

    def __init__(self, directory: str | os.PathLike, schedule: tuple[int, int, int]) -> None:
        from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler
        from torch.profiler import schedule as make_schedule

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.schedule = schedule
        self.pid = os.getpid()
        from amplint.runtime import torch_state

        activities = [ProfilerActivity.CPU]
        # NB: not torch.cuda.is_available(): under --device cpu that says yes, and a CUDA activity on
        # a CPU-only build fails every event ("Failed to record CUDA event", a stack trace each).
        if torch_state.cuda_really_available():
            activities.append(ProfilerActivity.CUDA)
        wait, warmup, active = schedule
        self.profiler = profile(
            activities=activities,
            schedule=make_schedule(wait=wait, warmup=warmup, active=active, repeat=1),
            on_trace_ready=tensorboard_trace_handler(str(self.directory), worker_name=_worker_name()),
            record_shapes=True,
            profile_memory=True,
            with_stack=False,  # stacks cost a lot and the summary does not need them
        )
        self.steps = 0
        self._boundaries = StepBoundaries(self._step).install()
        self._running = False

    def start(self) -> "StepProfiler":
        self.profiler.start()
        self._running = True
        return self

    def _step(self, skipped: bool = False) -> None:
        if self._running and os.getpid() == self.pid:
            self.steps += 1
            self.profiler.step()

    def remove(self) -> None:
        self._boundaries.remove()
        if self._running and os.getpid() == self.pid:
            self._running = False
            self.profiler.stop()  # writes the trace if the active window was still open


def install(sink: Any = None) -> StepProfiler | None:
    """Extension entry point: profile this process into `$AMPLINT_PROFILE_DIR`."""
    directory = os.environ.get(DIR_ENV)
    if not directory:
        return None
    steps = os.environ.get("AMPLINT_STEPS")
    sched = window(int(steps) if steps else None, os.environ.get(SCHEDULE_ENV))
    prof = StepProfiler(directory, sched).start()
    if sink is not None and hasattr(sink, "put"):
        sink.put("profile", {"dir": str(prof.directory), "schedule": list(sched)})
    return prof
