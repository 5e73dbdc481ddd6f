"""AMP106 probe: a torch.save payload with model/optimizer state but no scaler state."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from amplint.runtime import torch_state
from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe

_SCALER_KEYS = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}


def _kinds(obj, depth: int = 0, out: set | None = None, keys: list | None = None) -> set:
    out = set() if out is None else out
    if depth > 4:
        return out
    if isinstance(obj, torch_state.BaseGradScaler):
        out.add("scaler")
    elif isinstance(obj, torch.nn.Module):
        out.add("model")
    elif isinstance(obj, torch.optim.Optimizer):
        out.add("optimizer")
    elif isinstance(obj, Mapping):
        ks = set(obj.keys()) if len(obj) < 10_000 else set()
        if {"state", "param_groups"} <= ks:
            out.add("optimizer")
        elif ks and _SCALER_KEYS & ks >= {"scale", "_growth_tracker"}:
            out.add("scaler")
        elif obj and all(isinstance(v, torch.Tensor) for v in list(obj.values())[:50]) and all(isinstance(k, str) for k in list(obj)[:50]):
            out.add("model")
        else:
            for k, v in list(obj.items())[:200]:
                if keys is not None and depth == 0:
                    keys.append(str(k))
                _kinds(v, depth + 1, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj[:200]:
            _kinds(v, depth + 1, out)
    return out


def _is_weights_export(obj) -> bool:
    """A bare module or `model.state_dict()`: weights to deploy, not a checkpoint to resume from."""
    if isinstance(obj, torch.nn.Module):
        return True
    return isinstance(obj, Mapping) and bool(obj) and all(isinstance(v, torch.Tensor) for v in list(obj.values())[:50])


class ScalerNotCheckpointedProbe(Probe):
    """At torch.save: the payload holds model or optimizer state and no scaler state while an
    enabled scaler is live.  Evidence: what the payload holds, its top-level keys, the scale."""

    code = "AMP106"

    def install(self):
        self.opt_loads: list = []
        self.scaler_loaded = False
        # Saves are judged per checkpoint, not per call: the scaler often gets a file of its own
        # written next to the optimizer's, between the same two optimizer steps.
        self.pending_saves: list = []  # (step, stack, evidence)
        self.scaler_saved_at: set[int] = set()
        self._judging = None  # the pending entry of the torch.save call in progress
        yield self.on("save", self._save)
        yield self.on("load_state", self._load)
        yield self.on("raised", self._raised)

    def _raised(self, api, exc):
        if api == "torch.save" and self._judging is not None and self._judging in self.pending_saves:
            self.pending_saves.remove(self._judging)  # that checkpoint was never written: nothing to judge

    def _load(self, obj):
        if isinstance(obj, torch_state.BaseGradScaler):
            self.scaler_loaded = True
        elif isinstance(obj, torch.optim.Optimizer) and len(self.opt_loads) < 8:
            # A resume often comes before the scaler exists (a training engine builds its own
            # scaler after the entry has restored model and optimizer): kept with the count of
            # enabled scalers built so far, and judged at the end if one was live then or built later.
            self.opt_loads.append((self.sink.step, user_stack(1), bool(self.state.enabled_scalers()), self._enabled_built()))

    def _enabled_built(self) -> int:
        return self.state.facts.scalers["enabled"]

    def finish(self):
        """A resume that restores the optimizer but never the scaler, in a run whose enabled scaler
        was live at the load or built after it: the scale restarts at init_scale."""
        # NB: after an error or a signal, the checkpoint (or resume) in flight at the last step may
        # have been cut short before its scaler part: only earlier steps are judged then.
        last = self.sink.step if self.ended_abnormally else None
        for step, stack, evidence in self.pending_saves:
            if step not in self.scaler_saved_at and step != last:
                self.sink.record_site(self.code, stack[0] if stack else None, evidence, stack=stack)
        if self.scaler_loaded:
            return
        built = self._enabled_built()
        for step, stack, live, built_before in self.opt_loads:
            if step == last or not (live or built > built_before):
                continue
            ev = {"payload_holds": ["optimizer"], "restored": "optimizer", "scaler_restored": False}
            if not live:
                ev["scaler_built_after_load"] = True
            self.sink.record_site(self.code, stack[0] if stack else None, ev, stack=stack)

    def _save(self, obj):
        self._judging = None
        scalers = self.state.enabled_scalers()
        if not scalers:
            return
        keys: list = []
        kinds = _kinds(obj, keys=keys)
        if "scaler" in kinds:
            self.scaler_saved_at.add(self.sink.step)
            return
        if not ({"model", "optimizer"} & kinds) or _is_weights_export(obj):
            return
        if self.state.owner_state_dicts and torch_state.payload_holds(obj, set(self.state.owner_state_dicts)):
            return  # the state of a scaler-owning wrapper: AMP110 judges whether it keeps the scale
        evidence = {"payload_holds": sorted(kinds), "payload_keys": keys[:20], "live_scale": torch_state.scale_value(scalers[0])}
        self._judging = (self.sink.step, user_stack(1), evidence)
        self.pending_saves.append(self._judging)


PROBE = ScalerNotCheckpointedProbe
