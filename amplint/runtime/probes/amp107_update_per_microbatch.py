"""AMP107 probe: scaler.update / unscale_ on micro-batches that do not step."""

from __future__ import annotations

from amplint.runtime.attribution import user_stack
from amplint.runtime.probes._base import Probe

_BACKWARD_APIS = ("Tensor.backward", "torch.autograd.backward")  # the ones that write .grad


class UpdatePerMicrobatchProbe(Probe):
    """An update with no scaler.step since the previous update (and the unscale_ calls of such an
    iteration), on gradients that are then accumulated into: the scale moves per micro-batch while
    the optimizer steps per N.  Evidence: updates and steps so far.

    Two cases, told apart by what the run does:
    - no inf check was recorded since the last update (no step, no unscale_): torch's update
      raises on it (accumulation with an update per micro-batch); confirmed at the update, first;
    - unscale_ recorded one (the iteration was unscaled, then its step skipped: a warm-up gate, a
      non-finite check): the update succeeds, and whether that is accumulation is decided at the
      next backward: confirmed when the unscaled optimizers' parameters still hold non-zero
      gradients there (`gradients_kept`: they are carried into the next micro-batch and scaled
      by another scale), dropped when they were cleared (a skipped step, not accumulation).
    An update given the new scale (`scaler.update(new_scale)`) sets it by hand and is not judged."""

    code = "AMP107"

    def install(self):
        self.steps_since: dict[int, int] = {}
        self.unscales: dict[int, list] = {}
        self.unscaled_opts: dict[int, list] = {}
        self.updates: dict[int, int] = {}
        self.steps: dict[int, int] = {}
        self.pending: list = []  # (evidence, update stack, unscale_ stacks, optimizers)
        self.set_by_hand: set[int] = set()  # scalers whose pending update was given a new scale
        yield self.on("scaler_step_pre", self._step)
        # A plain optimizer.step() also steps this iteration (that is AMP104's business, not ours).
        yield self.on("opt_step_pre", lambda opt, in_scaler: None if in_scaler else self._plain_step())
        yield self.on("unscale_pre", self._unscale)
        yield self.on("update_new_scale", lambda scaler: self.set_by_hand.add(id(scaler)))
        yield self.on("update_pre", self._update)
        yield self.on("backward", self._backward)

    def _step(self, scaler, opt):
        k = id(scaler)
        self.steps_since[k] = self.steps_since.get(k, 0) + 1
        self.steps[k] = self.steps.get(k, 0) + 1
        self.unscales.pop(k, None)
        self.unscaled_opts.pop(k, None)

    def _plain_step(self):
        for k in list(self.steps_since) + [id(s) for s in list(self.state.scalers)]:
            self.steps_since[k] = self.steps_since.get(k, 0) + 1

    def _unscale(self, scaler, opt):
        self.unscales.setdefault(id(scaler), []).append(user_stack(1))
        self.unscaled_opts.setdefault(id(scaler), []).append(opt)

    def _update(self, scaler):
        k = id(scaler)
        if k in self.set_by_hand:
            # `scaler.update(new_scale)` sets the scale by hand (icefall's bump of a small scale):
            # it needs no step and adapts nothing; the iteration's own update is still to come
            self.set_by_hand.discard(k)
            return
        self.updates[k] = self.updates.get(k, 0) + 1
        if self.steps_since.get(k, 0) == 0:
            ev = {"updates": self.updates[k], "scaler_steps": self.steps.get(k, 0), "stepped_this_iteration": False}
            opts = self.unscaled_opts.get(k, [])
            if not opts:
                ev["inf_checks_recorded"] = False  # torch's update raises on it
                self.sink.record_here(self.code, ev, update=True)
            else:
                self.pending.append((ev, user_stack(1), self.unscales.get(k, []), opts))
        self.steps_since[k] = 0
        self.unscales.pop(k, None)
        self.unscaled_opts.pop(k, None)

    def _backward(self, api, tensors):
        if not self.pending or api not in _BACKWARD_APIS:
            return
        pending, self.pending = self.pending, []
        for ev, stack, unscale_stacks, opts in pending:
            params = {id(p): p for opt in opts for g in opt.param_groups for p in g["params"]}
            kept = sum(1 for p in params.values() if p.grad is not None and bool(p.grad.ne(0).any()))
            if not kept:
                continue  # the skipped iteration's gradients were cleared: not accumulation
            ev = {**ev, "gradients_kept": kept, "parameters": len(params)}
            self.sink.record_site(self.code, stack[0] if stack else None, ev, stack=stack, update=True)
            for us in unscale_stacks:
                self.sink.record_site(self.code, us[0] if us else None, ev, stack=us, update=True)


PROBE = UpdatePerMicrobatchProbe
