"""AMP105 probe: more than one GradScaler built at the same place."""

from __future__ import annotations

from amplint.runtime.probes._base import Probe


class ScalerInLoopProbe(Probe):
    """Counts GradScaler constructions per construction site; two or more from one site confirm
    (each new scaler restarts the scale at init_scale and forgets its growth tracker)."""

    code = "AMP105"

    def install(self):
        self.sites: dict = {}
        yield self.on("scaler_init", self._init)

    def _init(self, scaler):
        site = self.state.site.get(id(scaler))
        if site is not None:
            self.sites[site] = self.sites.get(site, 0) + 1

    def finish(self):
        total = sum(self.sites.values())
        for site, n in self.sites.items():
            if n > 1:
                self.sink.record_site(self.code, site, {"instances_from_this_line": n, "scalers_created": total})


PROBE = ScalerInLoopProbe
