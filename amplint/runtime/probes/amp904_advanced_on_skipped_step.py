"""AMP904 (runtime only): an LR scheduler or a weight average advanced on a step GradScaler skipped."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_site
from amplint.runtime.probes._base import Probe


class AdvancedOnSkippedStepProbe(Probe):
    """When GradScaler skips an optimizer's step (inf/NaN gradients), the weights do not move; a
    scheduler of that optimizer stepped before the optimizer's next real step advanced the
    schedule anyway (pytorch/pytorch#55585), and an AveragedModel updated then averaged weights
    that did not change.  Counted per call site; the skips before the scaler's first applied step
    are calibration (the scale coming down from init_scale) and kept apart.  A finding only where
    a later skip advanced something: a skip while calibrating is expected, in every fp16 run.
    A Python step counter (`global_step += 1`) is not seen: no hook reaches an int."""

    code = "AMP904"

    def install(self):
        self.applied: dict[int, bool] = {}  # scaler id -> some step of it ran
        # optimizer id -> the skip it is waiting to recover from: calibration?, the schedulers and
        # averages already counted for it
        self.pending: dict[int, dict] = {}
        self.sites: dict[tuple, dict] = {}
        yield self.on("scaler_step_post", self._scaler_step)
        yield self.on("opt_step_post", self._optimizer_step)
        yield self.on("lr_step", self._lr_step)
        yield self.on("average_update", self._average)

    def _scaler_step(self, scaler, optimizer, ran):
        if not torch_state.scaler_enabled(scaler):
            return
        if ran:
            self.applied[id(scaler)] = True
            self.pending.pop(id(optimizer), None)
            return
        calibration = not self.applied.get(id(scaler), False)
        self.pending[id(optimizer)] = {"calibration": calibration, "step": self.sink.step, "counted": set()}

    def _optimizer_step(self, optimizer, in_scaler_step):
        self.pending.pop(id(optimizer), None)

    def _lr_step(self, scheduler):
        optimizer = getattr(scheduler, "optimizer", None)
        skip = self.pending.get(id(optimizer)) if optimizer is not None else None
        if skip is not None:
            self._count(skip, scheduler, "lr_scheduler")

    def _average(self, averaged):
        for skip in self.pending.values():
            self._count(skip, averaged, "weight_average")
            break

    def _count(self, skip: dict, thing, kind: str) -> None:
        if id(thing) in skip["counted"]:
            return  # once per skipped step
        skip["counted"].add(id(thing))
        site = user_site(1)  # the user's line that stepped the scheduler (amplint and torch frames are skipped)
        key = (site.file, site.line) if site is not None else ("<unknown>", 0)
        entry = self.sites.setdefault(key, {"site": site, "kind": kind, "class": type(thing).__name__,
                                            "later": 0, "calibration": 0, "first_step": None})
        if skip["calibration"]:
            entry["calibration"] += 1
        else:
            entry["later"] += 1
            if entry["first_step"] is None:
                entry["first_step"] = skip["step"]

    def finish(self):
        for entry in self.sites.values():
            if not entry["later"]:
                continue  # only calibration skips: expected
            what = "LR scheduler" if entry["kind"] == "lr_scheduler" else "weight average"
            ev = {
                "advanced": entry["kind"],
                "class": entry["class"],
                "advanced_on_skipped_steps": entry["later"],
                "during_calibration": entry["calibration"],
                "first_skipped_step": entry["first_step"],
                "summary": (f"{what} `{entry['class']}` advanced on {entry['later']} step(s) GradScaler skipped"
                            + (f" (and {entry['calibration']} while the scale calibrated, expected)" if entry["calibration"] else "")),
            }
            self.sink.record_site(self.code, entry["site"], ev)


PROBE = AdvancedOnSkippedStepProbe
