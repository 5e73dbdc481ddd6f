"""AMP105 probe: more than one GradScaler built at the same place."""

from __future__ import annotations

import weakref

from amplint.runtime.probes._base import Probe


class ScalerInLoopProbe(Probe):
    """One optimizer stepped by two or more GradScalers built at the same line confirms: each new
    scaler restarts the scale at init_scale and forgets its growth tracker, mid-training.  A new
    scaler per independent run (a fold, an experiment: a new optimizer too) is fine."""

    code = "AMP105"

    def install(self):
        self.sites: dict = {}
        # optimizer -> {site: scalers}; NB: optimizers weakly referenced, not by id(): once an
        # experiment's optimizer is freed, CPython reuses its id for the next experiment's.
        self.by_opt: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        yield self.on("scaler_init", self._init)
        yield self.on("scaler_step_pre", self._step)

    def _init(self, scaler):
        site = self.state.site.get(id(scaler))
        if site is not None:
            self.sites[site] = self.sites.get(site, 0) + 1

    def _step(self, scaler, opt):
        site = self.state.site.get(id(scaler))
        if site is None:
            return
        try:
            ids = self.by_opt.setdefault(opt, {}).setdefault(site, [])
        except TypeError:  # an optimizer wrapper that cannot be weakly referenced
            return
        # Scalers are held strongly (two are enough to confirm) so a freed one's id is never reused.
        if len(ids) < 2 and not any(s is scaler for s in ids):
            ids.append(scaler)
        if len(ids) > 1:
            self.sink.record_site(
                self.code, site,
                {"instances_from_this_line": self.sites.get(site, len(ids)), "scalers_stepping_one_optimizer": len(ids)},
                stack=self.state.stack.get(id(scaler)),
                update=True,
            )


PROBE = ScalerInLoopProbe
