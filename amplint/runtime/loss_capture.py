"""Record the training loss of every iteration without touching the script (used by `amplint compare`).

Where the loss is read: at `GradScaler.scale(loss)` (its input, i.e. the unscaled value) and at
`torch.autograd.backward` (which `Tensor.backward` calls) for a loss that did not pass through a
scaler. A tensor returned by `scale()` is remembered so its backward is not counted twice; with a
disabled scaler `scale()` returns the loss itself, which the same check covers. Only one-element
tensors count: a backward with an explicit `gradient` is not a loss. A loss that only ever goes
through `torch.autograd.grad` (no backward, no scaler) is not seen.

What one point of the curve is: the sum of the losses back-propagated between two iteration
boundaries, i.e. the objective whose gradient the optimizer step applied (with gradient accumulation
of `loss / k` it is the batch loss). An iteration boundary is a `GradScaler.step()` call, stepped or
skipped, or an `optimizer.step()` outside one. Skipped steps must count: an fp16 run skips its first
steps while the scale calibrates, and the fp32 run does not, so counting only real optimizer steps
(the global step hook is silent on a skip) would shift one curve against the other. Two optimizers
stepped in one iteration (GANs) give two points per iteration, the same way in every run.

Output: with `AMPLINT_LOSS_DIR` set, each process appends one JSON line per iteration to
`loss-<rank>-<pid>.jsonl` there (rank from `RANK`, else 0), so a run cut short still leaves its points.
Each point is one `.item()`, a device sync per iteration on GPU: fine for a comparison run, and the
reason this is not part of plain `verify`. `AMPLINT_SEED` (set by compare) seeds torch, random and
numpy at install so that scripts that never seed still give the same data in every run.

Replay (compare's noise runs): with `AMPLINT_REPLAY_SKIPS` set to iteration indices ("0,1,2,7"), the
`GradScaler.step` of those iterations applies no update, exactly as GradScaler's own skip would: the
optimizer's `step` is not called (its state, momentum and step count stay as they were), the
iteration is recorded as skipped, and everything else (`update()`, schedulers, the data loader)
runs as written.  An fp32 run replaying a mixed run's skips sees the same batch after j updates as
the mixed run does, so their difference is down to precision.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import random
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from amplint.runtime.fp32_mode import Handles, Patch

LOSS_DIR_ENV = "AMPLINT_LOSS_DIR"
SEED_ENV = "AMPLINT_SEED"
REPLAY_ENV = "AMPLINT_REPLAY_SKIPS"


class _Hook:
    """Adapts a torch hook handle (or any callable) to the `.remove()` protocol."""

    def __init__(self, remove: Callable[[], None]) -> None:
        self._remove: Callable[[], None] | None = remove

    def remove(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None


class StepBoundaries:
    """Calls `callback()` once per iteration boundary (see module docstring).

    NB: the boundary fires from a `finally`, so it is seen even when a step hook of someone else
    (the verify step budget) raises inside `scaler.step()`.
    """

    def __init__(self, callback: Callable[[bool], None], replay: Callable[[], bool] | None = None) -> None:
        self.callback = callback  # callback(skipped): skipped is True when GradScaler skipped the step
        self.replay = replay  # replay(): True when this scaler step must be skipped (see module docstring)
        self._inside_scaler = threading.local()

    def install(self) -> Handles:
        handles = Handles()
        boundaries = self

        def make_step(original: Callable) -> Callable:
            def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
                tl = boundaries._inside_scaler
                depth = getattr(tl, "depth", 0)
                tl.depth, tl.stepped = depth + 1, False
                raised = False
                try:
                    if depth == 0 and boundaries.replay is not None and boundaries.replay():
                        return _without_step(original, scaler, optimizer, *args, **kwargs)
                    return original(scaler, optimizer, *args, **kwargs)
                except BaseException:
                    raised = True  # e.g. the step budget: not a skip
                    raise
                finally:
                    tl.depth = depth
                    if depth == 0:
                        boundaries.callback(not tl.stepped and not raised)

            return step

        def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            if getattr(boundaries._inside_scaler, "depth", 0):
                boundaries._inside_scaler.stepped = True
            else:
                boundaries.callback(False)

        handles.append(Patch(torch.amp.GradScaler, "step", make_step))
        hook = register_optimizer_step_post_hook(post_hook)
        handles.append(_Hook(hook.remove))
        return handles


def _without_step(original: Callable, scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
    """`scaler.step(optimizer)` whose `optimizer.step` does nothing: a replayed GradScaler skip.

    The scaler's own `step` still runs (verify's step budget counts it, as it counts a real skip);
    only the optimizer's update is withheld.  NB: `optimizer.step` may already be an instance
    attribute (LR schedulers wrap it there): it is put back as it was, not deleted."""
    own = optimizer.__dict__.get("step", _MISSING)
    optimizer.step = lambda *a, **k: None
    try:
        original(scaler, optimizer, *args, **kwargs)
        return None
    finally:
        if own is _MISSING:
            del optimizer.step
        else:
            optimizer.step = own


_MISSING = object()


def _loss_value(obj: Any) -> torch.Tensor | None:
    """The detached fp32 sum of a loss (a tensor or an iterable of tensors), None if not a loss.

    A loss of several elements (`scaler.scale(per_head_losses).backward(torch.ones(2))`) counts
    as its sum, the objective of a backward with unit weights: compare then has a curve, where
    it said only "the fp32 reference run recorded no loss" (hostile pass 23)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().float().sum() if obj.numel() >= 1 and obj.is_floating_point() else None
    if isinstance(obj, (list, tuple)):
        parts = [v for v in (_loss_value(o) for o in obj) if v is not None]
        return torch.stack([p.to(parts[0].device) for p in parts]).sum() if parts else None
    return None


