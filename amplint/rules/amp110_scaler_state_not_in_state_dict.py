"""AMP110 scaler-state-not-in-state-dict."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.callees import ForeignClass, bases_of, resolve_class_text
from amplint.analysis.names import dotted
from amplint.analysis.steps import module_label
from amplint.analysis.walk import walk
from amplint.analysis.wrappers import inherited_method, mentions, owned_scalers, scaler_names
from amplint.rules._base import Rule

_STATE_METHODS = ("state_dict", "load_state_dict")


class ScalerStateNotInStateDict(Rule):
    """
    ## What it does
    Flags `state_dict()` and `load_state_dict()` of a class that owns a GradScaler when the
    method leaves the scaler out.

    The class owns the scaler when it assigns an attribute a `GradScaler(...)` /
    `ShardedGradScaler(...)` construction that is not literally disabled. The method leaves
    it out when it never reads the scaler's attribute (or a property returning it), not even through the `self.` and
    `super()` helpers it calls. One finding per method, at its `def`; when the class
    defines neither and inherits them from a project base class that leaves the scaler
    out, one finding at the `class` line. A scaler only received from outside
    (`self.scaler = scaler`) belongs to whoever built it, and a class that saves or
    restores the scaler's state in another method of its own is not reported.

    ## Why is this bad?
    A wrapper's `state_dict()` is what checkpoints store for it: the optimizer wrapper of
    a trainer, a precision plugin, a loss-scaler helper. When it leaves the scaler out,
    every checkpoint loses the loss scale, and a resumed run restarts at the initial
    scale (65536), skips a burst of overflowing steps and re-learns it. AMP106 cannot see
    this: the checkpoint payload "holds the optimizer wrapper".

    ## Example
    ```python
    class AmpOptimizer:
        def __init__(self, optimizer):
            self.optimizer = optimizer
            self.scaler = torch.amp.GradScaler("cuda")

        def state_dict(self):
            return self.optimizer.state_dict()

        def load_state_dict(self, state):
            self.optimizer.load_state_dict(state)
    ```

    Use instead:
    ```python
    class AmpOptimizer:
        def __init__(self, optimizer):
            self.optimizer = optimizer
            self.scaler = torch.amp.GradScaler("cuda")

        def state_dict(self):
            return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict()}

        def load_state_dict(self, state):
            self.optimizer.load_state_dict(state["optimizer"])
            self.scaler.load_state_dict(state["scaler"])
    ```

    ## Fix safety
    No fix: the checkpoint format changes, and old checkpoints must still load.

    ## Runtime confirmation
    `amplint verify` watches the `state_dict()` / `load_state_dict()` of every object
    that holds an enabled GradScaler: a `state_dict()` result without the scaler's state
    (or a `load_state_dict()` that restores no scaler) confirms the finding, with the
    live scale that would be lost.
    """

    code = "AMP110"
    name = "scaler-state-not-in-state-dict"
    message = "`{cls}.{method}()` leaves out the GradScaler the class owns (`self.{attr}`)"
    inherited_message = (
        "`{cls}` owns a GradScaler (`self.{attr}`) but inherits {methods} from `{base}`, which "
        "{verb} it out"
    )
    # Pre-filter: the construction is spelled in the class's own file; the methods may be
    # inherited from a project base class in another module.
    requires_any = ("gradscaler",)
    and_requires_any = (("state_dict",),)
    imported_tokens = (1,)

    def check(self) -> None:
        for cls in self.model.classes.values():
            owned = owned_scalers(cls)
            if not owned:
                continue
            names = frozenset().union(*(scaler_names(cls, s) for s in owned))
            if self._checkpointed_elsewhere(cls, names):
                continue
            attr = owned[0].attr
            inherited = []
            for method in _STATE_METHODS:
                if method == "load_state_dict" and not _has_state_dict(cls):
                    continue  # `load_state_dict(self, checkpoint=None)` that reads a path: no state protocol
                fn = cls.methods.get(method)
                if fn is not None:
                    if not mentions(fn, self.model, names):
                        self.report(fn, cls=cls.name, method=method, attr=attr)
                    continue
                callee = inherited_method(cls, method)
                if callee is not None and not mentions(callee.fn, callee.model, names):
                    inherited.append((method, callee))
            if inherited:
                self._report_inherited(cls, attr, inherited)

    def _report_inherited(self, cls, attr: str, inherited) -> None:
        methods = " and ".join(f"`{m}()`" for m, _ in inherited)
        callee = inherited[0][1]
        base = callee.cls.name if callee.cls is not None else module_label(callee.model)
        related = tuple(
            (c.model, c.fn, f"`{base}.{m}()` is defined here")
            for m, c in inherited
            if c.model is not self.model
        )
        self.report(
            cls.node, message=self.inherited_message, related=related, cls=cls.name, attr=attr, methods=methods,
            base=base, verb="leaves" if len(inherited) == 1 else "leave",
        )

    @staticmethod
    def _checkpointed_elsewhere(cls, names: frozenset[str]) -> bool:
        """Another method of the class saves or restores the scaler's state itself
        (`torch.save({"scaler": self.scaler.state_dict()}, ...)` in `save_checkpoint`)."""
        for name, fn in cls.methods.items():
            if name in _STATE_METHODS or not fn.params.params:
                continue
            finder = _StateCall(fn.params.params[0].name.value, names)
            walk(fn.body, finder)
            if finder.found:
                return True
        return False


def _has_state_dict(cls) -> bool:
    """The class has the other half of the state protocol: a `state_dict` of its own or of a
    project base, or a base outside the project (`nn.Module`, a library's wrapper) that may
    give it one.  A `load_state_dict` without it is a loader of some other kind (a trainer's
    `load_state_dict(self, checkpoint=None)` that reads weights from a path)."""
    if inherited_method(cls, "state_dict") is not None:
        return True
    for c in (cls, *(b for b in bases_of(cls) if not isinstance(b, ForeignClass))):
        for base in getattr(c, "bases", ()):
            if base != "object" and resolve_class_text(base, c.model) is None:
                return True
    return False


class _StateCall(cst.CSTVisitor):
    """`self.<scaler>.state_dict()` / `self.<scaler>.load_state_dict(...)`."""

    def __init__(self, self_name: str, names: frozenset[str]) -> None:
        self.targets = {f"{self_name}.{n}" for n in names}
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _STATE_METHODS and dotted(func.value) in self.targets:
            self.found = True
