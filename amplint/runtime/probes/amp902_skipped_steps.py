"""AMP902 (runtime only): GradScaler skipped steps and scale history; a scale below 1 is a finding."""

from __future__ import annotations

from amplint.runtime import torch_state
from amplint.runtime.probes._base import Probe

_HISTORY = 1024


class SkippedStepsProbe(Probe):
    """Counts scaler.step calls whose optimizer step did not run (the global post-hook is not fired
    on a skip: no sync needed); leading skips while the scale comes down from init_scale are
    calibration and not counted.  It keeps the scale after each update as a device tensor (read once
    at the end).  Finding: the scale fell below 1, or at least 3 steps were skipped and they are at
    least half of all steps (calibration skips at the start of fp16 training are normal)."""

    code = "AMP902"

    def install(self):
        self.stats: dict[int, dict] = {}
        self.history: dict[int, list] = {}
        self.sink.on_fork(self._start_afresh)
        yield self.on("scaler_step_post", self._step)
        yield self.on("update_post", self._update)

    def _start_afresh(self) -> None:
        """A forked trainer counts its own steps, not its parent's."""
        self.stats.clear()
        self.history.clear()

    def _step(self, scaler, opt, ran):
        if not torch_state.scaler_enabled(scaler):
            return
        s = self.stats.setdefault(id(scaler), {"steps": 0, "skipped": 0, "calibration": 0, "first_skip_step": None, "applied": False})
        s["steps"] += 1
        if ran:
            s["applied"] = True
        elif not s["applied"]:
            s["calibration"] += 1  # leading skips: the scale coming down from init_scale, normal
        else:
            s["skipped"] += 1
            if s["first_skip_step"] is None:
                s["first_skip_step"] = self.sink.step
        self.sink.put("amp902", {str(k): {"steps": v["steps"], "skipped": v["skipped"]} for k, v in self.stats.items()})

    def _update(self, scaler):
        t = torch_state.scale_tensor(scaler)
        if t is None or not torch_state.scaler_enabled(scaler):
            return
        h = self.history.setdefault(id(scaler), [])
        if len(h) >= _HISTORY:
            del h[len(h) // 2]  # keep the start and the most recent values
        h.append(t.detach().clone())  # NB: a device copy, no sync; read at the end

    def finish(self):
        for k, s in self.stats.items():
            values = [float(t) for t in self.history.get(k, [])]
            low = min(values) if values else None
            collapsed = low is not None and low < 1.0
            after = s["steps"] - s["calibration"]
            many = s["skipped"] >= 3 and s["skipped"] * 2 >= after
            if not (collapsed or many):
                continue
            ev = {
                "steps": s["steps"],
                "skipped": s["skipped"],
                "calibration_skips": s["calibration"],
                "first_skip_step": s["first_skip_step"],
                "min_scale": low,
                "final_scale": values[-1] if values else None,
                "scale_history": _compact(values),
            }
            site = self.state.site.get(k)
            msg = "loss scale fell below 1" if collapsed else f"GradScaler skipped {s['skipped']} of {s['steps']} steps"
            ev["summary"] = msg
            self.sink.record_site(self.code, site, ev)


def _compact(values: list[float]) -> list[float]:
    """The history with runs of equal values collapsed (at most 32 entries)."""
    out: list[float] = []
    for v in values:
        if not out or out[-1] != v:
            out.append(v)
    return out[:16] + out[-16:] if len(out) > 32 else out


PROBE = SkippedStepsProbe