class LossCapture:
    """In-memory series of per-iteration losses, optionally streamed to a JSONL file."""

    def __init__(self, out_dir: str | os.PathLike | None = None, sink: Any = None,
                 replay_skips: "set[int] | frozenset[int]" = frozenset()) -> None:
        self.series: list[float] = []
        self.replay_skips = frozenset(replay_skips)  # iterations whose update is withheld (module docstring)
        self.complete: list[bool] = []
        self.skipped: list[int] = []  # iterations whose optimizer step GradScaler skipped
        self._pending: list[torch.Tensor] = []
        self._scaled: dict[int, weakref.ref] = {}
        self._handles = Handles()
        self._lock = threading.Lock()
        self.path: Path | None = None
        self._out_dir = out_dir
        self._pid = os.getpid()  # the process whose losses these are (see _start_afresh)
        self._stream_pending = False  # a forked child opens its own stream at its first loss
        if sink is not None and hasattr(sink, "put"):
            # the same lists, filled as the run goes: the bootstrap writes them with the evidence
            sink.put("losses", self._lists(), on_fork=self._start_afresh)
        elif sink is not None and hasattr(sink, "on_fork"):
            sink.on_fork(self._start_afresh)
        self._open_stream()

    def _lists(self) -> dict[str, list]:
        return {"losses": self.series, "complete": self.complete, "skipped": self.skipped}

    def _open_stream(self) -> None:
        if self._out_dir:
            rank = os.environ.get("RANK", "0")
            self.path = Path(self._out_dir) / f"loss-{rank}-{os.getpid()}.jsonl"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._write({"meta": {"pid": os.getpid(), "rank": int(rank) if rank.isdigit() else rank}})

    def _start_afresh(self) -> dict[str, list]:
        """In a forked child: its own series, from its own first loss.

        A Hogwild trainer forked by `torch.multiprocessing` records its losses as a spawned one
        does; a DataLoader worker never reaches a step boundary, so its series stays empty and its
        stream file is never opened.
        """
        self.series, self.complete, self.skipped = [], [], []
        self._pending, self._scaled = [], {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.path = None
        self._stream_pending = True
        return self._lists()

    # -- recording ------------------------------------------------------------------------------
    def _record(self, loss: Any) -> None:
        value = _loss_value(loss)
        if value is not None:
            with self._lock:
                self._pending.append(value)

    def _is_scaled_output(self, tensor: Any) -> bool:
        ref = self._scaled.get(id(tensor))
        return ref is not None and ref() is tensor

    def boundary(self, skipped: bool = False, complete: bool = True) -> None:
        if os.getpid() != self._pid:
            return
        with self._lock:
            pending, self._pending = self._pending, []
            self._scaled.clear()
        if not pending:
            return  # an optimizer step with no loss seen (e.g. a second optimizer sharing it)
        total = sum(float(p.item()) for p in pending)
        if self._stream_pending:
            self._stream_pending = False
            self._open_stream()
        self.series.append(total)
        self.complete.append(complete)
        if skipped:
            self.skipped.append(len(self.series) - 1)
        self._write({"step": len(self.series) - 1, "loss": total if math.isfinite(total) else repr(total),
                     "parts": len(pending), "complete": complete, "skipped": skipped})

    def _replays_skip(self) -> bool:
        """The iteration ending now is one whose update the replayed run skipped."""
        with self._lock:
            pending = bool(self._pending)
        return pending and len(self.series) in self.replay_skips

    def _write(self, record: dict) -> None:
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    # -- installation ---------------------------------------------------------------------------
    def install(self) -> "LossCapture":
        capture = self

        def make_scale(original: Callable) -> Callable:
            def scale(scaler: Any, outputs: Any) -> Any:
                capture._record(outputs)
                result = original(scaler, outputs)
                for out in result if isinstance(result, (list, tuple)) else (result,):
                    if isinstance(out, torch.Tensor):
                        capture._scaled[id(out)] = weakref.ref(out)
                return result

            return scale

        def make_backward(original: Callable) -> Callable:
            def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
                first = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
                if not capture._is_scaled_output(first):
                    grad = args[0] if args else kwargs.get("grad_tensors")
                    if grad is None:
                        capture._record(tensors)
                return original(tensors, *args, **kwargs)

            return backward

        try:
            self._handles.append(Patch(torch.amp.GradScaler, "scale", make_scale))
            self._handles.append(Patch(torch.autograd, "backward", make_backward))
            replay = self._replays_skip if self.replay_skips else None
            self._handles.extend(StepBoundaries(self.boundary, replay).install())
        except BaseException:
            self._handles.close()
            raise
        atexit.register(self.remove)
        return self

    def remove(self) -> None:
        """Remove the patches; losses seen after the last step become a last, incomplete point."""
        if self._handles:
            self._handles.close()
            self.boundary(complete=False)
            atexit.unregister(self.remove)


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy  # noqa: PLC0415  (optional)

        numpy.random.seed(seed)
    except ImportError:
        pass


def install(sink: Any = None) -> LossCapture:
    """Extension entry point: capture losses into `$AMPLINT_LOSS_DIR` (see module docstring)."""
    seed = os.environ.get(SEED_ENV)
    if seed is not None:
        _seed_everything(int(seed))
    replay = {int(k) for k in os.environ.get(REPLAY_ENV, "").split(",") if k.strip().isdigit()}
    return LossCapture(os.environ.get(LOSS_DIR_ENV), sink, replay_skips=replay).install()


def read_series(out_dir: str | os.PathLike) -> dict[str, Any]:
    """The loss series of the lowest rank found in `out_dir` (what `compare` plots).

    Returns {"losses": [...], "complete": [...], "skipped": [...], "files": [...]}; non-finite values come back as
    float("nan") / float("inf").
    """
    files = sorted(Path(out_dir).glob("loss-*.jsonl"))
    runs = []
    for path in files:
        meta: dict = {}
        losses, complete, skipped = [], [], []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if "meta" in record:
                meta = record["meta"]
            else:
                losses.append(float(record["loss"]))
                complete.append(bool(record.get("complete", True)))
                if record.get("skipped"):
                    skipped.append(len(losses) - 1)
        runs.append((meta.get("rank", 0), meta.get("pid", 0), losses, complete, path, skipped))
    # NB: a launcher may start Python processes that never train (torchrun's agent, the
    # `accelerate` CLI itself): they leave an empty file; prefer the lowest rank that has losses.
    runs.sort(key=lambda r: (not r[2], str(r[0]), r[1]))
    if not runs:
        return {"losses": [], "complete": [], "skipped": [], "files": []}
    rank, pid, losses, complete, path, skipped = runs[0]
    return {"losses": losses, "complete": complete, "skipped": skipped, "files": [str(r[4]) for r in runs],
            "rank": rank}
